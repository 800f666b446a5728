"""Ftrl, SparseFtrl, RmsProp, Lars, YellowFin and SparseNormalize against references
written here from the update formulas."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)


def ftrl_reference(w, nz, g, alpha, beta, l1, l2):
    w, nz, g = w.astype(np.float64).ravel(), nz.astype(np.float64).ravel(), g.astype(np.float64).ravel()
    new_w, new_nz = np.zeros_like(w), np.zeros_like(nz)
    for i in range(w.size):
        n, z = nz[2 * i], nz[2 * i + 1]
        n2 = n + g[i] ** 2
        z2 = z + g[i] - (math.sqrt(n2) - math.sqrt(n)) / alpha * w[i]
        new_nz[2 * i], new_nz[2 * i + 1] = n2, z2
        if abs(z2) > l1:
            new_w[i] = (l1 * np.sign(z2) - z2) / ((beta + math.sqrt(n2)) / alpha + l2)
    return new_w, new_nz


class TestOptimizers(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(0, 10), alpha_input=st.booleans(), seed=st.integers(0, 99))
    @SETTINGS
    def test_ftrl(self, n, alpha_input, seed):
        rng = np.random.default_rng(seed)
        w = rng.standard_normal(n).astype(np.float32)
        nz = np.abs(rng.standard_normal(2 * n)).astype(np.float32)
        nz[1::2] *= rng.choice([-1, 1], n)
        g = rng.standard_normal(n).astype(np.float32)
        alpha = np.array([0.1], np.float32)
        ins = ["w", "nz", "g"] + (["alpha"] if alpha_input else [])
        op = core.CreateOperator("Ftrl", ins, ["w", "nz"], alpha=0.005 if alpha_input else 0.1, beta=1.0,
                                 lambda1=0.01, lambda2=0.02)

        def reference(w, nz, g, *rest):
            nw, nnz = ftrl_reference(w, nz, g, 0.1, 1.0, 0.01, 0.02)
            return [nw.astype(np.float32), nnz.astype(np.float32)]
        self.assertReferenceChecks(hu.cpu_do, op, [w, nz, g] + ([alpha] if alpha_input else []), reference,
                                   atol=1e-5)

    @given(rows=st.integers(1, 6), block=st.integers(1, 3), k=st.integers(0, 6), seed=st.integers(0, 99))
    @SETTINGS
    def test_sparse_ftrl_applies_indices_in_order(self, rows, block, k, seed):
        rng = np.random.default_rng(seed)
        w = rng.standard_normal((rows, block)).astype(np.float32)
        nz = np.abs(rng.standard_normal((rows, 2 * block))).astype(np.float32)
        idx = rng.integers(0, rows, k).astype(np.int64)          # duplicates likely
        g = rng.standard_normal((k, block)).astype(np.float32)
        op = core.CreateOperator("SparseFtrl", ["w", "nz", "i", "g"], ["w", "nz"], alpha=0.1, lambda1=0.01)

        def reference(w, nz, idx, g):
            w, nz = w.astype(np.float64).copy(), nz.astype(np.float64).copy()
            for j, r in enumerate(idx):
                w[r], nz[r] = ftrl_reference(w[r], nz[r], g[j], 0.1, 1.0, 0.01, 0.001)
            return [w.astype(np.float32), nz.astype(np.float32)]
        self.assertReferenceChecks(hu.cpu_do, op, [w, nz, idx, g], reference, atol=1e-5)

    def test_sparse_ops_check_indices_before_writing(self):
        w, nz = np.ones((3, 2), np.float32), np.ones((3, 4), np.float32)
        op = core.CreateOperator("SparseFtrl", ["w", "nz", "i", "g"], ["w", "nz"])
        workspace.ResetWorkspace()
        for name, v in (("w", w), ("nz", nz), ("i", np.array([0, 3], np.int32)), ("g", np.ones((2, 2), np.float32))):
            workspace.FeedBlob(name, v)
        with self.assertRaisesRegex(Caffe2Error, "index 3 at position 1 is out of range"):
            workspace.RunOperatorOnce(op)
        np.testing.assert_array_equal(workspace.FetchBlob("w"), w)
        np.testing.assert_array_equal(workspace.FetchBlob("nz"), nz)
        op = core.CreateOperator("SparseNormalize", ["w", "i"], ["w"])
        self.assertRunOpRaises(hu.cpu_do, op, [w, np.array([-1], np.int64)], exception=Caffe2Error,
                               regexp="out of range")
        with self.assertRaisesRegex(Caffe2Error, "in place"):
            workspace.RunOperatorOnce(core.CreateOperator("SparseNormalize", ["w", "i"], ["other"]))

    @given(n=st.integers(0, 8), momentum=st.sampled_from([0.0, 0.9]), seed=st.integers(0, 99))
    @SETTINGS
    def test_rmsprop(self, n, momentum, seed):
        rng = np.random.default_rng(seed)
        g, ms, mom = (rng.standard_normal(n).astype(np.float32), np.abs(rng.standard_normal(n)).astype(np.float32),
                      rng.standard_normal(n).astype(np.float32))
        lr = np.array([0.05], np.float32)
        op = core.CreateOperator("RmsProp", ["g", "ms", "mom", "lr"], ["g", "ms", "mom"], decay=0.8,
                                 momentum=momentum, epsilon=1e-4)

        def reference(g, ms, mom, lr):
            ms2 = ms + 0.2 * (g.astype(np.float64) ** 2 - ms)
            mom2 = momentum * mom + 0.05 * g / np.sqrt(1e-4 + ms2)
            return [mom2, ms2, mom2]
        self.assertReferenceChecks(hu.cpu_do, op, [g, ms, mom, lr], reference)

    @given(n=st.integers(1, 8), zero=st.booleans(), seed=st.integers(0, 99))
    @SETTINGS
    def test_lars(self, n, zero, seed):
        rng = np.random.default_rng(seed)
        x = np.zeros(n, np.float32) if zero else rng.standard_normal(n).astype(np.float32)
        dx = rng.standard_normal(n).astype(np.float32)
        wd, trust, lr_max = (np.array([v], np.float32) for v in (1e-4, 0.001, 0.5))
        op = core.CreateOperator("Lars", ["x", "dx", "wd", "trust", "lr_max"], ["lr"], offset=0.1, lr_min=1e-5)

        def reference(x, dx, wd, trust, lr_max):
            xn, dn = np.linalg.norm(x.astype(np.float64)), np.linalg.norm(dx.astype(np.float64))
            val = trust[0] / (dn / xn + wd[0] + 0.1) if xn > 0 else 1.0
            return [np.array([min(max(val, 1e-5), lr_max[0])], np.float32)]
        self.assertReferenceChecks(hu.cpu_do, op, [x, dx, wd, trust, lr_max], reference)

    @given(rows=st.integers(1, 5), block=st.integers(1, 4), k=st.integers(0, 6), use_max=st.booleans(),
           with_grad=st.booleans(), seed=st.integers(0, 99))
    @SETTINGS
    def test_sparse_normalize(self, rows, block, k, use_max, with_grad, seed):
        rng = np.random.default_rng(seed)
        p = (rng.standard_normal((rows, block)) * rng.uniform(0.2, 3, (rows, 1))).astype(np.float32)
        idx = rng.integers(0, rows, k).astype(np.int32)
        g = rng.standard_normal((k, block)).astype(np.float32)

        def reference(p, idx, *rest):
            p = p.astype(np.float64).copy()
            for r in idx:
                length = np.linalg.norm(p[r]) + 1e-12
                if use_max and length < 1.5:
                    continue
                p[r] *= 1.5 / length
            return [p.astype(np.float32)]
        ins = ["p", "i"] + (["g"] if with_grad else [])
        op = core.CreateOperator("SparseNormalize", ins, ["p"], norm=1.5, use_max_norm=int(use_max))
        self.assertReferenceChecks(hu.cpu_do, op, [p, idx] + ([g] if with_grad else []), reference, atol=1e-5)


def yellowfin_reference(state, grad, it, beta=0.999, width=20, eps=1e-6, nesterov=False):
    """One YellowFin step in float64 from the paper's algorithm as Caffe2 arranges it."""
    p, m, lr, mu, win, g_avg, g2_avg, mem = (np.array(v, np.float64) for v in state)
    deb = 1.0 / (1.0 - beta ** it)
    lr0, mu0 = float(lr[0]), float(mu[0])
    m2 = mu0 * m + lr0 * grad
    p2 = p - (1 + mu0) * m2 + mu0 * m if nesterov else p - m2
    avg = lambda old, new: beta * old + (1 - beta) * new  # noqa: E731
    g_avg2, g2_avg2 = avg(g_avg, grad), avg(g2_avg, grad * grad)
    gn2 = max(eps, float(grad @ grad))
    mem2 = mem.copy()
    mem2[1] = avg(mem[1], gn2)
    mem2[0] = avg(mem[0], math.sqrt(gn2))
    win2 = win.copy()
    win2[(it - 1) % width] = math.log(gn2)
    valid = win2[:min(width, it)]
    mem2[2], mem2[3] = avg(mem[2], valid.min()), avg(mem[3], valid.max())
    hmin, hmax = max(eps, math.exp(deb * mem2[2])), max(eps, math.exp(deb * mem2[3]))
    g_deb = deb * g_avg2
    variance = max(eps, deb * mem2[1] - float(g_deb @ g_deb))
    mem2[4] = avg(mem[4], mem2[0] / mem2[1])
    lr2, mu2 = lr.copy(), mu.copy()
    if it > 1:
        dist = deb * mem2[4]
        ratio = math.sqrt(hmax / hmin)
        q = (dist * hmin) ** 2 / (2 * variance)
        w3 = (-math.sqrt(q * q + 4.0 / 27.0 * q ** 3) - q) / 2
        w = math.copysign(abs(w3) ** (1 / 3), w3)
        root = w - q / 3 / w + 1
        mu_t = max(root ** 2, ((ratio - 1) / (ratio + 1)) ** 2)
        lr_t = (1 - math.sqrt(mu_t)) ** 2 / hmin
        mu2[0], lr2[0] = avg(mu0, mu_t), avg(lr0, lr_t)
    return [p2, m2, lr2, mu2, win2, g_avg2, g2_avg2, mem2]


