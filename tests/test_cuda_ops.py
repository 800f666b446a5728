"""CUDA ops on a GPU against NumPy references written here (marked `cuda`: skipped
without PyCUDA or a GPU). Inputs are fresh random values on every run (the seed
is in each failure message); every device allocation is poisoned (NaN / 0xAB)
so an output element a kernel forgets to write fails the comparison. float32
results must match within 1e-5 relative, float16 within 1e-2."""
import os
import re

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2

pytestmark = pytest.mark.cuda

CUDA0 = core.DeviceOption(caffe2_pb2.CUDA, 0)


@pytest.fixture(autouse=True)
def poisoned_allocations(monkeypatch):
    """Every array the CUDA ops allocate starts as 0xFF bytes: NaN for float32 and
    float16, -1 / 255 for integers."""
    from caffe2py.cuda import allocator
    plain = allocator.empty

    def poisoned(shape, dtype, device_id=0):
        return allocator.memset(plain(shape, dtype, device_id), 0xFF, device_id)
    monkeypatch.setattr(allocator, "empty", poisoned)


class _SeededRng:
    """A fresh NumPy generator that remembers its seed for failure messages."""

    def __init__(self):
        seed = int.from_bytes(os.urandom(4), "little")
        self.gen = np.random.default_rng(seed)
        self.seed_text = "seed %d" % seed

    def __getattr__(self, name):
        return getattr(self.gen, name)


@pytest.fixture
def rng():
    return _SeededRng()


def run_gpu(op_type, inputs, n_outputs=1, **args):
    """Feed inputs to CUDA device 0, run the op there, fetch the outputs."""
    ws = workspace.Workspace("cuda_ops_test")
    names = ["in%d" % i for i in range(len(inputs))]
    outs = ["out%d" % i for i in range(n_outputs)]
    for name, value in zip(names, inputs):
        ws.feed_blob(name, value, CUDA0)
    ws.run_operator_once(core.CreateOperator(op_type, names, outs, device_option=CUDA0, **args))
    got = [ws.fetch_blob(o) for o in outs]
    return got[0] if n_outputs == 1 else got


def close(got, want, rtol, msg=""):
    want = np.asarray(want, np.float64)
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape, msg)
    assert not np.isnan(got.astype(np.float64)).any() or np.isnan(want).any(), "unwritten (NaN) elements " + msg
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol * scale, err_msg=msg)


# --------------------------------------------------------------------------- tables

def fused8_table(rng, rows, dim):
    """uint8 rows + float32 scale + float32 bias, and the float64 rows they encode."""
    q = rng.integers(0, 256, (rows, dim), dtype=np.uint8)
    scale = rng.uniform(0.001, 0.1, rows).astype(np.float32)
    bias = rng.uniform(-1, 1, rows).astype(np.float32)
    sb = np.stack([scale, bias], 1).astype("<f4").view(np.uint8)
    values = q.astype(np.float64) * scale[:, None].astype(np.float64) + bias[:, None]
    return np.concatenate([q, sb], 1), values


def fused4_table(rng, rows, dim):
    """4-bit values two per byte (low nibble first) + float16 scale + float16 bias."""
    q = rng.integers(0, 16, (rows, dim), dtype=np.uint8)
    padded = np.zeros((rows, dim + dim % 2), np.uint8)
    padded[:, :dim] = q
    packed = (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)
    scale = rng.uniform(0.01, 0.2, rows).astype(np.float16)
    bias = rng.uniform(-1, 1, rows).astype(np.float16)
    sb = np.stack([scale, bias], 1).astype("<f2").view(np.uint8)
    values = q.astype(np.float64) * scale[:, None].astype(np.float64) + bias[:, None].astype(np.float64)
    return np.concatenate([packed, sb], 1), values


def make_table(rng, layout, rows, dim):
    if layout == "float32":
        t = rng.standard_normal((rows, dim)).astype(np.float32)
        return t, t.astype(np.float64)
    if layout == "float16":
        t = rng.standard_normal((rows, dim)).astype(np.float16)
        return t, t.astype(np.float64)
    return (fused8_table if layout == "fused8" else fused4_table)(rng, rows, dim)


