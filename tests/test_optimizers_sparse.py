"""Row-sparse optimizer ops (ScatterWeightedSum, SparseMomentumSGDUpdate, SparseAdagrad,
RowWiseSparseAdagrad, SparseAdam, RowWiseSparseAdam) against sequential float64 NumPy
references of Caffe2's kernels (indices applied one after another, so a duplicated
index is updated twice), plus the in-place contract: a bad index raises naming the
blob and nothing is written; a net failing after the update leaves the tables as they
were; a table another blob shares is never written through."""
import weakref

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.workspace import current_workspace

RNG = np.random.default_rng(1616)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def feed(**blobs):
    workspace.ResetWorkspace()
    for name, value in blobs.items():
        workspace.FeedBlob(name, value)


def run(op_type, inputs, outputs, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **kwargs))
    return [workspace.FetchBlob(o) for o in outputs]


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


DUPS = np.array([4, 1, 4, 0, 4, 7], np.int64)       # row 4 three times


# ----------------------------------------------------------------- references

def ref_sparse_adagrad(p, h, idx, g, lr, eps, wd=0.0, rowwise=False):
    p, h, g = p.astype(np.float64), h.astype(np.float64), g.astype(np.float64)
    for i, r in enumerate(idx):
        gi = g[i] + wd * p[r]
        if rowwise:
            h[r] += np.mean(gi * gi)
        else:
            h[r] += gi * gi
        p[r] += lr * gi / (np.sqrt(h[r]) + eps)
    return p, h


def ref_sparse_adam(p, m1, m2, idx, g, lr, it, b1, b2, eps, rowwise=False):
    p, m1, m2, g = (a.astype(np.float64) for a in (p, m1, m2, g))
    t = it + 1
    c = np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    steps = np.zeros_like(g)
    for i, r in enumerate(idx):
        m1[r] = b1 * m1[r] + (1 - b1) * g[i]
        if rowwise:
            m2[r] = b2 * m2[r] + (1 - b2) * np.mean(g[i] * g[i])
        else:
            m2[r] = b2 * m2[r] + (1 - b2) * g[i] * g[i]
        steps[i] = c * m1[r] / (np.sqrt(m2[r]) + eps)
        p[r] += lr * steps[i]
    return p, m1, m2, steps


def ref_sparse_momentum(g, m, lr, p, idx, mu, nesterov):
    g, m, p = g.astype(np.float64), m.astype(np.float64), p.astype(np.float64)
    steps = np.zeros_like(g)
    for i, r in enumerate(idx):
        if nesterov:
            old = m[r].copy()
            m[r] = mu * old + lr * g[i]
            steps[i] = (1 + mu) * m[r] - mu * old
        else:
            steps[i] = lr * g[i] + mu * m[r]
            m[r] = steps[i]
        p[r] -= steps[i]
    return steps, m, p


# ----------------------------------------------------------------- values

@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_scatter_weighted_sum_duplicates_scale_once_per_occurrence(index_type):
    table, x1, x2 = f32(9, 3), f32(6, 3), f32(6, 3)
    feed(t=table, w0=np.array([0.5], np.float32), idx=DUPS.astype(index_type), x1=x1,
         w1=np.array([2.0], np.float32), x2=x2, w2=np.array([-1.0], np.float32))
    (out,) = run("ScatterWeightedSum", ["t", "w0", "idx", "x1", "w1", "x2", "w2"], ["t"])
    want = table.astype(np.float64)
    for r in DUPS:                       # Caffe2: scale every occurrence first ...
        want[r] *= 0.5
    for i, r in enumerate(DUPS):         # ... then add every slice
        want[r] += 2.0 * x1[i] - 1.0 * x2[i]
    close(out, want)


def test_scatter_weighted_sum_one_d_table_and_multi_dim_indices():
    table = f32(10)
    idx = np.array([[1, 2], [2, 9]], np.int64)
    x = f32(2, 2)
    feed(t=table, w0=np.array([1.0], np.float32), idx=idx, x=x, w=np.array([0.1], np.float32))
    (out,) = run("ScatterWeightedSum", ["t", "w0", "idx", "x", "w"], ["t"])
    want = table.astype(np.float64)
    for i, r in enumerate(idx.reshape(-1)):
        want[r] += 0.1 * x.reshape(-1)[i]
    close(out, want)


