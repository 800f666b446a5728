"""Caffe2's unseeded shuffles, reproduced: std::shuffle as libstdc++ (GCC 9 and later)
implements it, driven by a fresh std::default_random_engine (minstd_rand0, seed 1),
as Caffe2's SortAndShuffle constructs one for every call. The same input order then
comes out in the same order as in Caffe2.

A Python loop, one engine step per element (two elements per step for ranges small
enough): fine for dataset index lists, not meant for huge arrays."""

_MODULUS = 2 ** 31 - 1
_MULTIPLIER = 16807
_ENGINE_MIN, _ENGINE_MAX = 1, _MODULUS - 1
_ENGINE_RANGE = _ENGINE_MAX - _ENGINE_MIN


class MinstdRand0:
    """std::minstd_rand0: x <- 16807 x mod (2^31 - 1); values in [1, 2^31 - 2]."""

    def __init__(self, seed=1):
        self.state = seed % _MODULUS or 1

    def __call__(self):
        self.state = self.state * _MULTIPLIER % _MODULUS
        return self.state


def uniform_int(engine, low, high):
    """std::uniform_int_distribution(low, high)(engine), libstdc++'s downscaling: draw
    until below the largest multiple of the range, then divide."""
    span = high - low + 1
    if span > _ENGINE_RANGE:
        raise ValueError("a range of %d values is wider than minstd_rand0's" % span)
    scaling = _ENGINE_RANGE // span
    past = span * scaling
    while True:
        drawn = engine() - _ENGINE_MIN
        if drawn < past:
            return low + drawn // scaling


def std_shuffle(values):
    """Shuffles the 1-D array (or view) `values` in place as
    std::shuffle(begin, end, std::default_random_engine()) does in libstdc++."""
    n = len(values)
    if n == 0:
        return
    engine = MinstdRand0()

    def swap(i, j):
        values[i], values[j] = values[j], values[i]

    if _ENGINE_RANGE // n >= n:
        # two swap positions from one draw: i in [0, k], j in [0, k + 1] as x // (k + 2), x % (k + 2)
        i = 1
        if n % 2 == 0:
            swap(i, uniform_int(engine, 0, 1))
            i += 1
        while i != n:
            k = i + 1
            x = uniform_int(engine, 0, k * (k + 1) - 1)
            swap(i, x // (k + 1))
            swap(i + 1, x % (k + 1))
            i += 2
        return
    for i in range(1, n):
        swap(i, uniform_int(engine, 0, i))
