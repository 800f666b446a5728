"""Independent NumPy references for a few Caffe2 ops, written from the ops'
documented formulas (not from caffe2py's kernels). A fuzz case whose only op is
one of these, with float inputs and no arguments, must match within tolerance."""
import numpy as np


def _softmax(x):
    if x.ndim == 0 or x.size == 0:
        return None if x.ndim == 0 else x.copy()
    m = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    e = np.exp(m - m.max(axis=1, keepdims=True)) if m.size else m
    return (e / e.sum(axis=1, keepdims=True) if m.size else m).reshape(x.shape)


_UNARY = {
    "Relu": lambda x: np.maximum(x, 0),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Exp": np.exp,
    "Abs": np.abs,
    "Negative": np.negative,
    "Sqr": lambda x: x * x,
    "Sin": np.sin,
    "Cos": np.cos,
    "Softsign": lambda x: x / (1 + np.abs(x)),
    "Softmax": _softmax,
    "Copy": lambda x: x,
    "Transpose": lambda x: np.transpose(x),
}
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}
_VARIADIC = {"Sum": lambda xs: sum(xs[1:], xs[0]), "Max": lambda xs: np.maximum.reduce(xs),
             "Min": lambda xs: np.minimum.reduce(xs)}


def name_for(op):
    """The reference name for this op def, or None when none applies."""
    if len(op.arg) or len(op.output) != 1 or op.engine:
        return None
    if op.type in _UNARY and len(op.input) == 1:
        return op.type
    if op.type in _BINARY and len(op.input) == 2:
        return op.type
    if op.type in _VARIADIC and len(op.input) >= 1:
        return op.type
    return None


def check(name, op, feeds, blobs):
    """A text describing the mismatch, or None when the outputs agree (or the
    inputs are outside what the reference covers)."""
    xs = [feeds[i] for i in op.input]
    if not xs or any(not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64) for x in xs):
        return None
    if any(x.dtype != xs[0].dtype or x.shape != xs[0].shape for x in xs):
        return None
    wide = [x.astype(np.float64) for x in xs]
    with np.errstate(all="ignore"):
        if name in _UNARY:
            want = _UNARY[name](wide[0])
        elif name in _BINARY:
            want = _BINARY[name](wide[0], wide[1])
        else:
            want = _VARIADIC[name](wide)
    if want is None:
        return None
    got = blobs.get(op.output[0])
    if isinstance(got, np.generic):     # a 0-d result as a NumPy scalar (FetchBlob makes it an array)
        got = np.asarray(got)
    if not isinstance(got, np.ndarray):
        return "%s returned %s, expected an array" % (name, type(got).__name__)
    if got.shape != want.shape:
        return "%s: output shape %s, reference %s" % (name, list(got.shape), list(want.shape))
    if got.dtype != xs[0].dtype:
        return "%s: output dtype %s for %s inputs" % (name, got.dtype, xs[0].dtype)
    tol = 1e-5 if got.dtype == np.float64 else 2e-4
    with np.errstate(all="ignore"):
        want_cast = want.astype(got.dtype)
        ok = np.isclose(got.astype(np.float64), want_cast.astype(np.float64), rtol=tol, atol=tol, equal_nan=True)
    if not ok.all():
        k = int(np.argmin(ok.reshape(-1)))
        return "%s: element %d is %r, reference %r" % (name, k, got.reshape(-1)[k], want_cast.reshape(-1)[k])
    return None
