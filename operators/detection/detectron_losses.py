"""Detectron's losses (modules/detectron): SmoothL1Loss, SelectSmoothL1Loss,
SigmoidCrossEntropyLoss (with `scale` and `normalize`), SigmoidFocalLoss,
SoftmaxFocalLoss and GroupSpatialSoftmax, each with its gradient op and maker.
Caffe2 ran them on GPUs only; the arithmetic is that of its CUDA kernels
(kernels/cpu/detection/detectron_losses.py). Losses are float32 scalars (shape [])."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.detection import detectron_losses as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, Range, Rank, Scalar

DT = caffe2_pb2.TensorProto
SCALAR = TensorType((), DT.FLOAT)


def _scalar_loss(ctx, ins):
    return [SCALAR]


def _like_input0(ctx, ins):
    return [ins[0]]


def _scalar_value(x):
    return float(np.asarray(x).reshape(-1)[0])


def _same_size(ctx, index, x, ref, what):
    if x.size != ref.size:
        raise ctx.input_error(index, "%s must have as many elements as %s (%d), got shape %s"
                              % (what, ctx.inputs[0], ref.size, list(x.shape)))


def _int_labels(ctx, index, t, what="labels"):
    if t.dtype.kind not in "iu":
        raise ctx.input_error(index, "%s must be an integer tensor, got %s" % (what, t.dtype))
    return t.astype(np.int64, copy=False)


# ----------------------------------------------------------------- SmoothL1Loss

_SL1_ARGS = (Arg("beta", "float", 1.0, doc="L2 to L1 transition point"),
             Arg("scale", "float", 1.0, doc="multiplies the loss"))

register_schema(OpSchema(
    "SmoothL1Loss", num_inputs=4, num_outputs=1, args=_SL1_ARGS,
    inputs=("Y_hat", "Y", "alpha_in", "alpha_out"), outputs=("loss",), inference=_scalar_loss,
    checks=(DTypes("*", "float32"), Rank(0, 1)),
    doc="scale / N * sum_i alpha_out[i] * SmoothL1(alpha_in[i] * (Y_hat[i] - Y[i])), N = Y_hat's first dim; "
        "SmoothL1(x) = 0.5 x^2 / beta where |x| < beta, |x| - 0.5 beta elsewhere (Fast R-CNN box "
        "regression). The four inputs hold the same number of elements."))

register_schema(OpSchema(
    "SmoothL1LossGradient", num_inputs=5, num_outputs=1, args=_SL1_ARGS,
    inputs=("Y_hat", "Y", "alpha_in", "alpha_out", "d_loss"), outputs=("d_Y_hat",), inference=_like_input0,
    checks=(DTypes("*", "float32"), Scalar(4)),
    doc="Gradient of SmoothL1Loss with respect to Y_hat."))


def _smooth_l1_inputs(ctx, y_hat, y, a_in, a_out):
    if y.ndim == 0 or y.shape[0] != y_hat.shape[0]:
        raise ctx.input_error(1, "Y_hat and Y must have the same number of elements along axis 0 (%d), "
                                 "got shape %s" % (y_hat.shape[0], list(y.shape)))
    for i, (v, what) in enumerate(((y, "Y"), (a_in, "alpha_in"), (a_out, "alpha_out")), start=1):
        _same_size(ctx, i, v, y_hat, what)
    return y.reshape(y_hat.shape), a_in.reshape(y_hat.shape), a_out.reshape(y_hat.shape)


@register_kernel("SmoothL1Loss")
def smooth_l1_loss(ctx):
    beta, scale = ctx.float("beta"), ctx.float("scale")

    def run(y_hat, y, a_in, a_out):
        return K.smooth_l1_loss(y_hat, *_smooth_l1_inputs(ctx, y_hat, y, a_in, a_out), beta, scale)
    return run


@register_kernel("SmoothL1LossGradient")
def smooth_l1_loss_gradient(ctx):
    beta, scale = ctx.float("beta"), ctx.float("scale")

    def run(y_hat, y, a_in, a_out, d_loss):
        y, a_in, a_out = _smooth_l1_inputs(ctx, y_hat, y, a_in, a_out)
        return K.smooth_l1_loss_gradient(y_hat, y, a_in, a_out, _scalar_value(d_loss), beta, scale)
    return run


@register_gradient("SmoothL1Loss")
def _smooth_l1_grad(g):
    return [g.op("SmoothL1LossGradient", [g.I(0), g.I(1), g.I(2), g.I(3), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- SelectSmoothL1Loss

register_schema(OpSchema(
    "SelectSmoothL1Loss", num_inputs=4, num_outputs=1, args=_SL1_ARGS,
    inputs=("Y_hat", "Y", "locations", "normalizer"), outputs=("loss",), inference=_scalar_loss,
    checks=(DTypes(0, "float32"), DTypes(1, "float32"), DTypes(2, "numeric"), DTypes(3, "numeric"),
            Rank(0, 4, 4), Scalar(3)),
    doc="RetinaNet's box loss at selected places: Y_hat [N, 4 * classes * anchors, H, W], Y [M, 4] "
        "targets, locations [M, 4] = (n, c, y, x): the loss of channels c..c+3 at (n, y, x) is "
        "SmoothL1(Y_hat - Y); loss = scale * sum / max(1, normalizer)."))

register_schema(OpSchema(
    "SelectSmoothL1LossGradient", num_inputs=5, num_outputs=1, args=_SL1_ARGS,
    inputs=("Y_hat", "Y", "locations", "normalizer", "d_loss"), outputs=("d_Y_hat",), inference=_like_input0,
    checks=(DTypes(0, "float32"), DTypes(1, "float32"), Rank(0, 4, 4), Scalar(3), Scalar(4)),
    doc="Gradient of SelectSmoothL1Loss with respect to Y_hat (0 away from the selected places)."))


def _select_inputs(ctx, y_hat, y, locations):
    m = y.size // 4 if y.size % 4 == 0 else -1
    if y.size and (m < 0 or y.shape[-1] != 4):
        raise ctx.input_error(1, "Y must be [M, 4], got shape %s" % list(y.shape))
    if y.size == 0:
        return None
    if locations.size != 4 * m or locations.shape[-1] != 4:
        raise ctx.input_error(2, "locations must be [M, 4] with M = %d (one row per row of Y), got shape %s"
                              % (m, list(locations.shape)))
    loc = np.asarray(locations).reshape(m, 4)
    if not np.isfinite(loc).all() or (loc != np.floor(loc)).any():
        raise ctx.input_error(2, "locations must hold whole numbers (n, c, y, x)")
    N, D, H, W = y_hat.shape
    limits = np.array([N, D - 3, H, W])
    bad = np.argwhere((loc < 0) | (loc >= limits))
    if bad.size:
        row, col = bad[0]
        raise ctx.input_error(2, "location row %d has %s = %d outside [0, %d) (Y_hat is %s; c + 3 must be a "
                                 "channel)" % (row, "ncyx"[col], loc[row, col], max(limits[col], 0),
                                               list(y_hat.shape)))
    return loc.astype(np.int64)


@register_kernel("SelectSmoothL1Loss")
def select_smooth_l1_loss(ctx):
    beta, scale = ctx.float("beta"), ctx.float("scale")

    def run(y_hat, y, locations, normalizer):
        loc = _select_inputs(ctx, y_hat, y, locations)
        if loc is None:
            return K.select_smooth_l1_loss(y_hat, y, None, 1, beta, scale)
        return K.select_smooth_l1_loss(y_hat, y, loc, _scalar_value(normalizer), beta, scale)
    return run


@register_kernel("SelectSmoothL1LossGradient")
def select_smooth_l1_loss_gradient(ctx):
    beta, scale = ctx.float("beta"), ctx.float("scale")

    def run(y_hat, y, locations, normalizer, d_loss):
        loc = _select_inputs(ctx, y_hat, y, locations)
        if loc is None:
            return np.zeros(y_hat.shape, np.float32)
        return K.select_smooth_l1_loss_gradient(y_hat, y, loc, _scalar_value(normalizer),
                                                _scalar_value(d_loss), beta, scale)
    return run


@register_gradient("SelectSmoothL1Loss")
def _select_smooth_l1_grad(g):
    return [g.op("SelectSmoothL1LossGradient", [g.I(0), g.I(1), g.I(2), g.I(3), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- SigmoidCrossEntropyLoss

_SCE_ARGS = (Arg("scale", "float", 1.0, doc="multiplies the loss"),
             Arg("normalize", "int", 1, doc="1: divide by the number of targets > -1"))

register_schema(OpSchema(
    "SigmoidCrossEntropyLoss", num_inputs=2, num_outputs=1, args=_SCE_ARGS, inputs=("X", "targets"),
    outputs=("loss",), inference=_scalar_loss, checks=(DTypes(0, "float32"), Rank(0, 1)),
    doc="Detectron's sigmoid cross-entropy of logits X against int targets in {-1, 0, 1} (-1: ignored), "
        "summed, divided by the number of targets > -1 when normalize, times scale."))

register_schema(OpSchema(
    "SigmoidCrossEntropyLossGradient", num_inputs=3, num_outputs=1, args=_SCE_ARGS,
    inputs=("X", "targets", "d_loss"), outputs=("dX",), inference=_like_input0,
    checks=(DTypes(0, "float32"), Scalar(2)),
    doc="Gradient of SigmoidCrossEntropyLoss: (sigmoid(X) - targets) times d_loss * scale (/ count)."))


def _sce_targets(ctx, x, t):
    _same_size(ctx, 1, t, x, "targets")
    return _int_labels(ctx, 1, t, "targets").reshape(x.shape)


@register_kernel("SigmoidCrossEntropyLoss")
def sigmoid_cross_entropy_loss(ctx):
    scale, normalize = ctx.float("scale"), bool(ctx.int("normalize"))

    def run(x, t):
        return K.sigmoid_cross_entropy_loss(x, _sce_targets(ctx, x, t), scale, normalize)
    return run


@register_kernel("SigmoidCrossEntropyLossGradient")
def sigmoid_cross_entropy_loss_gradient(ctx):
    scale, normalize = ctx.float("scale"), bool(ctx.int("normalize"))

    def run(x, t, d_loss):
        return K.sigmoid_cross_entropy_loss_gradient(x, _sce_targets(ctx, x, t), _scalar_value(d_loss),
                                                     scale, normalize)
    return run


@register_gradient("SigmoidCrossEntropyLoss")
def _sigmoid_ce_grad(g):
    return [g.op("SigmoidCrossEntropyLossGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- focal losses

def _focal_args(num_classes):
    return (Arg("scale", "float", 1.0, doc="multiplies the loss"),
            Arg("alpha", "float", 0.25, doc="focal loss alpha"),
            Arg("gamma", "float", 1.0, doc="focal loss gamma"),
            Arg("num_classes", "int", num_classes, check=Range(1, None), doc="classes per anchor"))


def _anchor_labels(ctx, x, t, num_classes, lo, hi):
    """int64 labels [N, A, H, W] for logits x [N, A * num_classes, H, W], in [lo, hi]
    or negative (ignored)."""
    N, D, H, W = x.shape
    if D % num_classes:
        raise ctx.input_error(0, "the channel count %d is not a multiple of num_classes = %d" % (D, num_classes))
    want = (N, D // num_classes, H, W)
    if t.size != int(np.prod(want)):
        raise ctx.input_error(1, "labels must be shaped %s (one per anchor and place), got %s"
                              % (list(want), list(t.shape)))
    labels = _int_labels(ctx, 1, t).reshape(want)
    bad = labels[labels > hi]
    if bad.size:
        raise ctx.input_error(1, "labels must be at most %d (num_classes = %d), got %d" % (hi, num_classes, bad[0]))
    return labels


register_schema(OpSchema(
    "SigmoidFocalLoss", num_inputs=3, num_outputs=1, args=_focal_args(80),
    inputs=("logits", "labels", "normalizer"), outputs=("loss",), inference=_scalar_loss,
    checks=(DTypes(0, "float32"), Rank(0, 4, 4), Scalar(2)),
    doc="RetinaNet's binary focal loss: logits [N, A * num_classes, H, W], labels [N, A, H, W] (1..num_classes "
        "the true class, 0 background, -1 ignored); per entry -alpha (1 - p)^gamma log p for the true "
        "class and -(1 - alpha) p^gamma log(1 - p) for the others, p = sigmoid(logit); summed, divided "
        "by max(1, normalizer), times scale."))

register_schema(OpSchema(
    "SigmoidFocalLossGradient", num_inputs=4, num_outputs=1, args=_focal_args(80),
    inputs=("logits", "labels", "normalizer", "d_loss"), outputs=("d_logits",), inference=_like_input0,
    checks=(DTypes(0, "float32"), Rank(0, 4, 4), Scalar(2), Scalar(3)),
    doc="Gradient of SigmoidFocalLoss with respect to the logits."))


def _focal_params(ctx):
    return ctx.float("gamma"), ctx.float("alpha"), ctx.int("num_classes"), ctx.float("scale")


@register_kernel("SigmoidFocalLoss")
def sigmoid_focal_loss(ctx):
    gamma, alpha, nc, scale = _focal_params(ctx)

    def run(x, t, normalizer):
        labels = _anchor_labels(ctx, x, t, nc, -1, nc)
        return K.sigmoid_focal_loss(x, labels, _scalar_value(normalizer), gamma, alpha, nc, scale)
    return run


@register_kernel("SigmoidFocalLossGradient")
def sigmoid_focal_loss_gradient(ctx):
    gamma, alpha, nc, scale = _focal_params(ctx)

    def run(x, t, normalizer, d_loss):
        labels = _anchor_labels(ctx, x, t, nc, -1, nc)
        return K.sigmoid_focal_loss_gradient(x, labels, _scalar_value(normalizer), _scalar_value(d_loss),
                                             gamma, alpha, nc, scale)
    return run


@register_gradient("SigmoidFocalLoss")
def _sigmoid_focal_grad(g):
    return [g.op("SigmoidFocalLossGradient", [g.I(0), g.I(1), g.I(2), g.GO(0)], [g.GI(0)])]


def _softmax_focal_infer(ctx, ins):
    return [SCALAR, ins[0] if ins[0].known else UNKNOWN][:ctx.n_outputs]


register_schema(OpSchema(
    "SoftmaxFocalLoss", num_inputs=3, num_outputs=2, args=_focal_args(81),
    inputs=("scores", "labels", "normalizer"), outputs=("loss", "probabilities"),
    inference=_softmax_focal_infer, checks=(DTypes(0, "float32"), Rank(0, 4, 4), Scalar(2)),
    doc="RetinaNet's multiclass focal loss: a softmax over each group of num_classes channels of scores "
        "[N, A * num_classes, H, W] (the probabilities output, same shape), and per anchor with label t >= 0 "
        "(labels [N, A, H, W] in [0, num_classes), negative: ignored) -(1 - p_t)^gamma log p_t, weighted "
        "(1 - alpha) for t = 0 and alpha otherwise, divided by max(1, normalizer); summed, times scale."))

register_schema(OpSchema(
    "SoftmaxFocalLossGradient", num_inputs=5, num_outputs=1, args=_focal_args(81),
    inputs=("scores", "labels", "normalizer", "probabilities", "d_loss"), outputs=("d_scores",),
    inference=_like_input0, checks=(DTypes(0, "float32"), DTypes(3, "float32"), Rank(0, 4, 4), Scalar(2), Scalar(4)),
    doc="Gradient of SoftmaxFocalLoss with respect to the scores (probabilities: its output 1)."))


@register_kernel("SoftmaxFocalLoss")
def softmax_focal_loss(ctx):
    gamma, alpha, nc, scale = _focal_params(ctx)

    def run(x, t, normalizer):
        labels = _anchor_labels(ctx, x, t, nc, -1, nc - 1)
        return K.softmax_focal_loss(x, labels, _scalar_value(normalizer), gamma, alpha, nc, scale)
    return run


@register_kernel("SoftmaxFocalLossGradient")
def softmax_focal_loss_gradient(ctx):
    gamma, alpha, nc, scale = _focal_params(ctx)

    def run(x, t, normalizer, p, d_loss):
        labels = _anchor_labels(ctx, x, t, nc, -1, nc - 1)
        if p.size != x.size:
            raise ctx.input_error(3, "probabilities must be SoftmaxFocalLoss's output 1 (%d values), got shape %s"
                                  % (x.size, list(p.shape)))
        return K.softmax_focal_loss_gradient(x, labels, _scalar_value(normalizer), p.reshape(x.shape),
                                             _scalar_value(d_loss), gamma, alpha, nc, scale)
    return run


@register_gradient("SoftmaxFocalLoss")
def _softmax_focal_grad(g):
    return [g.op("SoftmaxFocalLossGradient", [g.I(0), g.I(1), g.I(2), g.O(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- GroupSpatialSoftmax

_GSS_ARGS = (Arg("num_classes", "int", 81, check=Range(1, None), doc="classes in each softmax group"),
             Arg("order", "string", "NCHW", doc="only NCHW"))

register_schema(OpSchema(
    "GroupSpatialSoftmax", num_inputs=1, num_outputs=1, args=_GSS_ARGS, inputs=("scores",),
    outputs=("probabilities",), inference=_like_input0, checks=(DTypes(0, "float32"), Rank(0, 4, 4)),
    doc="RetinaNet's spatial softmax: scores [N, A * num_classes, H, W]; a softmax over each group of "
        "num_classes consecutive channels at every place."))

register_schema(OpSchema(
    "GroupSpatialSoftmaxGradient", num_inputs=2, num_outputs=1, args=_GSS_ARGS,
    inputs=("scores", "d_probabilities"), outputs=("d_scores",), inference=_like_input0,
    checks=(DTypes("*", "float32"), Rank(0, 4, 4)),
    doc="Gradient of GroupSpatialSoftmax from its output (input 0, the probabilities) and dY."))


def _gss_setup(ctx):
    if ctx.string("order") != "NCHW":
        raise ctx.error("GroupSpatialSoftmax supports order NCHW only, got '%s'" % ctx.string("order"))
    return ctx.int("num_classes")


def _gss_groups(ctx, x, nc):
    if x.shape[1] % nc:
        raise ctx.input_error(0, "the channel count %d is not a multiple of num_classes = %d" % (x.shape[1], nc))


@register_kernel("GroupSpatialSoftmax")
def group_spatial_softmax(ctx):
    nc = _gss_setup(ctx)

    def run(x):
        _gss_groups(ctx, x, nc)
        return K.group_softmax(x, nc)
    return run


@register_kernel("GroupSpatialSoftmaxGradient")
def group_spatial_softmax_gradient(ctx):
    nc = _gss_setup(ctx)

    def run(y, dy):
        _gss_groups(ctx, y, nc)
        if dy.shape != y.shape:
            raise ctx.input_error(1, "d_probabilities must be shaped like the probabilities %s, got %s"
                                  % (list(y.shape), list(dy.shape)))
        return K.group_softmax_gradient(y, dy, nc)
    return run


@register_gradient("GroupSpatialSoftmax")
def _group_spatial_softmax_grad(g):
    return [g.op("GroupSpatialSoftmaxGradient", [g.O(0), g.GO(0)], [g.GI(0)])]
