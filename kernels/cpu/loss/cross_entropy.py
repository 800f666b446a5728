"""Cross-entropy losses and their gradients (Caffe2's formulas; inputs already checked).

Public:
    LOG_THRESHOLD                              probabilities are clamped to it before log
    label_cross_entropy(x2, label) -> y        -log(max(x[i, label[i]], 1e-20)) per row
    label_cross_entropy_grad(x2, label, dy) -> dx2
    cross_entropy(x2, label2) -> y             -sum_j label[i, j] * log(max(x[i, j], 1e-20))
    cross_entropy_grad(x2, label2, dy) -> dx2
    sigmoid_xent(logits, targets, log_d_trick, unjoined) -> per-row losses (mean over the last dim)
    sigmoid_xent_grad(dy, logits, targets, log_d_trick, unjoined) -> dlogits
    make_two_class(x) / make_two_class_grad(dy)
    squared_l2(x, y) -> 0.5 * ||x_i - y_i||^2 per row; squared_l2_grad(x, y, dd) -> (dx, dy)
"""
import numpy as np

LOG_THRESHOLD = np.float32(1e-20)


def _rows(n):
    return np.arange(n)


def label_cross_entropy(x2, label):
    picked = x2[_rows(x2.shape[0]), label]
    return -np.log(np.maximum(picked, LOG_THRESHOLD)).astype(np.float32)


def label_cross_entropy_grad(x2, label, dy):
    dx = np.zeros(x2.shape, np.float32)
    rows = _rows(x2.shape[0])
    dx[rows, label] = -dy / np.maximum(x2[rows, label], LOG_THRESHOLD)
    return dx


def cross_entropy(x2, label2):
    return -(label2 * np.log(np.maximum(x2, LOG_THRESHOLD))).sum(axis=1, dtype=np.float32)


def cross_entropy_grad(x2, label2, dy):
    return (-(label2 / np.maximum(x2, LOG_THRESHOLD)) * dy[:, None]).astype(np.float32)


def _nonneg(x):
    return (x >= 0).astype(x.dtype)


def _softplus(x):
    """log(1 + exp(x)) without overflow."""
    return x * _nonneg(x) + np.log1p(np.exp(-np.abs(x)))


def sigmoid_xent(logits, targets, log_d_trick=False, unjoined=False):
    x, t = logits.astype(np.float64), targets.astype(np.float64)
    if unjoined:
        value = x * t + (t - 1) * x * _nonneg(x) - (1 - t) * np.log1p(np.exp(-np.abs(x)))
    elif log_d_trick:
        value = (2 * t - 1) * (x - _softplus(x))
    else:
        value = x * (t - _nonneg(x)) - np.log1p(np.exp(-np.abs(x)))
    inner = logits.shape[-1] if logits.ndim else 1
    rows = int(np.prod(logits.shape[:-1], dtype=np.int64))      # explicit: -1 is ambiguous when inner is 0
    with np.errstate(invalid="ignore", divide="ignore"):       # an empty last dim: 0 / 0, as Caffe2 computes
        mean = -value.reshape(rows, inner).sum(axis=1) / inner
    return mean.reshape(logits.shape[:-1]).astype(np.float32)


def sigmoid_xent_grad(dy, logits, targets, log_d_trick=False, unjoined=False):
    x, t = logits.astype(np.float64), targets.astype(np.float64)
    sig = 0.5 * (1.0 + np.tanh(0.5 * x))
    if unjoined:
        back = t - (1 - t) * sig
    elif log_d_trick:
        back = (2 * t - 1) * (1 - sig)          # (2t - 1) / (1 + exp(x))
    else:
        back = t - sig
    inner = logits.shape[-1] if logits.ndim else 1
    rows = int(np.prod(logits.shape[:-1], dtype=np.int64))
    factor = -np.asarray(dy, np.float64).reshape(rows, 1) / max(inner, 1)
    return (back.reshape(rows, inner) * factor).reshape(logits.shape).astype(np.float32)


def make_two_class(x):
    return np.stack([1 - x, x], axis=-1).astype(x.dtype, copy=False)


def make_two_class_grad(dy):
    return (dy[..., 1] - dy[..., 0]).astype(dy.dtype, copy=False)


def _per_row(a, x):
    """a (shaped like x) as [rows, rest]; explicit sizes, since -1 is ambiguous for 0 rows."""
    rest = int(np.prod(x.shape[1:], dtype=np.int64)) if x.ndim else 1
    return a.reshape(x.shape[0] if x.ndim else 1, rest)


def squared_l2(x, y):
    d = _per_row(x.astype(np.float64) - y, x)
    return (0.5 * np.einsum("ij,ij->i", d, d)).astype(x.dtype)


def squared_l2_grad(x, y, dd):
    n = x.shape[0] if x.ndim else 1
    dx = (_per_row(x - y, x) * dd.reshape(n, 1)).reshape(x.shape).astype(x.dtype, copy=False)
    return dx, -dx
