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


def onnx_model(op, inputs, opset, out_type=0, **attrs):
    """A one-node model over named NumPy inputs (an empty name: an absent input)."""
    from onnx import helper
    from onnx.helper import np_dtype_to_tensor_dtype
    vi = [helper.make_tensor_value_info(n, np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
          for n, v in inputs if n]
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info("y", out_type, None)])
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


# ----------------------------------------------------------------- Caffe2 ops: named errors

@pytest.mark.parametrize("op_type, inputs, args, expected", [
    # op:3:37622: a dtype rule in Mean's schema
    ("Mean", {"a": np.zeros((0, 3), object), "b": np.zeros((0, 3), object)}, {},
     r"Mean #0 .*blob 'a': input 0 must be a tensor of .*float32.*, got object"),
    # op:3:60603: Caffe2 reads the shape blob as int32 / int64 only
    ("Reshape", {"x": f32(3), "s": np.array([1.0, 3.0, -np.inf], np.float32)}, {},
     r"Reshape #0 .*blob 's': input 1 must be a tensor of int32/int64, got float32"),
    # op:3:68258: every optimizer's scalar inputs (weights, lr) must be numbers
    ("WeightedSum", {"x": np.array(0.5, np.float16), "w": np.array("a", object)}, {},
     r"WeightedSum #0 .*blob 'w': weight_0 must hold one value as a number .*got dtype object"),
    ("SparseAdagrad", {"p": f32(4, 2), "h": f32(4, 2), "i": np.array([1], np.int64), "g": f32(1, 2),
                       "lr": np.array(["x"], object)}, dict(epsilon=1e-5), r"blob 'lr': .*as a number"),
])
def test_schema_and_shared_checks_name_the_problem(op_type, inputs, args, expected):
    outputs = ("p", "h") if op_type == "SparseAdagrad" else ("Y",)
    with pytest.raises(Caffe2Error, match=expected):
        run_op(op_type, inputs, outputs, **args)


def test_file_store_handler_on_a_path_through_a_file_is_named(tmp_path):   # op:3:71075
    (tmp_path / "in0").write_bytes(b"not a directory")
    path = str(tmp_path / "in0")
    for p in (path, str(tmp_path / "in0" / "sub")):
        with pytest.raises(Caffe2Error, match=r"FileStoreHandlerCreate #0 .*'path' = '%s': expected a directory "
                                              r".*'%s' is a file" % (p, path)):
            run_op("FileStoreHandlerCreate", {}, ("h",), path=p)
    # and a path under a directory still works: the folder is made
    run_op("FileStoreHandlerCreate", {}, ("h",), path=str(tmp_path / "store"), prefix="x")
    assert (tmp_path / "store").is_dir()


# ----------------------------------------------------------------- Caffe2 ops: empty but valid

def test_sinusoid_position_encoding_of_rows_without_columns():   # op:3:15581, op:3:85452
    for m in (2, 0):
        y = run_op("SinusoidPositionEncoding", {"p": np.zeros((m, 0), np.int64)}, embedding_size=99)[0]
        assert y.shape == (m, 0, 99) and y.dtype == np.float32


def test_square_root_divide_of_empty_tensors_matches_the_formula():   # op:3:73141
    for data, scale in ((np.zeros(0, np.float32), np.zeros(0, np.float32)),
                        (np.zeros((0, 4), np.float32), np.zeros(0, np.int32)),
                        (np.zeros((3, 0), np.float32), np.array([4, 0, 9], np.int64)),
                        (f32(3, 2), np.array([4, 0, 9], np.int64))):
        got = run_op("SquareRootDivide", {"d": data, "s": scale})[0]
        s = scale.astype(np.float64).reshape((-1,) + (1,) * (data.ndim - 1))
        want = np.where(s == 0, data, data / np.sqrt(np.where(s == 0, 1, s))).astype(np.float32)
        assert got.shape == data.shape and np.allclose(got, want, rtol=1e-6)


