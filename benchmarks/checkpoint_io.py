"""Save / Load of a model's parameters in Caffe2's minidb format next to torch.save /
torch.load of the same tensors, in the same process, alternating.

    python benchmarks/checkpoint_io.py [--mb 64] [--runs 5]

The parameter set: 40 float32 tensors (a few large embedding-like tables and many
small layers) plus one int64 tensor, about --mb megabytes in all. Ours goes through
the Save and Load ops (serialization to Caffe2's BlobProto records, chunks of 1M
elements, an fsync and an atomic rename of the file); torch.save writes its zip
format without fsync. Both read back into fresh arrays. Prints ms and ours / torch.
"""
import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import interleaved_ms, machine_label  # noqa: E402

from caffe2py import core, workspace  # noqa: E402


def parameters(total_mb, seed=0):
    rng = np.random.default_rng(seed)
    floats = total_mb * (1 << 20) // 4
    shapes = [(floats // 4 // 64, 64)] * 3 + [(256, 256)] * 37
    params = {"p%02d" % i: rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    params["ids"] = rng.integers(0, 1 << 40, 100_000).astype(np.int64)
    return params


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not installed: nothing to compare with")
        return 0
    params = parameters(args.mb)
    nbytes = sum(a.nbytes for a in params.values())
    names = sorted(params)
    tmp = tempfile.mkdtemp()
    ours_path, torch_path = os.path.join(tmp, "params.minidb"), os.path.join(tmp, "params.pt")
    for name, value in params.items():
        workspace.FeedBlob(name, value)
    save = core.CreateOperator("Save", names, [], db=ours_path, db_type="minidb", absolute_path=1)
    load = core.CreateOperator("Load", [], names, db=ours_path, db_type="minidb", absolute_path=1)
    tensors = {k: torch.from_numpy(v) for k, v in params.items()}

    def torch_load():
        return {k: v.numpy() for k, v in torch.load(torch_path).items()}

    print("machine: %s; %d tensors, %.1f MB" % (machine_label(), len(params), nbytes / 1e6))
    s_ours, s_torch = interleaved_ms(lambda: workspace.RunOperatorOnce(save),
                                     lambda: torch.save(tensors, torch_path), args.runs)
    l_ours, l_torch = interleaved_ms(lambda: workspace.RunOperatorOnce(load), torch_load, args.runs)
    for name in names:                       # what was loaded is what was saved
        assert np.array_equal(workspace.FetchBlob(name), params[name])
    sizes = os.path.getsize(ours_path) / 1e6, os.path.getsize(torch_path) / 1e6
    print("| step | ours ms | torch ms | ours / torch | ours MB/s |")
    print("|---|---|---|---|---|")
    print("| save | %.1f | %.1f | %.2f | %.0f |" % (s_ours, s_torch, s_ours / s_torch, nbytes / 1e3 / s_ours))
    print("| load | %.1f | %.1f | %.2f | %.0f |" % (l_ours, l_torch, l_ours / l_torch, nbytes / 1e3 / l_ours))
    print("file size: minidb %.1f MB, torch %.1f MB" % sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
