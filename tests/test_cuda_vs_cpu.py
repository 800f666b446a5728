"""Every CUDA op against its CPU op, on random inputs (marked `cuda`: on a GPU, or on
the CPU emulator, whose bounds and thread-order checks run on every launch here).

The same OperatorDef runs once on the CPU and once with a CUDA device_option (inputs
fed to the device, outputs fetched back). The CPU ops are the reference semantics.
Tolerances, relative to max(1, largest |CPU value|):
  float32 outputs      1e-5 (GEMM-based outputs: 1e-5 * sqrt(k); conv: 1e-4)
  float16 outputs      2e-3 (two half-precision ulps: the float32 math in between
                       may round differently on the two devices)
  conversions, layout ops, quantisation and index errors: exact.
"""
import os

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.models import read_net
from caffe2py.proto import caffe2_pb2

pytestmark = pytest.mark.cuda

CUDA0 = core.DeviceOption(caffe2_pb2.CUDA, 0)
F32, F16 = np.float32, np.float16


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


def run_on(device, op_type, inputs, n_outputs=1, **args):
    ws = workspace.Workspace("cpu" if device is None else "cuda")
    names = ["in%d" % i for i in range(len(inputs))]
    outs = ["out%d" % i for i in range(n_outputs)]
    for name, value in zip(names, inputs):
        ws.feed_blob(name, value, device)
    ws.run_operator_once(core.CreateOperator(op_type, names, outs, device_option=device, **args))
    return [ws.fetch_blob(o) for o in outs]


def compare(op_type, inputs, n_outputs=1, tol=None, msg="", cpu_type=None, **args):
    """Run on both devices (on the CPU as cpu_type when given: an op without a CPU
    kernel is compared with the CPU op of the same semantics); assert the outputs
    agree (exactly when tol is None)."""
    cpu = run_on(None, cpu_type or op_type, inputs, n_outputs, **args)
    gpu = run_on(CUDA0, op_type, inputs, n_outputs, **args)
    for k, (c, g) in enumerate(zip(cpu, gpu)):
        c, g = np.asarray(c), np.asarray(g)
        where = "%s output %d %s" % (op_type, k, msg)
        assert g.shape == c.shape and g.dtype == c.dtype, (where, g.shape, c.shape, g.dtype, c.dtype)
        if tol is None or c.dtype.kind not in "f":
            np.testing.assert_array_equal(g, c, err_msg=where)
        else:
            t = tol if c.dtype != F16 else max(tol, 2e-3)
            scale = max(1.0, float(np.nanmax(np.abs(c.astype(np.float64))))) if c.size else 1.0
            np.testing.assert_allclose(g.astype(np.float64), c.astype(np.float64), rtol=t, atol=t * scale,
                                       err_msg=where)
    return cpu, gpu


def errors_on_both(op_type, inputs, **args):
    """The Caffe2Error text of the op on the CPU and on CUDA."""
    texts = []
    for device in (None, CUDA0):
        with pytest.raises(Caffe2Error) as info:
            run_on(device, op_type, inputs, **args)
        texts.append(str(info.value))
    return texts


# --------------------------------------------------------------------------- SparseLengths family

_FUSED = {"fused8": ("Fused8BitRowwise", 1, 8), "fused4": ("Fused4BitRowwise", 2, 4),
          "fused2": ("Fused2BitRowwise", 4, 4)}
# (scalar-path dim, vector-path dim) per layout: the kernel loads vectors only when dim allows
_DIMS = {"float32": (7, 32), "float16": (6, 32), "fused8": (7, 32), "fused4": (6, 32), "fused2": (12, 32)}