class TestYellowFin(hu.HypothesisTestCase):
    def test_three_steps_in_place(self):
        rng = np.random.default_rng(0)
        n, width = 6, 4
        names = ["param", "moment", "lr", "mu", "curv_win", "g_avg", "g2_avg", "mem"]
        state = [rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32), np.array([0.1], np.float32),
                 np.array([0.0], np.float32), np.zeros(width, np.float32), np.zeros(n, np.float32),
                 np.zeros(n, np.float32), np.zeros(5, np.float32)]
        for nesterov in (False, True):
            op = core.CreateOperator("YellowFin", names + ["grad", "iter"], names, curv_win_width=width,
                                     beta=0.9, nesterov=int(nesterov))
            workspace.ResetWorkspace()
            for name, value in zip(names, state):
                workspace.FeedBlob(name, value)
            want = [np.array(v, np.float64) for v in state]
            for it in (1, 2, 3):
                grad = rng.standard_normal(n).astype(np.float32)
                workspace.FeedBlob("grad", grad)
                workspace.FeedBlob("iter", np.array([it], np.int64))
                workspace.RunOperatorOnce(op)
                want = yellowfin_reference(want, grad.astype(np.float64), it, beta=0.9, width=width,
                                           nesterov=nesterov)
                for name, value in zip(names, want):
                    np.testing.assert_allclose(workspace.FetchBlob(name), value, rtol=1e-3, atol=1e-5,
                                               err_msg="%s after iteration %d" % (name, it))

    def test_iteration_zero_is_refused(self):
        names = ["p", "m", "lr", "mu", "w", "ga", "g2", "mem"]
        shapes = [(3,), (3,), (1,), (1,), (20,), (3,), (3,), (5,)]
        op = core.CreateOperator("YellowFin", names + ["g", "it"], names)
        inputs = [np.zeros(s, np.float32) for s in shapes] + [np.zeros(3, np.float32), np.array([0], np.int64)]
        self.assertRunOpRaises(hu.cpu_do, op, inputs, exception=Caffe2Error, regexp="iter must be >= 1")