def segment_reference(values, indices, lengths, weights=None, mean=False):
    out = np.zeros((len(lengths), values.shape[1]))
    pos = 0
    for m, n in enumerate(lengths):
        for _ in range(n):
            w = 1.0 if weights is None else float(weights[pos])
            out[m] += w * values[indices[pos]]
            pos += 1
        if mean and n:
            out[m] /= n
    return out


_SUFFIX = {"float32": "", "float16": "", "fused8": "Fused8BitRowwise", "fused4": "Fused4BitRowwise"}


@pytest.mark.parametrize("layout", ["float32", "float16", "fused8", "fused4"])
@pytest.mark.parametrize("reduction", ["Sum", "WeightedSum", "Mean"])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("dim", [16, 7, 200])
def test_sparse_lengths_lengths_form(rng, layout, reduction, itype, dim):
    rows, bags = 50, 40
    if layout == "fused4":
        dim += dim % 2  # 4-bit rows hold whole bytes: an even number of values
    table, values = make_table(rng, layout, rows, dim)
    lengths = rng.integers(0, 9, bags).astype(np.int32)
    lengths[3] = 0  # an empty bag must come out as zeros
    indices = rng.integers(0, rows, int(lengths.sum())).astype(itype)
    weights = rng.standard_normal(indices.size).astype(np.float32)
    weighted = reduction == "WeightedSum"
    inputs = [table, weights, indices, lengths] if weighted else [table, indices, lengths]
    got = run_gpu("SparseLengths%s%s" % (reduction, _SUFFIX[layout]), inputs)
    want = segment_reference(values, indices, lengths, weights if weighted else None, reduction == "Mean")
    close(got, want, 1e-5, rng.seed_text)


@pytest.mark.parametrize("layout", ["float32", "fused8"])
@pytest.mark.parametrize("otype", [np.int32, np.int64])
@pytest.mark.parametrize("include_last", [1, 0])
def test_sparse_lengths_offsets_form(rng, layout, otype, include_last):
    rows, bags, dim = 30, 12, 32
    table, values = make_table(rng, layout, rows, dim)
    lengths = rng.integers(0, 6, bags)
    indices = rng.integers(0, rows, int(lengths.sum())).astype(np.int64)
    offsets = (np.concatenate([[0], np.cumsum(lengths)]) + 5).astype(otype)  # relative to offsets[0]
    if not include_last:
        offsets = offsets[:-1]
    got = run_gpu("SparseLengthsSum%sIdx" % _SUFFIX[layout], [table, indices, offsets],
                  include_last_offset=include_last)
    close(got, segment_reference(values, indices, lengths), 1e-5, rng.seed_text)


def test_sparse_lengths_higher_rank_float_table(rng):
    table = rng.standard_normal((9, 3, 4)).astype(np.float32)
    lengths = np.array([2, 0, 3], np.int32)
    indices = rng.integers(0, 9, 5).astype(np.int32)
    got = run_gpu("SparseLengthsSum", [table, indices, lengths])
    want = segment_reference(table.reshape(9, 12).astype(np.float64), indices, lengths).reshape(3, 3, 4)
    close(got, want, 1e-5, rng.seed_text)


@pytest.mark.parametrize("layout", ["float32", "float16", "fused8", "fused4"])
def test_out_of_range_index_raises_the_cpu_error(rng, layout):
    table, _ = make_table(rng, layout, 10, 8)
    indices = np.array([1, 2, 0, 100, 4, -1], np.int64)
    lengths = np.array([3, 3], np.int32)
    op = "SparseLengthsSum" + _SUFFIX[layout]
    with pytest.raises(Caffe2Error, match=re.escape("Index 3 is out of bounds: 100, range 0 to 10")):
        run_gpu(op, [table, indices, lengths])
    # the status words were reset: the next good run succeeds
    run_gpu(op, [table, np.array([1, 2], np.int64), np.array([2], np.int32)])