def make_table(rng, layout, rows, dim):
    if layout in ("float32", "float16"):
        return rng.standard_normal((rows, dim)).astype(layout)
    _, per_byte, _ = _FUSED[layout]
    values = rng.integers(0, 256, (rows, -(-dim // per_byte)), dtype=np.uint8)
    if layout == "fused8":
        sb = np.stack([rng.uniform(0.001, 0.1, rows), rng.uniform(-1, 1, rows)], 1).astype("<f4").view(np.uint8)
    else:
        sb = np.stack([rng.uniform(0.01, 0.2, rows), rng.uniform(-1, 1, rows)], 1).astype("<f2").view(np.uint8)
    return np.concatenate([values, sb], 1)


def op_name(reduction, layout, form):
    suffix = "" if layout in ("float32", "float16") else _FUSED[layout][0]
    return "SparseLengths%s%s%s" % (reduction, suffix, "" if form == "lengths" else "Idx")


@pytest.mark.parametrize("layout", ["float32", "float16", "fused8", "fused4", "fused2"])
@pytest.mark.parametrize("reduction", ["Sum", "WeightedSum", "Mean"])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("form", ["lengths", "offsets", "offsets_no_last"])
def test_sparse_lengths(rng, layout, reduction, itype, form):
    rows, bags = 40, 9
    for dim in _DIMS[layout]:
        table = make_table(rng, layout, rows, dim)
        lengths = rng.integers(0, 7, bags).astype(np.int32)
        lengths[2] = 0  # an empty bag
        indices = rng.integers(0, rows, int(lengths.sum())).astype(itype)
        args = {}
        if form == "lengths":
            seg = lengths
        else:
            otype = np.int64 if itype == np.int64 else np.int32
            seg = (np.concatenate([[0], np.cumsum(lengths)]) + 3).astype(otype)  # offsets relative to the first
            if form == "offsets_no_last":
                seg, args = seg[:-1], {"include_last_offset": 0}
        weights = rng.standard_normal(indices.size).astype(F32)
        inputs = [table, weights, indices, seg] if reduction == "WeightedSum" else [table, indices, seg]
        compare(op_name(reduction, layout, form), inputs, tol=1e-5, msg="dim %d %s" % (dim, rng.seed_text), **args)


@pytest.mark.parametrize("layout", ["float32", "float16", "fused8", "fused4", "fused2"])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_out_of_range_index_gives_the_cpu_error(rng, layout, itype):
    table = make_table(rng, layout, 10, 8)
    for bad in (100, -1, 10):
        indices = np.array([1, 2, bad, 4, 0], itype)
        cpu, gpu = errors_on_both(op_name("Sum", layout, "lengths"), [table, indices, np.array([2, 3], np.int32)])
        assert gpu == cpu and "Index 2 is out of bounds: %d, range 0 to 10" % bad in cpu
    cpu, gpu = errors_on_both(op_name("Sum", layout, "offsets"), [table, np.array([1, 50], itype),
                                                                  np.array([0, 1, 2], np.int64)])
    assert gpu == cpu and "Index 1 is out of bounds: 50" in cpu


def test_lengths_that_do_not_cover_the_indices_give_the_cpu_error(rng):
    cpu, gpu = errors_on_both("SparseLengthsSum", [rng.standard_normal((5, 4)).astype(F32),
                                                   np.array([0, 1, 2], np.int32), np.array([1, 1], np.int32)])
    assert gpu == cpu and "sum of lengths values should be the size of the indices" in cpu


# --------------------------------------------------------------------------- conversions

def test_rowwise_8bit_quantisation_round_trip(rng):
    x = (rng.standard_normal((21, 37)) * 3).astype(F32)
    x[3] = 1.25  # a constant row
    (q,), _ = compare("FloatToFused8BitRowwiseQuantized", [x])
    compare("Fused8BitRowwiseQuantizedToFloat", [q])


@pytest.mark.parametrize("n", [1, 2, 513])
def test_float_half_conversions(rng, n):
    x = (rng.standard_normal(n) * 1000).astype(F32)
    x[0] = 70000.0  # overflows to inf in both
    compare("FloatToHalf", [x])
    with np.errstate(over="ignore"):
        halves = x.astype(F16)
    compare("HalfToFloat", [halves])


# --------------------------------------------------------------------------- LSTMUnit

@pytest.mark.parametrize("dtype,d", [(F32, 16), (F32, 5), (F16, 16), (F16, 6), (F16, 3)])
@pytest.mark.parametrize("drop", [0, 1])
def test_lstm_unit_and_gradient(rng, dtype, d, drop):
    n, t = 11, 2
    h, c = (rng.standard_normal((1, n, d)).astype(dtype) for _ in range(2))
    gates = rng.standard_normal((1, n, 4 * d)).astype(dtype)
    seq = rng.integers(0, 5, n).astype(np.int32)
    timestep = np.array([t], np.int32)
    args = dict(forget_bias=0.7, drop_states=drop)
    (h1, c1), _ = compare("LSTMUnit", [h, c, gates, seq, timestep], 2, tol=1e-5, msg=rng.seed_text, **args)
    dh, dc = (rng.standard_normal((1, n, d)).astype(dtype) for _ in range(2))
    compare("LSTMUnitGradient", [h, c, gates, seq, timestep, h1, c1, dh, dc], 3, tol=1e-5, msg=rng.seed_text, **args)


def test_lstm_unit_without_sequence_lengths(rng):
    h, c = (rng.standard_normal((1, 4, 8)).astype(F32) for _ in range(2))
    gates = rng.standard_normal((1, 4, 32)).astype(F32)
    compare("LSTMUnit", [h, c, gates, np.array([0], np.int32)], 2, tol=1e-5, sequence_lengths=0)


# --------------------------------------------------------------------------- GEMMs

def _gemm_tol(k):
    return 1e-5 * max(1.0, np.sqrt(k))


def test_fc_and_fc_transposed(rng):
    x = rng.standard_normal((5, 3, 4)).astype(F32)
    b = rng.standard_normal(6).astype(F32)
    compare("FC", [x, rng.standard_normal((6, 12)).astype(F32), b], tol=_gemm_tol(12))
    compare("FCTransposed", [x, rng.standard_normal((12, 6)).astype(F32), b], tol=_gemm_tol(12))
    compare("FC", [x, rng.standard_normal((6, 4)).astype(F32), b], tol=_gemm_tol(4), axis=2)


@pytest.mark.parametrize("ta", [0, 1])
@pytest.mark.parametrize("tb", [0, 1])
def test_matmul_and_batch_matmul(rng, ta, tb):
    m, k, n = 7, 19, 13
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(F32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(F32)
    # no CPU MatMul kernel: CPU BatchMatMul computes the same product of 2-D inputs
    compare("MatMul", [a, b], tol=_gemm_tol(k), cpu_type="BatchMatMul", trans_a=ta, trans_b=tb)
    compare("BatchMatMul", [rng.standard_normal((2, 3) + a.shape).astype(F32),
                            rng.standard_normal((2, 3) + b.shape).astype(F32)], tol=_gemm_tol(k), trans_a=ta, trans_b=tb)


# --------------------------------------------------------------------------- elementwise

@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_binary_ops_with_broadcasting(rng, op_type, dtype):
    for a_shape, b_shape in [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), (1,)),
                             ((2, 3, 1, 5), (1, 3, 4, 1)), ((1,), (2, 3))]:
        a = rng.standard_normal(a_shape).astype(dtype)
        b = (rng.uniform(0.5, 2, b_shape) * rng.choice([-1, 1], b_shape)).astype(dtype)
        compare(op_type, [a, b], tol=1e-5, msg=str((a_shape, b_shape)))
    a = rng.standard_normal((2, 3, 4, 5)).astype(dtype)
    compare(op_type, [a, rng.uniform(0.5, 2, (3, 4)).astype(dtype)], tol=1e-5, broadcast=1, axis=1)


@pytest.mark.parametrize("op_type", ["Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Negative"])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_activations(rng, op_type, dtype):
    x = rng.standard_normal((9, 31)) * (2 if op_type == "Exp" else 5)
    if op_type in ("Log", "Sqrt"):
        x = np.abs(x) + 0.1
    compare(op_type, [x.astype(dtype)], tol=1e-5)


@pytest.mark.parametrize("shape,axis", [((6, 10), 1), ((2, 3, 5), 1), ((2, 3, 700), 2), ((4, 3), 0)])
def test_softmax(rng, shape, axis):
    compare("Softmax", [(rng.standard_normal(shape) * 4).astype(F32)], tol=1e-5, axis=axis)


@pytest.mark.parametrize("op_type,args", [
    ("ReduceSum", {"axes": [-1]}), ("ReduceSum", {"axes": [0, 2], "keepdims": 0}), ("ReduceSum", {}),
    ("ReduceMean", {"axes": [1]}), ("ReduceMean", {"axes": [2], "keepdims": 0}),
    ("ReduceBackSum", {"num_reduce_dim": 2}), ("ReduceBackMean", {}),
    ("ReduceFrontSum", {}), ("ReduceFrontMean", {"num_reduce_dim": 2}),
])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_sum_reductions(rng, op_type, args, dtype):
    compare(op_type, [rng.standard_normal((3, 5, 300)).astype(dtype)], tol=1e-5, **args)


# --------------------------------------------------------------------------- layout ops

@pytest.mark.parametrize("dtype", [F32, F16, np.int64, np.uint8, np.int32])
def test_concat_transpose_and_gather(rng, dtype):
    xs = [(rng.standard_normal((2, k, 3)) * 50).astype(dtype) for k in (1, 4, 2, 3, 1, 2, 2, 5, 3)]
    compare("Concat", xs, 2, axis=1)
    same = [(rng.standard_normal((2, 3)) * 50).astype(dtype) for _ in range(3)]
    compare("Concat", same, axis=0)
    compare("Concat", same, axis=1, add_axis=1)
    x = (rng.standard_normal((2, 3, 4, 5)) * 50).astype(dtype)
    compare("Transpose", [x], axes=[3, 1, 0, 2])
    compare("Transpose", [x])
    data = (rng.standard_normal((15, 2, 3)) * 50).astype(dtype)
    compare("Gather", [data, rng.integers(0, 15, (3, 4)).astype(np.int64)])
    compare("Gather", [data, rng.integers(0, 15, 7).astype(np.int32)])


def test_gather_out_of_range_gives_the_cpu_error(rng):
    cpu, gpu = errors_on_both("Gather", [rng.standard_normal((6, 2)).astype(F32), np.array([0, 6, 1], np.int64)])
    assert gpu == cpu and "out of DATA bounds" in cpu


# --------------------------------------------------------------------------- CNN ops

@pytest.mark.parametrize("args", [
    dict(kernel=3), dict(kernel=3, pad=1, stride=2), dict(kernels=[3, 2], strides=[1, 2], pads=[1, 0, 2, 1]),
    dict(kernel=3, dilation=2, pad=2), dict(kernel=3, group=2, pad=1), dict(kernel=5, legacy_pad=2, stride=2),
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv(rng, args, bias):
    x = rng.standard_normal((2, 4, 11, 9)).astype(F32)
    kernel = args.get("kernels", [args.get("kernel")] * 2)
    w = rng.standard_normal((6, 4 // args.get("group", 1)) + tuple(kernel)).astype(F32)
    inputs = [x, w] + ([rng.standard_normal(6).astype(F32)] if bias else [])
    compare("Conv", inputs, tol=1e-4, msg=str(args), **args)


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("args", [
    dict(kernel=2, stride=2), dict(kernel=3, stride=2, pad=1), dict(kernel=3, stride=1, pad=1, count_include_pad=1),
    dict(kernels=[3, 2], strides=[2, 1], pads=[0, 1, 1, 0]), dict(kernel=3, stride=2, legacy_pad=3),
    dict(global_pooling=1),
])
def test_pooling(rng, op_type, args):
    x = rng.standard_normal((2, 3, 9, 8)).astype(F32)
    x[0, 1, 2, 3] = np.nan  # max pooling propagates NaN, as the CPU op
    compare(op_type, [x], tol=1e-5, msg=str(args), **args)


def test_reshape_is_a_view_with_the_old_shape(rng):
    x = rng.standard_normal((2, 3, 4)).astype(F32)
    compare("Reshape", [x], 2, shape=[0, -1])
    compare("Reshape", [x], 1, shape=[4, 6])


# --------------------------------------------------------------------------- a real model

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "models")
INIT = os.path.join(MODELS, "caffe2_mnist_init_net.pb")
PREDICT = os.path.join(MODELS, "caffe2_mnist_predict_net.pb")


def _gpu(name):
    return name + "_gpu"


def _on_cuda(predict_net):
    """The predict net with every op on CUDA:0, reading the weights' device copies,
    with an explicit copy of the input in and of the output out."""
    net = caffe2_pb2.NetDef()
    net.CopyFrom(predict_net)
    del net.op[:]
    data, output = predict_net.external_input[0], predict_net.external_output[0]
    net.op.add().CopyFrom(core.CreateOperator("CopyCPUToGPU", [data], [_gpu(data)], device_option=CUDA0))
    for op in predict_net.op:
        new = net.op.add()
        new.CopyFrom(op)
        new.device_option.CopyFrom(CUDA0)
        new.input[:] = [_gpu(n) if n in predict_net.external_input else n for n in op.input]
        new.output[:] = [_gpu(n) if n == output else n for n in op.output]
    net.op.add().CopyFrom(core.CreateOperator("CopyGPUToCPU", [_gpu(output)], [output], device_option=CUDA0))
    net.external_input[:] = [data] + [_gpu(n) for n in predict_net.external_input[1:]]
    return net


@pytest.mark.skipif(not os.path.exists(PREDICT), reason="../shared/models is not present")
def test_mnist_predict_net_on_cuda_gives_the_cpu_output(rng):
    init_net, predict_net = read_net(INIT), read_net(PREDICT)
    assert {op.type for op in predict_net.op} == {"Conv", "Add", "MaxPool", "Relu", "Reshape", "FC"}
    image = rng.random((1, 1, 28, 28), dtype=np.float32)
    cpu_ws = workspace.Workspace("mnist_cpu")
    cpu_ws.run_net_once(init_net)
    cpu_ws.feed_blob("1", image)
    cpu_ws.run_net_once(predict_net)
    want = cpu_ws.fetch_blob(predict_net.external_output[0])

    ws = workspace.Workspace("mnist_cuda")
    ws.run_net_once(init_net)
    weights = [b for op in init_net.op for b in op.output]
    to_device = caffe2_pb2.NetDef(name="weights_to_gpu")
    for name in weights:  # explicit copies of the weights onto the device, once
        to_device.op.add().CopyFrom(core.CreateOperator("CopyCPUToGPU", [name], [_gpu(name)], device_option=CUDA0))
    ws.run_net_once(to_device)
    gpu_net = _on_cuda(predict_net)
    ws.create_net(gpu_net)
    for _ in range(2):  # the compiled net runs again on a fresh image
        ws.feed_blob("1", image)
        ws.run_net(gpu_net.name)
        got = ws.fetch_blob(predict_net.external_output[0])
        assert isinstance(ws.blobs[predict_net.external_output[0]], np.ndarray)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
        image = rng.random((1, 1, 28, 28), dtype=np.float32)
        cpu_ws.feed_blob("1", image)
        cpu_ws.run_net_once(predict_net)
        want = cpu_ws.fetch_blob(predict_net.external_output[0])