@pytest.mark.parametrize("nesterov", [0, 1])
def test_sparse_momentum_sgd_update(nesterov):
    p, m, g = f32(8, 4), f32(8, 4), f32(6, 4)
    feed(g=g, m=m, lr=np.array([0.1], np.float32), p=p, idx=DUPS)
    steps, m_out, p_out = run("SparseMomentumSGDUpdate", ["g", "m", "lr", "p", "idx"], ["g", "m", "p"],
                              momentum=0.9, nesterov=nesterov)
    want = ref_sparse_momentum(g, m, 0.1, p, DUPS, 0.9, nesterov)
    for got, ref in zip((steps, m_out, p_out), want):
        close(got, ref)


@pytest.mark.parametrize("wd", [0.0, 0.03])
def test_sparse_adagrad(wd):
    p, h, g = f32(8, 5), np.abs(f32(8, 5)), f32(6, 5)
    feed(p=p, h=h, idx=DUPS.astype(np.int32), g=g, lr=np.array([-0.05], np.float32))
    got = run("SparseAdagrad", ["p", "h", "idx", "g", "lr"], ["p", "h"], epsilon=1e-4, weight_decay=wd)
    for a, b in zip(got, ref_sparse_adagrad(p, h, DUPS, g, -0.05, 1e-4, wd)):
        close(a, b)


@pytest.mark.parametrize("wd", [0.0, 0.03])
def test_rowwise_sparse_adagrad(wd):
    p, h, g = f32(8, 5), np.abs(f32(8)), f32(6, 5)
    feed(p=p, h=h, idx=DUPS, g=g, lr=np.array([-0.05], np.float32))
    got = run("RowWiseSparseAdagrad", ["p", "h", "idx", "g", "lr"], ["p", "h"], epsilon=1e-4, weight_decay=wd)
    for a, b in zip(got, ref_sparse_adagrad(p, h, DUPS, g, -0.05, 1e-4, wd, rowwise=True)):
        close(a, b)


@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("n_out", [3, 4])
def test_sparse_adam(rowwise, n_out):
    p, m1, g = f32(8, 3), f32(8, 3) * 0.1, f32(6, 3)
    m2 = np.abs(f32(8) if rowwise else f32(8, 3)) * 0.1
    feed(p=p, m1=m1, m2=m2, idx=DUPS, g=g, lr=np.array([-0.01], np.float32), it=np.array([2], np.int64))
    op = "RowWiseSparseAdam" if rowwise else "SparseAdam"
    got = run(op, ["p", "m1", "m2", "idx", "g", "lr", "it"], ["p", "m1", "m2", "go"][:n_out],
              beta1=0.85, beta2=0.95, epsilon=1e-6)
    want = ref_sparse_adam(p, m1, m2, DUPS, g, -0.01, 2, 0.85, 0.95, 1e-6, rowwise)
    for a, b in zip(got, want):
        close(a, b)


def test_sparse_adagrad_matches_torch_on_unique_indices():
    # torch sums duplicate rows of a sparse gradient first (Caffe2 applies them one by
    # one), so the two agree on unique indices
    torch = pytest.importorskip("torch")
    p0 = f32(20, 4)
    t = torch.tensor(p0.copy(), requires_grad=True)
    opt = torch.optim.Adagrad([t], lr=0.2, eps=1e-6)
    feed(p=p0, h=np.zeros_like(p0), lr=np.array([-0.2], np.float32))
    net = core.Net("sparse_adagrad_vs_torch")
    net.SparseAdagrad(["p", "h", "idx", "g", "lr"], ["p", "h"], epsilon=1e-6)
    for _ in range(4):
        idx = RNG.choice(20, size=7, replace=False).astype(np.int64)
        g = f32(7, 4)
        workspace.FeedBlob("idx", idx)
        workspace.FeedBlob("g", g)
        workspace.RunNetOnce(net)
        t.grad = torch.sparse_coo_tensor(torch.tensor(idx).unsqueeze(0), torch.tensor(g), (20, 4))
        opt.step()
    close(workspace.FetchBlob("p"), t.detach().numpy())


def test_large_update_split_over_the_team_keeps_sequential_order():
    # enough work for several owner blocks; many duplicates land in every block
    rows, n, d = 300, 6000, 16
    p, h = f32(rows, d), np.zeros((rows, d), np.float32)
    idx = RNG.integers(0, rows, size=n).astype(np.int64)
    g = f32(n, d)
    feed(p=p, h=h, idx=idx, g=g, lr=np.array([-0.05], np.float32))
    got = run("SparseAdagrad", ["p", "h", "idx", "g", "lr"], ["p", "h"], epsilon=1e-4)
    for a, b in zip(got, ref_sparse_adagrad(p, h, idx, g, -0.05, 1e-4)):
        close(a, b, rtol=1e-4, atol=1e-5)