def test_lengths_not_covering_indices_raise_the_cpu_error(rng):
    table = rng.standard_normal((10, 8)).astype(np.float32)
    with pytest.raises(Caffe2Error, match="the sum of lengths values should be the size of the indices tensor"):
        run_gpu("SparseLengthsSum", [table, np.array([1, 2, 3], np.int32), np.array([1, 1], np.int32)])


# --------------------------------------------------------------------------- conversions

def test_float_to_fused8_and_back(rng):
    x = rng.standard_normal((33, 19)).astype(np.float32) * 3
    q = run_gpu("FloatToFused8BitRowwiseQuantized", [x])
    assert q.dtype == np.uint8 and q.shape == (33, 27)
    scale_bias = np.ascontiguousarray(q[:, 19:]).view("<f4")
    lo, hi = x.min(1), x.max(1)
    np.testing.assert_array_equal(scale_bias[:, 1], lo)
    np.testing.assert_allclose(scale_bias[:, 0], (hi.astype(np.float64) - lo) / 255, rtol=1e-6)
    q_ref = np.rint((x - lo[:, None]).astype(np.float64) * 255 / ((hi - lo)[:, None] + 1e-8))
    assert np.abs(q[:, :19].astype(np.int64) - q_ref).max() <= 1
    back = run_gpu("Fused8BitRowwiseQuantizedToFloat", [q])
    want = q[:, :19].astype(np.float64) * scale_bias[:, :1] + scale_bias[:, 1:]
    close(back, want, 1e-6, rng.seed_text)


@pytest.mark.parametrize("n", [1, 2, 1001])
def test_float_half_conversions(rng, n):
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    h = run_gpu("FloatToHalf", [x])
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h, x.astype(np.float16))
    f = run_gpu("HalfToFloat", [h])
    np.testing.assert_array_equal(f, h.astype(np.float32))


# --------------------------------------------------------------------------- LSTMUnit

def _sig(x):
    return 1 / (1 + np.exp(-x))


def lstm_reference(h_prev, c_prev, gates, seq, t, forget_bias, drop):
    d = c_prev.shape[-1]
    x = gates.astype(np.float64)
    i, f = _sig(x[..., :d]), _sig(x[..., d:2 * d] + forget_bias)
    o, g = _sig(x[..., 2 * d:3 * d]), np.tanh(x[..., 3 * d:])
    c = f * c_prev + i * g
    h = o * np.tanh(c)
    valid = (t < seq)[None, :, None]
    keep_h, keep_c = (0.0, 0.0) if drop else (h_prev.astype(np.float64), c_prev.astype(np.float64))
    return np.where(valid, h, keep_h), np.where(valid, c, keep_c)


def lstm_grad_reference(c_prev, gates, seq, t, c, dh, dc, forget_bias, drop):
    d = c_prev.shape[-1]
    x = gates.astype(np.float64)
    c_prev, c, dh, dc = (a.astype(np.float64) for a in (c_prev, c, dh, dc))
    i, f = _sig(x[..., :d]), _sig(x[..., d:2 * d] + forget_bias)
    o, g = _sig(x[..., 2 * d:3 * d]), np.tanh(x[..., 3 * d:])
    tc = np.tanh(c)
    dcell = dc + dh * o * (1 - tc * tc)
    dx = np.concatenate([dcell * g * i * (1 - i), dcell * c_prev * f * (1 - f), dh * tc * o * (1 - o),
                         dcell * i * (1 - g * g)], axis=-1)
    valid = np.broadcast_to((t < seq)[None, :, None], dh.shape)
    dh_prev = np.where(valid, 0.0, 0.0 if drop else dh)
    dc_prev = np.where(valid, dcell * f, 0.0 if drop else dc)
    return dh_prev, dc_prev, np.where((t < seq)[None, :, None], dx, 0.0)


@pytest.mark.parametrize("dtype,d", [(np.float32, 16), (np.float32, 5), (np.float16, 16), (np.float16, 6),
                                     (np.float16, 3)])
