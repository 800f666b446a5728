"""Random tensors and argument values for fuzz cases: mostly plausible (so cases
reach the kernels), with the edge values hostile input is made of (empty and 0-d
tensors, NaN and infinities, huge and negative integers, odd dtypes)."""
import numpy as np

FLOAT_DTYPES = (np.float32, np.float32, np.float32, np.float64, np.float16)
INT_DTYPES = (np.int32, np.int64, np.int64, np.uint8, np.int8, np.int16)
ALL_KINDS = ("float",) * 6 + ("int",) * 3 + ("bool", "string")

EDGE_INTS = (0, 1, -1, 2, 3, 4, 5, -2, 7, 8, 16, 100, 1000, 2 ** 31, -2 ** 31, 2 ** 31 - 1, 2 ** 62, -2 ** 63)
SMALL_INTS = (0, 1, 1, 1, 2, 2, 3, -1, 4, 0, 1, 2)
EDGE_FLOATS = (0.0, 1.0, -1.0, 0.5, 2.0, 1e-5, 0.9, 3.5, 1e30, -1e30, float("nan"), float("inf"), float("-inf"))
STRINGS = ("", "NCHW", "NHWC", "sum", "mean", "max", "min", "constant", "edge", "reflect", "float",
           "int32", "linear", "nearest", "SAME_UPPER", "VALID", "x", "a\x00b", "../x", "\u00e9", "none",
           "DEFAULT", "CUDNN", "X", "Y", "in0")


def pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def shape(rng, rank=None, max_dim=5, empty_p=0.08):
    if rank is None:
        rank = int(rng.choice([0, 1, 2, 2, 3, 4, 4, 1, 3, 5], p=None))
    dims = []
    for _ in range(rank):
        dims.append(0 if rng.random() < empty_p else int(rng.integers(1, max_dim + 1)))
    return tuple(dims)


def tensor(rng, dims, kind="float", dtype=None, special_p=0.05):
    """An array of `kind` (float, int, index, bool, string) with these dims."""
    n = int(np.prod(dims, dtype=np.int64))
    if kind == "float":
        dtype = dtype or pick(rng, FLOAT_DTYPES)
        x = (rng.standard_normal(n) * pick(rng, (1.0, 1.0, 3.0, 0.1, 100.0)))
        if n and rng.random() < special_p:
            k = int(rng.integers(n))
            x[k] = pick(rng, (np.nan, np.inf, -np.inf, 0.0, 1e38))
        return x.astype(dtype).reshape(dims)
    if kind in ("int", "index"):
        dtype = dtype or pick(rng, INT_DTYPES)
        lo, hi = (-2, 6) if kind == "index" else (-10, 10)
        info = np.iinfo(dtype)
        lo, hi = max(lo, info.min), min(hi, info.max)
        x = rng.integers(lo, hi + 1, n).astype(dtype)
        if n and rng.random() < special_p:
            x[int(rng.integers(n))] = pick(rng, (info.max, info.min, 0))
        return x.reshape(dims)
    if kind == "bool":
        return (rng.random(n) < 0.5).reshape(dims)
    if kind == "string":
        words = [pick(rng, ("a", "bb", "", "c\x00d", "\u00e9t\u00e9", "1", "-2")) for _ in range(n)]
        return np.array(words, dtype=object).reshape(dims)
    raise ValueError(kind)


def any_tensor(rng, dims=None):
    kind = pick(rng, ALL_KINDS)
    return tensor(rng, shape(rng) if dims is None else dims, kind)


def int_value(rng, small=True):
    return int(pick(rng, SMALL_INTS if small and rng.random() < 0.8 else EDGE_INTS))


def float_value(rng):
    if rng.random() < 0.6:
        return float(pick(rng, (0.0, 1.0, 0.5, 2.0, 0.1, -1.0, 1e-4)))
    return float(pick(rng, EDGE_FLOATS))


def int_list(rng, length=None):
    n = int(rng.integers(0, 5)) if length is None else length
    return [int_value(rng) for _ in range(n)]


def float_list(rng, length=None):
    n = int(rng.integers(0, 5)) if length is None else length
    return [float_value(rng) for _ in range(n)]


def string_value(rng, choices=()):
    if choices and rng.random() < 0.8:
        return str(pick(rng, choices))
    return pick(rng, STRINGS)
