"""`caffe2py run model.onnx` and `caffe2py convert`: random inputs with a note,
converted NetDef files giving the same outputs, and clear errors."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from caffe2py.cli import main
from caffe2py.models import read_net
from caffe2py.workspace import Workspace


def _model(tmp_path):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([4], np.int64), "b_shape")
    nodes = [helper.make_node("ConstantOfShape", ["b_shape"], ["b"],
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "cli_model", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
                              initializer=[w, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path, model


def _output_lines(text):
    return [line for line in text.splitlines() if not line.startswith(("note:", "ran net"))]


def test_run_onnx_without_inputs_uses_random_values_and_says_so(tmp_path, capsys):
    path, _ = _model(tmp_path)
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "note: no value given for input" in out and "x [1, 3, 6, 6] float32" in out
    assert "y: shape [1, 4, 1, 1] dtype float32" in out


def test_convert_then_run_netdefs_matches_run_onnx(tmp_path, capsys):
    path, model = _model(tmp_path)
    x = np.random.default_rng(5).standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    init, pred = str(tmp_path / "init.pb"), str(tmp_path / "pred.pb")
    assert main(["convert", str(path), "--init-net", init, "--predict-net", pred]) == 0
    assert "wrote predict net" in capsys.readouterr().out
    assert main(["run", str(path), "--input", "x=%s" % (tmp_path / "x.npy")]) == 0
    direct = _output_lines(capsys.readouterr().out)
    assert main(["run", "--init-net", init, "--predict-net", pred, "--input", "x=%s" % (tmp_path / "x.npy")]) == 0
    via_files = _output_lines(capsys.readouterr().out)
    assert direct == via_files and direct

    # the written files hold the model: compare their values with onnxruntime
    ort = pytest.importorskip("onnxruntime")
    ws = Workspace("cli_onnx")
    ws.run_net_once(read_net(init))
    ws.feed_blob("x", x)
    ws.run_net_once(read_net(pred))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ws.fetch_blob("y"), ref, rtol=1e-5, atol=1e-6)


def test_convert_text_format_and_no_fold(tmp_path, capsys):
    path, _ = _model(tmp_path)
    init, pred = str(tmp_path / "init.pbtxt"), str(tmp_path / "pred.pbtxt")
    assert main(["convert", str(path), "--init-net", init, "--predict-net", pred, "--text", "--no-fold"]) == 0
    assert "ConstantOfShape" in open(pred).read()
    assert [op.type for op in read_net(pred).op][0] == "ConstantOfShape"


def test_corrupted_model_is_a_clear_cli_error(tmp_path, capsys):
    path, _ = _model(tmp_path)
    data = path.read_bytes()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data[: len(data) // 3])
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.onnx" in err and "not a valid ONNX model" in err
    assert main(["convert", str(bad), "--init-net", os.devnull, "--predict-net", os.devnull]) == 1
    assert "not a valid ONNX model" in capsys.readouterr().err


def test_unknown_ops_are_listed_by_the_cli(tmp_path, capsys):
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"]),
                               helper.make_node("Twiddle", ["y"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    path = tmp_path / "unknown.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Frobnicate-13" in err and "Twiddle-13" in err


def test_input_names_are_checked(tmp_path, capsys):
    path, _ = _model(tmp_path)
    np.save(tmp_path / "v.npy", np.zeros(3, np.float32))
    assert main(["run", str(path), "--input", "nope=%s" % (tmp_path / "v.npy")]) == 1
    assert "not inputs of the model" in capsys.readouterr().err


def test_input_type_is_checked(tmp_path, capsys):
    path, _ = _model(tmp_path)
    np.save(tmp_path / "x64.npy", np.zeros((1, 3, 6, 6), np.float64))
    assert main(["run", str(path), "--input", "x=%s" % (tmp_path / "x64.npy")]) == 1
    assert "input 'x' must be float32, got float64" in capsys.readouterr().err
