"""caffe2py.onnx.convert and caffe2py.onnx.backend: NetDef layout, load-time
constant folding, error reporting, BackendRep input forms, and ONNX op
semantics checked against NumPy formulas and onnxruntime."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import caffe2py.onnx.backend as backend
from caffe2py.errors import Caffe2Error
from caffe2py.onnx import UnsupportedModelError, convert
from caffe2py.onnx.loader import ModelLoadError
from caffe2py.workspace import Workspace

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, opset=13, initializers=(), ir_version=8):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def vi(name, shape=None, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def single(op, n_inputs, opset=13, n_outputs=1, **attrs):
    names = ["x%d" % i for i in range(n_inputs)]
    outs = ["y%d" % i for i in range(n_outputs)]
    return make_model([helper.make_node(op, names, outs, **attrs)], [vi(n) for n in names],
                      [vi(o) for o in outs], opset=opset)


def run_ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------- NetDef layout

def _conv_relu_gemm_model():
    w = numpy_helper.from_array(randn(4, 3, 3, 3), "w")
    b = numpy_helper.from_array(randn(4), "b")
    fc = numpy_helper.from_array(randn(10, 4 * 5 * 5), "fc")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1, alpha=0.5)]
    return make_model(nodes, [vi("x", [1, 3, 5, 5])], [vi("y", [1, 10])], opset=11,
                      initializers=[w, b, fc])


def test_nodes_become_onnx_domain_ops_with_the_model_opset():
    init_net, predict_net = convert(_conv_relu_gemm_model())
    assert [op.type for op in predict_net.op] == ["Conv", "Relu", "Flatten", "Gemm"]
    assert all(op.domain == "ai.onnx" and op.op_version == 11 for op in predict_net.op)
    gemm = predict_net.op[3]
    args = {a.name: a for a in gemm.arg}
    assert args["transB"].i == 1 and args["alpha"].f == pytest.approx(0.5)
    assert list(predict_net.op[0].arg[0].ints) == [1, 1, 1, 1]
    assert [op.type for op in init_net.op] == ["Constant"] * 3
    assert list(predict_net.external_input)[0] == "x"
    assert list(predict_net.external_output) == ["y"]


def test_converted_nets_run_in_a_workspace_like_numpy():
    model = _conv_relu_gemm_model()
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = randn(1, 3, 5, 5)
    init_net, predict_net = convert(model)
    ws = Workspace("onnx_test")
    ws.run_net_once(init_net)
    ws.feed_blob("x", x)
    ws.run_net_once(predict_net)
    # independent reference: direct convolution by loops over the padded input
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    conv = np.zeros((1, 4, 5, 5), np.float32)
    for i in range(5):
        for j in range(5):
            conv[0, :, i, j] = np.tensordot(inits["w"], xp[0, :, i:i + 3, j:j + 3], axes=3)
    ref = 0.5 * np.maximum(conv + inits["b"][None, :, None, None], 0).reshape(1, -1) @ inits["fc"].T
    np.testing.assert_allclose(ws.fetch_blob("y"), ref, rtol=1e-4, atol=1e-5)


def test_model_from_path_and_bytes(tmp_path):
    model = _conv_relu_gemm_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    a = convert(str(path))[1]
    b = convert(model.SerializeToString())[1]
    assert a.SerializeToString() == b.SerializeToString()


def test_graph_attributes_become_nested_netdefs():
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    model = make_model([node], [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y")])
    from caffe2py.onnx.convert import graph_to_net, model_opsets
    op = None
    from caffe2py.onnx.convert import node_to_op
    op = node_to_op(model.graph.node[0], model_opsets(model))
    nets = {a.name: a.n for a in op.arg}
    assert [o.type for o in nets["then_branch"].op] == ["Relu"]
    assert [o.type for o in nets["else_branch"].op] == ["Neg"]
    assert graph_to_net(then_g, {"": 13}).external_output[0] == "t"


# ----------------------------------------------------------------- constant folding

def _constant_of_shape_model():
    shape = numpy_helper.from_array(np.array([3, 4], np.int64), "w_shape")
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["w"],
                              value=numpy_helper.from_array(np.array([0.25], np.float32))),
             helper.make_node("Mul", ["w", "w"], ["w2"]),
             helper.make_node("MatMul", ["x", "w2"], ["y"])]
    return make_model(nodes, [vi("x", [2, 3])], [vi("y", [2, 4])], initializers=[shape])


def test_constant_subgraphs_move_to_the_init_net():
    init_net, predict_net = convert(_constant_of_shape_model())
    assert [op.type for op in init_net.op] == ["Constant", "ConstantOfShape", "Mul"]
    assert [op.type for op in predict_net.op] == ["MatMul"]
    assert "w2" in predict_net.external_input


def test_folding_can_be_turned_off():
    init_net, predict_net = convert(_constant_of_shape_model(), fold_constants=False)
    assert [op.type for op in predict_net.op] == ["ConstantOfShape", "Mul", "MatMul"]


def test_prepare_computes_constants_once_and_runs_only_the_plan():
    rep = backend.prepare(_constant_of_shape_model())
    np.testing.assert_allclose(rep.constants["w2"], np.full((3, 4), 0.0625, np.float32))
    assert [s.op_def.type for s in rep.plan.steps] == ["MatMul"]
    x = randn(2, 3)
    np.testing.assert_allclose(rep.run([x])[0], x @ np.full((3, 4), 0.0625), rtol=1e-6)
    np.testing.assert_allclose(rep.run([x])[0], x @ np.full((3, 4), 0.0625), rtol=1e-6)


def test_random_ops_are_not_folded():
    shape = numpy_helper.from_array(np.array([2], np.int64), "s")
    nodes = [helper.make_node("RandomNormal", [], ["r"], shape=[2]),
             helper.make_node("ConstantOfShape", ["s"], ["y"])]
    model = make_model(nodes, [], [vi("r"), vi("y")], initializers=[shape])
    init_net, predict_net = convert(model)
    assert "RandomNormal" not in [op.type for op in init_net.op]
    rep = backend.prepare(model)
    first, second = rep.run([])[0], rep.run([])[0]
    assert first.shape == (2,) and first.dtype == np.float32 and not np.array_equal(first, second)


# ----------------------------------------------------------------- errors

def test_every_unsupported_op_is_listed_in_one_error():
    nodes = [helper.make_node("FooOp", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("BarOp", ["b"], ["c"]), helper.make_node("FooOp", ["c"], ["y"]),
             helper.make_node("Shrink", ["y"], ["z"])]
    model = make_model(nodes, [vi("x")], [vi("z")], opset=8)   # Shrink exists from opset 9
    with pytest.raises(UnsupportedModelError) as info:
        convert(model)
    assert info.value.unsupported == [("ai.onnx", "BarOp", 8), ("ai.onnx", "FooOp", 8),
                                      ("ai.onnx", "Shrink", 8)]
    assert "3 op(s)" in str(info.value) and "BarOp-8" in str(info.value) and "Shrink-8" in str(info.value)


def test_unknown_op_in_a_custom_domain_names_the_domain():
    node = helper.make_node("Magic", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [vi("x")], [vi("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedModelError, match=r"Magic-1 \(domain com.example\)"):
        convert(model)


def test_corrupted_and_truncated_files_get_clear_errors(tmp_path):
    data = _conv_relu_gemm_model().SerializeToString()
    (tmp_path / "trunc.onnx").write_bytes(data[: len(data) // 2])
    (tmp_path / "garbage.onnx").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "empty.onnx").write_bytes(b"")
    for name in ("trunc.onnx", "garbage.onnx", "empty.onnx"):
        with pytest.raises(ModelLoadError, match="not a valid ONNX model.*(corrupted or truncated|decoded)"):
            convert(str(tmp_path / name))
    with pytest.raises(ModelLoadError, match="cannot read ONNX model"):
        convert(str(tmp_path / "missing.onnx"))
    with pytest.raises(ModelLoadError, match="expected an onnx.ModelProto"):
        convert(42)


def test_too_new_ir_version_is_refused():
    model = single("Relu", 1)
    model.ir_version = 99
    with pytest.raises(ModelLoadError, match="IR version 99"):
        convert(model)


def test_kernel_errors_name_the_op_and_blob():
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"])],
                       [vi("x", [3]), vi("i", [1], TensorProto.INT64)], [vi("y")])
    rep = backend.prepare(model)
    with pytest.raises(Caffe2Error, match="Gather.*'i'.*out of range"):
        rep.run([np.arange(3, dtype=np.float32), np.array([5])])


# ----------------------------------------------------------------- BackendRep / Backend API

def test_run_accepts_list_dict_and_single_array():
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"])], [vi("a"), vi("b")], [vi("y")])
    rep = backend.prepare(model)
    a, b = randn(3), randn(3)
    np.testing.assert_array_equal(rep.run([a, b])[0], a + b)
    np.testing.assert_array_equal(rep.run({"b": b, "a": a})[0], a + b)
    rep1 = backend.prepare(single("Relu", 1))
    np.testing.assert_array_equal(rep1.run(a)[0], np.maximum(a, 0))
    with pytest.raises(Caffe2Error, match="missing model input"):
        rep.run([a])
    with pytest.raises(Caffe2Error, match="takes 2 inputs"):
        rep.run([a, b, a])


def test_run_model_run_node_and_devices():
    x = randn(2, 3)
    np.testing.assert_array_equal(backend.run_model(single("Neg", 1), [x])[0], -x)
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)
    np.testing.assert_allclose(backend.run_node(node, [x])[0], np.where(x < 0, 0.1 * x, x), rtol=1e-6)
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    with pytest.raises(Caffe2Error, match="CPU only"):
        backend.prepare(single("Relu", 1), device="CUDA")


# ----------------------------------------------------------------- op semantics

def _np_softmax(x2):
    e = np.exp(x2 - x2.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("kind", ["Softmax", "LogSoftmax"])
def test_softmax_coerces_to_2d_before_opset_13(opset, kind):
    x = randn(2, 3, 4)
    got = backend.prepare(single(kind, 1, opset=opset, axis=1)).run([x])[0]
    if opset < 13:   # one softmax over the flattened 3*4 trailing block
        ref = _np_softmax(x.reshape(2, 12)).reshape(2, 3, 4)
    else:            # softmax along axis 1 only
        ref = np.moveaxis(_np_softmax(np.moveaxis(x, 1, -1)), -1, 1)
    if kind == "LogSoftmax":
        ref = np.log(ref)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta", [(0, 0, 1.0, 1.0), (1, 0, 0.5, 2.0), (0, 1, 2.0, 0.0),
                                                        (1, 1, 1.5, -1.0)])
def test_gemm_attributes(trans_a, trans_b, alpha, beta):
    a = randn(3, 4) if not trans_a else randn(4, 3)
    b = randn(4, 5) if not trans_b else randn(5, 4)
    c = randn(5)
    got = backend.prepare(single("Gemm", 3, transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
                          ).run([a, b, c])[0]
    ref = alpha * (a.T if trans_a else a) @ (b.T if trans_b else b) + beta * c
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


ORT_CASES = [
    ("Conv", [(1, 2, 9), (4, 2, 3)], dict(strides=[2], dilations=[2], pads=[1, 2])),
    ("Conv", [(1, 4, 7, 6), (6, 2, 3, 3)], dict(group=2, auto_pad="SAME_UPPER", strides=[2, 2])),
    ("Conv", [(1, 3, 7, 6), (2, 3, 2, 3)], dict(auto_pad="SAME_LOWER")),
    ("Conv", [(1, 2, 5, 4, 6), (3, 2, 2, 3, 2)], dict(pads=[1, 0, 1, 0, 1, 1])),
    ("ConvTranspose", [(1, 2, 4, 5), (2, 3, 3, 3)], dict(strides=[2, 2], pads=[1, 0, 1, 1],
                                                         output_padding=[1, 0])),
    ("ConvTranspose", [(1, 4, 3, 3), (4, 1, 2, 2)], dict(group=2, output_shape=[7, 6], strides=[2, 2])),
    ("MaxPool", [(1, 2, 9, 8)], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", [(1, 2, 10)], dict(kernel_shape=[3], strides=[2], pads=[1, 1], dilations=[2])),
    ("MaxPool", [(1, 1, 5, 5, 6)], dict(kernel_shape=[2, 2, 3], auto_pad="SAME_UPPER")),
    ("MaxPool", [(1, 2, 7, 6)], dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_LOWER")),
    ("AveragePool", [(1, 2, 7, 7)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                         count_include_pad=1, ceil_mode=1)),
    ("AveragePool", [(1, 2, 7, 7)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                         count_include_pad=0, ceil_mode=1)),
    ("AveragePool", [(1, 3, 11)], dict(kernel_shape=[4], strides=[3], auto_pad="SAME_LOWER")),
    ("LpPool", [(1, 2, 6, 6)], dict(kernel_shape=[2, 2], p=3)),
    ("GlobalAveragePool", [(2, 3, 4, 5)], {}),
    ("GlobalMaxPool", [(2, 3, 4)], {}),
    ("LRN", [(1, 6, 3, 3)], dict(size=3, alpha=1e-2, beta=0.75, bias=2.0)),
    ("InstanceNormalization", [(2, 3, 4, 5), (3,), (3,)], dict(epsilon=1e-3)),
    ("BatchNormalization", [(2, 3, 4), (3,), (3,), (3,), "var3"], dict(epsilon=1e-3)),
    ("Hardmax", [(2, 3, 4)], dict(axis=1)),
    ("DepthToSpace", [(1, 8, 2, 3)], dict(blocksize=2, mode="CRD")),
    ("Elu", [(3, 4)], dict(alpha=0.7)),
    ("Selu", [(3, 4)], {}),
    ("HardSigmoid", [(3, 4)], dict(alpha=0.3, beta=0.4)),
    ("Softplus", [(3, 4)], {}),
    ("Erf", [(3, 4)], {}),
    ("PRelu", [(2, 3, 4), (3, 1)], {}),
    ("ReduceLogSumExp", [(2, 3, 4)], dict(axes=[0, 2], keepdims=0)),
    ("ReduceL2", [(2, 3, 4)], dict(axes=[-1])),
    ("MatMul", [(2, 1, 3, 4), (5, 4, 2)], {}),
]


@pytest.mark.parametrize("op,shapes,attrs", ORT_CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_ops_match_onnxruntime(op, shapes, attrs):
    feeds = {}
    for i, shape in enumerate(shapes):
        feeds["x%d" % i] = (np.abs(randn(3)) + 0.5 if shape == "var3" else randn(*shape))
    opset = 17 if op.startswith("Reduce") else 13
    model = single(op, len(shapes), opset=opset, **attrs)
    ref = run_ort(model, feeds)[0]
    got = backend.prepare(model).run(feeds)[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_legacy_broadcast_add_opset_6():
    a, b = randn(2, 3, 4), randn(3)
    got = backend.prepare(single("Add", 2, opset=6, broadcast=1, axis=1)).run([a, b])[0]
    np.testing.assert_allclose(got, a + b[None, :, None], rtol=1e-6)


def test_pad_modes_and_negative_pads():
    x = randn(1, 2, 4, 5)
    for mode, np_mode in (("reflect", "reflect"), ("edge", "edge"), ("constant", "constant")):
        model = make_model([helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)],
                           [vi("x"), vi("p", [8], TensorProto.INT64)], [vi("y")])
        pads = np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)
        got = backend.prepare(model).run([x, pads])[0]
        np.testing.assert_array_equal(got, np.pad(x, [(0, 0), (0, 0), (1, 2), (2, 1)], mode=np_mode))
    model = single("Pad", 1, opset=2, pads=[0, 0, -1, 1, 0, 0, 0, -2], value=3.0)
    ref = np.pad(x[:, :, 1:, :3], [(0, 0), (0, 0), (0, 0), (1, 0)], constant_values=3.0)
    np.testing.assert_array_equal(backend.prepare(model).run([x])[0], ref)


def test_slice_with_negative_steps_and_clamping():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    model = make_model([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])],
                       [vi("x"), vi("s", [2], TensorProto.INT64), vi("e", [2], TensorProto.INT64),
                        vi("a", [2], TensorProto.INT64), vi("t", [2], TensorProto.INT64)], [vi("y")])
    args = [np.array(v, np.int64) for v in ([-1, 1], [-100, 1000], [2, 0], [-2, 1])]
    np.testing.assert_array_equal(backend.prepare(model).run([x] + args)[0], x[1::1, :, ::-2])
    legacy = single("Slice", 1, opset=1, starts=[1, 0], ends=[100, -1], axes=[1, 2])
    np.testing.assert_array_equal(backend.prepare(legacy).run([x])[0], x[:, 1:, :-1])


def test_squeeze_unsqueeze_attribute_vs_input_axes():
    x = randn(1, 3, 1, 2)
    np.testing.assert_array_equal(backend.prepare(single("Squeeze", 1, opset=11, axes=[0, -2])).run([x])[0],
                                  x.reshape(3, 2))
    model = make_model([helper.make_node("Unsqueeze", ["x", "a"], ["y"])],
                       [vi("x"), vi("a", [2], TensorProto.INT64)], [vi("y")])
    got = backend.prepare(model).run([x, np.array([0, -1], np.int64)])[0]
    assert got.shape == (1, 1, 3, 1, 2, 1)


def test_split_sizes_from_attribute_and_input():
    x = randn(7, 2)
    outs = backend.prepare(single("Split", 1, opset=11, n_outputs=3, split=[1, 2, 4])).run([x])
    for got, ref in zip(outs, np.split(x, [1, 3])):
        np.testing.assert_array_equal(got, ref)
    # opset 18's num_outputs may split unevenly (the last part smaller); before 18 the
    # spec (and onnxruntime) require an even split
    outs = backend.prepare(single("Split", 1, opset=18, n_outputs=3, num_outputs=3)).run([x])
    assert [o.shape[0] for o in outs] == [3, 3, 1]
    with pytest.raises(Caffe2Error, match="not evenly splittable"):
        backend.prepare(single("Split", 1, opset=13, n_outputs=3)).run([x])


def test_absent_optional_inputs_reach_kernels_as_none():
    x = randn(10)
    node = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    model = make_model([node], [vi("x"), vi("hi", [])], [vi("y")])
    _, predict_net = convert(model)
    assert list(predict_net.op[0].input) == ["x", "hi"]
    got = backend.prepare(model).run([x, np.array(0.25, np.float32)])[0]
    np.testing.assert_array_equal(got, np.minimum(x, np.float32(0.25)))


def test_reshape_zero_and_allowzero():
    x = randn(2, 3, 4)
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [vi("x"), vi("s", [3], TensorProto.INT64)], [vi("y")], opset=14)
    assert backend.prepare(model).run([x, np.array([0, -1, 2], np.int64)])[0].shape == (2, 6, 2)


def test_integer_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    model = make_model([helper.make_node("Div", ["a", "b"], ["y"])],
                       [vi("a", [4], TensorProto.INT32), vi("b", [4], TensorProto.INT32)],
                       [vi("y", [4], TensorProto.INT32)])
    np.testing.assert_array_equal(backend.prepare(model).run([a, b])[0], np.array([3, -3, -3, 3], np.int32))


# ----------------------------------------------------------------- control flow

def test_if_branches_read_outer_scope_values():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["t"])], "then", [], [vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e")])
    bias = numpy_helper.from_array(np.array([10.0], np.float32), "bias")
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                       [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y")], initializers=[bias])
    _, predict_net = convert(model)
    assert list(predict_net.op[0].input) == ["c", "x", "bias"]
    rep = backend.prepare(model)
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(rep.run([np.array(True), x])[0], x + 10)
    np.testing.assert_array_equal(rep.run([np.array(False), x])[0], -x)


def test_loop_carries_state_and_stacks_scan_outputs():
    # body: (i, cond, acc) -> (cond, acc + x * i, acc as a scan output)
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Add", ["acc", "xi"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Identity", ["acc"], ["scan"])],
        "body", [vi("i", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("acc", [2])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [2]), vi("scan", [2])])
    node = helper.make_node("Loop", ["n", "", "acc0"], ["acc_final", "scans"], body=body)
    model = make_model([node], [vi("n", [], TensorProto.INT64), vi("acc0", [2]), vi("x", [2])],
                       [vi("acc_final"), vi("scans")])
    x, acc0 = np.array([1.0, 2.0], np.float32), np.zeros(2, np.float32)
    final, scans = backend.prepare(model).run({"n": np.array(4, np.int64), "acc0": acc0, "x": x})
    np.testing.assert_allclose(final, x * (0 + 1 + 2 + 3))
    np.testing.assert_allclose(scans, np.stack([x * k for k in (0, 0, 1, 3)]))   # acc before each step


RESIZE_CASES = [
    dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    dict(mode="nearest", coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil"),
    dict(mode="linear", coordinate_transformation_mode="half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="align_corners"),
    dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    dict(mode="cubic", coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.5, exclude_outside=1),
]


@pytest.mark.parametrize("attrs", RESIZE_CASES, ids=lambda a: "-".join(str(v) for v in a.values()))
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 1.5), (1, 1, 0.5, 0.75)])
def test_resize_matches_onnxruntime(attrs, scales):
    x = randn(1, 2, 6, 8)
    model = make_model([helper.make_node("Resize", ["x", "", "s"], ["y"], **attrs)],
                       [vi("x"), vi("s", [4])], [vi("y")], opset=13)
    feeds = {"x": x, "s": np.array(scales, np.float32)}
    ref = run_ort(model, feeds)[0]
    got = backend.prepare(model).run(feeds)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind,direction,attrs", [
    ("LSTM", "bidirectional", {}),
    ("LSTM", "reverse", dict(clip=0.5)),
    ("GRU", "bidirectional", dict(linear_before_reset=1)),
    ("GRU", "forward", {}),
    ("RNN", "bidirectional", dict(activations=["Relu", "Tanh"])),
])
def test_recurrent_ops_match_onnxruntime(kind, direction, attrs):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    seq, batch, inp, hid = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    feeds = {"X": randn(seq, batch, inp), "W": randn(dirs, gates * hid, inp) * 0.5,
             "R": randn(dirs, gates * hid, hid) * 0.5, "B": randn(dirs, 2 * gates * hid) * 0.1,
             "L": np.array([5, 2, 4], np.int32), "H0": randn(dirs, batch, hid)}
    names = ["X", "W", "R", "B", "L", "H0"]
    outs = ["Y", "Y_h"]
    if kind == "LSTM":
        feeds["C0"], feeds["P"] = randn(dirs, batch, hid), randn(dirs, 3 * hid) * 0.1
        names += ["C0", "P"]
        outs.append("Y_c")
    node = helper.make_node(kind, names, outs, hidden_size=hid, direction=direction, **attrs)
    model = make_model([node], [vi(n, None, TensorProto.INT32 if n == "L" else F) for n in names],
                       [vi(o) for o in outs], opset=14)
    ref = run_ort(model, feeds)
    got = backend.prepare(model).run(feeds)
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_quantize_dequantize_per_axis_match_onnxruntime():
    x = randn(2, 3, 4) * 4
    scale = np.array([0.05, 0.1, 0.2], np.float32)
    zp = np.array([0, 10, -5], np.int8)
    q_model = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1)],
                         [vi("x"), vi("s", [3]), vi("z", [3], TensorProto.INT8)], [vi("q", None, TensorProto.INT8)])
    feeds = {"x": x, "s": scale, "z": zp}
    q_ref = run_ort(q_model, feeds)[0]
    q = backend.prepare(q_model).run(feeds)[0]
    np.testing.assert_array_equal(q, q_ref)
    d_model = make_model([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)],
                         [vi("q", None, TensorProto.INT8), vi("s", [3]), vi("z", [3], TensorProto.INT8)], [vi("y")])
    dfeeds = {"q": q, "s": scale, "z": zp}
    np.testing.assert_allclose(backend.prepare(d_model).run(dfeeds)[0], run_ort(d_model, dfeeds)[0], rtol=1e-6)


# ----------------------------------------------------------------- function expansion

def test_model_local_functions_are_inlined():
    fn = helper.make_function("custom", "Scale2", ["a"], ["b"],
                              [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 13)])
    graph = helper.make_graph([helper.make_node("Scale2", ["x"], ["y"], domain="custom")], "g",
                              [vi("x", [3])], [vi("y", [3])])
    model = helper.make_model(graph, functions=[fn], ir_version=8,
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("custom", 1)])
    x = randn(3)
    np.testing.assert_array_equal(backend.prepare(model).run([x])[0], x + x)


def test_ops_without_kernel_expand_to_their_onnx_function_body():
    """Attention (opset 23) has no kernel; its schema's body is expanded."""
    from caffe2py.onnx.convert import is_supported
    assert not is_supported("ai.onnx", "Attention", 23)
    q, k, v = randn(1, 2, 3, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 4)
    model = make_model([helper.make_node("Attention", ["q", "k", "v"], ["y"])],
                       [vi("q", [1, 2, 3, 4]), vi("k", [1, 2, 5, 4]), vi("v", [1, 2, 5, 4])], [vi("y")],
                       opset=23, ir_version=10)
    _, predict_net = convert(model)
    assert "Attention" not in [op.type for op in predict_net.op]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(4)
    ref = _np_softmax(scores) @ v
    np.testing.assert_allclose(backend.prepare(model).run([q, k, v])[0], ref, rtol=1e-5, atol=1e-6)


