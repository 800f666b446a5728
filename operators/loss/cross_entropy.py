"""Cross-entropy losses with their gradient ops and makers (Caffe2's
cross_entropy_op semantics): LabelCrossEntropy, CrossEntropy,
SigmoidCrossEntropyWithLogits (log_D_trick, unjoined_lr_loss) and MakeTwoClass.

X is read as N rows (its first dim; a vector is one row); probabilities are clamped
to 1e-20 before their log. Label shapes that do not match X are named errors."""
import math

import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.loss import cross_entropy as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import DTypes

FLOAT = caffe2_pb2.TensorProto.FLOAT


def _rows(ctx, x):
    if x.dtype.kind != "f":
        raise ctx.input_error(0, "must be a float tensor, got %s" % x.dtype)
    n = x.shape[0] if x.ndim > 1 else 1
    d = math.prod(x.shape[1:]) if x.ndim > 1 else (x.shape[0] if x.ndim else 1)
    return x.reshape(n, d)


def _per_row(ctx, ins):
    x = ins[0]
    if not x.known:
        return [TensorType(None, FLOAT)]
    return [TensorType((x.dims[0] if len(x.dims) > 1 else 1,), FLOAT)]


def _check_dy(ctx, dy, n, index=2):
    if dy.ndim != 1 or dy.shape[0] != n:
        raise ctx.input_error(index, "the gradient must be a vector of %d values (one per row), got shape %s"
                              % (n, list(dy.shape)))
    return dy.astype(np.float32, copy=False)


# ----------------------------------------------------------------- LabelCrossEntropy

def _label_ids(ctx, label, n, d):
    if label.dtype.kind not in "iu":
        raise ctx.input_error(1, "labels must be int32 class ids, got %s" % label.dtype)
    if not (label.ndim == 1 or (label.ndim == 2 and label.shape[1] == 1)) or label.shape[0] != n:
        raise ctx.input_error(1, "labels must have shape [%d] or [%d, 1] (one per row of X), got %s"
                              % (n, n, list(label.shape)))
    ids = label.reshape(-1).astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= d):
        raise ctx.input_error(1, "Label seems to be outside of supported range. Supported labels are in "
                                 "range [0,%d); got %d" % (d, ids[(ids < 0) | (ids >= d)][0]))
    return ids


register_schema(OpSchema(
    "LabelCrossEntropy", num_inputs=2, num_outputs=1, inference=_per_row,
    inputs=("X", "label"), outputs=("Y",),
    doc="Y[i] = -log(max(X[i, label[i]], 1e-20)); X (N, D) probabilities, label (N,) int ids."))
register_schema(OpSchema(
    "LabelCrossEntropyGradient", num_inputs=3, num_outputs=1, inference=lambda ctx, ins: [ins[0]],
    inputs=("X", "label", "dY"), outputs=("dX",),
    doc="dX[i, label[i]] = -dY[i] / max(X[i, label[i]], 1e-20), other entries 0."))


@register_kernel("LabelCrossEntropy")
def label_cross_entropy(ctx):
    def run(x, label):
        x2 = _rows(ctx, x)
        return K.label_cross_entropy(x2, _label_ids(ctx, label, *x2.shape))
    return run


@register_kernel("LabelCrossEntropyGradient")
def label_cross_entropy_gradient(ctx):
    def run(x, label, dy):
        x2 = _rows(ctx, x)
        ids = _label_ids(ctx, label, *x2.shape)
        return K.label_cross_entropy_grad(x2, ids, _check_dy(ctx, dy, x2.shape[0])).reshape(x.shape)
    return run


# ----------------------------------------------------------------- CrossEntropy

def _label_probs(ctx, label, n, d):
    if label.dtype.kind != "f":
        raise ctx.input_error(1, "labels must be float probabilities, got %s" % label.dtype)
    if not (label.ndim == 1 and n == 1 and label.shape[0] == d) and not (
            label.ndim == 2 and label.shape == (n, d)):
        raise ctx.input_error(1, "labels must have X's shape (%d x %d), got %s" % (n, d, list(label.shape)))
    probs = label.reshape(n, d)
    if probs.size and (probs.min() < 0 or probs.max() > 1):
        raise ctx.input_error(1, "Soft label seems incorrect: label value should be a probability between 0 "
                                 "and 1.0; use LabelCrossEntropy for integer labels")
    return probs


register_schema(OpSchema(
    "CrossEntropy", num_inputs=2, num_outputs=1, inference=_per_row, inputs=("X", "label"), outputs=("Y",),
    doc="Y[i] = -sum_j label[i, j] * log(max(X[i, j], 1e-20)); label (N, D) probabilities."))
register_schema(OpSchema(
    "CrossEntropyGradient", num_inputs=3, num_outputs=1, inference=lambda ctx, ins: [ins[0]],
    inputs=("X", "label", "dY"), outputs=("dX",),
    doc="dX[i, j] = -dY[i] * label[i, j] / max(X[i, j], 1e-20)."))


@register_kernel("CrossEntropy")
def cross_entropy(ctx):
    def run(x, label):
        x2 = _rows(ctx, x)
        return K.cross_entropy(x2, _label_probs(ctx, label, *x2.shape))
    return run


