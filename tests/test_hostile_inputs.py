"""Issue 22's reproducers: every hostile input gets caffe2py's named error (or the
right result), never a bare exception, a hang, a silent accept or raw library text."""
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from caffe2py import core
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.workspace import Workspace

RNG = np.random.default_rng(22)


def run_op(op_type, inputs, outputs=("Y",), **args):
    """Run one op on {name: array} in a fresh workspace; the first output."""
    ws = Workspace("hostile")
    for name, value in inputs.items():
        ws.feed_blob(name, value)
    ws.run_net_once(_net(core.CreateOperator(op_type, list(inputs), list(outputs), **args)))
    return ws.fetch_blob(outputs[0])


def _net(*ops, name="hostile"):
    net = caffe2_pb2.NetDef(name=name)
    net.op.extend(ops)
    return net


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------- nets and arguments

def test_nul_byte_in_the_net_name_runs_through_every_entry_point(tmp_path):
    net = _net(core.CreateOperator("ConstantFill", [], ["x"], shape=[2], value=3.0), name="a\x00b")
    ws = Workspace("nul")
    ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch_blob("x"), [3.0, 3.0])
    ws.create_net(net)
    ws.run_net("a\x00b")
    net.external_output.append("x")
    path = tmp_path / "nul_net.pb"
    path.write_bytes(net.SerializeToString())
    done = subprocess.run([sys.executable, "-m", "caffe2py", "run", "--predict-net", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "x: shape [2]" in done.stdout


def test_duplicated_argument_names_are_refused_as_caffe2_does():
    op = core.CreateOperator("Relu", ["X"], ["Y"])
    op.arg.add(name="a", i=1)
    op.arg.add(name="a", i=2)
    ws = Workspace("dup")
    ws.feed_blob("X", f32(2))
    with pytest.raises(Caffe2Error, match=r"Relu #0 'Y': duplicated argument name 'a'"):
        ws.run_net_once(_net(op))
    assert ws.blob_names() == ["X"]


def test_wrongly_typed_declared_argument_is_named():
    with pytest.raises(Caffe2Error, match="argument 'axis' should be an int, got 'x'"):
        run_op("Softmax", {"X": f32(2, 3)}, axis="x")


@pytest.mark.parametrize("op_type,inputs,args,expected", [
    ("Transpose", {"X": f32(2, 3)}, dict(axes=[2, 1]), r"axes' = \[2, 1\] is not a permutation of the 2 dims"),
    ("Transpose", {"X": f32(2, 3)}, dict(axes=[0, 0]), "is not a permutation"),
    ("Flatten", {"X": f32(2, 4)}, dict(axis=-4), "out of range"),
    ("Flatten", {"X": f32(2, 4)}, dict(axis=3), "out of range"),
    ("Softmax", {"X": f32(2, 4)}, dict(axis=2), "out of range for input 0 of rank 2"),
    ("Bucketize", {"X": f32(4)}, dict(boundaries=[0.1, float("nan")]), "must hold finite numbers"),
    ("Bucketize", {"X": f32(4)}, dict(boundaries=[0.5, 0.1]), "must be sorted ascending"),
    ("Conv", {"X": f32(1, 2, 3, 3), "W": f32(2, 2, 1, 1), "b": f32(2)}, dict(kernel=1, group=0),
     "argument 'group' must be >= 1, got 0"),
    ("Conv", {"X": f32(1, 2, 3, 3), "W": f32(2, 2, 1, 1), "b": f32(2)}, dict(kernel=1, stride=0),
     "argument 'stride' must be >= 1"),
    ("MaxPool", {"X": f32(1, 1, 4, 4)}, dict(kernel=2, pad=-1), "argument 'pad' must be >= 0"),
    ("MaxPool", {"X": f32(1, 1, 4, 4)}, dict(kernel=2, order="NCWH"), "argument 'order' must be one of"),
])
def test_argument_rules_of_the_schema(op_type, inputs, args, expected):
    with pytest.raises(Caffe2Error, match=expected) as info:
        run_op(op_type, inputs, **args)
    assert str(info.value).startswith("%s #0 'Y'" % op_type)


@pytest.mark.parametrize("axis", [-3, 5, 2])
def test_split_refuses_axes_outside_the_input(axis):
    with pytest.raises(Caffe2Error, match="axis %d is out of range for a 2-D input" % axis):
        run_op("Split", {"X": f32(2, 4)}, ("A", "B"), axis=axis)


def test_split_and_concat_keep_their_negative_axes():
    x = f32(2, 4)
    np.testing.assert_array_equal(run_op("Split", {"X": x}, ("A", "B"), axis=-1), x[:, :2])
    np.testing.assert_array_equal(run_op("Concat", {"A": x, "B": x}, ("Y",), axis=-2),
                                  np.concatenate([x, x], axis=0))


# ----------------------------------------------------------------- dtypes and ranks

@pytest.mark.parametrize("op_type,extra", [("Conv", dict(kernel=1)), ("MaxPool", dict(kernel=2)),
                                           ("AveragePool", dict(kernel=2))])
def test_conv_and_pools_refuse_int32_x(op_type, extra):
    inputs = {"X": np.ones((1, 1, 3, 3), np.int32)}
    if op_type == "Conv":
        inputs.update(W=np.ones((1, 1, 1, 1), np.int32), b=np.ones(1, np.int32))
    with pytest.raises(Caffe2Error, match=r"blob 'X': input 0 must be a tensor of float16/float32/float64, "
                                          r"got int32"):
        run_op(op_type, inputs, **extra)


def test_messages_that_used_to_wrap_library_text():
    cases = [
        ("SpatialBN", {"X": f32(3), "s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3)}, dict(is_test=1),
         r"blob 'X': input 0 must have at least 2 dims, got shape \[3\]"),
        ("Sum", {"A": f32(3), "B": np.ones(3, np.int32)}, {},
         "blob 'B': input 1 has dtype int32 but input 0 has float32; they must match"),
        ("Add", {"A": np.ones((), np.float32), "B": f32(3)}, dict(broadcast=1),
         r"blob 'B': B of shape \[3\] does not fit A of shape \[\]"),
        ("Relu", {"X": np.array(["a", "b"], dtype=object)}, {}, "must be a tensor of"),
    ]
    for op_type, inputs, args, expected in cases:
        with pytest.raises(Caffe2Error, match=expected) as info:
            run_op(op_type, inputs, **args)
        assert "Error:" not in str(info.value)        # no NumPy/Python exception quoted


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0, 2)])
def test_softmax_of_an_empty_tensor_is_empty(shape):
    x = np.zeros(shape, np.float32)
    y = run_op("Softmax", {"X": x})
    assert y.shape == shape and y.dtype == np.float32
    dx = run_op("SoftmaxGradient", {"Y": x, "dY": x}, ("dX",))
    assert dx.shape == shape


