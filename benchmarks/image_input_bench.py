"""ImageInput throughput: images/s that the op hands over at 1 and 2 decode threads, on
an lmdb of ImageNet-sized JPEGs (500 x 375, quality 90), with resnet50_trainer.py's
settings (scale 256, crop 224, mirror, mean / std 128, training mode). Each run of the
op returns the batch prefetched during the previous one, so with nothing else in the
net the rate is the decoding pipeline's own (decode, resize, crop, normalise).

Usage: python benchmarks/image_input_bench.py [--images 64] [--batch 32] [--runs 6]
"""
import argparse
import io
import os
import shutil
import tempfile
import time

import numpy as np
from _timing import machine_label
from PIL import Image

import caffe2py.compat  # noqa: F401
from caffe2.python import core, workspace
from caffe2py.tools.make_image_db import record
from caffe2py import db as dbs


def make_db(path, n, rng):
    db = dbs.create_db("lmdb", path, dbs.NEW)
    txn = db.new_transaction()
    # smooth random images: JPEG sizes like photographs' (pure noise would compress badly)
    for i in range(n):
        base = rng.integers(0, 256, (47, 63, 3)).astype(np.uint8)
        img = Image.fromarray(base).resize((500, 375), Image.BICUBIC)
        out = io.BytesIO()
        img.save(out, "JPEG", quality=90)
        txn.put(b"%08d" % i, record(out.getvalue(), i % 10, datum=False))
    txn.commit()
    db.close()


def images_per_second(path, batch, runs, threads):
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("CreateDB", [], ["reader"], db=path, db_type="lmdb"))
    net = core.Net("image_input_bench_%d" % threads)
    net.ImageInput(["reader"], ["data", "label"], batch_size=batch, scale=256, crop=224, mirror=1, mean=128.0,
                   std=128.0, decode_threads=threads, is_test=0)
    workspace.CreateNet(net)
    workspace.RunNet(net.Proto().name)          # first batch: compile, warm the caches
    t0 = time.perf_counter()
    for _ in range(runs):
        workspace.RunNet(net.Proto().name)
    return runs * batch / (time.perf_counter() - t0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    try:
        path = os.path.join(folder, "bench.lmdb")
        make_db(path, args.images, np.random.default_rng(0))
        print("machine:", machine_label(), "| load average: %.1f %.1f %.1f" % os.getloadavg())
        print("| decode threads | images/s | ms per batch of %d |" % args.batch)
        print("|---|---|---|")
        for threads in (1, 2):
            rate = images_per_second(path, args.batch, args.runs, threads)
            print("| %d | %.0f | %.0f |" % (threads, rate, 1e3 * args.batch / rate))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