def test_sparse_kernel_twins_agree_with_the_compiled_kernels():
    from caffe2py.kernels.cpu.optim import ftrl, sparse_normalize
    from caffe2py.kernels.cpu.runtime import jit
    rng = np.random.default_rng(1)
    idx = np.array([2, 0, 2, 4], np.int64)
    g = rng.standard_normal((4, 3)).astype(np.float32)
    before = jit.jit_mode()
    results = []
    try:
        for mode in ("inline", "numpy"):
            jit.set_jit_mode(mode)
            w = rng.standard_normal((5, 3)).astype(np.float32) if not results else results[0][3].copy()
            nz = np.abs(rng.standard_normal((5, 6))).astype(np.float32) if not results else results[0][4].copy()
            start_w, start_nz = w.copy(), nz.copy()
            ftrl.sparse_ftrl(w, nz, idx, g, 10.0, 1.0, 0.01, 0.001)
            t = start_w * 3
            sparse_normalize.sparse_normalize(t, idx, 1.0, True)
            results.append((w, nz, t, start_w, start_nz))
    finally:
        jit.set_jit_mode(before)
    for a, b in zip(results[0][:3], results[1][:3]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sparse_updates_are_in_place_and_undone_when_the_net_fails():
    import weakref

    from caffe2py.workspace import current_workspace
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((6, 3)).astype(np.float32)
    nz0 = np.abs(rng.standard_normal((6, 6))).astype(np.float32)
    idx = np.array([1, 4, 1], np.int64)
    g = rng.standard_normal((3, 3)).astype(np.float32)
    workspace.ResetWorkspace()
    for name, v in (("w", w0), ("nz", nz0), ("i", idx), ("g", g), ("p", w0 * 4)):
        workspace.FeedBlob(name, v)
    net = core.Net("sparse_ok")
    net.SparseFtrl(["w", "nz", "i", "g"], ["w", "nz"], alpha=0.1)
    net.SparseNormalize(["p", "i"], ["p"])
    workspace.CreateNet(net)
    refs = {name: weakref.ref(current_workspace().blobs[name]) for name in ("w", "nz", "p")}
    workspace.RunNet(net.Name(), num_iter=2)
    for name in refs:
        assert current_workspace().blobs[name] is refs[name](), name          # updated where it lies
    assert not np.array_equal(workspace.FetchBlob("w"), w0)
    before = {name: workspace.FetchBlob(name) for name in ("w", "nz", "p")}
    failing = core.Net("sparse_then_fail")
    failing.SparseFtrl(["w", "nz", "i", "g"], ["w", "nz"], alpha=0.1)
    failing.SparseNormalize(["p", "i"], ["p"], use_max_norm=0, norm=0.5)
    failing.Reshape("g", "bad", shape=[7])
    workspace.CreateNet(failing)
    with pytest.raises(Caffe2Error, match="Reshape"):
        workspace.RunNet(failing.Name())
    for name, value in before.items():
        np.testing.assert_array_equal(workspace.FetchBlob(name), value, err_msg=name)


def gftrl_reference(w, nz, g, alpha, beta, l1, l2):
    """Group FTRL written out per weight in float64: rows are outputs, each column a group."""
    outputs = g.shape[0]
    w2, g2 = w.reshape(outputs, -1).astype(np.float64), g.reshape(outputs, -1).astype(np.float64)
    nz2 = nz.reshape(outputs, -1, 2).astype(np.float64)
    new_w, new_nz = np.zeros_like(w2), np.zeros_like(nz2)
    for j in range(w2.shape[1]):
        for i in range(outputs):
            n, z = nz2[i, j]
            nn = n + g2[i, j] ** 2
            new_nz[i, j] = nn, z + g2[i, j] - (math.sqrt(nn) - math.sqrt(n)) / alpha * w2[i, j]
        norm = math.sqrt(sum(new_nz[i, j, 1] ** 2 for i in range(outputs)))
        for i in range(outputs):
            if norm > l1 * math.sqrt(outputs):
                new_w[i, j] = new_nz[i, j, 1] * (l1 * math.sqrt(outputs) / norm - 1) / \
                    ((beta + math.sqrt(new_nz[i, j, 0])) / alpha + l2)
    return new_w.reshape(w.shape), new_nz.reshape(nz.shape)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 2), (5,)])