def test_instance_norm_of_empty_tensors():   # op:3:95427
    x = np.zeros((4, 0, 1, 2), np.float16)
    y, mean, inv = run_op("InstanceNorm", {"x": x, "s": x, "b": x}, ("y", "m", "r"))
    assert y.shape == x.shape and mean.shape == inv.shape == (4, 0)
    # no images: empty everything; channels with no pixels: an empty Y and NaN statistics (0 / 0)
    for shape in ((0, 3, 2, 2), (2, 3, 0, 5)):
        x = f32(*shape)
        y, mean, inv = run_op("InstanceNorm", {"x": x, "s": f32(3), "b": f32(3)}, ("y", "m", "r"))
        assert y.shape == shape and mean.shape == inv.shape == shape[:2]
        assert np.isnan(mean).all() and np.isnan(inv).all()
    # and a normal case against the formula, so the empty-input path changed nothing
    x, s, b = f32(2, 3, 4, 5), f32(3), f32(3)
    y = run_op("InstanceNorm", {"x": x, "s": s, "b": b}, epsilon=1e-5)[0]
    mu = x.mean(axis=(2, 3), keepdims=True)
    var = x.var(axis=(2, 3), keepdims=True)
    want = (x - mu) / np.sqrt(var + 1e-5) * s.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------- the fuzz oracle

def test_fuzz_oracle_compares_only_shapes_of_models_with_random_ops():   # mutate:3:52736
    pytest.importorskip("onnxruntime")
    from onnx import helper

    from caffe2py.tools.fuzz import execute
    from caffe2py.tools.fuzz.cases import Case
    x = f32(2, 3, 4, 5)
    # a mutated model with a node retyped to RandomNormalLike:
    # the spec leaves the generator undefined, so values differ from onnxruntime's by design
    model = onnx_model("RandomNormalLike", [("x", x)], 6, out_type=1)
    case = Case("mutate:0:0", "mutate", {"model_onnx": model.SerializeToString(), "inputs": {"x": x}})
    got = execute.run(case)
    assert got["class"] == "ran" and got["note"] == "matches_reference_shapes"
    # a deterministic model is still compared value by value
    model = onnx_model("Neg", [("x", x)], 6, out_type=1)
    case = Case("mutate:0:1", "mutate", {"model_onnx": model.SerializeToString(), "inputs": {"x": x}})
    assert execute.run(case)["note"] == "matches_reference"
    assert execute.gen_onnx.uses_random_ops(model.SerializeToString()) is False
    # a random op inside a subgraph counts too
    branch = helper.make_graph([helper.make_node("RandomUniformLike", ["x"], ["y"])], "branch", [], [])
    outer = helper.make_model(helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch,
                                                                  else_branch=branch)], "g", [], []))
    assert execute.gen_onnx.uses_random_ops(outer.SerializeToString()) is True


def _while_net(write_condition):
    sub = caffe2_pb2.NetDef(name="loop")
    sub.op.extend([core.CreateOperator("ConstantFill", [], ["sub_out"], shape=[2], value=1.0)])
    if write_condition:
        sub.op.extend([core.CreateOperator("ConstantFill", [], ["c"], shape=[], value=0.0,
                                           dtype=core.DataType.BOOL)])
    op = core.CreateOperator("While", ["c"], [])
    op.arg.add(name="loop_net").n.CopyFrom(sub)
    net = caffe2_pb2.NetDef(name="n")
    net.op.extend([op])
    return net


