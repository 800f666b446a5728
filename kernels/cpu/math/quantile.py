"""Quantile (caffe2/operators/quantile_op): a value v such that at least
ceil(n * quantile) of the n values are <= v, found by bisection of [min, max] in the
inputs' float type until hi - lo is within tol of |hi| + |lo|."""
import numpy as np


class PrecisionLimit(Exception):
    """The bisection's midpoint equals an end: the float type cannot split further."""


def _count_le(values, threshold):
    return int(np.count_nonzero(values <= threshold))


def bisect_quantile(values, quantile, tol):
    """values: a non-empty flat float32/float64 array (already abs-ed when asked).
    Returns the quantile value in values.dtype, following Caffe2's steps: the minimum
    when the target count is 0 or the minimum already reaches it, the maximum when the
    target is every value, else the first midpoint whose count equals the target, or
    the upper end once the bracket is within tolerance. NaN is never counted and never
    a bound (comparisons with NaN are false)."""
    t = values.dtype.type
    tol = t(np.float32(tol))                       # Caffe2 keeps tol as a float
    numel = values.size
    # the target count is computed in single precision, as Caffe2 does (int64 * float)
    target = int(np.ceil(np.float32(numel) * np.float32(quantile)))
    finite = values[~np.isnan(values)]
    lo = finite.min() if finite.size else t(np.finfo(t).max)
    hi = finite.max() if finite.size else t(np.finfo(t).min)
    if target == 0:
        return lo
    if target == numel:
        return hi
    if _count_le(values, lo) >= target:
        return lo
    with np.errstate(over="ignore", invalid="ignore"):
        while abs(hi - lo) > tol * (abs(hi) + abs(lo)):
            # the half step is taken in double and the midpoint rounded to the type
            mid = t(float(lo) + float(hi - lo) / 2.0)
            count = _count_le(values, mid)
            if count > target:
                if mid == hi:
                    raise PrecisionLimit()
                hi = mid
            elif count < target:
                if mid == lo:
                    raise PrecisionLimit()
                lo = mid
            else:
                return mid
    return hi
