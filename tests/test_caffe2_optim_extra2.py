"""Adadelta, Storm, Wngrad (dense and sparse), DecayAdagrad, EnsureClipped,
SparseLpRegularizer, WeightScale, LearningRateAdaption and ScaleBlobs against float64
NumPy formulas written here (sparse references walk the indices one after another, so
a duplicated index is updated twice, as Caffe2's loops do)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(3131)
DUPS = np.array([4, 1, 4, 0, 4, 7], np.int64)       # row 4 three times


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run(op_type, inputs, outputs, blobs, **kwargs):
    workspace.ResetWorkspace()
    for name, value in blobs.items():
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **kwargs))
    return [workspace.FetchBlob(o) for o in outputs]


def close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


def adadelta_ref(w, h, d, g, lr, eps, decay):
    h = decay * h + (1 - decay) * g * g
    u = np.sqrt(d + eps) / np.sqrt(h + eps) * g
    return w + lr * u, h, decay * d + (1 - decay) * u * u


def test_adadelta_dense():
    w, h, d, g = f32(3, 4), np.abs(f32(3, 4)), np.abs(f32(3, 4)), f32(3, 4)
    lr = np.array([0.3], np.float32)
    out = run("Adadelta", ["w", "h", "d", "g", "lr"], ["w", "h", "d"],
              dict(w=w, h=h, d=d, g=g, lr=lr), epsilon=0.1, decay=0.8)
    for a, b in zip(out, adadelta_ref(*(x.astype(np.float64) for x in (w, h, d, g)), 0.3, 0.1, 0.8)):
        close(a, b)


def test_sparse_adadelta_duplicates_in_order():
    w, h, d, g = f32(8, 3), np.abs(f32(8, 3)), np.abs(f32(8, 3)), f32(6, 3)
    lr = np.array([0.5], np.float32)
    rw, rh, rd = (x.astype(np.float64) for x in (w, h, d))
    for i, r in enumerate(DUPS):
        rw[r], rh[r], rd[r] = adadelta_ref(rw[r], rh[r], rd[r], g[i].astype(np.float64), 0.5, 0.01, 0.9)
    out = run("SparseAdadelta", ["w", "h", "d", "i", "g", "lr"], ["w", "h", "d"],
              dict(w=w, h=h, d=d, i=DUPS, g=g, lr=lr), epsilon=0.01, decay=0.9)
    for a, b in zip(out, (rw, rh, rd)):
        close(a, b)


def test_sparse_adadelta_bad_index_writes_nothing():
    w = f32(4, 2)
    with pytest.raises(Caffe2Error, match="out of range"):
        run("SparseAdadelta", ["w", "h", "d", "i", "g", "lr"], ["w", "h", "d"],
            dict(w=w, h=f32(4, 2), d=f32(4, 2), i=np.array([0, 4], np.int64), g=f32(2, 2),
                 lr=np.array([0.1], np.float32)))
    np.testing.assert_array_equal(workspace.FetchBlob("w"), w)


def storm_rate(s, g, lr, momentum, beta):
    s = s + np.sum(g.astype(np.float64) ** 2)
    nlr = lr * (beta + s) ** (-1.0 / 3)
    return s, nlr, momentum * nlr * nlr


def test_storm_dense_and_sparse():
    w, m, g = f32(5, 3), f32(5, 3), f32(5, 3)
    s, lr = np.array([0.5], np.float32), np.array([0.2], np.float32)
    s2, nlr, alpha = storm_rate(0.5, g, 0.2, 2.0, 0.3)
    m2 = g + (1 - alpha) * (m - g)
    out = run("Storm", ["w", "m", "s", "g", "lr"], ["w", "m", "s"], dict(w=w, m=m, s=s, g=g, lr=lr),
              momentum=2.0, beta=0.3)
    for a, b in zip(out, (w + nlr * m2, m2, [s2])):
        close(a, b)

    w, m, g = f32(8, 3), f32(8, 3), f32(6, 3)
    s2, nlr, alpha = storm_rate(0.5, g, 0.2, 2.0, 0.3)
    rw, rm = w.astype(np.float64), m.astype(np.float64)
    for i, r in enumerate(DUPS):
        rm[r] = g[i] + (1 - alpha) * (rm[r] - g[i])
        rw[r] = rw[r] + nlr * rm[r]
    out = run("SparseStorm", ["w", "m", "s", "g", "i", "lr"], ["w", "m", "s"],
              dict(w=w, m=m, s=s, g=g, i=DUPS, lr=lr), momentum=2.0, beta=0.3)
    for a, b in zip(out, (rw, rm, [s2])):
        close(a, b)


def test_wngrad_dense_four_outputs():
    w, g = f32(3, 4), f32(3, 4)
    b, lr = np.array([0.7], np.float32), np.array([0.4], np.float32)
    eff = 0.4 / (0.7 + 0.05)
    out = run("Wngrad", ["w", "b", "g", "lr"], ["w", "b", "e", "u"], dict(w=w, b=b, g=g, lr=lr), epsilon=0.05)
    ref = (w + eff * g, [0.7 + np.sum(g.astype(np.float64) ** 2) / 0.75], [eff], eff * g)
    for a, r in zip(out, ref):
        close(a, r)


def test_sparse_wngrad_duplicates_and_seq_b_without_epsilon():
    w, g = f32(8, 2), f32(6, 2)
    b, lr = np.array([0.7], np.float32), np.array([0.4], np.float32)
    rw = w.astype(np.float64)
    for i, r in enumerate(DUPS):
        rw[r] += 0.4 * g[i] / (0.7 + 0.05)
    out = run("SparseWngrad", ["w", "b", "i", "g", "lr"], ["w", "b"],
              dict(w=w, b=b, i=DUPS, g=g, lr=lr), epsilon=0.05)
    close(out[0], rw)
    close(out[1], [0.7 + np.sum(g.astype(np.float64) ** 2) / 0.7])


def test_decay_adagrad():
    w, m1, m2, g = f32(4, 3), f32(4, 3), np.abs(f32(4, 3)), f32(4, 3)
    lr, it = np.array([0.1], np.float32), np.array([3], np.int64)
    b1, eps, wd = 0.8, 0.01, 0.05
    n1 = b1 * m1 + (1 - b1) * g
    n2 = m2 + g.astype(np.float64) ** 2
    step = n1 / (1 - b1 ** 4) / (np.sqrt(n2) + eps) + wd * w
    out = run("DecayAdagrad", ["w", "m1", "m2", "g", "lr", "it"], ["w", "m1", "m2"],
              dict(w=w, m1=m1, m2=m2, g=g, lr=lr, it=it), beta1=b1, epsilon=eps, weight_decay=wd)
    for a, r in zip(out, (w + 0.1 * step, n1, n2)):
        close(a, r)


def test_ensure_clipped_dense_and_sparse():
    x = f32(5, 3)
    (y,) = run("EnsureClipped", ["x"], ["y"], dict(x=x), min=-0.5, max=0.5)
    close(y, np.minimum(np.maximum(x, -0.5), 0.5))
    idx = np.array([1, 3], np.int64)
    (y,) = run("EnsureClipped", ["x", "i", "g"], ["x"], dict(x=x, i=idx, g=f32(2, 3)), min=0.0)
    ref = x.copy()
    ref[idx] = np.maximum(ref[idx], 0)
    close(y, ref)


@pytest.mark.parametrize("p", [1.0, 2.0])
def test_sparse_lp_regularizer(p):
    w = f32(8, 3)
    lam = 0.3
    ref = w.astype(np.float64)
    for r in DUPS:
        if p == 2.0:
            ref[r] = ref[r] * (1 - lam)
        else:
            ref[r] = np.where(np.abs(ref[r]) <= lam, 0.0, ref[r] - lam * np.sign(ref[r]))
    (y,) = run("SparseLpRegularizer", ["w", "i"], ["w"], dict(w=w, i=DUPS), p=p, reg_lambda=lam)
    close(y, ref)


def test_sparse_lp_regularizer_rejects_other_p():
    with pytest.raises(Caffe2Error, match="p must be 1 or 2"):
        run("SparseLpRegularizer", ["w", "i"], ["w"], dict(w=f32(2, 2), i=np.array([0], np.int64)), p=3.0)


@pytest.mark.parametrize("it,scaled", [(9, True), (8, False), (19, False)])
def test_weight_scale(it, scaled):
    w = f32(3, 2)
    (y,) = run("WeightScale", ["w", "it"], ["y"], dict(w=w, it=np.array([it], np.int64)),
               stepsize=10, upper_bound_iter=15, scale=0.5)
    close(y, w * 0.5 if scaled else w)


@pytest.mark.parametrize("normalized", [True, False])
def test_learning_rate_adaption(normalized):
    g, e = f32(6), f32(6)
    lr = np.array([0.3], np.float32)
    x = float(np.dot(g.astype(np.float64), e))
    if normalized:
        ref = 0.3 - 0.3 * 0.1 * x / (np.linalg.norm(g) * np.linalg.norm(e))
    else:
        ref = 0.3 - 0.1 * x
    (y,) = run("LearningRateAdaption", ["lr", "g", "e"], ["y"], dict(lr=lr, g=g, e=e),
               lr_alpha=0.1, normalized_lr_adaption=normalized)
    close(y, [ref])


def test_scale_blobs():
    a, b = f32(2, 3), f32(4)
    out = run("ScaleBlobs", ["a", "b"], ["c", "b"], dict(a=a, b=b), scale=2.5)
    close(out[0], 2.5 * a)
    close(out[1], 2.5 * b)
    (c,) = run("ScaleBlobs", ["a"], ["c"], dict(a=a), scale=2.5)
    assert c.shape == a.shape
    close(c, 2.5 * a)
    with pytest.raises(Caffe2Error):
        run("ScaleBlobs", ["a", "b"], ["c"], dict(a=a, b=b), scale=2.5)


# ----------------------------------------------------------------- quantisation

def fused8_values(q):
    """(values, scale, bias) of a fused 8-bit layout table (float32 scale and bias)."""
    sb = np.ascontiguousarray(q[:, -8:]).view("<f4")
    return q[:, :-8].astype(np.float64), sb[:, 0].astype(np.float64), sb[:, 1].astype(np.float64)


@pytest.mark.parametrize("bits", [2, 4])
def test_fake_nbit_matches_formula(bits):
    x = RNG.random((6, 9)).astype(np.float32)
    (q,) = run("FloatToFused%dBitFakeRowwiseQuantized" % bits, ["x"], ["q"], dict(x=x))
    assert q.shape == (6, 17) and q.dtype == np.uint8
    values, scale, bias = fused8_values(q)
    top = (1 << bits) - 1
    ref_bias = x.min(1).astype(np.float16).astype(np.float64)
    ref_scale = ((x.max(1) - ref_bias) / top).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(bias, ref_bias)
    np.testing.assert_array_equal(scale, ref_scale)
    ref_q = np.clip(np.round((x - ref_bias[:, None]) / ref_scale[:, None]), 0, top)
    assert np.abs(values - ref_q).max() <= 1     # ties may round either way in float32
    assert values.max() <= top


@pytest.mark.parametrize("bits", [2, 4])
def test_greedy_engine_error_not_above_minmax(bits):
    x = RNG.standard_normal((20, 64)).astype(np.float32)
    errors = {}
    for engine in ("", "GREEDY"):
        (q,) = run("FloatToFused%dBitFakeRowwiseQuantized" % bits, ["x"], ["q"], dict(x=x), engine=engine)
        values, scale, bias = fused8_values(q)
        errors[engine] = np.linalg.norm(x - (values * scale[:, None] + bias[:, None]), axis=1)
        (packed,) = run("FloatToFused%dBitRowwiseQuantized" % bits, ["x"], ["p"], dict(x=x), engine=engine)
        (deq,) = run("Fused%dBitRowwiseQuantizedToFloat" % bits, ["p"], ["d"], dict(p=packed))
        close(deq[:, :64], values * scale[:, None] + bias[:, None], rtol=0, atol=0)
    assert (errors["GREEDY"] <= errors[""] * 1.0001).all()
    if bits == 4:                                # normal rows: a narrower 4-bit range wins
        assert (errors["GREEDY"] < errors[""]).any()


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_rand_rowwise_quantization_round_trip(bits):
    x = RNG.standard_normal((5, 11)).astype(np.float32)
    (y,) = run("FloatToFusedRandRowwiseQuantized", ["x"], ["y"], dict(x=x), bitwidth=bits, random=False)
    k = 8 // bits
    segment = -(-11 // k)
    assert y.shape == (5, 10 + segment)
    assert (y[:, 0] == bits).all() and (y[:, 1] == k * segment - 11).all()
    mm = np.ascontiguousarray(y[:, 2:10]).view("<f4")
    np.testing.assert_array_equal(mm[:, 0], x.min(1))
    np.testing.assert_array_equal(mm[:, 1], x.max(1))
    gap = (x.max(1) - x.min(1)).astype(np.float64) / ((1 << bits) - 1)
    q = np.round((x - x.min(1)[:, None]) / (gap[:, None] + 1e-8))
    for c in range(11):                          # value c: byte c % segment, bits (c // segment) * bits
        got = (y[:, 10 + c % segment] >> ((c // segment) * bits)) & ((1 << bits) - 1)
        assert np.abs(got - q[:, c]).max() <= 1
    (d,) = run("FusedRandRowwiseQuantizedToFloat", ["y"], ["d"], dict(y=y))
    assert (np.abs(d - x) <= gap[:, None] / 2 + 1e-5).all()


def test_rand_rowwise_stochastic_is_unbiased():
    x = RNG.random((2, 8)).astype(np.float32)
    total = np.zeros(x.shape)
    for seed in range(300):
        op = core.CreateOperator("FloatToFusedRandRowwiseQuantized", ["x"], ["y"], bitwidth=2, random=True)
        op.device_option.random_seed = seed
        workspace.FeedBlob("x", x)
        workspace.RunOperatorOnce(op)
        (d,) = run("FusedRandRowwiseQuantizedToFloat", ["y"], ["d"], dict(y=workspace.FetchBlob("y")))
        total += d
    gap = (x.max(1) - x.min(1)) / 3
    assert (np.abs(total / 300 - x) < gap[:, None] * 0.15).all()


@pytest.mark.parametrize("bits", [8, 4, 2])
@pytest.mark.parametrize("reduction", ["Sum", "WeightedSum", "Mean"])
def test_rowwise_sparse_lookup_against_dequantised_table(bits, reduction):
    x = RNG.random((10, 16)).astype(np.float32)
    quant = "FloatToFused8BitRowwiseQuantized" if bits == 8 else "FloatToFused%dBitRowwiseQuantized" % bits
    deq = "Fused8BitRowwiseQuantizedToFloat" if bits == 8 else "Fused%dBitRowwiseQuantizedToFloat" % bits
    (q,) = run(quant, ["x"], ["q"], dict(x=x))
    (table,) = run(deq, ["q"], ["t"], dict(q=q))
    mapping = np.array([0, -1, 1, 2, -1, 3, 4, 5, -1, 6], np.int32)
    idx = np.array([0, 1, 2, 9, 8, 3, 5], np.int64)
    lengths = np.array([3, 0, 4], np.int32)
    w = RNG.random(7).astype(np.float32)
    ref = np.zeros((3, table.shape[1]))
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for s in range(3):
        for p in range(starts[s], starts[s + 1]):
            if mapping[idx[p]] >= 0:
                ref[s] += (w[p] if reduction == "WeightedSum" else 1.0) * table[idx[p]]
        if reduction == "Mean" and lengths[s]:
            ref[s] /= lengths[s]
    ins = ["d"] + (["w"] if reduction == "WeightedSum" else []) + ["i", "l", "m"]
    (out,) = run("SparseLengths%s%dBitRowwiseSparse" % (reduction, bits), ins, ["o"],
                 dict(d=q[mapping >= 0], w=w, i=idx, l=lengths, m=mapping))
    close(out, ref)
    (unpruned,) = run("SparseLengths%s%dBitRowwiseSparse" % (reduction, bits), ins, ["o"],
                      dict(d=q, w=w, i=idx, l=lengths, m=np.array([0], np.int32)))
    full = [np.sum([(w[p] if reduction == "WeightedSum" else 1.0) * table[idx[p]]
                    for p in range(starts[s], starts[s + 1])] or [np.zeros(table.shape[1])], axis=0)
            / (lengths[s] if reduction == "Mean" and lengths[s] else 1) for s in range(3)]
    close(unpruned, full)


def test_rowwise_sparse_lookup_bad_index():
    (q,) = run("FloatToFused4BitRowwiseQuantized", ["x"], ["q"], dict(x=f32(3, 8)))
    with pytest.raises(Caffe2Error, match="COMPRESSED_INDICES_MAPPING"):
        run("SparseLengthsSum4BitRowwiseSparse", ["d", "i", "l", "m"], ["o"],
            dict(d=q, i=np.array([5], np.int64), l=np.array([1], np.int32), m=np.array([0, 1, 2], np.int32)))


@pytest.mark.parametrize("nesterov", [False, True])
def test_fp16_momentum_sgd_update(nesterov):
    g, m, w = (RNG.random(6).astype(np.float16) for _ in range(3))
    lr = np.array([0.3], np.float32)
    mu, wd = 0.9, 0.01
    g64, m64, w64 = (a.astype(np.float64) for a in (g, m, w))
    g64 = g64 + wd * w64
    if nesterov:
        new = mu * m64 + 0.3 * g64
        step = (1 + mu) * new - mu * m64
    else:
        step = new = 0.3 * g64 + mu * m64
    out = run("FP16MomentumSGDUpdate", ["g", "m", "lr", "w"], ["g", "m", "w"], dict(g=g, m=m, lr=lr, w=w),
              momentum=mu, weight_decay=wd, nesterov=int(nesterov))
    assert all(o.dtype == np.float16 for o in out)
    for a, r in zip(out, (step, new, w64 - step)):
        close(a, r, rtol=2e-3, atol=2e-3)