@register_kernel("CrossEntropyGradient")
def cross_entropy_gradient(ctx):
    def run(x, label, dy):
        x2 = _rows(ctx, x)
        probs = _label_probs(ctx, label, *x2.shape)
        return K.cross_entropy_grad(x2, probs, _check_dy(ctx, dy, x2.shape[0])).reshape(x.shape)
    return run


@register_gradient("LabelCrossEntropy", "CrossEntropy")
def _cross_entropy_maker(g):
    return [g.op(g.def_.type + "Gradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- SigmoidCrossEntropyWithLogits

_SIGMOID_ARGS = (Arg("log_D_trick", "bool", False, doc="Goodfellow et al.'s log D trick (binary targets)"),
                 Arg("unjoined_lr_loss", "bool", False, doc="the unjoined-data variant of the loss"))


def _sigmoid_settings(ctx):
    log_d, unjoined = ctx.bool("log_D_trick"), ctx.bool("unjoined_lr_loss")
    if log_d and unjoined:
        raise ctx.error("log_D_trick and unjoined_lr_loss cannot both be set")
    return log_d, unjoined


def _check_logits_targets(ctx, logits, targets, offset=0):
    if logits.dtype.kind != "f":
        raise ctx.input_error(offset, "logits must be float, got %s" % logits.dtype)
    if targets.shape != logits.shape:
        raise ctx.input_error(offset + 1, "targets of shape %s do not match the logits' %s"
                              % (list(targets.shape), list(logits.shape)))


register_schema(OpSchema(
    "SigmoidCrossEntropyWithLogits", num_inputs=2, num_outputs=1, args=_SIGMOID_ARGS,
    inference=lambda ctx, ins: [TensorType(ins[0].dims[:-1], FLOAT) if ins[0].known else UNKNOWN],
    inputs=("logits", "targets"), outputs=("xentropy",),
    doc="Per row (all dims but the last), the mean over the last dim of the sigmoid cross-entropy "
        "-(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))), computed without overflow."))
register_schema(OpSchema(
    "SigmoidCrossEntropyWithLogitsGradient", num_inputs=3, num_outputs=1, args=_SIGMOID_ARGS,
    inference=lambda ctx, ins: [ins[1]], inputs=("dY", "logits", "targets"), outputs=("dlogits",),
    doc="dlogits = -dY / inner * (t - sigmoid(x)) (the log_D_trick / unjoined forms likewise)."))


@register_kernel("SigmoidCrossEntropyWithLogits")
def sigmoid_cross_entropy(ctx):
    log_d, unjoined = _sigmoid_settings(ctx)

    def run(logits, targets):
        _check_logits_targets(ctx, logits, targets)
        return K.sigmoid_xent(logits, targets, log_d, unjoined)
    return run


@register_kernel("SigmoidCrossEntropyWithLogitsGradient")
def sigmoid_cross_entropy_gradient(ctx):
    log_d, unjoined = _sigmoid_settings(ctx)

    def run(dy, logits, targets):
        _check_logits_targets(ctx, logits, targets, offset=1)
        rows = math.prod(logits.shape[:-1])         # the forward's output size (1 for a 1-D or 0-d logits)
        if dy.size != rows:
            raise ctx.input_error(0, "the gradient holds %d values for %d rows of logits" % (dy.size, rows))
        return K.sigmoid_xent_grad(dy, logits, targets, log_d, unjoined)
    return run


@register_gradient("SigmoidCrossEntropyWithLogits")
def _sigmoid_xent_maker(g):
    return [g.op("SigmoidCrossEntropyWithLogitsGradient", [g.GO(0), g.I(0), g.I(1)], [g.GI(0)])]


# ----------------------------------------------------------------- MakeTwoClass

register_schema(OpSchema(
    "MakeTwoClass", num_inputs=1, num_outputs=1,
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims) + (2,), ins[0].dtype) if ins[0].known else UNKNOWN],
    inputs=("X",), outputs=("Y",),
    doc="Probabilities X become two columns [1 - X, X] (shape X.shape + [2])."))
register_schema(OpSchema(
    "MakeTwoClassGradient", num_inputs=1, num_outputs=1,
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims[:-1]), ins[0].dtype) if ins[0].known else UNKNOWN],
    inputs=("dY",), outputs=("dX",), checks=(DTypes(0, "float"),), doc="dX = dY[..., 1] - dY[..., 0]."))


@register_kernel("MakeTwoClass")
def make_two_class(ctx):
    def run(x):
        if x.dtype.kind != "f":
            raise ctx.input_error(0, "must be float probabilities, got %s" % x.dtype)
        return K.make_two_class(x)
    return run


@register_kernel("MakeTwoClassGradient")
def make_two_class_gradient(ctx):
    def run(dy):
        if dy.ndim < 1 or dy.shape[-1] != 2:
            raise ctx.input_error(0, "the gradient's last dim must be 2, got shape %s" % list(dy.shape))
        return K.make_two_class_grad(dy)
    return run


@register_gradient("MakeTwoClass")
def _make_two_class_maker(g):
    return [g.op("MakeTwoClassGradient", [g.GO(0)], [g.GI(0)])]
