"""caffe2py.onnx.frontend: Caffe2's entry points, the real MNIST files, names,
SSA, ai.onnx ops, errors, atomic files, the `caffe2py export` command and the
`caffe2.python.onnx.frontend` alias."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from _onnx_export import (check_export, init_net_of, netdef, predict_net, run_caffe2,  # noqa: E402
                          run_onnxruntime)
from caffe2py.errors import Caffe2Error  # noqa: E402
from caffe2py.onnx import frontend  # noqa: E402
from caffe2py.proto import caffe2_pb2  # noqa: E402

# ../shared/models beside the checkout; CAFFE2PY_SHARED_MODELS points elsewhere (a worktree)
MODELS = Path(os.environ.get("CAFFE2PY_SHARED_MODELS", Path(__file__).resolve().parents[2] / "shared" / "models"))
MNIST_INIT, MNIST_PREDICT = MODELS / "caffe2_mnist_init_net.pb", MODELS / "caffe2_mnist_predict_net.pb"
FLOAT = onnx.TensorProto.FLOAT
RNG = np.random.default_rng(5)


def mnist_nets():
    if not MNIST_PREDICT.exists():
        pytest.skip("../shared/models is not there")
    from caffe2py.models import read_net
    return read_net(str(MNIST_PREDICT)), read_net(str(MNIST_INIT))


def small_nets(width=3):
    """FC -> Relu (in place) -> Softmax, weights from the init net."""
    r = np.random.default_rng(width)
    w, b = r.standard_normal((width, 4)).astype(np.float32), r.standard_normal(width).astype(np.float32)
    init = init_net_of({"w": w, "b": b})
    pred = predict_net(lambda n: (n.FC(["x", "w", "b"], "h"), n.Relu("h", "h"), n.Softmax("h", "prob")),
                       ["x", "w", "b"], ["prob"])
    return pred, init


# ----------------------------------------------------------------- MNIST

@pytest.mark.parametrize("opset", [None, 13, 21])
def test_mnist_exports_checks_and_matches_caffe2py(opset):
    pred, init = mnist_nets()
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"1": (FLOAT, (1, 1, 28, 28))}, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    assert [o.version for o in model.opset_import if o.domain == ""] == [opset or frontend.DEFAULT_OPSET]
    assert set("23456789") <= {t.name for t in model.graph.initializer}       # names kept
    assert [i.name for i in model.graph.input] == ["1"] and [o.name for o in model.graph.output] == ["26"]
    for seed in range(3):
        x = np.random.default_rng(seed).random((1, 1, 28, 28), dtype=np.float32)
        expected = run_caffe2(pred, init, {"1": x})[0]
        got = run_onnxruntime(model, {"1": x})[0]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_mnist_with_a_symbolic_batch_runs_any_batch():
    pred, init = mnist_nets()
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"1": (FLOAT, ("N", 1, 28, 28))})
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(9).random((5, 1, 28, 28), dtype=np.float32)
    np.testing.assert_allclose(run_onnxruntime(model, {"1": x})[0], run_caffe2(pred, init, {"1": x})[0],
                               rtol=1e-5, atol=1e-4)


# ----------------------------------------------------------------- Caffe2's API

def test_caffe2_api_shapes_and_types():
    pred, init = small_nets()
    pred_copy, init_copy = caffe2_pb2.NetDef(), caffe2_pb2.NetDef()
    pred_copy.CopyFrom(pred)
    init_copy.CopyFrom(init)
    graph = frontend.caffe2_net_to_onnx_graph(pred, init, {"x": (FLOAT, (2, 4))})
    assert isinstance(graph, onnx.GraphProto) and graph.name == pred.name
    assert pred == pred_copy and init == init_copy                  # the caller's nets are untouched
    model = frontend.Caffe2Frontend.caffe2_net_to_onnx_model(pred, init, {"x": (np.float32, [2, 4])})
    assert isinstance(model, onnx.ModelProto) and model.producer_name == "caffe2py"
    tensors = frontend.caffe2_init_net_to_initializer(init)
    assert [t.name for t in tensors] == ["b", "w"]
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(tensors[1]), run_caffe2(
        netdef([], ["w"], ["w"]), init, {})[0])
    check_export(pred, init, {"x": RNG.standard_normal((2, 4)).astype(np.float32)},
                 value_info={"x": ("float32", [2, 4])})


def test_ssa_names_for_in_place_ops():
    pred, init = small_nets()
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"x": (FLOAT, (2, 4))})
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    assert list(relu.input) == ["h"] and list(relu.output) == ["h_2"]
    net = caffe2_pb2.NetDef()
    net.CopyFrom(pred)
    frontend.ssa_rewrite(net, init, {"x": None})
    assert [list(op.output) for op in net.op] == [["h"], ["h_2"], ["prob"]]


def test_an_input_the_init_net_fills_stays_an_input_when_given_in_value_info():
    pred, init = small_nets()
    init.op.extend(init_net_of({"x": np.zeros((2, 4), np.float32)}).op)     # Caffe2's "fake init"
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"x": (FLOAT, (2, 4))})
    assert [i.name for i in model.graph.input] == ["x"]
    assert "x" not in {t.name for t in model.graph.initializer}


def test_graph_inputs_come_from_what_ops_read_when_external_input_is_empty():
    pred, init = small_nets()
    del pred.external_input[:]
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"x": (FLOAT, (2, 4))})
    assert [i.name for i in model.graph.input] == ["x"]


def test_outputs_that_are_inputs_or_constants():
    pred = predict_net(lambda n: n.Relu("x", "y"), ["x", "w"], ["y", "x", "w"])
    init = init_net_of({"w": np.arange(3, dtype=np.float32)})
    result = frontend.export(pred, init, {"x": (FLOAT, [2])})
    assert [o.name for o in result.model.graph.output] == ["y", "x", "w_output"]
    assert any("'w' is an init net constant" in note for note in result.notes)
    onnx.checker.check_model(result.model, full_check=True)
    x = np.array([-1, 2], np.float32)
    y, x_out, w = run_onnxruntime(result.model, {"x": x})
    np.testing.assert_array_equal(y, [0, 2])
    np.testing.assert_array_equal(x_out, x)
    np.testing.assert_array_equal(w, [0, 1, 2])


# ----------------------------------------------------------------- ai.onnx ops (imported models)

def _opset9_model():
    from onnx import helper
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=1),          # 2-D coercion before opset 13
             helper.make_node("Dropout", ["s"], ["d"], ratio=0.2),
             helper.make_node("Reshape", ["d", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", FLOAT, [2, 12])],
                              [helper.make_tensor("shape", onnx.TensorProto.INT64, [2], [2, 12])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])


@pytest.mark.parametrize("opset", [13, 17])
def test_imported_onnx_ops_move_to_the_target_opset(opset):
    from caffe2py.onnx import convert
    original = _opset9_model()
    init, pred = convert(original)
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"x": (FLOAT, [2, 3, 4])}, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(run_onnxruntime(model, {"x": x})[0], run_onnxruntime(original, {"x": x})[0],
                               rtol=1e-6)
    assert "Flatten" in [n.op_type for n in model.graph.node]     # Softmax-1's meaning, kept


def test_imported_subgraph_ops_are_refused_by_name():
    from onnx import helper
    from caffe2py.onnx import convert
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "b", [],
                               [helper.make_tensor_value_info("o", FLOAT, [1])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
                                            helper.make_tensor_value_info("x", FLOAT, [1])],
                              [helper.make_tensor_value_info("y", FLOAT, [1])])
    init, pred = convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with pytest.raises(Caffe2Error, match=r"If #0 'y': .*subgraphs"):
        frontend.caffe2_net_to_onnx_model(pred, init, {"c": (9, []), "x": (FLOAT, [1])})


# ----------------------------------------------------------------- errors

def test_an_unmapped_op_is_named_with_its_index_and_the_supported_ops():
    pred, init = small_nets()
    op = pred.op.add(type="Frobnicate", name="frob")
    op.input.append("prob")
    op.output.append("out")
    pred.external_output[:] = ["out"]
    with pytest.raises(frontend.ExportError) as info:
        frontend.caffe2_net_to_onnx_model(pred, init, {"x": (FLOAT, (2, 4))})
    text = str(info.value)
    assert "Frobnicate #3 'frob' has no ONNX translation" in text
    assert "SparseLengthsSumFused8BitRowwise" in text and "FC" in text and "every ai.onnx op" in text
    assert info.value.unsupported == [(3, "Frobnicate")]


@pytest.mark.parametrize("value_info,match", [
    ({}, r"input 'x' has no shape: give it in value_info"),
    ([("x", (FLOAT, [2, 4]))], "value_info must be a dict"),
    ({"x": (FLOAT,)}, r"value_info\['x'\] must be a pair"),
    ({"x": ("complex", [2, 4])}, "unknown element type 'complex'"),
    ({"x": (FLOAT, [2, -4])}, "dim -4 is negative"),
    ({"x": (FLOAT, "2x4")}, "shape must be a sequence"),
])
def test_bad_value_info_is_named(value_info, match):
    pred = predict_net(lambda n: n.Relu("x", "y"), ["x"], ["y"])
    with pytest.raises(Caffe2Error, match=match):
        frontend.caffe2_net_to_onnx_model(pred, None, value_info)


def test_bad_opset_and_bad_nets():
    pred, init = small_nets()
    with pytest.raises(Caffe2Error, match="opset 7 is not supported"):
        frontend.caffe2_net_to_onnx_model(pred, init, {"x": (FLOAT, (2, 4))}, opset=7)
    with pytest.raises(Caffe2Error, match="predict_net must be a caffe2_pb2.NetDef"):
        frontend.caffe2_net_to_onnx_model("net.pb", init, {})
    broken = predict_net(lambda n: n.Relu("nowhere", "y"), ["x"], ["y"])
    with pytest.raises(Caffe2Error, match=r"Relu #0 'y': reads 'nowhere'"):
        frontend.caffe2_net_to_onnx_model(broken, None, {"x": (FLOAT, [1])})
    bad_init = netdef([caffe2_pb2.OperatorDef(type="GivenTensorFill", output=["w"])], [], ["w"])
    with pytest.raises(Caffe2Error, match="the init net 'n' failed to run"):
        frontend.caffe2_net_to_onnx_model(pred, bad_init, {"x": (FLOAT, (2, 4))})


def test_save_model_leaves_no_partial_file(tmp_path, monkeypatch):
    pred, init = small_nets()
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"x": (FLOAT, (2, 4))})
    target = tmp_path / "model.onnx"
    target.write_bytes(b"old")

    def no_space(*args):
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as patch:       # the rename into place fails
        patch.setattr(os, "replace", no_space)
        with pytest.raises(Caffe2Error, match="cannot write .*No space left"):
            frontend.save_model(model, target)
    assert target.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["model.onnx"]
    frontend.save_model(model, target)
    assert onnx.load(str(target)) == model and sorted(os.listdir(tmp_path)) == ["model.onnx"]
    with pytest.raises(Caffe2Error, match="cannot write"):
        frontend.save_model(model, tmp_path / "missing" / "m.onnx")


def test_large_models_keep_their_weights_in_external_data(tmp_path, monkeypatch):
    from caffe2py.onnx import export_model
    monkeypatch.setattr(export_model, "EXTERNAL_DATA_THRESHOLD", 16)
    pred, init = small_nets(width=300)          # a 300 x 4 weight: over onnx's 1 KB external minimum
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"x": (FLOAT, (2, 4))})
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    expected = run_onnxruntime(model, {"x": x})[0]
    frontend.save_model(model, tmp_path / "m.onnx")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    import onnxruntime as ort
    got = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], expected)


# ----------------------------------------------------------------- the command

def _write_nets(tmp_path, pred, init):
    p, i = tmp_path / "predict.pb", tmp_path / "init.pb"
    p.write_bytes(pred.SerializeToString())
    i.write_bytes(init.SerializeToString())
    return str(p), str(i)


def test_export_command_writes_the_model_and_says_what_it_mapped(tmp_path, capsys):
    from caffe2py.cli import main
    p, i = _write_nets(tmp_path, *small_nets())
    out = tmp_path / "m.onnx"
    assert main(["export", "--init-net", i, "--predict-net", p, "--input", "x:float32:batchx4",
                 "-o", str(out), "--opset", "18"]) == 0
    text = capsys.readouterr().out
    assert "mapped 3 op(s):" in text and "FC" in text and "-> Gemm" in text
    assert "input  x: float32 [batch, 4]" in text and "opset 18" in text
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(run_onnxruntime(model, {"x": x})[0], run_caffe2(*small_nets(), {"x": x})[0],
                               rtol=1e-6)


def test_export_command_lists_unmapped_ops_and_writes_nothing(tmp_path, capsys):
    from caffe2py.cli import main
    pred, init = small_nets()
    op = pred.op.add(type="Frobnicate")
    op.input.append("prob")
    op.output.append("out")
    p, i = _write_nets(tmp_path, pred, init)
    out = tmp_path / "m.onnx"
    out.write_bytes(b"previous export")
    assert main(["export", "--init-net", i, "--predict-net", p, "--input", "x:float32:2x4", "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert "could map 3 of 4 op(s); could not map 1:" in captured.out and "Frobnicate #3" in captured.out
    assert "Frobnicate #3" in captured.err and "has no ONNX translation" in captured.err
    assert out.read_bytes() == b"previous export"
    assert sorted(os.listdir(tmp_path)) == ["init.pb", "m.onnx", "predict.pb"]


def test_export_command_inputs_and_list(capsys):
    from caffe2py.cli import main
    from caffe2py.commands.export import parse_input
    assert parse_input("data:float32:1x3x224x224") == ("data", "float32", [1, 3, 224, 224])
    assert parse_input("ids:int64:num_ids") == ("ids", "int64", ["num_ids"])
    assert parse_input("a:b:int32:max_len,?") == ("a:b", "int32", ["max_len", None])
    assert parse_input("scalar:float32:") == ("scalar", "float32", [])
    with pytest.raises(Caffe2Error, match="expected NAME:TYPE:DIMS"):
        parse_input("data")
    assert main(["export", "--list"]) == 0
    text = capsys.readouterr().out
    assert "SparseLengthsWeightedSumFused8BitRowwise" in text and "every ai.onnx op" in text


# ----------------------------------------------------------------- compat alias, docs

def test_a_caffe2_script_exports_through_the_compat_alias(tmp_path):
    pred, init = small_nets()
    p, i = _write_nets(tmp_path, pred, init)
    script = tmp_path / "to_onnx.py"
    script.write_text(
        "import sys, onnx\n"
        "from caffe2.proto import caffe2_pb2\n"
        "from caffe2.python.onnx import frontend\n"
        "pred, init = caffe2_pb2.NetDef(), caffe2_pb2.NetDef()\n"
        "pred.ParseFromString(open(sys.argv[1], 'rb').read())\n"
        "init.ParseFromString(open(sys.argv[2], 'rb').read())\n"
        "model = frontend.caffe2_net_to_onnx_model(pred, init, {'x': (onnx.TensorProto.FLOAT, (2, 4))})\n"
        "onnx.checker.check_model(model)\n"
        "onnx.save(model, sys.argv[3])\n")
    out = tmp_path / "m.onnx"
    done = subprocess.run([sys.executable, "-m", "caffe2py.compat", str(script), p, i, str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Gemm", "Relu", "Softmax"]


def test_docs_list_every_exported_op():
    from caffe2py.onnx.export_registry import exported_op_types
    docs = (Path(__file__).resolve().parents[1] / "docs" / "onnx.md").read_text()
    section = docs[docs.index("## Export"):]
    missing = [t for t in exported_op_types("") if "`%s`" % t not in section]
    assert not missing, missing