# ----------------------------------------------------------------- sparse lookups

@pytest.mark.parametrize("op_type,lengths,expected", [
    ("SparseLengthsSum", [-5], "LENGTHS must be non-negative"),
    ("SparseLengthsSum", [5, 0], "sum of lengths values should be the size of the indices"),
    ("SparseLengthsMean", [1], "sum of lengths values should be the size of the indices"),
    ("SparseLengthsSumIdx", [0, 255], "sum of lengths values should be the size of the indices"),
])
def test_sparse_lengths_with_empty_indices_still_check_lengths(op_type, lengths, expected):
    inputs = {"D": f32(4, 3), "I": np.zeros(0, np.int64), "L": np.array(lengths, np.int32)}
    with pytest.raises(Caffe2Error, match=expected):
        run_op(op_type, inputs)
    inputs["L"] = np.zeros(len(lengths), np.int32)
    if op_type.endswith("Idx"):
        got = run_op(op_type, inputs)
        assert got.shape == (len(lengths) - 1, 3)
    else:
        np.testing.assert_array_equal(run_op(op_type, inputs), np.zeros((len(lengths), 3), np.float32))


# ----------------------------------------------------------------- pooling geometry

def _pool_reference(x, kernel, strides, pads, kind, include_pad=False, dilations=(1, 1)):
    """Pooling written out window by window: cells outside the input are skipped
    (max) or count only with include_pad (average)."""
    n, c, h, w = x.shape
    oh = (h + pads[0] + pads[2] - ((kernel[0] - 1) * dilations[0] + 1)) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - ((kernel[1] - 1) * dilations[1] + 1)) // strides[1] + 1
    out = np.zeros((n, c, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            rows = [i * strides[0] - pads[0] + a * dilations[0] for a in range(kernel[0])]
            cols = [j * strides[1] - pads[1] + b * dilations[1] for b in range(kernel[1])]
            rin = [r for r in rows if 0 <= r < h]
            cin = [q for q in cols if 0 <= q < w]
            cells = x[:, :, rin][:, :, :, cin].reshape(n, c, -1).astype(np.float64)
            if kind == "max":
                out[:, :, i, j] = cells.max(axis=2) if cells.shape[2] else -np.inf
            else:
                rows_pad = [r for r in rows if -pads[0] <= r < h + pads[2]] if include_pad else rin
                cols_pad = [q for q in cols if -pads[1] <= q < w + pads[3]] if include_pad else cin
                out[:, :, i, j] = cells.sum(axis=2) / (len(rows_pad) * len(cols_pad))
    return out


@pytest.mark.parametrize("kind", ["max", "average"])
def test_far_reaching_windows_match_the_window_by_window_reference(kind):
    x = f32(2, 3, 4, 5)
    op = "MaxPool" if kind == "max" else "AveragePool"
    for kernel, strides, pads in (((100000, 100000), (1, 1), (50000, 50000, 50000, 50000)),
                                  ((60, 7), (3, 2), (30, 3, 29, 3)), ((5, 41), (1, 4), (2, 20, 2, 20))):
        for include_pad in ((False, True) if kind == "average" else (False,)):
            args = dict(kernels=list(kernel), strides=list(strides), pads=list(pads),
                        count_include_pad=int(include_pad))
            started = time.perf_counter()
            got = run_op(op, {"X": x}, **args)
            assert time.perf_counter() - started < 60, "windows far past the input must not cost their area"
            want = _pool_reference(x, kernel, strides, pads, kind, include_pad)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_onnx_maxpool_far_reaching_dilated_windows_match_the_reference():
    from onnx import helper

    from caffe2py.onnx import backend
    x = f32(1, 2, 6, 6)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[40, 3], strides=[1, 2], pads=[39, 1, 39, 1],
                            dilations=[2, 1])
    got = backend.run_node(node, [x], opset_version=13)[0]
    want = _pool_reference(x, (40, 3), (1, 2), (39, 1, 39, 1), "max", dilations=(2, 1))
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("pads", [[40, 1, 0, 1], [0, 1, 0, 3]])
def test_pool_pads_as_large_as_the_kernel_are_refused_as_caffe2_and_onnxruntime_do(pads):
    # fuzz mutate:4:25097: a pad of 2**31 - 1 left a MaxPool computing windows of padding for minutes
    from onnx import helper

    from caffe2py.onnx import backend
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[40, 3], pads=pads)
    with pytest.raises(Caffe2Error, match="each pad must be smaller than kernel_shape"):
        backend.run_node(node, [f32(1, 2, 6, 6)], opset_version=13)
    with pytest.raises(Caffe2Error, match="each pad must be smaller than the kernel"):
        run_op("AveragePool", {"X": f32(1, 2, 6, 6)}, kernels=[40, 3], pads=pads)


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
def test_pools_on_an_empty_batch_return_at_once(op_type):
    x = np.zeros((0, 3, 8, 8), np.float32)
    for args in (dict(kernels=[1, 2147483647], pads=[0, 1073741823, 0, 1073741823]),
                 dict(kernel_h=1, kernel_w=100000000, pad_l=50000000, pad_r=50000000, pad_t=0, pad_b=0)):
        started = time.perf_counter()
        y = run_op(op_type, {"X": x}, **args)
        assert time.perf_counter() - started < 30, "an empty batch must not loop over kernel offsets"
        assert y.shape[:2] == (0, 3) and y.dtype == np.float32


