"""ONNX normalisation and newer activations: LayerNormalization,
GroupNormalization, RMSNormalization, LpNormalization,
MeanVarianceNormalization, Gelu, Mish, Swish."""
import numpy as np

from caffe2py.kernels.cpu.math import elementwise as ew
from caffe2py.kernels.cpu.math import onnx_math as om
from caffe2py.kernels.cpu.cnn import onnx_nn as nn_k

from caffe2py.registry import Arg
from caffe2py.schema_rules import Axes, Range, Rank

from ..onnx_base import axis_of, onnx_op


def _check_fits(ctx, index, name, param, target):
    """param broadcasts to `target` (onnx's unidirectional broadcasting), or a named error."""
    if param is None:
        return
    p, t = tuple(param.shape), tuple(target)
    if len(p) > len(t) or any(a != 1 and a != b for a, b in zip(p[::-1], t[::-1])):
        raise ctx.input_error(index, "%s of shape %s does not broadcast to the normalised dims %s"
                              % (name, list(p), list(t)))


@onnx_op("LayerNormalization", (17, None))
def layer_norm(ctx):
    axis, eps = ctx.int("axis", -1), ctx.float("epsilon", 1e-5)
    n_out = ctx.n_outputs

    def run(x, scale, bias=None):
        a = axis_of(ctx, axis, x.ndim)
        _check_fits(ctx, 1, "scale", scale, x.shape[a:])
        _check_fits(ctx, 2, "bias", bias, x.shape[a:])
        y, mean, inv = nn_k.layer_norm(x, scale, bias, a, eps)
        return (y, mean, inv)[:n_out] if n_out > 1 else y
    return run


@onnx_op("GroupNormalization", (18, 20), (21, None), args=(Arg("num_groups", "int", check=Range(1)),),
         checks=(Rank(0, 2), Rank((1, 2), 1, 1)))
def group_norm(ctx):
    groups, eps = ctx.int("num_groups"), ctx.float("epsilon", 1e-5)
    per_channel = ctx.op_version >= 21

    def run(x, scale, bias):
        if x.shape[1] % groups:
            raise ctx.input_error(0, "%d channels do not split into %d groups" % (x.shape[1], groups))
        want = x.shape[1] if per_channel else groups
        for k, v in ((1, scale), (2, bias)):
            if v.size != want:
                raise ctx.input_error(k, "must hold %d values (one per %s), got %d"
                                      % (want, "channel" if per_channel else "group", v.size))
        if x.size == 0:
            return np.empty_like(x)
        return nn_k.group_norm(x, scale, bias, groups, eps, per_channel)
    return run


@onnx_op("RMSNormalization", (23, None))
def rms_norm(ctx):
    axis, eps = ctx.int("axis", -1), ctx.float("epsilon", 1e-5)
    def run(x, scale):
        a = axis_of(ctx, axis, x.ndim)
        _check_fits(ctx, 1, "scale", scale, x.shape[a:])
        return nn_k.rms_norm(x, scale, a, eps)
    return run


@onnx_op("LpNormalization", (1, None))
def lp_normalization(ctx):
    axis, p = ctx.int("axis", -1), ctx.int("p", 2)
    if p not in (1, 2):
        raise ctx.error("p must be 1 or 2, got %d" % p)
    return lambda x: nn_k.lp_normalize(x, axis_of(ctx, axis, x.ndim), p)


@onnx_op("MeanVarianceNormalization", (9, None), args=(Arg("axes", "ints", [0, 2, 3], check=Axes(0)),))
def mean_variance_normalization(ctx):
    axes = ctx.ints("axes", None) or [0, 2, 3]
    return lambda x: nn_k.mean_variance_normalize(x, tuple(axis_of(ctx, a, x.ndim) for a in axes))


@onnx_op("Gelu", (20, None))
def gelu(ctx):
    tanh = ctx.string("approximate", "none") == "tanh"

    def run(x):
        if tanh:
            inner = np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)
            return (0.5 * x * (1 + np.tanh(inner))).astype(x.dtype, copy=False)
        return (0.5 * x * (1 + om.erf(x / np.sqrt(2)))).astype(x.dtype, copy=False)
    return run


@onnx_op("Mish", (18, None))
def mish(ctx):
    return lambda x: (x * np.tanh(om.softplus(x))).astype(x.dtype, copy=False)


@onnx_op("Swish", (24, None))
def swish(ctx):
    alpha = ctx.float("alpha", 1.0)
    return lambda x: (x * ew.sigmoid(x * np.asarray(alpha, x.dtype))).astype(x.dtype, copy=False)
