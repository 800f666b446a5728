"""Gradients of nn.py's InstanceNorm and LRN, as Caffe2 makes them:
  InstanceNorm -> InstanceNormGradient(X, scale, bias, dY[, mean][, inv_stdev]) ->
    (dX, dscale, dbias); mean and inv_stdev are the forward's optional outputs, passed
    when it has them (recomputed from X otherwise);
  LRN -> LRNGradient(X, Y, dY) -> dX; the scale is recomputed from X (the forward's
    scale output is not read).
Both take the forward's arguments (epsilon / size, alpha, beta, bias; order NCHW or
NHWC). Kernels: kernels/cpu/cnn/norm_grad.py."""
from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.cnn import norm_grad as K
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import DTypes

from .._common import same_as_input
from .nn import _from_nchw, _nchw, _to_nchw

_ORDER = Arg("order", "string", "NCHW")


def _same_shape(ctx, index, a, like, what):
    if a.shape != like.shape:
        raise ctx.input_error(index, "has shape %s but %s has %s" % (list(a.shape), what, list(like.shape)))


# ----------------------------------------------------------------- InstanceNorm

register_schema(OpSchema(
    "InstanceNormGradient", num_inputs=(4, 6), num_outputs=3,
    args=(Arg("epsilon", "float", 1e-5), _ORDER),
    checks=(DTypes(0, "float"),),
    inference=lambda ctx, ins: [ins[0], ins[1], ins[2]],
    inputs=("X", "scale", "bias", "dY", "mean", "inv_stdev"), outputs=("dX", "dscale", "dbias"),
    doc="Gradient of InstanceNorm: dX, dscale, dbias. mean and inv_stdev (N, C), when given, are the "
        "forward's; otherwise they are recomputed from X."))


@register_kernel("InstanceNormGradient")
def instance_norm_gradient(ctx):
    eps = ctx.float("epsilon")
    nchw = _nchw(ctx)

    def run(x, scale, bias, dy, mean=None, inv_std=None):
        if x.ndim < 3:
            raise ctx.input_error(0, "needs (N, C, spatial...) input, got shape %s" % list(x.shape))
        _same_shape(ctx, 3, dy, x, "X")
        n, c = x.shape[0], x.shape[1 if nchw else -1]
        for k, v in ((1, scale), (2, bias)):
            if v.size != c:
                raise ctx.input_error(k, "has %d elements, expected %d channels" % (v.size, c))
        for k, v in ((4, mean), (5, inv_std)):
            if v is not None and v.shape != (n, c):
                raise ctx.input_error(k, "must have shape [N, C] = %s, got %s" % ([n, c], list(v.shape)))
        xc, dyc = (x, dy) if nchw else (_to_nchw(x), _to_nchw(dy))
        dx, dscale, dbias = K.instance_norm_gradient(xc, scale.reshape(-1), dyc, eps, mean, inv_std)
        return (dx if nchw else _from_nchw(dx)), dscale.reshape(scale.shape), dbias.reshape(bias.shape)
    return run


@register_gradient("InstanceNorm")
def _instance_norm_maker(g):
    inputs = [g.input_value(0), g.I(1), g.I(2), g.GO(0)] + list(g.def_.output[1:3])
    return [g.op("InstanceNormGradient", inputs, [g.GI(0), g.GI(1), g.GI(2)])]


# ----------------------------------------------------------------- LRN

register_schema(OpSchema(
    "LRNGradient", num_inputs=3, num_outputs=1,
    args=(Arg("size", "int", required=True), Arg("alpha", "float", 0.0), Arg("beta", "float", 0.0),
          Arg("bias", "float", 1.0), _ORDER),
    checks=(DTypes(0, "float"),), inference=same_as_input(0),
    inputs=("X", "Y", "dY"), outputs=("dX",),
    doc="Gradient of LRN from X, the forward's Y and dY (the scale is recomputed from X): "
        "dX = dY * scale^-beta - 2 alpha beta / size * X * (sum of dY * Y / scale over the channels "
        "whose windows hold X's)."))


@register_kernel("LRNGradient")
def lrn_gradient(ctx):
    size = ctx.int("size")
    if size <= 0:
        raise ctx.error("size must be positive, got %d" % size)
    alpha, beta, bias = ctx.float("alpha"), ctx.float("beta"), ctx.float("bias")
    nchw = _nchw(ctx)

    def run(x, y, dy):
        if x.ndim < 2:
            raise ctx.input_error(0, "needs a channel axis, got shape %s" % list(x.shape))
        _same_shape(ctx, 1, y, x, "X")
        _same_shape(ctx, 2, dy, x, "X")
        if nchw:
            return K.lrn_gradient(x, y, dy, size, alpha, beta, bias)
        return _from_nchw(K.lrn_gradient(_to_nchw(x), _to_nchw(y), _to_nchw(dy), size, alpha, beta, bias))
    return run


@register_gradient("LRN")
def _lrn_maker(g):
    return [g.op("LRNGradient", [g.input_value(0), g.O(0), g.GO(0)], [g.GI(0)])]