def test_global_pool_of_an_empty_batch_and_an_empty_map():
    y = run_op("MaxPool", {"X": np.zeros((0, 2, 3, 3), np.float32)}, global_pooling=1)
    assert y.shape == (0, 2, 1, 1)
    with pytest.raises(Caffe2Error, match="non-empty spatial extent"):
        run_op("MaxPool", {"X": np.zeros((1, 2, 0, 3), np.float32)}, global_pooling=1)


# ----------------------------------------------------------------- ONNX ops

def _onnx(node, inputs, opset=18):
    from caffe2py.onnx import backend
    return backend.run_node(node, inputs, opset_version=opset)


def test_onnx_topk_pad_flatten_transpose_split_refuse_what_the_spec_refuses():
    from onnx import helper
    x = f32(3, 4)
    cases = [
        (helper.make_node("TopK", ["x", "k"], ["v", "i"]), [x, np.array([-4], np.int64)], 18,
         r"k = -4 must be between 0 and 4"),
        (helper.make_node("TopK", ["x", "k"], ["v", "i"]), [x, np.array([5], np.int64)], 18,
         "less than the requested k elements"),
        (helper.make_node("Pad", ["x", "p"], ["y"]), [x, np.array([0, -3, 0, -3], np.int64)], 18,
         r"would give dim 1 a negative size \(4 \+ -3 \+ -3 = -2\)"),
        (helper.make_node("Pad", ["x"], ["y"], pads=[-2, 0, -2, 0]), [x], 10, "negative size"),
        (helper.make_node("Flatten", ["x"], ["y"], axis=-4), [x], 18, "out of range"),
        (helper.make_node("Transpose", ["x"], ["y"], perm=[2, 1]), [x], 18, "perm"),
        (helper.make_node("Split", ["x"], ["a", "b"], axis=5), [x], 18, "axis"),
        (helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2), [x], 13, "must (be 4-dimensional|have 4 dims)"),
        (helper.make_node("Add", ["x", "z"], ["y"]), [x, f32(5)], 14,
         r"shapes \[3, 4\] and \[5\] do not broadcast"),
        (helper.make_node("Add", ["x", "z"], ["y"]), [x, np.ones((3, 4), np.int32)], 14,
         "input 1 has type tensor\\(int32\\) but input 0 has tensor\\(float\\)"),
        (helper.make_node("Range", ["a", "b", "c"], ["y"]), [np.array(0.0), np.array(5.0), np.array(0.0)], 11,
         "delta must not be 0"),
    ]
    for node, inputs, opset, expected in cases:
        with pytest.raises(Caffe2Error, match=expected) as info:
            _onnx(node, inputs, opset)
        assert str(info.value).startswith(node.op_type + " #0"), str(info.value)
        assert "Error:" not in str(info.value)


