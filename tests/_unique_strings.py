"""Shared by the fuzz-finding tests of Unique on strings: our Unique node against onnxruntime's."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from caffe2py.onnx import backend

_OUTPUTS = ("y", "first", "inverse", "counts")


def assert_unique_of_strings_matches_onnxruntime(x, **attributes):
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node("Unique", ["x"], list(_OUTPUTS), **attributes)
    got = backend.run_node(node, [x], opset_version=13)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.STRING, list(x.shape))],
        [helper.make_tensor_value_info(n, TensorProto.STRING if n == "y" else TensorProto.INT64, None)
         for n in _OUTPUTS])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert np.asarray(a).tolist() == np.asarray(b).tolist()
