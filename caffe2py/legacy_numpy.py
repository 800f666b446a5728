"""NumPy names that Caffe2-era scripts use and NumPy removed (np.int, np.float,
np.bool, np.object, np.str, np.asscalar, np.float_, np.NaN, ...), put back for one run
of a legacy script: `python -m caffe2py.compat --legacy-numpy script.py`; np.sum over
a generator, which NumPy 2 refuses, summed as NumPy 1.x did; the SciPy functions such
code imported from scipy.misc (logsumexp, comb, factorial), which SciPy moved to
scipy.special; and scipy.interpolate.interp2d on regular grids (removed in SciPy 1.14)
through RectBivariateSpline, the replacement SciPy names.

Never installed by `import caffe2py` or by the compat alias alone: a program that
does not ask for them meets NumPy's own errors, as it would anywhere else.
"""
import builtins
import inspect
import sys

import numpy as np


def _asscalar(a):
    """np.asscalar(a): a one-element array's value as a Python scalar (a.item())."""
    return np.asarray(a).item()


def _asfarray(a, dtype=np.float64):
    """np.asfarray(a, dtype): the array as a floating type (float64 unless a float dtype)."""
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact):
        dtype = np.dtype(np.float64)
    return np.asarray(a, dtype=dtype)


def _sum_accepting_generators(np_sum):
    """np.sum that sums a generator as NumPy < 2 did (Python's sum over it, after a
    deprecation warning since NumPy 1.15); any other argument goes to NumPy's own."""
    def sum(a, *args, **kwargs):
        if not inspect.isgenerator(a):
            return np_sum(a, *args, **kwargs)
        total = builtins.sum(a)        # NumPy 1.x: Python's sum; only `out` was honoured
        out = kwargs.get("out", args[2] if len(args) > 2 else None)
        if out is not None:
            out[...] = total
            return out
        return total
    sum.__doc__ = np_sum.__doc__
    sum._caffe2py_legacy = True
    return sum


def _removed_aliases():
    """name -> what it meant before NumPy removed it (builtins for the np.int family,
    NumPy's own replacement for the rest)."""
    return {
        # removed in NumPy 1.24: the builtin-type aliases
        "int": builtins.int, "float": builtins.float, "bool": builtins.bool, "object": builtins.object,
        "str": builtins.str, "complex": builtins.complex, "long": builtins.int, "unicode": builtins.str,
        # removed in NumPy 1.23 / 2.0
        "asscalar": _asscalar, "asfarray": _asfarray,
        "float_": np.float64, "complex_": np.complex128, "string_": np.bytes_, "unicode_": np.str_,
        "int0": np.intp, "uint0": np.uintp, "bool8": np.bool_, "object0": np.object_, "str0": np.str_,
        "bytes0": np.bytes_, "void0": np.void, "cfloat": np.complex128, "singlecomplex": np.complex64,
        "longfloat": np.longdouble, "longcomplex": np.clongdouble, "clongfloat": np.clongdouble,
        "NaN": np.nan, "NAN": np.nan, "Inf": np.inf, "Infinity": np.inf, "infty": np.inf, "PINF": np.inf,
        "NINF": -np.inf, "PZERO": 0.0, "NZERO": -0.0,
        "product": np.prod, "cumproduct": np.cumprod, "alltrue": np.all, "sometrue": np.any,
        "round_": np.round, "rank": np.ndim,
    }


# SciPy functions Caffe2-era tests import from scipy.misc, which SciPy moved to
# scipy.special (and removed from scipy.misc in 1.3)
_SCIPY_MISC_MOVED = ("logsumexp", "comb", "factorial", "factorial2")


def _interp2d(RectBivariateSpline):
    """scipy.interpolate.interp2d for data on a regular grid (removed in SciPy 1.14),
    through the replacement SciPy's transition guide names: RectBivariateSpline(x, y,
    z.T, kx=ky=k, s=0), evaluated transposed; points outside the grid take the nearest
    edge value, as interp2d's default fill_value=None did."""
    degrees = {"linear": 1, "cubic": 3, "quintic": 5}

    def interp2d(x, y, z, kind="linear", copy=True, bounds_error=False, fill_value=None):  # noqa: ARG001
        x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
        z = np.asarray(z, dtype=np.float64)
        if z.shape != (len(y), len(x)):
            raise ValueError("interp2d (caffe2py --legacy-numpy): only regular grids, z of shape "
                             "(len(y), len(x)) = (%d, %d); got %s" % (len(y), len(x), z.shape))
        k = degrees[kind]
        spline = RectBivariateSpline(x, y, z.T, kx=k, ky=k, s=0)

        def evaluate(xnew, ynew):
            xnew = np.clip(np.atleast_1d(np.asarray(xnew, dtype=np.float64)), x.min(), x.max())
            ynew = np.clip(np.atleast_1d(np.asarray(ynew, dtype=np.float64)), y.min(), y.max())
            if fill_value is not None:
                raise ValueError("interp2d (caffe2py --legacy-numpy): only fill_value=None")
            return spline(np.sort(xnew), np.sort(ynew)).T
        return evaluate
    return interp2d


def _install_scipy_misc():
    """Put back scipy.misc.<name> for the moved functions, when SciPy is installed (it is
    imported only here, under the flag); returns the names set."""
    try:
        import scipy.misc
        import scipy.special
    except ImportError:
        return []
    added = []
    for name in _SCIPY_MISC_MOVED:
        if not hasattr(scipy.misc, name) and hasattr(scipy.special, name):
            setattr(scipy.misc, name, getattr(scipy.special, name))
            added.append("scipy.misc." + name)
    try:
        import scipy.interpolate as interpolate
    except ImportError:
        return added
    try:
        interpolate.interp2d([0.0, 1.0], [0.0, 1.0], np.zeros((2, 2)))
        removed = False
    except NotImplementedError:          # SciPy >= 1.14 keeps the name and raises
        removed = True
    except Exception:                    # noqa: BLE001 - any other answer: leave it alone
        removed = False
    if removed and hasattr(interpolate, "RectBivariateSpline"):
        interpolate.interp2d = _interp2d(interpolate.RectBivariateSpline)
        added.append("scipy.interpolate.interp2d")
    return added


def install(stream=None):
    """Put back every removed name this NumPy lacks; returns the names set. Says so in
    one line on stderr (stream)."""
    added = []
    for name, value in _removed_aliases().items():
        if name in np.__dict__:
            continue          # this NumPy still has it (np.long is back in NumPy 2)
        setattr(np, name, value)
        added.append(name)
    added += _install_scipy_misc()
    if not getattr(np.sum, "_caffe2py_legacy", False):
        np.sum = _sum_accepting_generators(np.sum)     # removed behaviour, not a removed name
    (stream or sys.stderr).write("caffe2py.compat --legacy-numpy: NumPy %s given back %d removed name(s) "
                                 "for this run (np.int, np.float, np.asscalar, ...)\n" % (np.__version__, len(added)))
    return added