def test_empty_indices_change_nothing():
    p, h = f32(5, 2), np.abs(f32(5, 2))
    feed(p=p, h=h, idx=np.zeros(0, np.int64), g=np.zeros((0, 2), np.float32), lr=np.array([-1.0], np.float32))
    got = run("SparseAdagrad", ["p", "h", "idx", "g", "lr"], ["p", "h"])
    assert np.array_equal(got[0], p) and np.array_equal(got[1], h)


# ----------------------------------------------------------------- bad input

SPARSE_CASES = {
    "ScatterWeightedSum": (["p", "one", "idx", "g", "lr"], ["p"]),
    "SparseMomentumSGDUpdate": (["g", "h", "lr", "p", "idx"], ["g", "h", "p"]),
    "SparseAdagrad": (["p", "h", "idx", "g", "lr"], ["p", "h"]),
    "RowWiseSparseAdagrad": (["p", "hr", "idx", "g", "lr"], ["p", "hr"]),
    "SparseAdam": (["p", "h", "h2", "idx", "g", "lr", "it"], ["p", "h", "h2"]),
    "RowWiseSparseAdam": (["p", "h", "hr", "idx", "g", "lr", "it"], ["p", "h", "hr"]),
}


def _sparse_blobs(idx, g=None):
    return dict(p=f32(6, 3), h=np.abs(f32(6, 3)), h2=np.abs(f32(6, 3)), hr=np.abs(f32(6)),
                one=np.array([1.0], np.float32), idx=idx, g=f32(len(idx), 3) if g is None else g,
                lr=np.array([-0.1], np.float32), it=np.array([0], np.int64))


@pytest.mark.parametrize("op", sorted(SPARSE_CASES))
@pytest.mark.parametrize("bad", [6, -1])
def test_out_of_range_index_is_named_and_nothing_is_written(op, bad):
    blobs = _sparse_blobs(np.array([0, bad, 2], np.int64))
    feed(**blobs)
    inputs, outputs = SPARSE_CASES[op]
    with pytest.raises(Caffe2Error, match=r"%s.*blob 'idx'.*index %d at position 1 is out of range \[0, 6\)"
                                          % (op, bad)):
        run(op, inputs, outputs)
    for name in ("p", "h", "h2", "hr"):
        assert np.array_equal(workspace.FetchBlob(name), blobs[name]), name


@pytest.mark.parametrize("op", sorted(SPARSE_CASES))
def test_gradient_of_the_wrong_width_is_named(op):
    feed(**_sparse_blobs(np.array([0, 1], np.int64), g=f32(2, 4)))
    inputs, outputs = SPARSE_CASES[op]
    with pytest.raises(Caffe2Error, match=r"%s.*blob 'g'.*one 3-value row of 'p' per index" % op):
        run(op, inputs, outputs)


def test_float_indices_and_wrong_moment_shapes_are_named():
    feed(**_sparse_blobs(np.array([0.0, 1.0], np.float32)))
    with pytest.raises(Caffe2Error, match="SparseAdagrad.*blob 'idx'.*int32 or int64"):
        run("SparseAdagrad", ["p", "h", "idx", "g", "lr"], ["p", "h"])
    feed(**_sparse_blobs(np.array([0, 1], np.int64)))
    with pytest.raises(Caffe2Error, match="RowWiseSparseAdagrad.*blob 'h'.*has 18 elements.*first dimension has 6"):
        run("RowWiseSparseAdagrad", ["p", "h", "idx", "g", "lr"], ["p", "h"])
    with pytest.raises(Caffe2Error, match="SparseAdam.*blob 'lr'.*lr must hold one value"):
        workspace.FeedBlob("lr", np.ones(2, np.float32))
        run("SparseAdam", ["p", "h", "h2", "idx", "g", "lr", "it"], ["p", "h", "h2"])


def test_tables_must_be_updated_in_place_and_be_distinct():
    feed(**_sparse_blobs(np.array([0], np.int64)))
    with pytest.raises(Caffe2Error, match="must run in place"):
        run("SparseAdagrad", ["p", "h", "idx", "g", "lr"], ["p_new", "h"])
    with pytest.raises(Caffe2Error, match="input 0 and output 1 are both 'p'"):
        run("SparseAdagrad", ["p", "p", "idx", "g", "lr"], ["p", "p"])
    with pytest.raises(Caffe2Error, match="enableRAdam"):
        run("SparseAdam", ["p", "h", "h2", "idx", "g", "lr", "it"], ["p", "h", "h2"], enableRAdam=1)


