"""kernels/cpu/math/packed_gemm.py: a weight packed once into 16-column panels and
multiplied by a few rows at a time (the recurrent products of the fused RNNs),
against the product written out in float64."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.math import packed_gemm as P
from caffe2py.kernels.cpu.runtime import jit


@pytest.mark.parametrize("m,k,n", [(1, 5, 3), (2, 9, 37), (3, 16, 16), (4, 256, 1024), (7, 100, 400),
                                   (16, 1024, 256), (9, 33, 17)])
@pytest.mark.parametrize("transposed", [False, True])
def test_packed_matmul_matches_the_product(m, k, n, transposed):
    rng = np.random.default_rng(m * 1000 + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    b = w.T if transposed else w            # the fused RNNs pack W^T, a transposed view
    packed = P.pack_columns(b)
    assert packed.shape == (-(-n // 16), k, 16)
    got = P.packed_matmul(a, packed, n)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_packed_padding_is_zero():
    """Columns past n in the last panel are zero (the micro-kernel multiplies them)."""
    b = np.random.default_rng(3).standard_normal((6, 21)).astype(np.float32)
    packed = P.pack_columns(b)
    assert np.all(packed[1, :, 5:] == 0)
    np.testing.assert_array_equal(packed[1, :, :5], b[:, 16:])


def test_numpy_twin_matches_the_compiled_kernel():
    before = jit.jit_mode()
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 40)).astype(np.float32)
    packed = P.pack_columns(rng.standard_normal((40, 50)).astype(np.float32))
    try:
        results = []
        for mode in ("inline", "numpy"):
            jit.set_jit_mode(mode)
            results.append(P.packed_matmul(a, packed, 50))
    finally:
        jit.set_jit_mode(before)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-5)


def test_bad_operands_are_refused():
    packed = P.pack_columns(np.ones((4, 20), np.float32))
    with pytest.raises(ValueError, match="C-contiguous float32"):
        P.packed_matmul(np.ones((2, 5), np.float32), packed, 20)       # K differs
    with pytest.raises(ValueError):
        P.packed_matmul(np.ones((2, 4), np.float32), packed, 40)       # more columns than packed
    with pytest.raises(ValueError):
        P.packed_matmul(np.ones((2, 4), np.float64), packed, 20)

