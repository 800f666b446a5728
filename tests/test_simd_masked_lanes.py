"""simd.vstore_f32_lanes / vload_f32_lanes / vmerge_f32_lanes: only lanes lo..hi-1 are
stored / read; the memory of the other lanes is left as it was (the direct and panel
convolutions store the lanes of a block that straddles output rows with them, next to
other channels' outputs). simd.vtranspose16_at: the panel kernel's register transpose."""
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


@numba.njit
def _merge_lanes(lanes, base, src, start, lo, hi, dst):
    v = simd.vload_f32(lanes, simd.address(base))
    simd.vstore_f32_at(simd.address(dst), simd.vmerge_f32_lanes(v, simd.address(src) + start * 4, lo, hi))


@pytest.mark.parametrize("lanes", [simd.LANES_8, simd.LANES_16])
def test_masked_merge_keeps_the_other_lanes_bit_for_bit(lanes):
    # the panel kernel gathers a block's residual run by run into one vector: a lane
    # outside the run must keep its value exactly (-0.0 and NaN included)
    n = lanes.n
    base = np.full(n, -0.0, np.float32)
    base[1] = np.nan
    src = np.arange(1, 3 * n + 1, dtype=np.float32)
    out = np.empty(n, np.float32)
    for lo, hi in [(0, n), (2, n - 3), (n - 1, n), (3, 3)]:
        _merge_lanes(lanes, base, src, n, lo, hi, out)
        want = base.copy()
        want[lo:hi] = src[n + lo:n + hi]
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


@numba.njit
def _transpose(rows, out):
    a, n = simd.address(rows), simd.LANES_16       # (a list of vectors does not compile)
    simd.vtranspose16_at(simd.address(out), simd.vload_f32(n, a), simd.vload_f32(n, a + 64),
                         simd.vload_f32(n, a + 128), simd.vload_f32(n, a + 192), simd.vload_f32(n, a + 256),
                         simd.vload_f32(n, a + 320), simd.vload_f32(n, a + 384), simd.vload_f32(n, a + 448),
                         simd.vload_f32(n, a + 512), simd.vload_f32(n, a + 576), simd.vload_f32(n, a + 640),
                         simd.vload_f32(n, a + 704), simd.vload_f32(n, a + 768), simd.vload_f32(n, a + 832),
                         simd.vload_f32(n, a + 896), simd.vload_f32(n, a + 960))


def test_transpose16_stores_column_c_at_64_c_bytes():
    rows = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    rows[3, 5] = np.nan
    out = np.full((18, 16), -7.0, np.float32)
    _transpose(rows, out[1:17])
    np.testing.assert_array_equal(out[1:17].view(np.uint32), rows.T.view(np.uint32))
    assert (out[0] == -7.0).all() and (out[17] == -7.0).all()      # nothing past the 16 x 16
