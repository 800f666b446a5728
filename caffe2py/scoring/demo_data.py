"""A dataset for the built-in demo net: Parquet shards with an `id` column and a
`data` column of 784 float32 values per row (a 1x28x28 image, flattened; the demo
net declares the row shape, so the flat list is reshaped).

    python -m caffe2py.scoring.demo_data DIR [--shards 4] [--rows 1000] [--seed 0]
"""
import argparse
import os

import numpy as np

from .deps import require_pyarrow

ROW_VALUES = 28 * 28


def demo_images(rows, seed):
    rng = np.random.default_rng(seed)
    return rng.random((rows, ROW_VALUES), dtype=np.float32)


def write_demo_shards(folder, shards=4, rows=1000, seed=0):
    """Writes part-00000.parquet ... into folder; returns their paths. Ids are
    shard * 1_000_000 + row, so every row of the dataset has its own."""
    pa = require_pyarrow()
    import pyarrow.parquet as pq
    os.makedirs(folder, exist_ok=True)
    paths = []
    for k in range(shards):
        images = demo_images(rows, seed + k)
        ids = pa.array(np.arange(rows, dtype=np.int64) + k * 1_000_000)
        data = pa.FixedSizeListArray.from_arrays(pa.array(images.reshape(-1)), ROW_VALUES)
        path = os.path.join(folder, "part-%05d.parquet" % k)
        pq.write_table(pa.table({"id": ids, "data": data}), path)
        paths.append(path)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m caffe2py.scoring.demo_data", description=__doc__.split("\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--rows", type=int, default=1000, help="rows per shard")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    paths = write_demo_shards(args.folder, args.shards, args.rows, args.seed)
    print("wrote %d shard(s) of %d rows to %s" % (len(paths), args.rows, args.folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
