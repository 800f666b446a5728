"""What fuzz campaign 13 (seed 15, docs/reliability.md) found, fixed at its source."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


def _run(op_type, inputs, n_outputs):
    workspace.ResetWorkspace()
    names = ["in%d" % i for i in range(len(inputs))]
    for name, value in zip(names, inputs):
        workspace.FeedBlob(name, value)
    outputs = ["out%d" % i for i in range(n_outputs)]
    net = core.Net(op_type)
    getattr(net, op_type)(names, outputs)
    workspace.RunNetOnce(net)
    return [workspace.FetchBlob(name) for name in outputs]


SCALARS = np.array([0.5, 2.0, -1.0], np.float32)
LENGTHS = np.array([2, 1], np.int32)
GRAD = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
DATA = np.arange(6, dtype=np.float32).reshape(3, 2)


BAD_SHARED = [   # wrong for both gradients: (SCALARS, SEGMENT_GRADS, LENGTHS), message
    ((SCALARS, np.array(9, np.float32), LENGTHS), "SEGMENT_GRADS must be at least 1-D"),
    ((SCALARS, GRAD[:1], LENGTHS), "SEGMENT_GRADS has 1 rows; LENGTHS has 2 segments"),
    ((SCALARS.reshape(1, 1, 3), GRAD, LENGTHS), "SCALARS must be 1-D"),
    ((SCALARS.astype(np.float16), GRAD, LENGTHS), "Unsupported input type"),
]


@pytest.mark.parametrize("bad, message", BAD_SHARED + [
    ((SCALARS, GRAD, LENGTHS, DATA[:, :1]), "DATA_INPUT of shape \\[3, 1\\] must have 3 rows"),
])
def test_lengths_weighted_sum_with_main_input_gradient_names_bad_inputs(bad, message):
    # op:15:10119: a 0-d int32 SEGMENT_GRADS (and 3-D float16 SCALARS) reached a tuple index
    inputs = list(bad) + ([DATA] if len(bad) == 3 else [])
    with pytest.raises(Caffe2Error, match=message):
        _run("LengthsWeightedSumWithMainInputGradient", inputs, 2)
    assert not workspace.HasBlob("out0")


@pytest.mark.parametrize("bad, message", BAD_SHARED)
def test_lengths_weighted_sum_gradient_names_bad_inputs(bad, message):
    with pytest.raises(Caffe2Error, match=message):
        _run("LengthsWeightedSumGradient", list(bad), 1)
    assert not workspace.HasBlob("out0")


def test_lengths_weighted_sum_gradient_matches_the_formula():
    segment_of_row = np.repeat(np.arange(LENGTHS.size), LENGTHS)
    want_d = SCALARS[:, None] * GRAD[segment_of_row]
    want_dw = (GRAD[segment_of_row] * DATA).sum(axis=1)
    d, dw = _run("LengthsWeightedSumWithMainInputGradient", [SCALARS, GRAD, LENGTHS, DATA], 2)
    np.testing.assert_allclose(d, want_d)
    np.testing.assert_allclose(dw, want_dw)
    (d_only,) = _run("LengthsWeightedSumGradient", [SCALARS, GRAD, LENGTHS], 1)
    np.testing.assert_allclose(d_only, want_d)


def _gradient_of_mul_model(xs, outputs):
    from onnx import TensorProto, helper
    scalar = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [])  # noqa: E731
    nodes = [helper.make_node("Mul", ["a", "b"], ["c"]),
             helper.make_node("Gradient", ["a", "b"], outputs, xs=xs, y="c", domain="ai.onnx.preview.training")]
    graph = helper.make_graph(nodes, "g", [scalar("a"), scalar("b")], [scalar(n) for n in ["c"] + outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                   helper.make_opsetid("ai.onnx.preview.training", 1)])


def test_onnx_gradient_with_fewer_xs_than_outputs_is_a_named_error():
    # mutate:15:62684: xs lost a name; one gradient came back for two outputs and the plan's unpacking failed
    from caffe2py.onnx import backend
    a, b = np.array(3.0, np.float32), np.array(5.0, np.float32)
    with pytest.raises(Caffe2Error, match="xs names 1 tensors \\(b\\) but the node has 2 outputs"):
        backend.prepare(_gradient_of_mul_model(["b"], ["da", "db"])).run([a, b])
    c, da, db = backend.prepare(_gradient_of_mul_model(["a", "b"], ["da", "db"])).run([a, b])
    assert (float(c), float(da), float(db)) == (15.0, 5.0, 3.0)      # d(ab)/da = b, d(ab)/db = a


def _split(node, inputs, opset):
    from caffe2py.onnx import backend
    return [part.tolist() for part in backend.run_node(node, inputs, opset_version=opset)]


def test_split_num_outputs_must_match_the_outputs_as_in_onnxruntime():
    # found beside mutate:15:62684 (an output count an attribute must agree with): Split-18 ignored num_outputs
    from onnx import helper
    x = np.arange(7, dtype=np.float32)
    with pytest.raises(Caffe2Error, match="num_outputs is 3 but the node has 2 outputs"):
        _split(helper.make_node("Split", ["x"], ["a", "b"], num_outputs=3), [x], 18)
    # uneven: ceil(7 / 3) = 3 per part, the last smaller (the ONNX spec)
    assert _split(helper.make_node("Split", ["x"], ["a", "b", "c"], num_outputs=3), [x], 18) == \
        [[0, 1, 2], [3, 4, 5], [6]]


def test_split_sizes_must_be_non_negative():
    # [9, -2] adds up to 7 and split a 7-vector into 7 and 0 values
    from onnx import helper
    x = np.arange(7, dtype=np.float32)
    with pytest.raises(Caffe2Error, match="split sizes \\[9, -2\\] must be non-negative"):
        _split(helper.make_node("Split", ["x", "s"], ["a", "b"]), [x, np.array([9, -2], np.int64)], 13)
    with pytest.raises(Caffe2Error, match="split sizes \\[9, -2\\] must be non-negative"):
        _split(helper.make_node("Split", ["x"], ["a", "b"], split=[9, -2]), [x], 11)
    assert _split(helper.make_node("Split", ["x"], ["a", "b"], split=[2, 5]), [x], 11) == [[0, 1], [2, 3, 4, 5, 6]]


def test_onnx_gradient_xs_naming_a_tensor_outside_the_forward_subgraph_is_a_named_error():
    # mutate:19:10116 (campaign 17, beside campaign 13's Gradient finding): xs 'b' flipped to 'r'
    from caffe2py.onnx import backend
    a, b = np.array(3.0, np.float32), np.array(5.0, np.float32)
    with pytest.raises(Caffe2Error, match="xs names 'r', which the forward subgraph to y 'c' neither takes nor "
                                          "computes \\(it has: a, b, c\\)"):
        backend.prepare(_gradient_of_mul_model(["a", "r"], ["da", "dr"])).run([a, b])
