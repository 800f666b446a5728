"""ONNX random generators: RandomNormal(Like), RandomUniform(Like), Bernoulli.
They are never constant-folded (see caffe2py.onnx.convert NONDETERMINISTIC);
a `seed` attribute makes a generator reproducible from plan time on."""
import numpy as np

from caffe2py.kernels.cpu.onnx import math as om

from .onnx_base import onnx_op

FLOAT = 1


def _rng(ctx):
    return np.random.default_rng(int(ctx.float("seed")) if ctx.has("seed") else None)


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
        values = rng.uniform(ctx.float("low", 0.0), ctx.float("high", 1.0), size=shape)
    return values.astype(dtype)


def _generator(kind, like):
    def factory(ctx):
        rng = _rng(ctx)
        if like:
            return lambda x: _draw(kind, rng, ctx, x.shape, _dtype(ctx, x))
        shape = tuple(ctx.ints("shape"))
        dtype = _dtype(ctx)
        return lambda: _draw(kind, rng, ctx, shape, dtype)
    return factory


onnx_op("RandomNormal", (1, None))(_generator("normal", like=False))
onnx_op("RandomUniform", (1, None))(_generator("uniform", like=False))
onnx_op("RandomNormalLike", (1, None))(_generator("normal", like=True))
onnx_op("RandomUniformLike", (1, None))(_generator("uniform", like=True))


@onnx_op("Bernoulli", (15, None))
def bernoulli(ctx):
    rng = _rng(ctx)

    def run(p):
        dtype = om.onnx_dtype(ctx.int("dtype")) if ctx.has("dtype") else p.dtype
        return (rng.random(p.shape) < p).astype(dtype)
    return run
