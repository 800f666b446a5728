"""What the fuzz campaign (docs/reliability.md) found, each fixed at its source: a named
error where the input is wrong, the right result where it is merely unusual (empty
tensors, zero-width rows). References are NumPy formulas written here or onnxruntime."""
import numpy as np
import pytest

from caffe2py import core
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.workspace import Workspace

RNG = np.random.default_rng(2211)


def run_op(op_type, inputs, outputs=("Y",), **args):
    ws = Workspace("fuzz_findings")
    for name, value in inputs.items():
        ws.feed_blob(name, value)
    net = caffe2_pb2.NetDef(name="fuzz_findings")
    net.op.extend([core.CreateOperator(op_type, list(inputs), list(outputs), **args)])
    ws.run_net_once(net)
    return [ws.fetch_blob(o) for o in outputs]


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------- Caffe2 ops: named errors

@pytest.mark.parametrize("op_type, inputs, outputs, args, expected", [
    ("CreateDB", {}, ("db",), dict(db="a\x00b", db_type="minidb"), "NUL byte"),
    ("DBExists", {}, ("e",), dict(db_name="x\x00", absolute_path=1), "NUL byte"),
    ("LC2DGradient", {"X": f32(1, 1, 3, 3), "W": f32(2, 2, 1, 1, 2, 2)}, ("dW", "dB"), {}, "3 inputs"),
    ("Cast", {"X": f32(2)}, ("Y",), dict(to=[2]), "one TensorProto.DataType"),
    ("RangeFill", {}, ("Y",), dict(shape=[1 << 62, 1, 1000, 100]), "more than any memory holds"),
    ("BooleanUnmask", {"m": np.array(True), "v": np.array([1.0], np.float32)}, ("Y",), {}, "must be 1-D"),
    ("LRN", {"X": np.ones((1, 3, 2, 2), np.int32)}, ("Y",), dict(size=3), "float"),
    ("ReduceFrontWeightedSumGradient", {"s": f32(2), "g": f32(3), "shape": np.array([2, 3], np.float32)},
     ("dX",), {}, "int"),
    ("SparseToDenseMaskGradient", {"i": np.array([1, 2], np.int64), "g": f32(1, 2),
                                   "l": np.array(2, np.int32)}, ("dV",), dict(mask=[1, 2]), "lengths"),
    ("Tile", {"X": f32(2, 3), "t": np.array([2.0], np.float32)}, ("Y",), {}, "int"),
    ("Conv", {"X": f32(1, 1, 5, 5), "W": f32(1, 1, 3, 3)}, ("Y",), dict(kernels=[3, 3], strides=[1, 1, 1]),
     "strides .* has 3 values; a 2-D window needs 2"),
])
def test_schema_and_kernel_checks_name_the_problem(op_type, inputs, outputs, args, expected):
    with pytest.raises(Caffe2Error, match=expected):
        run_op(op_type, inputs, outputs, **args)


def test_minidb_commit_onto_a_directory_is_a_named_error_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "adir"
    target.mkdir()
    ws = Workspace("fuzz_findings")
    ws.feed_blob("x", f32(2))
    net = caffe2_pb2.NetDef(name="save")
    net.op.extend([core.CreateOperator("Save", ["x"], [], db=str(target), db_type="minidb", absolute_path=1)])
    with pytest.raises(Caffe2Error, match="adir"):
        ws.run_net_once(net)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


# ----------------------------------------------------------------- Caffe2 ops: unusual but valid