def test_inputs_are_checked_against_declared_types_and_shapes():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, "n"])], [vi("y")])
    rep = backend.prepare(model)
    assert rep.run([randn(2, 5)])[0].shape == (2, 5)          # symbolic dim: any size
    with pytest.raises(Caffe2Error, match="input 'x' must be float32, got float64"):
        rep.run([np.zeros((2, 5))])
    with pytest.raises(Caffe2Error, match=r"input 'x' must have shape \[2, None\]"):
        rep.run([randn(3, 5)])


def test_decodable_but_inconsistent_graph_is_reported():
    model = _conv_relu_gemm_model()
    del model.graph.node[1]          # as if the file lost a node: Flatten reads a missing 'r'
    with pytest.raises(Caffe2Error, match="reads 'r'.*corrupted or truncated"):
        convert(model)


def test_too_new_opset_is_refused():
    with pytest.raises(ModelLoadError, match="opset 29; caffe2py knows opsets 1 to 28"):
        convert(single("Relu", 1, opset=29))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_onnxruntime(mode, padding, align):
    x = randn(2, 3, 5, 6)
    grid = (rng.random((2, 4, 7, 2)) * 2.6 - 1.3).astype(np.float32)   # some points outside [-1, 1]
    model = make_model([helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding,
                                         align_corners=align)], [vi("x"), vi("g")], [vi("y")], opset=16)
    feeds = {"x": x, "g": grid}
    np.testing.assert_allclose(backend.prepare(model).run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_matches_onnxruntime(mode, ratio):
    x = randn(2, 3, 10, 12)
    rois = np.array([[0.5, 1.0, 7.5, 8.0], [2.0, 0.0, 11.0, 9.5], [-1.0, -2.0, 4.0, 3.0]], np.float32)
    idx = np.array([0, 1, 1], np.int64)
    model = make_model([helper.make_node("RoiAlign", ["x", "r", "i"], ["y"], mode=mode, output_height=3,
                                         output_width=4, sampling_ratio=ratio, spatial_scale=0.9)],
                       [vi("x"), vi("r"), vi("i", None, TensorProto.INT64)], [vi("y")], opset=16)
    feeds = {"x": x, "r": rois, "i": idx}
    np.testing.assert_allclose(backend.prepare(model).run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_outputs_never_alias_inputs_or_constants():
    shape = numpy_helper.from_array(np.array([4], np.int64), "s")
    c = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(2, 2), "c")
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"]),
                        helper.make_node("Reshape", ["c", "s"], ["z"])],
                       [vi("x", [2, 2])], [vi("y"), vi("z")], initializers=[shape, c])
    rep = backend.prepare(model)
    x = randn(2, 2)
    y, z = rep.run([x])
    assert not np.shares_memory(y, x)
    z[0] = 100.0           # the caller's copy; the next run is unaffected
    np.testing.assert_array_equal(rep.run([x])[1], np.arange(4, dtype=np.float32))


