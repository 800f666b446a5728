"""Detectron's losses and their gradients (SmoothL1Loss, SelectSmoothL1Loss,
SigmoidCrossEntropyLoss, SigmoidFocalLoss, SoftmaxFocalLoss, GroupSpatialSoftmax),
written from the arithmetic of Caffe2's CUDA kernels (Caffe2 had no CPU version of
most of them). Whole-array NumPy: every loss is a few elementwise passes.

Elementwise terms are float32 as on the GPU; sums are accumulated in float64 and the
scalar loss returned as float32 of shape () (Caffe2's scalar outputs).
Callers check shapes, label ranges and locations first.
"""
import numpy as np

F32 = np.float32
FLT_MIN = F32(np.finfo(np.float32).tiny)


def _scalar(v):
    return np.asarray(v, F32).reshape(())


def _smooth_l1(d, beta):
    """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (beta = 0: plain L1)."""
    a = np.abs(d)
    with np.errstate(divide="ignore", invalid="ignore"):
        quad = F32(0.5) * d * d / F32(beta)
    return np.where(a < beta, quad, a - F32(0.5 * beta)).astype(F32)


def _smooth_l1_slope(d, beta):
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = d / F32(beta)
    return np.where(np.abs(d) < beta, inner, np.sign(d)).astype(F32)


# ----------------------------------------------------------------- SmoothL1Loss

def smooth_l1_loss(y_hat, y, alpha_in, alpha_out, beta, scale):
    """scale / N * sum(alpha_out * SmoothL1(alpha_in * (y_hat - y))), N = y_hat.shape[0]."""
    n = y_hat.shape[0]
    if n == 0:
        return _scalar(0)
    d = (alpha_in * (y_hat - y)).astype(F32)
    total = np.sum(alpha_out * _smooth_l1(d, beta), dtype=np.float64)
    return _scalar(total * scale / n)


def smooth_l1_loss_gradient(y_hat, y, alpha_in, alpha_out, d_loss, beta, scale):
    n = y_hat.shape[0]
    if n == 0:
        return np.zeros(y_hat.shape, F32)
    d = (alpha_in * (y_hat - y)).astype(F32)
    factor = F32(scale / n * float(d_loss))
    return (_smooth_l1_slope(d, beta) * factor * alpha_in * alpha_out).astype(F32)


# ----------------------------------------------------------------- SelectSmoothL1Loss

def _selected(y_hat, locations):
    """Flat indices [M, 4] of the four channels c..c+3 at each (n, c, y, x) location."""
    _, D, H, W = y_hat.shape
    n, c, yy, xx = (locations[:, k].astype(np.int64) for k in range(4))
    base = ((n * D + c) * H + yy) * W + xx
    return base[:, None] + (np.arange(4) * H * W)[None, :]


def select_smooth_l1_loss(y_hat, y, locations, normalizer, beta, scale):
    """scale * sum over the M selected 4-channel groups of SmoothL1(y_hat - y) / max(normalizer, 1)."""
    if y.size == 0:
        return _scalar(0)
    at = _selected(y_hat, locations)
    d = (y_hat.reshape(-1)[at] - y.reshape(-1, 4)).astype(F32)
    total = np.sum(_smooth_l1(d, beta), dtype=np.float64) / max(float(normalizer), 1.0)
    return _scalar(total * scale)


def select_smooth_l1_loss_gradient(y_hat, y, locations, normalizer, d_loss, beta, scale):
    """The selected entries get scale * d_loss * SmoothL1'(y_hat - y) / max(normalizer, 1)
    (a location listed twice adds twice, as its loss counts twice)."""
    dx = np.zeros(y_hat.size, F32)
    if y.size:
        at = _selected(y_hat, locations)
        d = (y_hat.reshape(-1)[at] - y.reshape(-1, 4)).astype(F32)
        factor = F32(scale * float(d_loss) / max(float(normalizer), 1.0))
        np.add.at(dx, at.reshape(-1), (_smooth_l1_slope(d, beta) * factor).reshape(-1))
    return dx.reshape(y_hat.shape)


# ----------------------------------------------------------------- SigmoidCrossEntropyLoss

def _log1p_exp_neg_abs(x):
    """log(1 + exp(-|x|)), the stable tail of both sigmoid cross-entropies."""
    return np.log1p(np.exp(-np.abs(x))).astype(F32)


def _normalizer(count):
    return max(float(count), 1e-5)


def sigmoid_cross_entropy_loss(x, targets, scale, normalize):
    """scale * sum over targets != -1 of -x (t - [x >= 0]) + log(1 + exp(x - 2 x [x >= 0])),
    divided by the number of such targets when normalize."""
    keep = targets != -1
    pos = (x >= 0).astype(F32)
    losses = -x * (targets.astype(F32) - pos) + _log1p_exp_neg_abs(x)
    total = np.sum(np.where(keep, losses, F32(0)), dtype=np.float64)
    if normalize:
        total /= _normalizer(np.count_nonzero(keep))
    return _scalar(total * scale)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)


def sigmoid_cross_entropy_loss_gradient(x, targets, d_loss, scale, normalize):
    keep = targets != -1
    g = np.where(keep, _sigmoid(x) - targets.astype(F32), F32(0))
    factor = scale * float(d_loss)
    if normalize:
        factor /= _normalizer(np.count_nonzero(keep))
    return (g * F32(factor)).astype(F32)


# ----------------------------------------------------------------- focal losses

def _per_class_targets(targets, num_classes):
    """targets [N, A, H, W] spread over the logits' [N, A * num_classes, H, W] layout."""
    N, A, H, W = targets.shape
    return np.broadcast_to(targets[:, :, None], (N, A, num_classes, H, W)).reshape(N, A * num_classes, H, W)