def test_channel_shuffle_of_half_floats_and_of_an_empty_batch():
    for x in (f32(2, 6, 3, 2).astype(np.float16), np.zeros((0, 6, 2, 2), np.float32)):
        got = run_op("ChannelShuffle", {"X": x}, group=2)[0]
        n, c = x.shape[:2]
        want = x.reshape(n, 2, c // 2, -1 if n else 4).transpose(0, 2, 1, 3).reshape(x.shape)
        assert got.dtype == x.dtype and np.array_equal(got, want)


def test_squared_l2_distance_and_its_gradient_on_an_empty_batch():
    x, y = np.zeros((0, 1, 4), np.float32), np.zeros((0, 1, 4), np.float32)
    assert run_op("SquaredL2Distance", {"A": x, "B": y}, ("Z",))[0].shape == (0,)
    dx, dy = run_op("SquaredL2DistanceGradient", {"A": x, "B": y, "dZ": np.zeros(0, np.float32)},
                    ("dX", "dY"))
    assert dx.shape == dy.shape == (0, 1, 4)


def test_sigmoid_cross_entropy_with_an_empty_last_dim():
    logits = np.zeros((3, 0), np.float32)
    loss = run_op("SigmoidCrossEntropyWithLogits", {"L": logits, "T": logits})[0]
    assert loss.shape == (3,) and np.isnan(loss).all()          # the mean of nothing, as Caffe2 computes it
    grad = run_op("SigmoidCrossEntropyWithLogitsGradient", {"g": np.ones(3, np.float32), "L": logits,
                                                            "T": logits})[0]
    assert grad.shape == (3, 0)
    with pytest.raises(Caffe2Error, match="1 rows"):          # 1-D logits are one row
        run_op("SigmoidCrossEntropyWithLogitsGradient", {"g": np.zeros(0, np.float32),
                                                         "L": np.zeros(0, np.float32), "T": np.zeros(0, np.float32)})


def test_rowwise_quantisation_of_zero_width_rows():
    x = np.zeros((4, 1, 0), np.float32)
    q8 = run_op("FloatToFused8BitRowwiseQuantized", {"X": x})[0]
    q4 = run_op("FloatToFused4BitRowwiseQuantized", {"X": x})[0]
    assert q8.shape == (4, 1, 8) and q4.shape == (4, 1, 4)


# ----------------------------------------------------------------- ONNX

def _model(nodes, inputs, outputs, opset):
    from onnx import TensorProto, helper
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs]
    vo = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    graph = helper.make_graph(nodes, "g", vi, vo)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _prepare(model):
    from caffe2py.onnx import backend
    return backend.prepare(model)


@pytest.mark.parametrize("node_args, inputs, opset, expected", [
    (("Cosh", ["a", "b", "c"], ["y"]), [("a", (2,)), ("b", (2,)), ("c", (2,))], 9, "takes exactly 1 input, got 3"),
    (("Expand", ["", "s"], ["y"]), [("s", (2,))], 9, "input 0 .'input'. of onnx's Expand-9 is required"),
    (("Pow", ["", "b"], ["y"]), [("b", (2,))], 7, "input 0 .'X'. of onnx's Pow-7 is required"),
    (("ReduceSum", ["a"], ["y"], dict(keepdims=3)), [("a", (2, 3))], 11, "'keepdims' must be one of 0, 1"),
    (("Einsum", ["a"], ["y"]), [("a", (2, 3))], 12, "required argument 'equation'"),
    # an opset older than the op: onnx's types of the op still apply
    (("BitwiseAnd", ["a", "b"], ["y"]), [("a", (2,)), ("b", (2,))], 9, "does not allow for its type parameter"),
])
def test_onnx_nodes_the_spec_rejects_are_refused_when_the_model_is_prepared(node_args, inputs, opset, expected):
    from onnx import helper
    op, ins, outs = node_args[:3]
    attrs = node_args[3] if len(node_args) > 3 else {}
    model = _model([helper.make_node(op, ins, outs, **attrs)], inputs, outs, opset)
    with pytest.raises(Caffe2Error, match=expected):
        _prepare(model).run([f32(*s) for _, s in inputs])


def test_onnx_type_checks_remember_only_what_passed():
    """The type-constraint check remembers the input dtypes it let through: the same
    op refuses a mix onnx forbids on any later run, and takes the good mix again."""
    from onnx import TensorProto, helper
    node = helper.make_node("BitwiseAnd", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, [2]) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    rep = _prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))    # inputs of any type
    ints = np.array([6, 3], np.int32)
    for _ in range(2):
        np.testing.assert_array_equal(rep.run([ints, np.array([3, 1], np.int32)])[0], [2, 1])
        with pytest.raises(Caffe2Error, match="so they must match"):
            rep.run([ints, np.array([3, 1], np.int64)])
        with pytest.raises(Caffe2Error, match="does not allow for its type parameter"):
            rep.run([f32(2), f32(2)])


