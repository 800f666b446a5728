"""A 100-tree, depth-8 TreeEnsembleRegressor (full trees: 255 splits and 256 leaves
each, 20 features) over 100,000 float32 rows: caffe2py's compiled forest kernel vs
onnxruntime in the same process, alternating blocks (_timing.interleaved_ms).

    python benchmarks/tree_ensemble_bench.py [--rows 100000] [--threads 1]
(one thread count per process: the team's size is fixed at its first use)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import numpy as np  # noqa: E402
from _timing import interleaved_ms, machine_label  # noqa: E402
from _tree_models import random_trees, regressor, tree_ensemble  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(args.threads)
    import onnxruntime as ort

    import caffe2py.onnx.backend as c2_backend

    rng = np.random.default_rng(0)
    trees = random_trees(rng, args.trees, args.depth, 20, 1, leaf_prob=0.0)
    x = rng.standard_normal((args.rows, 20)).astype(np.float32)
    print("machine:", machine_label())
    print("| model | threads | ours ms | onnxruntime ms | ratio (ours / ort) |")
    print("|---|---|---|---|---|")
    for name, model in (("TreeEnsembleRegressor", regressor(trees, 20, 1)),
                        ("TreeEnsemble (opset 5)", tree_ensemble(trees, 20, 1))):
        for n in (args.threads,):
            rep = c2_backend.prepare(model)
            so = ort.SessionOptions()
            so.intra_op_num_threads = n
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            ours_out = rep.run([x])[0]
            ref = sess.run(None, {"X": x})[0]
            np.testing.assert_allclose(ours_out, ref, rtol=1e-5, atol=1e-4)
            ours, peer = interleaved_ms(lambda: rep.run([x]), lambda: sess.run(None, {"X": x}), args.runs)
            print("| %s | %d | %.1f | %.1f | %.2f |" % (name, n, ours, peer, ours / peer))


if __name__ == "__main__":
    main()