def test_onnx_topk_and_pad_still_compute():
    from onnx import helper
    x = f32(3, 4)
    v, i = _onnx(helper.make_node("TopK", ["x", "k"], ["v", "i"]), [x, np.array([2], np.int64)])
    np.testing.assert_array_equal(v, -np.sort(-x, axis=1)[:, :2])
    y = _onnx(helper.make_node("Pad", ["x", "p"], ["y"]), [x, np.array([0, -1, 1, -1], np.int64)])[0]
    np.testing.assert_array_equal(y, np.concatenate([x[:, 1:3], np.zeros((1, 2), np.float32)], axis=0))


# ----------------------------------------------------------------- memory

_FETCH_UNDER_A_CAP = textwrap.dedent("""
    import resource, numpy as np
    from caffe2py.errors import Caffe2Error
    from caffe2py.workspace import Workspace
    ws = Workspace("cap")
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize")) * 1024
    size = 1 << 30
    ws.blobs["big"] = np.empty(size, np.uint8)      # address space only, never touched
    resource.setrlimit(resource.RLIMIT_AS, (vm + size + (size >> 1),) * 2)
    try:
        ws.fetch_blob("big")
    except Caffe2Error as exc:
        print("OURS", exc)
    except MemoryError as exc:
        print("BARE", exc)
    else:
        print("FETCHED")
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="address-space caps and /proc are Linux's")
def test_fetch_blob_under_an_address_space_cap_is_a_named_error():
    done = subprocess.run([sys.executable, "-c", _FETCH_UNDER_A_CAP], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CAFFE2PY_JIT="numpy"))
    assert done.stdout.startswith("OURS cannot fetch blob 'big' (shape [1073741824], uint8, 1.0 GiB)"), \
        done.stdout + done.stderr


def test_an_op_that_runs_out_of_memory_says_so_without_numpy_wording():
    from caffe2py.errors import out_of_memory_text
    text = out_of_memory_text(MemoryError("Unable to allocate 7.45 GiB for an array with shape (2000000000,) "
                                          "and data type float32"))
    assert text.startswith("ran out of memory: an array of 7.45 GiB (shape (2000000000,), float32)")


# ----------------------------------------------------------------- the workspace after a failure

def test_a_net_failing_on_a_schema_rule_leaves_the_workspace_as_it_was():
    ws = Workspace("rules")
    x = f32(2, 3)
    ws.feed_blob("X", x)
    ws.feed_blob("Y", np.zeros(1, np.float32))
    net = _net(core.CreateOperator("Relu", ["X"], ["Y"]),                    # writes Y
               core.CreateOperator("Copy", ["Y"], ["Z"]),
               core.CreateOperator("Transpose", ["Z"], ["T"], axes=[0, 1, 2]))  # refused at run time
    with pytest.raises(Caffe2Error, match="Transpose #2"):
        ws.run_net_once(net)
    assert ws.blob_names() == ["X", "Y"]
    np.testing.assert_array_equal(ws.fetch_blob("Y"), np.zeros(1, np.float32))
    np.testing.assert_array_equal(ws.fetch_blob("X"), x)
    ws.create_net(net)
    with pytest.raises(Caffe2Error, match="is not a permutation"):
        ws.run_net(net.name)
    assert ws.blob_names() == ["X", "Y"]
