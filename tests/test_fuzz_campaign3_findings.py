"""What fuzz campaign 3 (seed 3, docs/reliability.md) and the seed-11 slice after it
found, each fixed at its source: a named error where the input is wrong, the right
result where it is merely unusual (empty tensors). References are NumPy formulas
written here or onnxruntime (skipped cleanly when absent)."""
import numpy as np
import pytest

from caffe2py import core
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.workspace import Workspace

RNG = np.random.default_rng(2213)


def run_op(op_type, inputs, outputs=("Y",), **args):
    ws = Workspace("fuzz_campaign3")
    for name, value in inputs.items():
        ws.feed_blob(name, value)
    net = caffe2_pb2.NetDef(name="fuzz_campaign3")
    net.op.extend([core.CreateOperator(op_type, list(inputs), list(outputs), **args)])
    ws.run_net_once(net)
    return [ws.fetch_blob(o) for o in outputs]


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def onnx_model(op, inputs, opset, **attrs):
    """A one-node model over named NumPy inputs (an empty name: an absent input)."""
    from onnx import helper
    from onnx.helper import np_dtype_to_tensor_dtype
    vi = [helper.make_tensor_value_info(n, np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
          for n, v in inputs if n]
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info("y", 0, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_onnx(model, inputs):
    from caffe2py.onnx import backend
    return backend.prepare(model).run({n: v for n, v in inputs if n})[0]


# ----------------------------------------------------------------- outputs too big for any memory

@pytest.mark.parametrize("op, inputs, opset, attrs", [
    ("Pad", [("x", f32(2))], 8, dict(pads=[1, 1 << 62])),                     # onnx:3:336
    ("Tile", [("x", f32(2)), ("r", np.array([1 << 60], np.int64))], 13, {}),
    ("ConstantOfShape", [("s", np.array([1 << 40, 1 << 20], np.int64))], 13, {}),
])
def test_onnx_outputs_no_memory_holds_are_refused_by_size_before_allocating(op, inputs, opset, attrs):
    with pytest.raises(Caffe2Error, match=r"%s #0 .*holds \d+ elements \(\d+ bytes\), more than any memory" % op):
        run_onnx(onnx_model(op, inputs, opset, **attrs), inputs)


# ----------------------------------------------------------------- ONNX pooling windows, MatMulInteger

def test_onnx_pool_window_larger_than_the_padded_input_is_named():   # onnx:3:18047
    x = RNG.standard_normal((3, 5, 2, 2))
    for op, attrs in (("LpPool", dict(p=2)), ("MaxPool", {}), ("AveragePool", {})):
        with pytest.raises(Caffe2Error, match=r"%s #0 .*kernel_shape \[1, 3\].*larger than the padded input on "
                                              r"axis 3: a window of 3 over 2 values" % op):
            run_onnx(onnx_model(op, [("x", x)], 11, kernel_shape=[1, 3], **attrs), [("x", x)])
    # padding makes room: the window then fits and LpPool is the p-norm of each window
    got = run_onnx(onnx_model("LpPool", [("x", x)], 11, kernel_shape=[1, 3], pads=[0, 1, 0, 0], p=2), [("x", x)])
    xp = np.pad(x, [(0, 0), (0, 0), (0, 0), (1, 0)])
    want = np.sqrt(np.stack([(xp[..., j:j + 3] ** 2).sum(-1) for j in range(1)], -1))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_onnx_matmul_integer_zero_points_must_keep_their_input_shape():   # onnx:3:37896
    a = RNG.integers(-5, 5, (5, 3)).astype(np.int8)
    b = RNG.integers(-5, 5, (3,)).astype(np.int8)
    bad = [("a", a), ("b", b), ("", None), ("bz", np.array([[4]], np.int8))]
    with pytest.raises(Caffe2Error, match=r"MatMulInteger #0 .*blob 'bz': zero point of shape \[1, 1\] .*B's shape \[3\]"):
        run_onnx(onnx_model("MatMulInteger", bad, 14), bad)
    # a per-column zero point of a 2-D B and a per-batch [.., 1, N] one: (A - az) @ (B - bz)
    b2 = RNG.integers(-5, 5, (2, 3, 4)).astype(np.int8)
    for bz in (RNG.integers(-3, 3, (4,)).astype(np.int8), RNG.integers(-3, 3, (2, 1, 4)).astype(np.int8)):
        ins = [("a", a), ("b", b2), ("az", np.array(1, np.int8)), ("bz", bz)]
        got = run_onnx(onnx_model("MatMulInteger", ins, 14), ins)
        want = (a.astype(np.int32) - 1) @ (b2.astype(np.int32) - bz.astype(np.int32))
        assert got.dtype == np.int32 and np.array_equal(got, want)