def test_onnx_gather_nd_with_empty_index_tuples_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    node = helper.make_node("GatherND", ["d", "i"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 3]),
                                            helper.make_tensor_value_info("i", TensorProto.INT64, [4, 0])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    d, i = f32(2, 3), np.zeros((4, 0), np.int64)
    got = _prepare(model).run([d, i])[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"d": d, "i": i})[0]
    assert got.shape == want.shape == (4, 2, 3) and np.array_equal(got, want)


def test_onnx_deform_conv_and_training_batch_norm_check_their_input_shapes():
    from caffe2py.onnx import backend
    from onnx import helper
    node = helper.make_node("DeformConv", ["x", "w", "off"], ["y"])
    with pytest.raises(Caffe2Error, match="offset must be \\[1, 8, 2, 2\\]"):
        backend.run_node(node, [f32(1, 1, 3, 3), f32(1, 1, 2, 2), f32(1, 8, 1, 1)], opset_version=19)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)
    x = np.zeros((0, 1, 3, 5, 1), np.float16)          # the campaign's case
    with pytest.raises(Caffe2Error, match="must be \\[C\\] = \\[1\\]|expected to have rank 1"):
        backend.run_node(node, [x, f32(5), np.zeros((2, 4, 0, 1, 5), np.float32), f32(4, 3, 2, 4),
                                np.zeros((5, 0, 4, 3), np.float32)], opset_version=16)


def test_onnx_opset1_tile_needs_one_value_for_tiles_and_axis():
    from caffe2py.onnx import backend
    from onnx import helper
    node = helper.make_node("Tile", ["x", "t", "a"], ["y"])
    with pytest.raises(Caffe2Error, match="one value for tiles"):
        backend.run_node(node, [f32(2, 3), np.zeros(0, np.float32), np.array([0], np.float32)], opset_version=1)
    got = backend.run_node(node, [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([2], np.float32),
                                  np.array([1], np.float32)], opset_version=1)[0]
    assert np.array_equal(got, np.tile(np.arange(6, dtype=np.float32).reshape(2, 3), (1, 2)))


def test_fuzz_reference_comparison_ignores_nan_when_scaling_its_tolerance():
    from caffe2py.tools.fuzz.gen_onnx import compare
    ref = np.array([np.nan, -0.15916452, 2.0], np.float32)
    assert compare([np.array([np.nan, -0.1591645, 2.0], np.float32)], [ref]) is None
    assert compare([np.array([np.nan, -0.2, 2.0], np.float32)], [ref]) is not None


def test_onnx_gather_nd_negative_batch_dims_is_refused_before_onnx_inference_crashes():
    # onnx's own GatherND shape inference segfaulted on batch_dims=-2 (the campaign's one crash)
    from caffe2py.onnx import backend
    from onnx import helper
    node = helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=-2)
    with pytest.raises(Caffe2Error, match="'batch_dims' must be >= 0"):
        backend.run_node(node, [f32(4, 5, 5, 5), np.array([[1], [3], [2]], np.int64)], opset_version=13)


def _ort_and_ours(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return _prepare(model).run([feeds[i.name] for i in model.graph.input]), want


def test_onnx_gather_elements_with_indices_shorter_than_data_matches_onnxruntime():
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("GatherElements", ["d", "i"], ["y"], axis=1)], "g",
                              [helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 4]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    got, want = _ort_and_ours(model, {"d": f32(3, 4), "i": np.array([[3, 0], [1, 2]], np.int64)})
    assert got[0].shape == (2, 2) and np.array_equal(got[0], want[0])


def test_onnx_concat_of_empty_tensors_and_split_to_sequence_of_an_empty_axis():
    from caffe2py.onnx import backend
    from onnx import helper
    x = np.zeros((0, 2, 3), np.float32)
    got = backend.run_node(helper.make_node("Concat", ["a", "b"], ["y"], axis=1), [x, x], opset_version=13)[0]
    assert got.shape == (0, 4, 3)
    node = helper.make_node("SplitToSequence", ["a"], ["s"], axis=0)
    assert list(backend.run_node(node, [x], opset_version=13)[0]) == []


def test_onnx_batch_norm_inference_checks_its_parameter_shapes():
    from caffe2py.onnx import backend
    from onnx import helper
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    with pytest.raises(Caffe2Error, match="must be \\[C\\] = \\[3\\]|Dimension mismatch"):
        backend.run_node(node, [f32(1, 3, 5, 5), f32(4), f32(4), f32(4), np.ones(4, np.float32)], opset_version=15)


