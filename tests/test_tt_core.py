"""caffe2py.tt_core (Caffe2's caffe2.python.tt_core): cores rebuilt into the
matrix with NumPy, the TT op on matrix_to_tt's cores against X W^T + b."""
import numpy as np
import pytest

from caffe2py import core, tt_core, workspace

INP, OUT = [2, 3, 2], [3, 2, 2]


def _dense_from_cores(cores, inp, out, ranks):
    """W[(i..), (j..)] from cores in the TT op's layout (last core first, each (n, r', r, m))."""
    d = len(inp)
    parts, at = [None] * d, 0
    for k in range(d - 1, -1, -1):
        shape = (inp[k], ranks[k + 1], ranks[k], out[k])
        size = int(np.prod(shape))
        parts[k] = cores[at:at + size].reshape(shape).transpose(2, 0, 3, 1)   # (r, n, m, r')
        at += size
    assert at == cores.size
    full = parts[0]
    for k in range(1, d):
        full = np.einsum("...a,anmb->...nmb", full, parts[k])
    full = full.reshape([n for k in range(d) for n in (inp[k], out[k])])   # drop r_0 = r_d = 1
    order = list(range(0, 2 * d, 2)) + list(range(1, 2 * d, 2))
    return full.transpose(order).reshape(int(np.prod(inp)), int(np.prod(out)))


def test_full_ranks_rebuild_the_matrix_exactly():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((12, 12)).astype(np.float32)
    ranks = [1, 6, 4, 1]               # the full ranks of these mode sizes
    cores = tt_core.matrix_to_tt(W, INP, OUT, ranks)
    assert cores.dtype == np.float32
    # the cores stand for W^T: the TT op computes X W^T like FC with weight W
    np.testing.assert_allclose(_dense_from_cores(cores, INP, OUT, ranks), W.T, atol=1e-4)


def test_tt_op_on_the_cores_matches_fc():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((12, 12)).astype(np.float32)
    X = rng.standard_normal((4, 12)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    ranks = [1, 6, 4, 1]               # the full ranks of these mode sizes
    workspace.ResetWorkspace()
    for name, value in (("X", X), ("b", b), ("cores", tt_core.matrix_to_tt(W, INP, OUT, ranks))):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator("TT", ["X", "b", "cores"], ["Y"], inp_sizes=INP,
                                                  out_sizes=OUT, tt_ranks=ranks))
    np.testing.assert_allclose(workspace.FetchBlob("Y"), X @ W.T + b, rtol=1e-4, atol=1e-4)
    workspace.ResetWorkspace()


def test_low_ranks_give_the_truncated_svd_of_a_two_core_split():
    rng = np.random.default_rng(2)
    W = rng.standard_normal((6, 6))
    inp, out, ranks = [2, 3], [3, 2], [1, 2, 1]
    cores = tt_core.matrix_to_tt(W, inp, out, ranks)
    got = _dense_from_cores(cores, inp, out, ranks)
    # two cores: the best rank-2 approximation of W^T unfolded as (i0 j0) x (i1 j1)
    unfold = W.T.reshape(2, 3, 3, 2).transpose(0, 2, 1, 3).reshape(6, 6)
    u, s, v = np.linalg.svd(unfold)
    best = (u[:, :2] * s[:2]) @ v[:2]
    np.testing.assert_allclose(got.reshape(2, 3, 3, 2).transpose(0, 2, 1, 3).reshape(6, 6), best, atol=1e-4)


def test_tt_svd_and_init_cores():
    rng = np.random.default_rng(3)
    tensor = rng.standard_normal((4, 5, 3))
    cores = tt_core.tt_svd(tensor, [4, 5, 3], [1, 4, 3, 1])
    g0 = cores[:16].reshape(1, 4, 4)
    g1 = cores[16:76].reshape(4, 5, 3)
    g2 = cores[76:].reshape(3, 3, 1)
    np.testing.assert_allclose(np.einsum("xia,ajb,bky->ijk", g0, g1, g2), tensor, atol=1e-4)
    init = tt_core.init_tt_cores(INP, OUT, [1, 3, 3, 1], seed=5)
    assert init.dtype == np.float32 and init.size == 2 * 3 * 3 + 3 * 2 * 3 * 3 + 3 * 2 * 2
    np.testing.assert_array_equal(init, tt_core.init_tt_cores(INP, OUT, [1, 3, 3, 1], seed=5))
    first = init[:18].reshape(6, 3)          # orthogonalized: orthonormal columns, times the scale
    gram = first.T @ first
    np.testing.assert_allclose(gram / gram[0, 0], np.eye(3), atol=1e-5)


def test_size_mismatches_are_refused():
    with pytest.raises(AssertionError, match="first dimension of W"):
        tt_core.matrix_to_tt(np.zeros((5, 12)), INP, OUT, [1, 2, 2, 1])
    with pytest.raises(AssertionError, match="tt-ranks"):
        tt_core.matrix_to_tt(np.zeros((12, 12)), INP, OUT, [1, 2, 1])