def test_gftrl_zeroes_whole_groups_and_matches_the_formula(shape):
    rng = np.random.default_rng(len(shape))
    w = rng.normal(size=shape).astype(np.float32)
    g = rng.normal(size=shape).astype(np.float32)
    n = np.abs(rng.normal(size=shape)).astype(np.float32)
    z = rng.normal(size=shape).astype(np.float32) * 0.05
    z.reshape(shape[0], -1)[:, 0] *= 40          # one group far above the threshold
    nz = np.stack([n, z], axis=-1)
    alpha, beta, l1, l2 = 0.05, 0.5, 0.3, 0.01
    workspace.ResetWorkspace()
    for name, value in (("w", w), ("nz", nz), ("g", g)):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator("GFtrl", ["w", "nz", "g"], ["w2", "nz2"],
                                                  alpha=alpha, beta=beta, lambda1=l1, lambda2=l2))
    ref_w, ref_nz = gftrl_reference(w, nz, g, alpha, beta, l1, l2)
    np.testing.assert_allclose(workspace.FetchBlob("nz2"), ref_nz, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("w2"), ref_w, rtol=1e-4, atol=1e-5)
    columns = np.abs(workspace.FetchBlob("w2").reshape(shape[0], -1)).max(axis=0)
    assert columns[0] > 0 and np.array_equal(columns == 0, np.abs(ref_w.reshape(shape[0], -1)).max(axis=0) == 0)
    # the alpha input overrides the argument
    workspace.FeedBlob("alpha", np.array([alpha], np.float32))
    workspace.RunOperatorOnce(core.CreateOperator("GFtrl", ["w", "nz", "g", "alpha"], ["w3", "nz3"],
                                                  alpha=1.0, beta=beta, lambda1=l1, lambda2=l2))
    np.testing.assert_allclose(workspace.FetchBlob("w3"), ref_w, rtol=1e-4, atol=1e-5)


def test_gftrl_refuses_mismatched_state():
    workspace.ResetWorkspace()
    workspace.FeedBlob("w", np.zeros((2, 3), np.float32))
    workspace.FeedBlob("nz", np.zeros((2, 3), np.float32))
    workspace.FeedBlob("g", np.zeros((2, 3), np.float32))
    with pytest.raises(Caffe2Error, match="GFtrl.*n_z must hold 2 values per weight"):
        workspace.RunOperatorOnce(core.CreateOperator("GFtrl", ["w", "nz", "g"], ["w", "nz"]))