@pytest.mark.parametrize("op_type, inputs, args, expected", [
    ("SubGradient", {"g": np.zeros(0, bool), "a": np.zeros(0, bool), "b": np.zeros(0, bool)}, {}, "got bool"),
    ("GivenTensorIntFill", {}, dict(shape=[1], values=[-(1 << 63)]), "does not fit int32"),
])
def test_more_schema_checks(op_type, inputs, args, expected):
    outputs = ("dA", "dB") if op_type.endswith("Gradient") else ("Y",)
    with pytest.raises(Caffe2Error, match=expected):
        run_op(op_type, inputs, outputs, **args)


def test_fuzz_oracle_counts_blobs_written_by_if_subnets_as_outputs():
    from caffe2py.tools.fuzz.gen_ops import _all_outputs
    sub = caffe2_pb2.NetDef(name="then")
    sub.op.extend([core.CreateOperator("ConstantFill", [], ["sub_out"], shape=[1])])
    op = core.CreateOperator("If", ["c"], ["o"])
    op.arg.add(name="then_net").n.CopyFrom(sub)
    net = caffe2_pb2.NetDef(name="n")
    net.op.extend([op])
    assert _all_outputs(net) == {"o", "sub_out"}


def test_transpose_of_a_0d_tensor_stays_0d():
    x = np.array(3.5, np.float32)
    y = run_op("Transpose", {"X": x})[0]
    assert y.shape == () and y == x


@pytest.mark.parametrize("op_type, inputs, args, expected", [
    ("Conv", {"X": f32(4, 0, 2, 2), "W": f32(4, 0, 2, 2)}, {}, "has no input channels"),
    ("Conv", {"X": f32(5, 2, 3, 4), "W": f32(5, 2, 3, 4), "B": f32(5, 2, 3, 4)}, {}, "bias must be \\[M\\] = \\[5\\]"),
    ("BatchMatMul", {"A": f32(4, 3, 4), "B": np.array(0.5)}, dict(broadcast=1), "at least 1 dims"),
    ("FlexibleTopKGradient", {"X": np.array(1.0, np.float32), "K": np.array([1], np.int64),
                              "G": f32(1), "I": np.array([0], np.int64)}, {}, "at least one dimension"),
    ("MakeTwoClassGradient", {"dY": np.array([False, True])}, {}, "got bool"),
    ("UniformFill", {}, dict(shape=[2], min=float("-inf")), "finite"),
])
def test_campaign2_findings(op_type, inputs, args, expected):
    with pytest.raises(Caffe2Error, match=expected):
        run_op(op_type, inputs, ("Y",), **args)


def test_cpu_utilization_report_refuses_infinite_utilization():
    ws = Workspace("fuzz_findings")
    ws.feed_blob("u", np.array([np.inf], np.float32))
    net = caffe2_pb2.NetDef(name="cpu")
    net.op.extend([core.CreateOperator("CpuUtilizationReport", ["u"], [])])
    with pytest.raises(Caffe2Error, match="must be finite"):
        ws.run_net_once(net)


def test_onnx_gemm_refuses_trans_flags_other_than_0_1_and_c_that_y_would_broadcast_to():
    from caffe2py.onnx import backend
    from onnx import helper
    a = np.ones((1, 5), np.float32)
    with pytest.raises(Caffe2Error, match="'transB' must be one of 0, 1"):
        backend.run_node(helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=2), [a, a, a], opset_version=13)
    with pytest.raises(Caffe2Error, match="does not broadcast to \\[1, 1\\]"):
        backend.run_node(helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1), [a, a, a], opset_version=13)


def test_onnx_conv_transpose_slice_and_concat_from_sequence_missing_or_absurd_attributes():
    from caffe2py.onnx import backend
    from onnx import helper
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 3],
                            pads=[2, 4, 3, 1 << 62])
    with pytest.raises(Caffe2Error, match="do not give a 2-D output of sizes >= 0"):
        backend.run_node(node, [f32(1, 3, 6, 7), f32(3, 4, 3, 3)], opset_version=11)
    with pytest.raises(Caffe2Error, match="needs the attributes 'starts' and 'ends'"):
        backend.run_node(helper.make_node("Slice", ["x"], ["y"]), [f32(2, 3)], opset_version=9)
    model = _model([helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
                    helper.make_node("ConcatFromSequence", ["s"], ["y"])], [("a", (2,)), ("b", (2,))], ["y"], 13)
    with pytest.raises(Caffe2Error, match="required argument 'axis'"):
        _prepare(model).run([f32(2), f32(2)])


