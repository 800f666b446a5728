"""Caffe2's row-wise similarity ops in the caffe2 domain: DotProduct, CosineSimilarity
and DotProductWithPadding (`pad_value`, `replicate`), with their gradient ops. Each
input is viewed as (N, D): N its first dim (1 for a 0-d input), D the rest. Kernels:
kernels/cpu/math/distance.py."""
import math

from caffe2py.kernels.cpu.math import distance as K
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .._gradient_hooks import register_gradient


def _rows_infer(ctx, ins):
    x = ins[0].dims
    return [TensorType((x[0] if x else 1,), ins[0].dtype)]


def _dot_cost(ctx, ins):
    """Caffe2's CostInferenceForDotProduct: a two-input pointwise pass, N values written."""
    n = float(math.prod(ins[0].dims)) if ins[0].known else 0.0
    rows = float(ins[0].dims[0]) if ins[0].known and ins[0].dims else 1.0
    return Cost(flops=2 * n, bytes_read=4 * n * 2, bytes_written=4 * rows)


def _as_rows(x):
    n = x.shape[0] if x.ndim else 1
    return x.reshape(n, x.size // n if n else 0)


def _check_pair(ctx, x, y, same_shape=True):
    check_dtype(ctx, 0, x, FLOATS)
    if y.dtype != x.dtype:
        raise ctx.input_error(1, "dtype %s differs from X's %s" % (y.dtype, x.dtype))
    if same_shape and y.shape != x.shape:
        raise ctx.input_error(1, "shape %s differs from X's %s; %s needs equal shapes"
                              % (list(y.shape), list(x.shape), ctx.type))
    if not same_shape:
        if y.ndim != x.ndim or (x.ndim and y.shape[0] != x.shape[0]):
            raise ctx.input_error(1, "shape %s must have X's rank and first dim (X is %s)"
                                  % (list(y.shape), list(x.shape)))


def _check_grad(ctx, dz, rows):
    if dz.ndim != 1 or dz.shape[0] != rows:
        raise ctx.input_error(2, "must be 1-D with one value per row (%d), got shape %s" % (rows, list(dz.shape)))


def _register(op_type, doc, forward, backward):
    """An equal-shape row-wise op and its gradient op; forward(x2, y2) and
    backward(x2, y2, dz) work on the (N, D) views."""
    register_schema(OpSchema(op_type, num_inputs=2, num_outputs=1, inputs=("X", "Y"), outputs=("Z",),
                             inference=_rows_infer, cost=_dot_cost, doc=doc))
    register_schema(OpSchema(op_type + "Gradient", num_inputs=3, num_outputs=2,
                             inputs=("X", "Y", "dZ"), outputs=("dX", "dY"),
                             inference=lambda ctx, ins: [ins[0], ins[1]], doc="Gradient of %s." % op_type))

    @register_kernel(op_type)
    def factory(ctx):
        def run(x, y):
            _check_pair(ctx, x, y)
            return forward(_as_rows(x), _as_rows(y))
        return run

    @register_kernel(op_type + "Gradient")
    def gradient(ctx):
        def run(x, y, dz):
            _check_pair(ctx, x, y)
            x2, y2 = _as_rows(x), _as_rows(y)
            _check_grad(ctx, dz, x2.shape[0])
            dx, dy = backward(x2, y2, dz.astype(x.dtype, copy=False))
            return dx.reshape(x.shape), dy.reshape(y.shape)
        return run

    @register_gradient(op_type)
    def _maker(g):
        return [g.op(op_type + "Gradient", [g.input_value(0), g.input_value(1), g.GO(0)], [g.GI(0), g.GI(1)])]


_register("DotProduct", "Z[i] = the dot product of row i of X and of Y (equal shapes; rows along dim 0).",
          lambda x2, y2: K.row_dot(x2, y2).astype(x2.dtype, copy=False),
          lambda x2, y2, dz: (dz[:, None] * y2, dz[:, None] * x2))
_register("CosineSimilarity", "Z[i] = cosine similarity of row i of X and of Y (equal shapes), with each "
          "squared norm clamped to at least 1e-12.", K.cosine_similarity, K.cosine_similarity_gradient)


def _padding_args(ctx):
    return float(ctx.float("pad_value")), bool(ctx.bool("replicate"))


_PAD_ARGS = (Arg("pad_value", "float", 0.0, doc="value the shorter row is padded with"),
             Arg("replicate", "bool", False, doc="repeat the shorter row instead of padding it"))


def _check_replicate(ctx, x2, y2, replicate):
    dx, dy = x2.shape[1], y2.shape[1]
    if replicate and min(dx, dy) and max(dx, dy) % min(dx, dy):
        raise ctx.input_error(1, "replicate=1 needs the longer row (%d) to be a multiple of the shorter (%d)"
                              % (max(dx, dy), min(dx, dy)))


def _padded_forward(ctx):
    pad_value, replicate = _padding_args(ctx)

    def run(x, y):
        _check_pair(ctx, x, y, same_shape=False)
        x2, y2 = _as_rows(x), _as_rows(y)
        _check_replicate(ctx, x2, y2, replicate)
        return K.dot_with_padding(x2, y2, pad_value, replicate)
    return run


def _padded_backward(ctx):
    pad_value, replicate = _padding_args(ctx)

    def run(x, y, dz):
        _check_pair(ctx, x, y, same_shape=False)
        x2, y2 = _as_rows(x), _as_rows(y)
        _check_replicate(ctx, x2, y2, replicate)
        _check_grad(ctx, dz, x2.shape[0])
        dx, dy = K.dot_with_padding_gradient(x2, y2, dz.astype(x.dtype, copy=False), pad_value, replicate)
        return dx.reshape(x.shape), dy.reshape(y.shape)
    return run


register_schema(OpSchema(
    "DotProductWithPadding", num_inputs=2, num_outputs=1, args=_PAD_ARGS, inputs=("X", "Y"), outputs=("Z",),
    inference=_rows_infer, cost=_dot_cost,
    doc="Z[i] = dot product of row i of X and of Y where the rows may differ in length (same rank and "
        "first dim): the shorter row is padded with pad_value, or with replicate=1 repeated to the longer "
        "row's length, which must be a multiple of it."))
register_schema(OpSchema(
    "DotProductWithPaddingGradient", num_inputs=3, num_outputs=2, args=_PAD_ARGS, inputs=("X", "Y", "dZ"),
    outputs=("dX", "dY"), inference=lambda ctx, ins: [ins[0], ins[1]], doc="Gradient of DotProductWithPadding."))
register_kernel("DotProductWithPadding")(_padded_forward)
register_kernel("DotProductWithPaddingGradient")(_padded_backward)


@register_gradient("DotProductWithPadding")
def _padded_maker(g):
    return [g.op("DotProductWithPaddingGradient", [g.input_value(0), g.input_value(1), g.GO(0)],
                 [g.GI(0), g.GI(1)])]
