"""BenchmarkNet prints Caffe2's benchmark text and returns [ms/iter, per-op ms...]."""
import re

import numpy as np

from caffe2py import core, workspace


def test_benchmark_net_text_and_return(capsys):
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.ones((16, 8), np.float32))
    workspace.FeedBlob("w", np.ones((4, 8), np.float32))
    workspace.FeedBlob("b", np.ones(4, np.float32))
    net = core.Net("bench")
    net.FC(["x", "w", "b"], "y")
    net.Relu("y", "z")
    workspace.CreateNet(net)
    result = workspace.BenchmarkNet("bench", 2, 5, True)
    out = capsys.readouterr().out
    assert len(result) == 3 and all(v >= 0 for v in result)
    assert "Starting benchmark." in out and "Running warmup runs." in out and "Main runs." in out
    assert re.search(r"Main run finished\. Milliseconds per iter: [\d.e-]+\. Iters per second: [\d.e+]+", out)
    assert re.search(r"Operator #0 \(y, FC\) [\d.e-]+ ms/iter \([\d.e-]+ GFLOP, [\d.e-]+ GFLOPS\)", out)
    assert re.search(r"Operator #1 \(z, Relu\) [\d.e-]+ ms/iter", out)
    for title in ("Time per operator type:", "FLOP per operator type:",
                  "Feature Memory per operator type:", "Parameter Memory per operator type:"):
        assert title in out
    # FC flops: 2 * 16 * 8 * 4 = 1024 -> 1.024e-06 GFLOP in the FLOP table
    assert re.search(r"1\.024e-06 GFLOP\.\s+[\d.]+%\. FC", out)
    np.testing.assert_array_equal(workspace.FetchBlob("z"), np.full((16, 4), 9.0))


def test_benchmark_without_individual_returns_one_number(capsys):
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.ones(3, np.float32))
    net = core.Net("bench2")
    net.Relu("x", "y")
    workspace.CreateNet(net)
    assert len(workspace.BenchmarkNet("bench2", 0, 3, False)) == 1
    assert "Operator #" not in capsys.readouterr().out


def _onnx_flops(capsys, node, feeds):
    """GFLOP printed for a one-node ONNX model converted to a Caffe2 net."""
    from onnx import TensorProto, helper

    from caffe2py.onnx import convert
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    _, predict_net = convert(model)
    workspace.ResetWorkspace()
    for k, v in feeds.items():
        workspace.FeedBlob(k, v)
    predict_net.name = "onnx_cost"
    workspace.CreateNet(predict_net)
    workspace.BenchmarkNet("onnx_cost", 0, 1, True)
    out = capsys.readouterr().out
    return float(re.search(r"Operator #0 \(\S*, %s\) [\d.e-]+ ms/iter \(([\d.e+-]+) GFLOP" % node.op_type, out)[1])


def test_onnx_ops_report_flops(capsys):
    """ONNX Conv (auto_pad, stride, groups), Gemm (transB) and batched MatMul have
    cost functions: flops = 2 * multiply-adds, counted here by hand."""
    from onnx import helper
    rng = np.random.default_rng(0)
    x = rng.random((2, 4, 9, 11), dtype=np.float32)
    w = rng.random((6, 2, 3, 3), dtype=np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=2, strides=[2, 2], auto_pad="SAME_UPPER")
    out_h, out_w = -(-9 // 2), -(-11 // 2)              # SAME: ceil(in / stride)
    expected = 2.0 * (2 * 6 * out_h * out_w) * (2 * 3 * 3)
    assert np.isclose(_onnx_flops(capsys, conv, {"x": x, "w": w}), expected / 1e9, rtol=1e-3)

    a, b = rng.random((5, 7), dtype=np.float32), rng.random((3, 7), dtype=np.float32)
    gemm = helper.make_node("Gemm", ["a", "b"], ["y"], transB=1)
    assert np.isclose(_onnx_flops(capsys, gemm, {"a": a, "b": b}), 2.0 * 5 * 7 * 3 / 1e9, rtol=1e-3)

    a, b = rng.random((4, 1, 5, 6), dtype=np.float32), rng.random((3, 6, 2), dtype=np.float32)
    mm = helper.make_node("MatMul", ["a", "b"], ["y"])
    assert np.isclose(_onnx_flops(capsys, mm, {"a": a, "b": b}), 2.0 * 12 * 5 * 6 * 2 / 1e9, rtol=1e-3)


def _conv_chain_model():
    """Conv, then an elementwise tail that fusion turns into one generated loop
    (Mul, Add, Sigmoid on the conv's output: 16,384 values, fusion's minimum), then a
    MaxPool."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "c"], ["m"]),
             helper.make_node("Add", ["m", "c"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["g"]),
             helper.make_node("MaxPool", ["g"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "conv_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_per_op_times_come_from_the_plans_own_runs(monkeypatch):
    """per_op_timing times the generated run itself (the output pool, the fused loop):
    op by op only once, for the cost table; the warm timed runs take every output from
    the pool; each op gets a time, a fused group's shared by its ops; the workspace
    ends as after plain runs."""
    from caffe2py.benchmark import per_op_timing
    from caffe2py.onnx import backend
    model = _conv_chain_model()
    x = np.random.default_rng(4).standard_normal((2, 3, 32, 32)).astype(np.float32)
    rep = backend.prepare(model)
    expected = rep.run({"x": x})[0]
    rep.run({"x": x})
    plan = rep.plan
    groups = [s for s in plan.steps if getattr(s, "members", None)]
    assert groups and len(groups[0].members) >= 2          # elementwise ops in one generated loop
    blobs = dict(rep.constants)
    blobs["x"] = x
    one_by_one = []
    run_step = plan.run_step
    monkeypatch.setattr(plan, "run_step", lambda *a: (one_by_one.append(a[0]), run_step(*a))[1])
    pool = plan.output_pool

    def pool_use(runs):
        before = (pool.allocations, pool.reuses)
        runs()
        return pool.allocations - before[0], pool.reuses - before[1]
    # the timed runs take their outputs from the pool as plain runs of the plan on the
    # same blobs do (6 of each, after one of each): as many requests, reusing at least
    # as often (the cost pass before them frees the last run's committed output)
    plain = pool_use(lambda: [plan.run_serial(blobs) for _ in range(7)])
    per_op_timing(plan, blobs, 1)
    plain = pool_use(lambda: [plan.run_serial(blobs) for _ in range(6)])
    timed = pool_use(lambda: per_op_timing(plan, blobs, 6))
    assert plain[1] > 0 and sum(timed) == sum(plain) and timed[1] >= plain[1]
    ms, costs, feature_mb = per_op_timing(plan, blobs, 3)
    steps = plan.op_steps()
    assert len(one_by_one) == 3 * len(steps)                # the cost passes only, not the timed runs
    assert len(ms) == len(costs) == len(feature_mb) == len(steps)
    assert all(t > 0 for t in ms)
    fused = [ms[k] for k, s in enumerate(steps) if s in groups[0].members]
    assert len(fused) == len(groups[0].members) and fused == [fused[0]] * len(fused)
    np.testing.assert_array_equal(blobs["y"], expected)
