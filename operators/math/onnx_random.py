"""ONNX random generators: RandomNormal(Like), RandomUniform(Like), Bernoulli.
They are never constant-folded (see caffe2py.onnx.convert NONDETERMINISTIC);
a `seed` attribute makes a generator reproducible from plan time on."""
import numpy as np

from caffe2py.kernels.cpu.math import onnx_math as om

from caffe2py.registry import Arg
from caffe2py.schema_rules import Finite, Range

from ..onnx_base import onnx_op

_ARGS = (Arg("seed", "float", check=Finite()), Arg("mean", "float", check=Finite()),
         Arg("scale", "float", check=Range(0.0, 1e300)), Arg("low", "float", check=Range(-1e300, 1e300)),
         Arg("high", "float", check=Range(-1e300, 1e300)), Arg("shape", "ints", check=Range(0)))

FLOAT = 1


def _rng(ctx):
    # any finite seed (negative ones too, as onnxruntime takes them) picks a stream
    return np.random.default_rng(int(ctx.float("seed")) % (1 << 64) if ctx.has("seed") else None)


def _dtype(ctx, like=None):
    if ctx.has("dtype") or like is None:
        dtype = om.onnx_dtype(ctx.int("dtype", FLOAT))
        if dtype is None or dtype.kind != "f":
            raise ctx.error("dtype %s is not a floating type" % ctx.int("dtype", FLOAT))
        return dtype
    return like.dtype


def _draw(kind, rng, ctx, shape, dtype):
    if kind == "normal":
        values = rng.normal(ctx.float("mean", 0.0), ctx.float("scale", 1.0), size=shape)
    else:
        low, high = ctx.float("low", 0.0), ctx.float("high", 1.0)
        # numpy refuses ranges wider than a double holds: draw in [0, 1) and scale
        values = low + (high - low) * rng.random(size=shape) if np.isfinite(high - low) else \
            low / 2 + (high / 2 - low / 2) * rng.random(size=shape) * 2
    return values.astype(dtype)


def _generator(kind, like):
    def factory(ctx):
        rng = _rng(ctx)
        if like:
            return lambda x: _draw(kind, rng, ctx, x.shape, _dtype(ctx, x))
        shape = tuple(ctx.ints("shape") or ())
        if float(np.prod(np.asarray(shape, np.float64))) > 1 << 31:
            raise ctx.error("shape %s holds more than 2^31 values" % list(shape))
        dtype = _dtype(ctx)
        return lambda: _draw(kind, rng, ctx, shape, dtype)
    return factory


onnx_op("RandomNormal", (1, None), args=_ARGS)(_generator("normal", like=False))
onnx_op("RandomUniform", (1, None), args=_ARGS)(_generator("uniform", like=False))
onnx_op("RandomNormalLike", (1, None), args=_ARGS)(_generator("normal", like=True))
onnx_op("RandomUniformLike", (1, None), args=_ARGS)(_generator("uniform", like=True))


@onnx_op("Bernoulli", (15, None), args=_ARGS[:1])
def bernoulli(ctx):
    rng = _rng(ctx)
    dtype_arg = om.onnx_dtype(ctx.int("dtype")) if ctx.has("dtype") else None
    if ctx.has("dtype") and dtype_arg is None:
        raise ctx.error("dtype %d is not a type caffe2py can produce" % ctx.int("dtype"))

    def run(p):
        dtype = dtype_arg or p.dtype
        return (rng.random(p.shape) < p).astype(dtype)
    return run
