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
