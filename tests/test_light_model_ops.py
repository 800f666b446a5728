"""The light models' non-convolution kernels on their compiled paths (inference batch
norm, softmax rows, one-row Gemm, pools): each against a NumPy formula written here,
on the edges of the path (tails, several images, team blocks 1 / 2 / 3)."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import norm as norm_k
from caffe2py.kernels.cpu.math import epilogue
from caffe2py.kernels.cpu.runtime import jit


def _bn_reference(x, scale, bias, mean, var, eps, relu):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    f64 = [np.asarray(v, np.float64).reshape(shape) for v in (scale, bias, mean, var)]
    y = (x.astype(np.float64) - f64[2]) / np.sqrt(f64[3] + eps) * f64[0] + f64[1]
    return np.maximum(y, 0) if relu else y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stats_dtype", [np.float32, np.float64])
def test_batch_norm_compiled_pass_on_team_blocks(monkeypatch, dtype, stats_dtype):
    """NCHW BN (+ ReLU) with the factors worked out in the kernel: several images (row r
    is channel r % C), a 2-D (N, C) input, read-only statistics of another float type,
    one block (the serial copy) and 2 / 3 blocks on the team."""
    rng = np.random.default_rng(3)
    for shape in [(3, 5, 4, 7), (2, 6), (1, 4, 3, 3, 2)]:
        c = shape[1]
        x = rng.standard_normal(shape).astype(dtype)
        x.flat[1] = np.nan
        scale, bias, mean = (rng.standard_normal(c).astype(stats_dtype) for _ in range(3))
        var = (rng.random(c) + 0.1).astype(stats_dtype)
        for v in (scale, bias, mean, var):
            v.flags.writeable = False
        for min_work in (jit.TEAM_MIN_WORK, 1):          # one block, then split
            monkeypatch.setattr(jit, "TEAM_MIN_WORK", min_work)
            for relu in (False, True):
                y = norm_k.batch_norm(x, scale, bias, mean, var, 1e-3, relu=relu)
                assert y.dtype == dtype and y.shape == x.shape
                np.testing.assert_allclose(y, _bn_reference(x, scale, bias, mean, var, 1e-3, relu), rtol=1e-5, atol=1e-5)
                assert np.isnan(y.flat[1]) and np.isnan(y).sum() == 1


def test_batch_norm_kernel_blocks_and_twin_agree():
    """The kernels themselves (the factors, then the row pass at 1, 2 and 3 blocks, more
    blocks than rows too) against their NumPy twins and the formula."""
    rng = np.random.default_rng(4)
    rows, length, c = 10, 13, 5
    x = rng.standard_normal((rows, length)).astype(np.float32)
    stats = [rng.standard_normal(c).astype(np.float32) for _ in range(3)] + [(rng.random(c) + 0.5).astype(np.float32)]
    want = _bn_reference(x.reshape(2, c, length), *stats, 1e-5, True).reshape(rows, length)
    twin_factors = np.empty((2, c), np.float32)
    norm_k._bn_factors.twin(*stats, 1e-5, twin_factors)
    twin = np.empty_like(x)
    epilogue._affine_rows.twin(x, twin_factors[0], twin_factors[1], twin, True, 1)
    np.testing.assert_allclose(twin, want, rtol=1e-5, atol=1e-6)
    factors = np.empty((2, c), np.float32)
    norm_k._bn_factors(*stats, 1e-5, factors)
    for blocks in (1, 2, 3, 12):
        y = np.full_like(x, np.inf)
        with jit.team():
            epilogue._affine_rows(x, factors[0], factors[1], y, True, blocks)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def _softmax_reference(x2):
    z = x2.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_rows_kernel(dtype):
    """Rows of 1 and 1000 values, a strided view, large values (the shift matters), a NaN
    (its row all NaN, others untouched), -inf entries (exp 0), 1 / 2 / 3 blocks."""
    from caffe2py.kernels.cpu.math import softmax_rows as sm
    rng = np.random.default_rng(5)
    for shape in [(1, 1000), (7, 1), (5, 33)]:
        x = (rng.standard_normal(shape) * 30 + 500).astype(dtype)
        np.testing.assert_allclose(sm.softmax_rows(x), _softmax_reference(x), rtol=1e-5, atol=1e-7)
    x = rng.standard_normal((6, 40)).astype(dtype)[:, ::2]
    x[2, 3] = np.nan
    x[4, :5] = -np.inf
    want = _softmax_reference(x)
    assert np.isnan(want[2]).all()
    for blocks in (1, 2, 3):
        y = np.empty(x.shape, dtype)
        with jit.team():
            sm._softmax_rows(x, y, blocks)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-7)
        assert np.isnan(y[2]).all() and not np.isnan(np.delete(y, 2, axis=0)).any()
        assert (y[4, :5] == 0).all()
    twin = np.empty(x.shape, dtype)
    sm._softmax_rows.twin(x, twin, 1)
    np.testing.assert_allclose(twin, want, rtol=1e-5, atol=1e-7)
    assert sm.softmax_rows(np.zeros((0, 3), dtype)) is None and sm.softmax_rows(x.astype(np.float16)) is None


def test_softmax_ops_use_the_row_pass():
    """ONNX Softmax (opset 11's 2-D coercion, opset 13's last axis, another axis) and
    Caffe2's Softmax against the formula; the row pass is what runs."""
    from caffe2py import workspace
    from caffe2py.proto import caffe2_pb2
    from caffe2py.kernels.cpu.math import softmax_rows as sm
    from onnx import helper, TensorProto
    from caffe2py.onnx import backend
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    calls = []
    real = sm._softmax_rows_serial

    class Spy:
        def __call__(self, *a):
            calls.append(a[0].shape)
            return real(*a)
    for opset, axis, want in [(11, 1, _softmax_reference(x.reshape(2, 12)).reshape(x.shape)),
                              (13, -1, _softmax_reference(x.reshape(6, 4)).reshape(x.shape)),
                              (13, 1, np.exp(x) / np.exp(x).sum(axis=1, keepdims=True))]:
        node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        sm._softmax_rows_serial = Spy()
        try:
            got = backend.prepare(model).run({"x": x})[0]
        finally:
            sm._softmax_rows_serial = real
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        assert calls == ([] if opset == 13 and axis == 1 else [(2, 12) if opset == 11 else (6, 4)])
        calls.clear()
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    op = caffe2_pb2.OperatorDef(type="Softmax", input=["x"], output=["y"])
    op.arg.add(name="axis", i=2)
    workspace.RunOperatorOnce(op)
    np.testing.assert_allclose(workspace.FetchBlob("y"), _softmax_reference(x.reshape(6, 4)).reshape(x.shape),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_row_gemm_and_fc(monkeypatch, dtype):
    """x (1, K) @ w.T + c: the GEMV path (one block) and the team path (split), C of
    shape (N,) / (1, N) / none / ignored (beta 0), beta and alpha that fall back to the
    general path, a read-only w with padded rows, N = 1; Caffe2's FC too."""
    from caffe2py.kernels.cpu.math import gemm as gemm_k
    rng = np.random.default_rng(8)
    k, n = 37, 21
    x = rng.standard_normal((1, k)).astype(dtype)
    w = rng.standard_normal((n, k + 3)).astype(dtype)[:, :k]          # rows with a stride of k + 3
    w.flags.writeable = False
    c = rng.standard_normal(n).astype(dtype)
    prod = x.astype(np.float64) @ w.astype(np.float64).T
    tol = dict(rtol=1e-5, atol=1e-5)
    gemv_calls = []
    real_dot = np.dot
    for min_work in (jit.TEAM_MIN_WORK, 1):
        monkeypatch.setattr(jit, "TEAM_MIN_WORK", min_work)
        monkeypatch.setattr(gemm_k.np, "dot", lambda *a, **kw: gemv_calls.append(1) or real_dot(*a, **kw))
        for cc, alpha, beta, want in [(None, 1.0, 1.0, prod), (c, 1.0, 1.0, prod + c), (c.reshape(1, n), 1.0, 1.0, prod + c),
                                      (c, 1.0, 0.0, prod), (c, 1.0, 2.0, prod + 2 * c), (c, 3.0, 1.0, 3 * prod + c)]:
            y = gemm_k.gemm(x, w, cc, alpha, beta, trans_b=True)
            assert y.shape == (1, n) and y.dtype == dtype
            np.testing.assert_allclose(y, want, **tol)
        np.testing.assert_allclose(gemm_k.fc(x, w, c), prod + c, **tol)
        np.testing.assert_allclose(gemm_k.gemm(x, w[:1], c[:1], trans_b=True), prod[:, :1] + c[:1], **tol)
        monkeypatch.undo()
        # one block only (N = 1 is one block always), beta / alpha 1 or C ignored
        assert len(gemv_calls) == (6 if min_work > 1 else 1)
        gemv_calls.clear()
    with pytest.raises(ValueError, match="broadcast"):
        gemm_k.gemm(x, w, rng.standard_normal((2, n)).astype(dtype), trans_b=True)


def _pool_reference(x, kernel, strides, pads, is_max, include_pad=False):
    """Loops over windows in float64 (pads skipped for max, counted only if include_pad)."""
    n, c, h, w = x.shape
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * strides[0] - pads[0], j * strides[1] - pads[1]
            win = x[:, :, max(y0, 0):y0 + kernel[0], max(x0, 0):x0 + kernel[1]].astype(np.float64)
            if is_max:
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                out[:, :, i, j] = win.sum(axis=(2, 3)) / (kernel[0] * kernel[1] if include_pad else win[0, 0].size)
    return out


def test_onnx_pool_ops_reuse_their_plan_per_shape(monkeypatch):
    """ONNX MaxPool / AveragePool: the first call of a shape runs the pool's full path,
    later calls of that shape its cached compiled plan; a second shape gets its own,
    an input of the wrong rank still fails, auto_pad
    follows the shape; the values are the window formula's every time."""
    from onnx import helper, TensorProto
    from caffe2py.errors import Caffe2Error
    from caffe2py.kernels.cpu.cnn import pool as pool_k
    from caffe2py.onnx import backend
    rng = np.random.default_rng(9)
    full_calls = []
    for op, attrs, is_max in [("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]), True),
                              ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), False),
                              ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), False)]:
        node = helper.make_node(op, ["x"], ["y"], **attrs)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        rep = backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]))
        name = "max_pool" if is_max else "average_pool"
        real = getattr(pool_k, name)
        monkeypatch.setattr(pool_k, name, lambda *a, **k: full_calls.append(a[0].shape) or real(*a, **k))
        for shape in [(1, 5, 9, 8)] * 3 + [(2, 3, 6, 7)] * 2 + [(1, 5, 9, 8)]:
            x = rng.standard_normal(shape).astype(np.float32)
            x[0, 0, 1, 1] = np.nan
            if "auto_pad" in attrs:        # SAME_UPPER: the extra pad at the end
                ph, pw = [max((-(-s // 2) - 1) * 2 + 3 - s, 0) for s in shape[2:]]
                pads = [ph // 2, pw // 2, ph - ph // 2, pw - pw // 2]
                strides = [2, 2]
            else:
                pads, strides = attrs["pads"], attrs.get("strides", [1, 1])
            want = _pool_reference(x, attrs["kernel_shape"], strides, pads, is_max, attrs.get("count_include_pad", 0))
            got = rep.run({"x": x})[0]
            assert got.dtype == np.float32 and got.flags.c_contiguous
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert full_calls == [(1, 5, 9, 8), (2, 3, 6, 7)], (op, full_calls)
        full_calls.clear()
        with pytest.raises(Caffe2Error):
            rep.run({"x": rng.standard_normal((1, 5, 9)).astype(np.float32)})
        monkeypatch.undo()


def test_one_block_output_passes_run_serial_copies(monkeypatch):
    """The conv output passes, the BN affine pass and the global mean take their serial
    copy for one block (no parallel region) and the team kernel for more; both give the
    formula's values."""
    from caffe2py.kernels.cpu.cnn import pool as pool_k
    rng = np.random.default_rng(10)
    y0 = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    bias, res = rng.standard_normal(3).astype(np.float32), rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    mul, add = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    acc = rng.standard_normal((3, 4 * 9)).astype(np.float32)          # 4 padded rows of 9, 7 kept
    big = rng.standard_normal((2, 40, 12, 12)).astype(np.float32)     # global mean: 4096+ values compiled
    b3 = bias.reshape(1, 3, 1, 1)
    for split, suffix in ((False, "_serial"), (True, "")):
        if split:                  # two blocks, whatever the team's size on this machine
            for mod in (epilogue, pool_k):
                monkeypatch.setattr(mod, "team_blocks", lambda count, work: min(count, 2))
        used = []
        for mod, name in ((epilogue, "_finish_rows"), (epilogue, "_crop_rows"), (epilogue, "_affine_rows"),
                          (pool_k, "_row_means")):
            for variant in (name, name + "_serial"):
                real = getattr(mod, variant)
                monkeypatch.setattr(mod, variant, lambda *a, _r=real, _n=variant: used.append(_n) or _r(*a))
        got = epilogue.finish_channels(y0.copy(), bias, res, relu=True)
        np.testing.assert_allclose(got, np.maximum(y0 + b3 + res, 0), rtol=1e-6, atol=1e-6)
        got = epilogue.channel_affine(y0, mul, add, relu=False)
        np.testing.assert_allclose(got, y0 * mul.reshape(1, 3, 1, 1) + add.reshape(1, 3, 1, 1), rtol=1e-6, atol=1e-6)
        out = np.full((3, 6, 7), np.nan, np.float32)
        epilogue.finish_rows_into(acc, 9, bias, out, 2, True)
        want = np.maximum(acc.reshape(3, 4, 9)[:, :, :7] + bias.reshape(3, 1, 1), 0)
        np.testing.assert_allclose(out[:, 2:6], want, rtol=1e-6, atol=1e-6)
        assert np.isnan(out[:, :2]).all()
        np.testing.assert_allclose(pool_k.global_pool(big, "avg"), big.astype(np.float64).mean(axis=(2, 3), keepdims=True),
                                   rtol=1e-5, atol=1e-6)
        assert used == [n + suffix for n in ("_finish_rows", "_affine_rows", "_crop_rows", "_row_means")], used
        monkeypatch.undo()