def test_names_that_are_not_utf8_are_a_load_error():
    model = single("Relu", 1)
    data = model.SerializeToString().replace(b"x0", b"\xff\xfe")   # the input's name
    with pytest.raises(ModelLoadError, match="not valid UTF-8"):
        convert(data)


def test_random_corruption_only_ever_raises_caffe2_errors():
    data = _conv_relu_gemm_model().SerializeToString()
    r = np.random.default_rng(3)
    for trial in range(60):
        b = bytearray(data)
        if trial % 3 == 0:
            b = b[:int(r.integers(len(b)))]
        else:
            for i in r.integers(0, len(b), size=1 + trial % 7):
                b[i] = int(r.integers(256))
        try:
            backend.prepare(bytes(b)).run([randn(1, 3, 5, 5)])
        except Caffe2Error:
            pass


def test_unused_trailing_outputs_are_dropped():
    x = randn(3, 5)
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", ""])],
                       [vi("x"), vi("k", [1], TensorProto.INT64)], [vi("v")])
    got = backend.prepare(model).run([x, np.array([2], np.int64)])[0]
    np.testing.assert_array_equal(got, -np.sort(-x, axis=1)[:, :2])


@pytest.mark.parametrize("opset", [14, 17])
def test_torch_exported_model_matches_torch(opset):
    """Conv, BatchNorm, bilinear Upsample, adaptive pooling, bidirectional LSTM, a
    Transformer encoder layer, LayerNorm and GELU, exported by torch.onnx."""
    torch = pytest.importorskip("torch")
    import io
    import warnings

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.up = torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.lstm = torch.nn.LSTM(16, 12, batch_first=True, bidirectional=True)
            self.enc = torch.nn.TransformerEncoderLayer(24, 4, 32, batch_first=True, dropout=0.0)
            self.ln = torch.nn.LayerNorm(24)

        def forward(self, x):
            y = self.up(torch.relu(self.bn(self.conv(x))))
            y = torch.nn.functional.adaptive_avg_pool2d(y, (4, 4))
            seq = y.flatten(2).transpose(1, 2)
            h, _ = self.lstm(torch.cat([seq, seq], dim=2))
            return torch.nn.functional.gelu(self.ln(self.enc(h))).mean(dim=1).softmax(-1)

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 3, 10, 10)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(net, (x,), f, opset_version=opset, dynamo=False, input_names=["x"])
        except Exception as exc:  # noqa: BLE001 - exporter extras missing on this install
            pytest.skip("torch.onnx.export unavailable: %s" % exc)
        ref = net(x).detach().numpy()
    got = backend.prepare(f.getvalue()).run(x.numpy())[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