def _focal_weights(targets, num_classes, alpha, normalizer):
    """(is_class, is_other, zp, zn) of the binary focal loss: the entry's class is the
    label (labels 1..num_classes; 0 background), -1 ignored."""
    t = _per_class_targets(targets, num_classes)
    d = (np.arange(num_classes) + 1)[None, None, :, None, None]
    N, A, H, W = targets.shape
    d = np.broadcast_to(d, (N, A, num_classes, H, W)).reshape(t.shape)
    is_class = (t == d).astype(F32)
    is_other = ((t != -1) & (t != d)).astype(F32)
    np_ = max(float(normalizer), 1.0)
    return is_class, is_other, F32(alpha / np_), F32((1.0 - alpha) / np_)


def _log_one_minus_sigmoid(x):
    pos = (x >= 0).astype(F32)
    return (-x * pos - np.log1p(np.exp(x - F32(2) * x * pos))).astype(F32)


def sigmoid_focal_loss(logits, targets, normalizer, gamma, alpha, num_classes, scale):
    is_class, is_other, zp, zn = _focal_weights(targets, num_classes, alpha, normalizer)
    p = _sigmoid(logits)
    with np.errstate(divide="ignore", invalid="ignore"):
        term1 = np.power(F32(1) - p, F32(gamma)) * np.log(np.maximum(p, FLT_MIN))
        term2 = np.power(p, F32(gamma)) * _log_one_minus_sigmoid(logits)
    losses = -is_class * term1 * zp - is_other * term2 * zn
    return _scalar(np.sum(losses, dtype=np.float64) * scale)


def sigmoid_focal_loss_gradient(logits, targets, normalizer, d_loss, gamma, alpha, num_classes, scale):
    is_class, is_other, zp, zn = _focal_weights(targets, num_classes, alpha, normalizer)
    p = _sigmoid(logits)
    g = F32(gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        term1 = np.power(F32(1) - p, g) * (F32(1) - p - p * g * np.log(np.maximum(p, FLT_MIN)))
        term2 = np.power(p, g) * (_log_one_minus_sigmoid(logits) * (F32(1) - p) * g - p)
    dx = -is_class * zp * term1 - is_other * zn * term2
    return (dx * F32(float(d_loss) * scale)).astype(F32)


def group_softmax(x, num_classes):
    """Softmax over each group of num_classes consecutive channels of x [N, A * num_classes, H, W]."""
    N, D, H, W = x.shape
    g = x.reshape(N, D // num_classes, num_classes, H, W)
    e = np.exp(g - g.max(axis=2, keepdims=True))
    return (e / e.sum(axis=2, keepdims=True)).astype(F32).reshape(x.shape)


def group_softmax_gradient(y, dy, num_classes):
    """dX = Y * (dY - sum over the group of Y * dY)."""
    N, D, H, W = y.shape
    yg = y.reshape(N, D // num_classes, num_classes, H, W)
    dg = dy.reshape(yg.shape)
    s = np.sum(yg * dg, axis=2, keepdims=True, dtype=np.float64).astype(F32)
    return (yg * (dg - s)).astype(F32).reshape(y.shape)


def _label_probability(p, targets, num_classes):
    """(p of the label's class [N, A, H, W] (0 where the label is < 0), weights mask)."""
    N, A, H, W = targets.shape
    pg = p.reshape(N, A, num_classes, H, W)
    idx = np.maximum(targets, 0)[:, :, None]
    return np.take_along_axis(pg, idx, axis=2)[:, :, 0]


def _softmax_focal_z(targets, alpha, normalizer):
    np_ = max(float(normalizer), 1.0)
    return ((targets == 0) * F32((1.0 - alpha) / np_) + (targets >= 1) * F32(alpha / np_)).astype(F32)


def softmax_focal_loss(scores, targets, normalizer, gamma, alpha, num_classes, scale):
    """(loss, probabilities): -(1 - p_t)^gamma log(max(p_t, FLT_MIN)) z per anchor with a
    label >= 0, z = (1 - alpha) / Np for label 0 and alpha / Np for the others."""
    p = group_softmax(scores, num_classes)
    pt = _label_probability(p, targets, num_classes)
    z = _softmax_focal_z(targets, alpha, normalizer)
    with np.errstate(divide="ignore", invalid="ignore"):
        losses = -(np.power(F32(1) - pt, F32(gamma)) * np.log(np.maximum(pt, FLT_MIN))) * z
    total = np.sum(np.where(targets >= 0, losses, F32(0)), dtype=np.float64)
    return _scalar(total * scale), p


def softmax_focal_loss_gradient(scores, targets, normalizer, p, d_loss, gamma, alpha, num_classes, scale):
    N, A, H, W = targets.shape
    pt = _label_probability(p, targets, num_classes)
    z = _softmax_focal_z(targets, alpha, normalizer)
    g = F32(gamma)
    one_minus = F32(1) - pt
    with np.errstate(divide="ignore", invalid="ignore"):
        # gamma * (1 - p)^(gamma - 1) is 0 when gamma is 0 (not 0 * inf at p = 1)
        slope = g * np.power(one_minus, g - F32(1)) if gamma != 0 else np.zeros_like(pt)
        weight = (-np.power(one_minus, g) + slope * pt * np.log(np.maximum(pt, FLT_MIN))) * z
    weight = np.where(targets >= 0, weight, F32(0)).astype(F32)
    onehot = (np.arange(num_classes)[None, None, :, None, None] == targets[:, :, None]).astype(F32)
    pg = p.reshape(N, A, num_classes, H, W)
    dx = weight[:, :, None] * (onehot - pg) * F32(float(d_loss) * scale)
    return dx.astype(F32).reshape(scores.shape)