@pytest.mark.parametrize("op_type, inputs, args, expected", [
    ("LpNorm", {"X": np.ones((2, 4), np.int8)}, dict(p=2), "got int8"),
    ("Cast", {"X": f32(2)}, dict(to=float("-inf")), "one TensorProto.DataType"),
    ("LengthsMaxWithMainInputAndForwardOutputGradient", {"o": np.array(1.0, np.float32), "g": f32(1),
                                                         "l": np.array([1], np.int32), "d": f32(1)}, {},
     "at least 1 dims"),
])
def test_campaign1_leftovers(op_type, inputs, args, expected):
    with pytest.raises(Caffe2Error, match=expected):
        run_op(op_type, inputs, ("Y",), **args)


def test_sub_of_bools_and_weighted_sigmoid_xent_of_an_empty_last_dim():
    b = np.zeros((2, 2), bool)
    with pytest.raises(Caffe2Error, match="got bool"):
        run_op("Sub", {"A": b, "B": b})
    logits = np.zeros((3, 0), np.float32)
    grad = run_op("WeightedSigmoidCrossEntropyWithLogitsGradient",
                  {"g": np.ones(3, np.float32), "L": logits, "T": logits, "W": logits})[0]
    assert grad.shape == (3, 0)


def test_split_sizes_input_must_be_integers_and_onnx_required_attributes():
    from caffe2py.onnx import backend
    from onnx import helper, numpy_helper
    with pytest.raises(Caffe2Error, match="input 1 must be a tensor of int"):
        run_op("DepthSplit", {"X": f32(4, 5, 2), "S": np.array([2.0, np.inf], np.float32)}, ("A", "B"), axis=1)
    with pytest.raises(Caffe2Error, match="required argument 'blocksize'"):
        backend.run_node(helper.make_node("DepthToSpace", ["x"], ["y"]), [f32(1, 4, 2, 2)], opset_version=13)
    empty = numpy_helper.from_array(np.zeros(0, np.float32), "v")
    with pytest.raises(Caffe2Error, match="one-element tensor"):
        backend.run_node(helper.make_node("ConstantOfShape", ["s"], ["y"], value=empty),
                         [np.array([2, 3], np.int64)], opset_version=13)


def test_recurrent_network_gradient_with_too_few_inputs_is_named():
    step = caffe2_pb2.NetDef(name="step")
    op = core.CreateOperator("RecurrentNetworkGradient", ["g"], ["dX"])
    op.arg.add(name="backward_step_net").n.CopyFrom(step)
    ws = Workspace("fuzz_findings")
    ws.feed_blob("g", f32(5, 3))
    net = caffe2_pb2.NetDef(name="rnng")
    net.op.extend([op])
    with pytest.raises(Caffe2Error, match="got 1 inputs"):
        ws.run_net_once(net)


def test_onnx_rules_inlined_in_the_plan_still_refuse_what_they_refused():
    """The plan inlines onnx's type and shape rules as comparisons with what passed
    last (schema_rules.fast_path): inputs that differ from it run the rules in full,
    so a run after good ones is refused exactly as a first run is."""
    from onnx import TensorProto, helper
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    inputs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in "ab"]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    rep = _prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    source = rep.plan.source
    assert "if not (" in source and "[0])" in source           # both rules inlined
    good = (f32(2, 3), f32(3, 4))
    for _ in range(2):
        np.testing.assert_allclose(rep.run(list(good))[0], good[0] @ good[1], rtol=1e-6)
        with pytest.raises(Caffe2Error, match="specification of MatMul"):
            rep.run([f32(2, 3), f32(4, 5)])
        with pytest.raises(Caffe2Error, match="does not allow for its type parameter"):
            rep.run([good[0].astype(np.int8), good[1].astype(np.int8)])
        with pytest.raises(Caffe2Error, match="so they must match"):
            rep.run([good[0], good[1].astype(np.float64)])