# ----------------------------------------------------------------- the in-place contract

@pytest.mark.parametrize("op", sorted(SPARSE_CASES))
def test_update_writes_the_workspace_tables_in_place(op):
    feed(**_sparse_blobs(np.array([0, 3], np.int64)))
    inputs, outputs = SPARSE_CASES[op]
    net = core.Net("in_place_" + op)
    getattr(net, op)(inputs, outputs)
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    tables = [o for o in outputs if o != "g"]
    # weak references: a strong one would be a second holder and force a copy
    refs = {name: weakref.ref(current_workspace().blobs[name]) for name in tables}
    workspace.RunNet(net.Name(), num_iter=3)
    for name in tables:
        assert current_workspace().blobs[name] is refs[name](), name      # no copy per step


@pytest.mark.parametrize("op", sorted(SPARSE_CASES))
def test_a_net_failing_after_the_update_leaves_every_table_as_it_was(op):
    blobs = _sparse_blobs(np.array([0, 3, 3, 5, 3], np.int64))
    feed(**blobs)
    inputs, outputs = SPARSE_CASES[op]
    workspace.FeedBlob("x", blobs["h"] + 1)
    net = core.Net("update_then_fail_" + op)
    getattr(net, op)(inputs, outputs)
    net.ScatterWeightedSum(["x", "lr", "idx", "g", "lr"], "x")      # a second in-place update
    net.Reshape("g", "bad", shape=[7])
    workspace.CreateNet(net)
    for _ in range(2):
        with pytest.raises(Caffe2Error, match="Reshape #2"):
            workspace.RunNet(net.Name())
        for name in ("p", "h", "h2", "hr"):
            assert np.array_equal(workspace.FetchBlob(name), blobs[name]), name
        assert np.array_equal(workspace.FetchBlob("x"), blobs["h"] + 1)


def test_observed_runs_update_in_place_and_undo_too():
    blobs = _sparse_blobs(np.array([0, 3, 3], np.int64))
    feed(**blobs)
    net = core.Net("observed")
    net.SparseAdagrad(["p", "h", "idx", "g", "lr"], ["p", "h"])
    workspace.CreateNet(net)
    current_workspace().get_net(net.Name()).add_observer("TimeObserver")
    workspace.RunNet(net.Name())
    table = weakref.ref(current_workspace().blobs["p"])
    workspace.RunNet(net.Name(), num_iter=2)
    assert current_workspace().blobs["p"] is table()
    updated = workspace.FetchBlob("p")
    failing = core.Net("observed_fail")
    failing.SparseAdagrad(["p", "h", "idx", "g", "lr"], ["p", "h"])
    failing.Reshape("g", "bad", shape=[7])
    workspace.CreateNet(failing)
    current_workspace().get_net(failing.Name()).add_observer("TimeObserver")
    with pytest.raises(Caffe2Error, match="Reshape #1"):
        workspace.RunNet(failing.Name())
    assert np.array_equal(workspace.FetchBlob("p"), updated)


def test_per_op_benchmark_runs_update_in_place(capsys):
    # BenchmarkNet(..., run_individual=True) times ops one by one: its first pass also
    # reads every op's inputs for the cost table, which must not hold the table then
    blobs = _sparse_blobs(np.array([0, 3, 3], np.int64))
    feed(**blobs)
    net = core.Net("per_op_in_place")
    net.SparseAdagrad(["p", "h", "idx", "g", "lr"], ["p", "h"])
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    table = weakref.ref(current_workspace().blobs["p"])
    workspace.BenchmarkNet(net.Name(), 0, 2, True)
    assert "SparseAdagrad" in capsys.readouterr().out
    assert current_workspace().blobs["p"] is table()


def test_a_shared_table_is_copied_not_written_through():
    blobs = _sparse_blobs(np.array([1, 2], np.int64))
    feed(**blobs)
    workspace.RunOperatorOnce(core.CreateOperator("Alias", ["p"], ["p_alias"]))
    workspace.RunOperatorOnce(core.CreateOperator("Reshape", ["h"], ["h_view"], shape=[18]))
    run("SparseAdagrad", ["p", "h", "idx", "g", "lr"], ["p", "h"])
    assert not np.array_equal(workspace.FetchBlob("p"), blobs["p"])
    assert np.array_equal(workspace.FetchBlob("p_alias"), blobs["p"])
    assert np.array_equal(workspace.FetchBlob("h_view"), blobs["h"].reshape(18))