@pytest.mark.parametrize("drop", [0, 1])
def test_lstm_unit_and_gradient(rng, dtype, d, drop):
    n, t, forget_bias = 9, 3, 0.5
    h_prev, c_prev = (rng.standard_normal((1, n, d)).astype(dtype) for _ in range(2))
    gates = rng.standard_normal((1, n, 4 * d)).astype(dtype)
    seq = rng.integers(0, 7, n).astype(np.int32)
    timestep = np.array([t], np.int32)
    rtol = 1e-5 if dtype == np.float32 else 1e-2
    h, c = run_gpu("LSTMUnit", [h_prev, c_prev, gates, seq, timestep], 2, forget_bias=forget_bias, drop_states=drop)
    assert h.dtype == dtype and c.dtype == dtype
    want_h, want_c = lstm_reference(h_prev.astype(np.float64), c_prev.astype(np.float64), gates, seq, t,
                                    forget_bias, drop)
    close(h, want_h, rtol, rng.seed_text)
    close(c, want_c, rtol, rng.seed_text)
    dh, dc = (rng.standard_normal((1, n, d)).astype(dtype) for _ in range(2))
    grads = run_gpu("LSTMUnitGradient", [h_prev, c_prev, gates, seq, timestep, h, c, dh, dc], 3,
                    forget_bias=forget_bias, drop_states=drop)
    for got, want in zip(grads, lstm_grad_reference(c_prev, gates, seq, t, c, dh, dc, forget_bias, drop)):
        close(got, want, rtol, rng.seed_text)


def test_lstm_unit_without_sequence_lengths(rng):
    n, d = 4, 8
    h_prev, c_prev = (rng.standard_normal((1, n, d)).astype(np.float32) for _ in range(2))
    gates = rng.standard_normal((1, n, 4 * d)).astype(np.float32)
    h, c = run_gpu("LSTMUnit", [h_prev, c_prev, gates, np.array([0], np.int32)], 2, sequence_lengths=0)
    want_h, want_c = lstm_reference(h_prev, c_prev, gates, np.full(n, 1), 0, 0.0, 0)
    close(h, want_h, 1e-5, rng.seed_text)
    close(c, want_c, 1e-5, rng.seed_text)


# --------------------------------------------------------------------------- elementwise

_NP_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


