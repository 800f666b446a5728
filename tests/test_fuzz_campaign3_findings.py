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