def test_a_given_tensor_fill_constant_is_never_modified():
    # GivenTensorFill hands every run the same read-only array: the update must copy it
    workspace.ResetWorkspace()
    init = core.Net("const_init")
    init.GivenTensorFill([], "p", shape=[3, 2], values=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    init.ConstantFill(["p"], "h", value=0.0)
    workspace.CreateNet(init)
    for name, value in (("idx", np.array([1], np.int64)), ("g", np.ones((1, 2), np.float32)),
                        ("lr", np.array([-1.0], np.float32))):
        workspace.FeedBlob(name, value)
    step = core.Net("const_step")
    step.SparseAdagrad(["p", "h", "idx", "g", "lr"], ["p", "h"])
    workspace.CreateNet(step)
    for _ in range(2):
        workspace.RunNet(init.Name())
        workspace.RunNet(step.Name())
        close(workspace.FetchBlob("p"), [[1, 2], [3 - 1, 4 - 1], [5, 6]], atol=1e-4)


# ----------------------------------------------------------------- the NumPy twins

def test_the_numpy_twins_pass_the_reference_and_undo_tests_too():
    """What a first run uses while the kernels compile (CAFFE2PY_JIT=background): the
    twins must match the sequential references (duplicates in order) and fill the undo
    buffers so that a failing net leaves every table as it was."""
    from caffe2py.kernels.cpu.optim import sparse as S
    from caffe2py.kernels.cpu.runtime import jit
    before = jit.jit_mode()
    jit.set_jit_mode("numpy")
    try:
        test_scatter_weighted_sum_duplicates_scale_once_per_occurrence(np.int32)
        test_scatter_weighted_sum_one_d_table_and_multi_dim_indices()
        for nesterov in (0, 1):
            test_sparse_momentum_sgd_update(nesterov)
        test_sparse_adagrad(0.03)
        test_rowwise_sparse_adagrad(0.03)
        for rowwise in (False, True):
            test_sparse_adam(rowwise, 4)
            test_sparse_adam(rowwise, 3)
        test_large_update_split_over_the_team_keeps_sequential_order()
        test_empty_indices_change_nothing()
        for op in sorted(SPARSE_CASES):
            test_a_net_failing_after_the_update_leaves_every_table_as_it_was(op)
        kernels = (S._sparse_adagrad, S._rowwise_sparse_adagrad, S._sparse_adam, S._rowwise_sparse_adam,
                   S._sparse_momentum_sgd, S._scale_rows, S._axpy_rows)
        assert not any(k.ready() for k in kernels)          # the twins ran, not machine code
    finally:
        jit.set_jit_mode(before)


@pytest.mark.parametrize("rowwise", [False, True])
def test_a_zero_denominator_gives_nan_and_inf_as_caffe2_and_the_twins_do(rowwise):
    """epsilon = 0 with an all-zero moment and gradient: 0 / (sqrt(0) + 0) = nan, as
    Caffe2's C++ and the NumPy twins give; the compiled loops divide the same way (no
    ZeroDivisionError) and agree with their twins bit for bit."""
    from caffe2py.kernels.cpu.optim import sparse as S
    from caffe2py.kernels.cpu.runtime import jit
    d = 8
    param = np.ones((3, d), np.float32)
    moment = np.zeros(3 if rowwise else (3, d), np.float32)
    grad = np.zeros((2, d), np.float32)
    grad[1, :4] = 2.0
    indices = np.array([0, 2], np.int64)
    update = S.rowwise_sparse_adagrad if rowwise else S.sparse_adagrad
    results = {}
    before = jit.jit_mode()
    try:
        for mode in ("inline", "numpy"):
            jit.set_jit_mode(mode)
            p, m = param.copy(), moment.copy()
            update(p, m, indices, grad, np.float32(-0.1), np.float32(0.0), np.float32(0.0))
            results[mode] = p
    finally:
        jit.set_jit_mode(before)
    np.testing.assert_array_equal(results["inline"], results["numpy"])      # nan where both are nan
    assert np.isnan(results["inline"][0]).all()             # 0 / (sqrt(0) + 0)
    np.testing.assert_array_equal(results["inline"][1], param[1])