@pytest.mark.parametrize("op_type", sorted(_NP_BINARY))
@pytest.mark.parametrize("a_shape,b_shape", [((4, 5), (4, 5)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)),
                                             ((6,), (1,)), ((2, 3, 1, 5), (1, 3, 4, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_binary_broadcast(rng, op_type, a_shape, b_shape, dtype):
    a = rng.standard_normal(a_shape).astype(dtype)
    b = (rng.uniform(0.5, 2, b_shape) * rng.choice([-1, 1], b_shape)).astype(dtype)
    got = run_gpu(op_type, [a, b])
    assert got.dtype == dtype
    close(got, _NP_BINARY[op_type](a.astype(np.float64), b.astype(np.float64)),
          1e-5 if dtype == np.float32 else 1e-2, rng.seed_text)


def test_legacy_broadcast_with_axis(rng):
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    got = run_gpu("Add", [a, b], broadcast=1, axis=1)
    close(got, a.astype(np.float64) + b.reshape(1, 3, 4, 1), 1e-5, rng.seed_text)


@pytest.mark.parametrize("op_type,fn", [("Relu", lambda x: np.maximum(x, 0)), ("Sigmoid", _sig),
                                        ("Tanh", np.tanh), ("Exp", np.exp), ("Log", np.log), ("Sqrt", np.sqrt),
                                        ("Abs", np.abs), ("Negative", np.negative)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_activations(rng, op_type, fn, dtype):
    x = rng.standard_normal((7, 33)) * (2 if op_type == "Exp" else 4)
    if op_type in ("Log", "Sqrt"):
        x = np.abs(x) + 0.1
    x = x.astype(dtype)
    got = run_gpu(op_type, [x])
    close(got, fn(x.astype(np.float64)), 1e-5 if dtype == np.float32 else 1e-2, rng.seed_text)


@pytest.mark.parametrize("shape,axis", [((8, 10), 1), ((3, 4, 5), 1), ((2, 3, 2000), 2)])
def test_softmax(rng, shape, axis):
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    rows = x.reshape(int(np.prod(shape[:axis])), -1).astype(np.float64)
    e = np.exp(rows - rows.max(1, keepdims=True))
    got = run_gpu("Softmax", [x], axis=axis)
    close(got, (e / e.sum(1, keepdims=True)).reshape(shape), 1e-5, rng.seed_text)


# --------------------------------------------------------------------------- layout ops

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8])
def test_concat_and_split_info(rng, dtype):
    xs = [(rng.standard_normal((2, k, 3)) * 10).astype(dtype) for k in (1, 4, 2, 3, 1, 1, 2, 5, 3, 2)]
    out, split = run_gpu("Concat", xs, 2, axis=1)
    np.testing.assert_array_equal(out, np.concatenate(xs, axis=1))
    np.testing.assert_array_equal(split, [1, 4, 2, 3, 1, 1, 2, 5, 3, 2])
    same = [(rng.standard_normal((2, 3))).astype(dtype) for _ in range(3)]
    np.testing.assert_array_equal(run_gpu("Concat", same, axis=0, add_axis=1), np.stack(same, 0))


@pytest.mark.parametrize("shape,axes", [((3, 4), None), ((2, 3, 4), (0, 2, 1)), ((2, 3, 4, 5), (3, 1, 0, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_transpose(rng, shape, axes, dtype):
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    args = {} if axes is None else {"axes": list(axes)}
    np.testing.assert_array_equal(run_gpu("Transpose", [x], **args), np.transpose(x, axes))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_and_its_bounds_check(rng, itype):
    data = rng.standard_normal((20, 3, 2)).astype(np.float32)
    idx = rng.integers(0, 20, (4, 5)).astype(itype)
    np.testing.assert_array_equal(run_gpu("Gather", [data, idx]), data[idx])
    with pytest.raises(Caffe2Error, match="out of DATA bounds, id=20 axis_dim=20"):
        run_gpu("Gather", [data, np.array([0, 20], itype)])


# --------------------------------------------------------------------------- GEMMs

def _gemm_tol(k):
    return 1e-5 * max(1, np.sqrt(k))


def test_fc(rng):
    x = rng.standard_normal((6, 2, 5)).astype(np.float32)
    w = rng.standard_normal((7, 10)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    got = run_gpu("FC", [x, w, b])
    close(got, x.reshape(6, 10).astype(np.float64) @ w.T.astype(np.float64) + b, _gemm_tol(10), rng.seed_text)
    wt = rng.standard_normal((10, 7)).astype(np.float32)
    got = run_gpu("FCTransposed", [x, wt, b])
    close(got, x.reshape(6, 10).astype(np.float64) @ wt.astype(np.float64) + b, _gemm_tol(10), rng.seed_text)


@pytest.mark.parametrize("ta", [0, 1])
@pytest.mark.parametrize("tb", [0, 1])
def test_matmul_and_batch_matmul(rng, ta, tb):
    m, k, n = 9, 33, 17
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    close(run_gpu("MatMul", [a, b], trans_a=ta, trans_b=tb), want, _gemm_tol(k), rng.seed_text)
    ab = rng.standard_normal((3, 2) + a.shape).astype(np.float32)
    bb = rng.standard_normal((3, 2) + b.shape).astype(np.float32)
    want = np.matmul(np.swapaxes(ab, -1, -2) if ta else ab, np.swapaxes(bb, -1, -2) if tb else bb)
    close(run_gpu("BatchMatMul", [ab, bb], trans_a=ta, trans_b=tb), want, _gemm_tol(k), rng.seed_text)


def test_matmul_third_input_shapes_the_output(rng):
    """Caffe2's gradient ops pass the input whose gradient they make as input 2: the
    product takes its shape."""
    dy = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    like = np.zeros((2, 6), np.float32)
    got = run_gpu("MatMul", [dy, b, like], trans_b=1)
    assert got.shape == (2, 6)
    close(got, (dy.astype(np.float64) @ b.T).reshape(2, 6), _gemm_tol(5), rng.seed_text)
    with pytest.raises(Caffe2Error, match="does not hold the 4 x 3 product"):
        run_gpu("MatMul", [dy, b, np.zeros((5,), np.float32)], trans_b=1)


# --------------------------------------------------------------------------- devices

def test_copy_ops_and_feed_fetch_round_trip(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    ws = workspace.Workspace("copies")
    ws.feed_blob("x", x)
    net = caffe2_pb2.NetDef(name="copies")
    net.op.add().CopyFrom(core.CreateOperator("CopyCPUToGPU", ["x"], ["xg"], device_option=CUDA0))
    net.op.add().CopyFrom(core.CreateOperator("Relu", ["xg"], ["yg"], device_option=CUDA0))
    net.op.add().CopyFrom(core.CreateOperator("CopyGPUToCPU", ["yg"], ["y"], device_option=CUDA0))
    net.op.add().CopyFrom(core.CreateOperator("EnsureCPUOutput", ["yg"], ["y2"]))
    net.op.add().CopyFrom(core.CreateOperator("Copy", ["xg"], ["xg2"], device_option=CUDA0))
    ws.create_net(net)
    ws.run_net("copies")
    assert isinstance(ws.blobs["y"], np.ndarray) and isinstance(ws.blobs["y2"], np.ndarray)
    np.testing.assert_array_equal(ws.fetch_blob("y"), np.maximum(x, 0))
    np.testing.assert_array_equal(ws.fetch_blob("y2"), np.maximum(x, 0))
    np.testing.assert_array_equal(ws.fetch_blob("xg2"), x)


def test_wrong_device_input_is_refused_at_create_net(rng):
    ws = workspace.Workspace("placement")
    ws.feed_blob("xg", rng.standard_normal(3).astype(np.float32), CUDA0)
    ws.feed_blob("xc", rng.standard_normal(3).astype(np.float32))
    net = caffe2_pb2.NetDef(name="bad")
    net.op.add().CopyFrom(core.CreateOperator("Relu", ["xg"], ["y"]))
    with pytest.raises(Caffe2Error, match="input 'xg' is on CUDA:0 but the op runs on CPU"):
        ws.create_net(net)
    net = caffe2_pb2.NetDef(name="bad2")
    net.op.add().CopyFrom(core.CreateOperator("Relu", ["xc"], ["y"], device_option=CUDA0))
    with pytest.raises(Caffe2Error, match="input 'xc' is on CPU but the op runs on CUDA:0"):
        ws.create_net(net)


def test_workspace_reports_the_gpu():
    assert workspace.has_gpu_support and workspace.NumGpuDevices() >= 1
    assert workspace.GpuDeviceType == caffe2_pb2.CUDA


def test_net_runs_allocate_nothing_after_warm_up(rng):
    from caffe2py.cuda import allocator
    ws = workspace.Workspace("pool")
    table, _ = fused8_table(rng, 100, 32)
    ws.feed_blob("t", table, CUDA0)
    ws.feed_blob("i", rng.integers(0, 100, 64).astype(np.int32), CUDA0)
    ws.feed_blob("l", np.full(16, 4, np.int32), CUDA0)
    ws.feed_blob("w", rng.standard_normal((8, 32)).astype(np.float32), CUDA0)
    ws.feed_blob("b", rng.standard_normal(8).astype(np.float32), CUDA0)
    net = caffe2_pb2.NetDef(name="rec")
    net.op.add().CopyFrom(core.CreateOperator("SparseLengthsSumFused8BitRowwise", ["t", "i", "l"], ["e"],
                                              device_option=CUDA0))
    net.op.add().CopyFrom(core.CreateOperator("FC", ["e", "w", "b"], ["f"], device_option=CUDA0))
    net.op.add().CopyFrom(core.CreateOperator("Sigmoid", ["f"], ["p"], device_option=CUDA0))
    ws.create_net(net)
    for _ in range(3):
        ws.run_net("rec")
    blocks = sum(allocator.stats(0))
    for _ in range(5):
        ws.run_net("rec")
    assert sum(allocator.stats(0)) == blocks
