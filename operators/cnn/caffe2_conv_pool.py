"""Caffe2's dimension-named convolution and pooling ops in the caffe2 domain: Conv1D,
Conv2D, Conv3D, MaxPool1D..3D and AveragePool1D..3D are other names of Conv, MaxPool
and AveragePool (Caffe2 registered the same operator classes under them; like Caffe2
they do not check the input's rank), so they are aliases sharing those kernels
(registry.register_alias). Their gradient ops (Conv2DGradient, MaxPool2DGradient, ...)
alias ConvGradient / MaxPoolGradient / AveragePoolGradient. LpPool
(`p`, the pooling geometry arguments) has its own kernel: kernels/cpu/cnn/lp_pool.py."""
import math

from caffe2py.kernels.cpu.cnn import lp_pool as K
from caffe2py.kernels.cpu.cnn.pool import pool_output_shape
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_alias, register_kernel, register_schema

from . import conv_grad, nn, pool_grad  # noqa: F401  (the ops and gradient ops aliased here)
from .._caffe2_binary import FLOATS, check_dtype
from .._gradient_hooks import delegate_gradient, register_gradient


def _conv_schema_changes(rank):
    return dict(num_inputs=(2, 3), allow_inplace=frozenset(), inputs=("X", "filter", "bias"),
                args=tuple(a for a in nn._CONV_ARGS if a.name != "concat_channels"),
                doc="Caffe2's name for a %d-D Conv (the same operator; see Conv)." % rank)


for _rank in (1, 2, 3):
    _name = "Conv%dD" % _rank
    register_alias(_name, "Conv", **_conv_schema_changes(_rank))
    register_alias(_name + "Gradient", "ConvGradient")
    delegate_gradient(_name, "Conv", rename={"ConvGradient": _name + "Gradient"})
    for _pool in ("MaxPool", "AveragePool"):
        _name = "%s%dD" % (_pool, _rank)
        register_alias(_name, _pool, doc="Caffe2's name for %d-D %s (the same operator; see %s)."
                       % (_rank, _pool, _pool))
        register_alias(_name + "Gradient", _pool + "Gradient")
        delegate_gradient(_name, _pool, rename={_pool + "Gradient": _name + "Gradient"})


# ----------------------------------------------------------------- LpPool

_LP_ARGS = tuple(a for a in nn._POOL_ARGS if a.name != "count_include_pad") + (
    Arg("p", "float", 2.0, doc="the norm's exponent (> 0)"),)


def _lp_geometry(ctx, x_dims):
    """(nchw, kernel, strides, pads, output spatial) for an input of dims x_dims."""
    nchw = nn._nchw(ctx)
    if len(x_dims) < 3:
        raise ctx.input_error(0, "pooling needs (N, C, spatial...) input, got shape %s" % list(x_dims))
    spatial = list(x_dims[2:]) if nchw else list(x_dims[1:-1])
    kernel, strides, pads, dil, ceil = nn._pool_geometry(ctx, spatial)
    if len(kernel) != len(spatial) or min(kernel) < 1 or min(strides) < 1 or min(pads) < 0:
        raise ctx.error("kernel %s, strides %s and pads %s do not suit the %d-D input '%s'"
                        % (list(kernel), list(strides), list(pads), len(x_dims), ctx.inputs[0]))
    if any(d != 1 for d in dil):
        raise ctx.error("LpPool has no dilation, got %s" % list(dil))
    out = pool_output_shape(spatial, kernel, strides, pads, dil, ceil)
    if min(out) < 1:
        raise ctx.error("the windows do not fit: output spatial size %s for input %s" % (list(out), spatial))
    return nchw, list(kernel), list(strides), list(pads), list(out)


def _lp_infer(ctx, ins):
    nn.check_pool_window(ctx)
    x = ins[0].dims
    nchw, _, _, _, out = _lp_geometry(ctx, x)
    dims = (x[0], x[1]) + tuple(out) if nchw else (x[0],) + tuple(out) + (x[-1],)
    return [TensorType(dims, ins[0].dtype)]


def _lp_cost(ctx, ins):
    out = _lp_infer(ctx, ins)[0].dims
    _, kernel, _, _, _ = _lp_geometry(ctx, ins[0].dims)
    flops = 3.0 * math.prod(out) * math.prod(kernel)
    return Cost(flops=flops, bytes_read=4.0 * math.prod(ins[0].dims), bytes_written=4.0 * math.prod(out))


def _p(ctx):
    p = ctx.float("p")
    if not p > 0:
        raise ctx.error("p must be > 0, got %g" % p)
    return p


register_schema(OpSchema(
    "LpPool", num_inputs=1, num_outputs=1, args=_LP_ARGS, inputs=("X",), outputs=("Y",),
    inference=_lp_infer, cost=_lp_cost,
    doc="Lp pooling: each window's (sum of |x|^p)^(1/p), padding counting as zeros. Geometry as "
        "MaxPool (kernel / stride / pad spellings, global_pooling, legacy_pad), NCHW or NHWC."))
register_schema(OpSchema(
    "LpPoolGradient", num_inputs=3, num_outputs=1, args=_LP_ARGS, inputs=("X", "Y", "dY"), outputs=("dX",),
    inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of LpPool: dX = sum over windows of dY * x * |x|^(p-2) / Y^(p-1)."))


@register_kernel("LpPool")
def lp_pool(ctx):
    nn.check_pool_window(ctx)
    p = _p(ctx)

    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        nchw, kernel, strides, pads, out = _lp_geometry(ctx, x.shape)
        y = K.lp_pool(x if nchw else nn._to_nchw(x), kernel, strides, pads, p, out)
        return y if nchw else nn._from_nchw(y)
    return run


@register_kernel("LpPoolGradient")
def lp_pool_gradient(ctx):
    nn.check_pool_window(ctx)
    p = _p(ctx)

    def run(x, y, dy):
        check_dtype(ctx, 0, x, FLOATS)
        nchw, kernel, strides, pads, out = _lp_geometry(ctx, x.shape)
        want = _lp_infer(ctx, [TensorType(tuple(x.shape), None)])[0].dims
        for index, v in ((1, y), (2, dy)):
            if tuple(v.shape) != tuple(want):
                raise ctx.input_error(index, "shape %s differs from the pooled shape %s" % (list(v.shape),
                                                                                            list(want)))
        xc, yc, dyc = (x, y, dy) if nchw else (nn._to_nchw(x), nn._to_nchw(y), nn._to_nchw(dy))
        dx = K.lp_pool_gradient(xc, yc, dyc, kernel, strides, pads, p, out)
        return dx if nchw else nn._from_nchw(dx)
    return run


@register_gradient("LpPool")
def _lp_pool_maker(g):
    return [g.op("LpPoolGradient", [g.input_value(0), g.O(0), g.GO(0)], [g.GI(0)])]
