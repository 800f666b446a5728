"""simd.vstore_f32_lanes / vload_f32_lanes: only lanes lo..hi-1 are stored / read; the
memory of the other lanes is left as it was (the direct convolution stores the lanes of
a block that straddles output rows with them, next to other channels' outputs)."""
import numpy as np
import numba
import pytest

from caffe2py.kernels.cpu.runtime import simd


@numba.njit
def _store_lanes(lanes, src, dst, start, lo, hi):
    v = simd.vload_f32(lanes, simd.address(src))
    simd.vstore_f32_lanes(simd.address(dst) + start * 4, v, lo, hi)


@numba.njit
def _load_lanes(lanes, src, start, lo, hi, dst):
    simd.vstore_f32_at(simd.address(dst), simd.vload_f32_lanes(lanes, simd.address(src) + start * 4, lo, hi))


@pytest.mark.parametrize("lanes", [simd.LANES_8, simd.LANES_16])
def test_masked_store_writes_exactly_the_lanes_asked(lanes):
    n = lanes.n
    src = np.arange(1, n + 1, dtype=np.float32)
    for lo in range(0, n + 1):
        for hi in range(lo, n + 1):
            dst = np.full(3 * n, -7.0, np.float32)
            _store_lanes(lanes, src, dst, n, lo, hi)
            want = np.full(3 * n, -7.0, np.float32)
            want[n + lo:n + hi] = src[lo:hi]
            np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("lanes", [simd.LANES_8, simd.LANES_16])
def test_masked_load_reads_the_lanes_asked_and_zeros_the_rest(lanes):
    n = lanes.n
    src = np.arange(1, 3 * n + 1, dtype=np.float32)
    out = np.empty(n, np.float32)
    for lo, hi in [(0, n), (0, 1), (n - 1, n), (2, n - 3), (3, 3)]:
        _load_lanes(lanes, src, n, lo, hi, out)
        want = np.zeros(n, np.float32)
        want[lo:hi] = src[n + lo:n + hi]
        np.testing.assert_array_equal(out, want)


def test_masked_store_with_lane_zero_before_the_run_it_writes():
    # the direct kernel's row runs: lane 0 may sit columns before the row it stores into
    src = np.arange(1, 17, dtype=np.float32)
    dst = np.full(40, -7.0, np.float32)
    _store_lanes(simd.LANES_16, src, dst, 8, 10, 16)      # lanes 10..15 -> dst[18:24]
    want = np.full(40, -7.0, np.float32)
    want[18:24] = src[10:16]
    np.testing.assert_array_equal(dst, want)
