"""`caffe2py shapes`, `caffe2py bench` and `caffe2py run --report`.

Expected dims are computed here from the layer arithmetic (conv: n - k + 2p + 1,
pool: n / 2), expected bytes from the init net's values or an actual run."""
import json
import os
import re

import numpy as np
import pytest
from google.protobuf import text_format

from caffe2py import workspace
from caffe2py.cli import main
from caffe2py.core import CreateOperator
from caffe2py.demo import build_demo
from caffe2py.models import read_net
from caffe2py.profiling import latency_summary, percentile
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import OpSchema, TensorType, register_kernel, register_schema

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models")
MNIST_PREDICT = os.path.join(MODELS, "caffe2_mnist_predict_net.pb")
MNIST_INIT = os.path.join(MODELS, "caffe2_mnist_init_net.pb")
needs_mnist = pytest.mark.skipif(not (os.path.exists(MNIST_PREDICT) and os.path.exists(MNIST_INIT)),
                                 reason="../shared/models/caffe2_mnist_*.pb not available")


def run_json(capsys, argv):
    assert main(argv + ["--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def conv(n, k, p=0):
    return n - k + 2 * p + 1


# ----------------------------------------------------------------- shapes

@needs_mnist
def test_shapes_on_the_real_caffe2_mnist_files(capsys):
    b = 32
    report = run_json(capsys, ["shapes", "--predict-net", MNIST_PREDICT, "--init-net", MNIST_INIT,
                               "--max-batch-size", str(b), "--max-seq-size", "100", "--hint", "1,%d,1,28,28" % b])
    assert report["unknown"] == []
    dims = {r["name"]: r["dims"] for r in report["blobs"]}
    s1 = conv(28, 5)
    s2 = conv(s1 // 2, 5)
    expected = {"1": [b, 1, 28, 28], "11": [b, 20, s1, s1], "12": [b, 20, s1, s1], "13": [b, 20, s1 // 2, s1 // 2],
                "14": [b, 20, s1 // 2, s1 // 2], "16": [b, 50, s2, s2], "17": [b, 50, s2, s2],
                "18": [b, 50, s2 // 2, s2 // 2], "19": [b, 50, s2 // 2, s2 // 2], "20": [b, 800],
                "OC2_DUMMY_0": [4], "23": [b, 500], "26": [b, 10]}
    for name, want in expected.items():
        assert dims[name] == want, name
    rows = {r["name"]: r for r in report["blobs"]}
    assert rows["26"]["dim_types"] == ["BATCH", "CONSTANT"] and rows["26"]["producer"] == "FC #10 '26'"
    assert rows["OC2_DUMMY_0"]["dtype"] == "INT64" and rows["OC2_DUMMY_0"]["dim_types"] == ["CONSTANT"]
    init = read_net(MNIST_INIT)
    param_bytes = sum(4 * len(a.floats) for op in init.op for a in op.arg if a.name == "values")
    assert report["totals"]["parameter_bytes"] == param_bytes
    act = sum(4 * int(np.prod(d)) for n, d in expected.items() if n != "OC2_DUMMY_0") + 8 * 4
    assert report["totals"]["activation_bytes"] == act


@needs_mnist
def test_shapes_without_an_input_hint_names_the_missing_input(capsys):
    assert main(["shapes", "--predict-net", MNIST_PREDICT, "--init-net", MNIST_INIT]) == 0
    out = capsys.readouterr().out
    assert "unknown blobs (10):" in out
    assert "1: an input of the net without a shape hint" in out
    assert "11: Conv #0 '11': input '1' has no shape" in out


def test_shapes_on_the_demo_net(capsys):
    b = 16
    report = run_json(capsys, ["shapes", "--max-batch-size", str(b)])
    assert report["unknown"] == []
    rows = {r["name"]: r for r in report["blobs"]}
    c1 = conv(28, 5)
    p1 = c1 // 2
    c2 = conv(p1, 5, p=2)
    p2 = c2 // 2
    expected = {"data": [b, 1, 28, 28], "conv1": [b, 8, c1, c1], "pool1": [b, 8, p1, p1], "relu1": [b, 8, p1, p1],
                "conv2": [b, 16, c2, c2], "pool2": [b, 16, p2, p2], "relu2": [b, 16, p2, p2],
                "flat": [b, 16 * p2 * p2], "fc1": [b, 64], "fc1_relu": [b, 64], "fc2": [b, 10], "softmax": [b, 10]}
    for name, want in expected.items():
        assert rows[name]["dims"] == want, name
        assert rows[name]["dim_types"][0] == "BATCH" and rows[name]["bytes"] == 4 * int(np.prod(want))
    # parameters: what the init net actually produces when run
    init_net, predict_net, _ = build_demo()
    workspace.ResetWorkspace()
    workspace.RunNetOnce(init_net)
    params = [o for op in init_net.op for o in op.output]
    assert report["totals"]["parameter_bytes"] == sum(workspace.FetchBlob(p).nbytes for p in params)
    for p in params:
        assert rows[p]["dims"] == list(workspace.FetchBlob(p).shape)
        assert set(rows[p]["dim_types"]) == {"CONSTANT"} and rows[p]["producer"] == "(parameter)"
    assert report["totals"]["activation_bytes"] == sum(4 * int(np.prod(d)) for d in expected.values())


def test_shapes_table_format(capsys):
    assert main(["shapes", "--max-batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"bound shapes of net 'demo_lenet\w*' \(max batch size 8", out)
    assert "unknown blobs: none" in out
    line = next(l for l in out.splitlines() if l.startswith("fc2 "))
    assert line.split()[:4] == ["fc2", "[8,", "10]", "(B,C)"] and "FC #9 'fc2'" in line
    assert "parameters:  8 blobs" in out and "activations: 12 blobs" in out


@pytest.mark.parametrize("argv,message", [
    (["--hint", "dta,8,1,28,28"], "shape hint for blob 'dta', which net 'demo_lenet"),
    (["--hint", "data,8,x,28"], "dim 'x' is not an integer"),
    (["--max-batch-size", "-1"], "max_batch_size must be a non-negative integer"),
    (["--hint", "data,8,1,28,28#data,4,1,28,28"], "inconsistent shape hints for 'data'"),
    (["--hint", "conv1,32,3,24,24"], "Conv #0 'conv1': Shape inconsistency found in tensor 'conv1' on dim 1 (3 vs 8)"),
])
def test_shapes_bad_input_is_a_clear_error(capsys, argv, message):
    assert main(["shapes"] + argv) == 1
    assert message in capsys.readouterr().err


# ----------------------------------------------------------------- bench

def test_bench_profile_writes_a_valid_chrome_trace(tmp_path, capsys):
    path = tmp_path / "trace.json"
    iters = 3
    assert main(["bench", "--iters", str(iters), "--warmup", "1", "--run-individual", "--profile", str(path)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "Main run finished. Milliseconds per iter:" in out
    assert "Operator #0 (conv1, Conv)" in out and "Time per operator type:" in out
    assert "Parameter Memory per operator type:" in out
    for key in ("P50 Latency", "P90 Latency", "P95 Latency", "P99 Latency"):
        assert key in out
    assert "Total inference requests: %d" % iters in out
    assert "timing [" not in captured.err   # no progress bar when stderr is not a terminal
    trace = json.loads(path.read_text())
    _, predict_net, _ = build_demo()
    op_events = [e for e in trace["traceEvents"] if e["cat"] != "net"]
    assert len(op_events) == iters * len(predict_net.op)
    for e in op_events:
        assert e["ph"] == "X" and e["dur"] >= 0 and isinstance(e["ts"], float)
    assert sorted({e["args"]["run"] for e in op_events}) == list(range(iters))
    first_run = [e for e in op_events if e["args"]["run"] == 0]
    assert [e["cat"] for e in first_run] == [op.type for op in predict_net.op]
    assert [e["ts"] for e in first_run] == sorted(e["ts"] for e in first_run)


@needs_mnist
def test_bench_on_mnist_files_with_a_synthesised_input(capsys):
    assert main(["bench", "--predict-net", MNIST_PREDICT, "--init-net", MNIST_INIT, "--iters", "2",
                 "--hint", "1,2,1,28,28"]) == 0
    out = capsys.readouterr().out
    assert "benchmarking net 'torch-jit-export_predict' (11 ops)" in out and "P99 Latency" in out


def test_bench_input_without_value_or_hint(tmp_path, capsys):
    net = caffe2_pb2.NetDef(name="n")
    net.op.add().CopyFrom(CreateOperator("Relu", ["x"], ["y"]))
    net.external_input.append("x")
    (tmp_path / "p.pbtxt").write_text(text_format.MessageToString(net))
    assert main(["bench", "--predict-net", str(tmp_path / "p.pbtxt")]) == 1
    assert "input 'x' has no value and no bound shape" in capsys.readouterr().err


def test_latency_percentiles_are_nearest_rank():
    rng = np.random.default_rng(3)
    values = list(rng.random(137))
    s = latency_summary(values)
    for p, key in ((50, "p50_s"), (90, "p90_s"), (95, "p95_s"), (99, "p99_s")):
        assert s[key] == np.percentile(values, p, method="inverted_cdf")
    assert percentile(sorted(values), 100) == max(values)
    assert s["mean_ms"] == pytest.approx(1e3 * np.mean(values))


# ----------------------------------------------------------------- run --report

def test_run_report_on_the_demo(capsys):
    assert main(["run", "--report"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"bound shapes of net 'demo_lenet\w*' \(max batch size 4", out)
    assert "report check: all 20 bound shapes hold after the run" in out
    assert out.index("bound shapes of net") < out.index("ran net 'demo_lenet")


register_schema(OpSchema("TestUnderstatesShape", num_inputs=1, num_outputs=1,
                         inference=lambda ctx, ins: [TensorType(ins[0].dims[:-1] + (1,), ins[0].dtype)]))
register_kernel("TestUnderstatesShape")(lambda ctx: lambda x: np.concatenate([x, x], axis=-1))


def test_run_report_names_the_op_whose_rule_was_wrong(tmp_path, capsys):
    net = caffe2_pb2.NetDef(name="lying")
    net.op.add().CopyFrom(CreateOperator("TestUnderstatesShape", ["x"], ["y"]))
    net.external_input.append("x")
    net.external_output.append("y")
    (tmp_path / "p.pbtxt").write_text(text_format.MessageToString(net))
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    assert main(["run", "--report", "--predict-net", str(tmp_path / "p.pbtxt"),
                 "--input", "x=%s" % (tmp_path / "x.npy")]) == 0
    err = capsys.readouterr().err
    assert "warning: blob 'y' is [2, 6] but the net was bound for at most [2, 1]" in err
    assert "the shape rule of TestUnderstatesShape #0 'y' is wrong" in err


# ----------------------------------------------------------------- ONNX models

def _tiny_onnx(path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).random((6, 4), dtype=np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_shapes_and_bench_take_onnx_models(tmp_path, capsys):
    pytest.importorskip("caffe2py.onnx")
    path = tmp_path / "tiny.onnx"
    _tiny_onnx(path)
    report = run_json(capsys, ["shapes", "--predict-net", str(path), "--max-batch-size", "8"])
    assert report["unknown"] == []
    dims = {r["name"]: r["dims"] for r in report["blobs"]}
    assert dims == {"x": [8, 6], "W": [6, 4], "h": [8, 4], "y": [8, 4]}   # x @ W: [8, 6] x [6, 4]
    assert main(["bench", "--predict-net", str(path), "--max-batch-size", "8", "--iters", "2"]) == 0
    out = capsys.readouterr().out
    assert "P50 Latency" in out
    # The GEMM library's kernel family and thread count decide the numbers: say which.
    from caffe2py.kernels.cpu.runtime import blas as gemm
    blas_line = next(line for line in out.splitlines() if line.startswith("BLAS: "))
    core = gemm.openblas_core()
    if core is not None:
        assert "%s kernels" % core in blas_line
    from caffe2py.kernels.cpu.runtime.blas import gemm_entry
    from caffe2py.kernels.cpu.runtime.jit import team_size
    if gemm_entry(np.float32) is not None:       # GEMMs on caffe2py's team
        assert "team of %d thread" % team_size() in blas_line
    else:                                         # OpenBLAS's own threads
        assert "%d thread" % gemm.blas_threads() in blas_line and "team" not in blas_line


def test_bench_optimize_applies_the_prepare_time_rewrites(tmp_path, capsys):
    """--optimize benchmarks the net caffe2py.onnx.backend.prepare would run: Conv +
    BatchNormalization + Relu become one ConvRelu; the input is not taken for a constant."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.random(shape, dtype=np.float32), name)
             for name, shape in (("W", (4, 3, 3, 3)), ("scale", (4,)), ("bias", (4,)), ("mean", (4,)))]
    inits.append(numpy_helper.from_array(rng.random(4, dtype=np.float32) + 0.5, "var"))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
         helper.make_node("Relu", ["n"], ["y"])], "cbr",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    path = tmp_path / "cbr.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    argv = ["bench", "--predict-net", str(path), "--max-batch-size", "2", "--iters", "2", "--run-individual"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert "ConvRelu" not in plain and "optimized:" not in plain
    assert main(argv + ["--optimize"]) == 0
    out = capsys.readouterr().out
    assert "optimized: 3 ops -> 1" in out
    assert re.search(r"Operator #0 \(\S+, ConvRelu\)", out)


def test_shapes_without_hints_keeps_stderr_clean_and_reports_unknown_blobs(tmp_path):
    """Ops skipped for want of an input shape go to the report's unknown section (text
    and json), not one stderr line per op."""
    import json
    import subprocess
    import sys
    from caffe2py.core import CreateOperator
    from caffe2py.proto import caffe2_pb2
    net = caffe2_pb2.NetDef(name="chain")
    net.op.extend([CreateOperator("Relu", ["x"], ["y"]), CreateOperator("NoSuchOpAnywhere", ["y"], ["z"]),
                   CreateOperator("Relu", ["z"], ["w"])])
    net.external_input.append("x")
    path = tmp_path / "net.pb"
    path.write_bytes(net.SerializeToString())
    def shapes(*extra):
        done = subprocess.run([sys.executable, "-m", "caffe2py", "shapes", "--predict-net", str(path)] + list(extra),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        return done.stdout
    report = json.loads(shapes("--format", "json"))
    assert {u["name"] for u in report["unknown"]} == {"x", "y", "z", "w"}
    assert "unknown blobs (4):" in shapes()
    report = json.loads(shapes("--format", "json", "--hint", "x,4,3"))
    assert {u["name"] for u in report["unknown"]} == {"z", "w"}
    assert any("NoSuchOpAnywhere" in w for w in report["warnings"])
    assert "warnings (1):" in shapes("--hint", "x,4,3")


def test_bench_ms_per_iter_and_average_latency_come_from_the_same_runs(capsys):
    """Caffe2's "Milliseconds per iter" and perf_test's "Average inference time cost" are
    both the mean of the same main runs (they once came from two different sets)."""
    import re
    assert main(["bench", "--iters", "5", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    per_iter = float(re.search(r"Milliseconds per iter: ([0-9.e+-]+?)\.? ", out).group(1))
    average = float(re.search(r"Average inference time cost: ([0-9.e+-]+) ms", out).group(1))
    assert per_iter == pytest.approx(average, rel=1e-4)
    assert "Total inference requests: 5" in out
    assert "1 warmup, 5 main runs" in out          # at least one warmup: kernels compile before timing