def test_fuzz_generator_ends_its_while_loops_and_the_oracle_names_endless_ones():   # op:3:5988
    from caffe2py.tools.fuzz import gen_ops
    from caffe2py.tools.fuzz.cases import Case, case_rng
    # every While the generator draws writes its condition in one of its nets
    drawn = 0
    for i in range(300):
        case = gen_ops.generate("op:5:%d" % i, case_rng("op", 5, i), types=["While"])
        net = caffe2_pb2.NetDef.FromString(case.data["net"])
        op = net.op[0]
        loop_args = [a for a in op.arg if a.name in ("loop_net", "cond_net") and a.HasField("n")]
        if op.input and any(a.name == "loop_net" for a in loop_args):
            drawn += 1
            assert any(op.input[0] in o.output for a in loop_args for o in a.n.op)
    assert drawn > 50
    feeds = {"c": np.array(True)}
    endless = Case("op:0:0", "op", {"net": _while_net(False).SerializeToString(), "inputs": feeds})
    got = gen_ops.run(endless)      # returns at once instead of looping forever
    assert got["class"] == "skipped" and "neither loop_net nor cond_net writes it" in got["message"]
    ends = Case("op:0:1", "op", {"net": _while_net(True).SerializeToString(), "inputs": feeds})
    assert gen_ops.run(ends)["class"] == "ran"


# ----------------------------------------------------------------- seed-11 slice

def _svm_regressor(**attrs):
    from onnx import TensorProto, helper
    node = helper.make_node("SVMRegressor", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])


def test_onnx_svm_regressor_support_vector_count():   # onnx:11:335, onnx:11:589
    x = f32(4, 2)
    with pytest.raises(Caffe2Error, match=r"SVMRegressor #0 .*'n_supports' must be >= 0, got -1"):
        run_onnx(_svm_regressor(n_supports=-1, support_vectors=[2.0], coefficients=[1.0]), [("x", x)])
    # no support vectors counted: a linear SVM, its support_vectors unused: y = x . coef + rho
    model = _svm_regressor(support_vectors=[1e-4, -1e30], coefficients=[0.5, -2.0], rho=[0.25],
                           kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0])
    got = run_onnx(model, [("x", x)])
    want = (x.astype(np.float64) @ np.array([0.5, -2.0]) + 0.25).astype(np.float32)[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    try:
        import onnxruntime as ort
    except ImportError:
        return
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_onnx_imputer_and_feature_vectorizer_of_an_empty_batch():   # onnx:11:5102
    from onnx import TensorProto, helper

    def ml_model(op, n_inputs, **attrs):
        node = helper.make_node(op, ["x%d" % i for i in range(n_inputs)], ["y"], domain="ai.onnx.ml", **attrs)
        ins = [helper.make_tensor_value_info("x%d" % i, TensorProto.FLOAT, None) for i in range(n_inputs)]
        graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                       helper.make_opsetid("ai.onnx.ml", 2)])

    x = np.zeros((0, 2, 2), np.float32)
    imputer = ml_model("Imputer", 1, imputed_value_floats=[1.0, 2.0, 3.0, 4.0], replaced_value_float=0.0)
    assert run_onnx(imputer, [("x0", x)]).shape == (0, 2, 2)
    with pytest.raises(Caffe2Error, match=r"Imputer #0 .*imputed values has 2 values; X has 4 features"):
        run_onnx(ml_model("Imputer", 1, imputed_value_floats=[1.0, 2.0]), [("x0", x)])
    # and a filled batch against the formula: each feature's replaced value becomes its imputed value
    x = np.array([[[0.0, 5.0], [0.0, 0.0]]], np.float32)
    want = np.where(x == 0, np.array([1.0, 2.0, 3.0, 4.0], np.float32).reshape(1, 2, 2), x)
    assert np.array_equal(run_onnx(imputer, [("x0", x)]), want)
    vec = ml_model("FeatureVectorizer", 2, inputdimensions=[3, 1])
    got = run_onnx(vec, [("x0", np.zeros((0, 3), np.float32)), ("x1", np.zeros((0, 1, 1), np.float32))])
    assert got.shape == (0, 4)


def test_elementwise_linear_of_an_empty_batch():   # found reading for the reshape(0, -1) pattern
    a, b = f32(3), f32(3)
    for x in (np.zeros((0, 3), np.float32), f32(2, 3)):
        got = run_op("ElementwiseLinear", {"x": x, "a": a, "b": b})[0]
        assert got.shape == x.shape and np.allclose(got, x * a + b, rtol=1e-6)
