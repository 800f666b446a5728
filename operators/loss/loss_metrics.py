"""AveragedLoss, SquaredL2Distance (with their gradient ops and makers) and the
Accuracy metric (no gradient: Caffe2's SHOULD_NOT_DO_GRADIENT)."""
import numpy as np

from caffe2py.gradients import register_gradient, should_not_do_gradient
from caffe2py.kernels.cpu.loss import cross_entropy as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

FLOAT = caffe2_pb2.TensorProto.FLOAT

# ----------------------------------------------------------------- AveragedLoss

register_schema(OpSchema(
    "AveragedLoss", num_inputs=1, num_outputs=1,
    inference=lambda ctx, ins: [TensorType((), ins[0].dtype or FLOAT)],
    inputs=("input",), outputs=("output",), doc="The mean of all input values, a scalar."))
register_schema(OpSchema(
    "AveragedLossGradient", num_inputs=2, num_outputs=1, inference=lambda ctx, ins: [ins[0]],
    inputs=("input", "output_grad"), outputs=("input_grad",),
    doc="Every input value gets output_grad / (number of values)."))


@register_kernel("AveragedLoss")
def averaged_loss(ctx):
    def run(x):
        if x.dtype.kind != "f":
            raise ctx.input_error(0, "must be a float tensor, got %s" % x.dtype)
        if x.size == 0:
            raise ctx.input_error(0, "the average of no values is undefined")
        return np.array(x.mean(dtype=np.float64), dtype=x.dtype)
    return run


@register_kernel("AveragedLossGradient")
def averaged_loss_gradient(ctx):
    def run(x, dy):
        if np.size(dy) != 1:
            raise ctx.input_error(1, "the averaged loss is a scalar, so its gradient must be one value, "
                                     "got shape %s" % list(np.shape(dy)))
        return np.full(x.shape, np.asarray(dy).reshape(-1)[0] / max(x.size, 1), dtype=x.dtype)
    return run


@register_gradient("AveragedLoss")
def _averaged_loss_maker(g):
    return [g.op("AveragedLossGradient", [g.I(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- SquaredL2Distance

def _check_pair(ctx, x, y):
    if x.shape != y.shape:
        raise ctx.input_error(1, "shape %s differs from X's %s" % (list(y.shape), list(x.shape)))
    if x.dtype.kind != "f":
        raise ctx.input_error(0, "must be a float tensor, got %s" % x.dtype)


register_schema(OpSchema(
    "SquaredL2Distance", num_inputs=2, num_outputs=1,
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0] if ins[0].dims else 1,), ins[0].dtype)
                                if ins[0].known else UNKNOWN],
    inputs=("X", "Y"), outputs=("Z",),
    doc="Z[i] = 0.5 * ||X[i] - Y[i]||^2 over all dims but the first (a vector is one row)."))
register_schema(OpSchema(
    "SquaredL2DistanceGradient", num_inputs=3, num_outputs=2,
    inference=lambda ctx, ins: [ins[0], ins[1]], inputs=("X", "Y", "dZ"), outputs=("dX", "dY"),
    doc="dX = (X - Y) * dZ per row, dY = -dX."))


@register_kernel("SquaredL2Distance")
def squared_l2_distance(ctx):
    def run(x, y):
        _check_pair(ctx, x, y)
        return K.squared_l2(x, y)
    return run


@register_kernel("SquaredL2DistanceGradient")
def squared_l2_distance_gradient(ctx):
    def run(x, y, dz):
        _check_pair(ctx, x, y)
        rows = x.shape[0] if x.ndim else 1
        if dz.size != rows:
            raise ctx.input_error(2, "the gradient must hold one value per row (%d), got shape %s"
                                  % (rows, list(dz.shape)))
        return K.squared_l2_grad(x, y, dz.astype(x.dtype, copy=False))
    return run


@register_gradient("SquaredL2Distance")
def _squared_l2_maker(g):
    return [g.op("SquaredL2DistanceGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0), g.GI(1)])]


# ----------------------------------------------------------------- Accuracy

register_schema(OpSchema(
    "Accuracy", num_inputs=2, num_outputs=1, args=(Arg("top_k", "int", 1),),
    inference=lambda ctx, ins: [TensorType((), FLOAT)], inputs=("predictions", "labels"), outputs=("accuracy",),
    doc="Fraction of rows whose label is among the top_k scores (ties go to the lower class "
        "index, as a stable sort), a float scalar."))


@register_kernel("Accuracy")
def accuracy(ctx):
    top_k = ctx.int("top_k")
    if top_k < 1:
        raise ctx.error("top_k must be positive, got %d" % top_k)

    def run(pred, labels):
        if pred.ndim != 2:
            raise ctx.input_error(0, "predictions must be (N, D), got shape %s" % list(pred.shape))
        n, d = pred.shape
        if labels.ndim != 1 or labels.shape[0] != n:
            raise ctx.input_error(1, "labels must have shape [%d] (one per row), got %s" % (n, list(labels.shape)))
        if labels.dtype.kind not in "iu":
            raise ctx.input_error(1, "labels must be int class ids, got %s" % labels.dtype)
        ids = labels.astype(np.int64)
        if n and (ids.min() < 0 or ids.max() >= d):
            raise ctx.input_error(1, "labels must lie in [0, %d)" % d)
        if n == 0:
            return np.array(0.0, np.float32)
        own = pred[np.arange(n), ids][:, None]
        ahead = (pred > own) | ((pred == own) & (np.arange(d)[None, :] < ids[:, None]))
        return np.array(np.mean(ahead.sum(axis=1) < top_k), dtype=np.float32)
    return run


should_not_do_gradient("Accuracy")
