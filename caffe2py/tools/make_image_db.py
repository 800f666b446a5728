"""Write an image db that ImageInput reads (Caffe2's make_image_db, Caffe's convert_imageset).

    python -m caffe2py.tools.make_image_db FOLDER_OR_LIST out.lmdb [--db-type lmdb|leveldb|minidb]
        [--datum] [--shuffle] [--seed N] [--root DIR] [--resize N]
    python -m caffe2py.tools.make_image_db --generate N --num-labels K [--size S] out.lmdb [--datum]

FOLDER: one subfolder per class (sorted names are labels 0, 1, ...), image files in
each. LIST: a text file of "path label" lines (paths relative to --root, default the
list's folder). Each record's key is its zero-padded index and path; its value a
TensorProtos (the encoded file as a STRING tensor, the label as INT32), or with
--datum a Caffe Datum (encoded, label) as resnet50_trainer.py's use_caffe_datum=1
reads. The file bytes are stored as they are, unless --resize N re-encodes each image
(Pillow) with its shorter side N. --generate N writes N generated JPEG images instead
(S x S, default 32; class c a noisy image of one random colour per class, labels drawn
at random with --seed): a db to try a trainer on without a dataset.
"""
import argparse
import io
import os
import random
import sys

from caffe2py import db as dbs
from caffe2py.proto import caffe2_pb2
from caffe2py.proto.caffe2_legacy_pb2 import CaffeDatum

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")


def folder_entries(folder):
    """[(path, label)] of a folder of class subfolders, classes in sorted order."""
    classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    if not classes:
        raise SystemExit("make_image_db: %s has no class subfolders" % folder)
    entries = []
    for label, name in enumerate(classes):
        sub = os.path.join(folder, name)
        for f in sorted(os.listdir(sub)):
            if f.lower().endswith(IMAGE_EXTENSIONS):
                entries.append((os.path.join(sub, f), label))
    return entries


def list_entries(path, root):
    """[(path, label)] of a "path label" list file."""
    entries = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, label = line.rpartition(" ")
            if not name or not label.lstrip("-").isdigit():
                raise SystemExit("make_image_db: %s line %d: expected 'path label', got %r" % (path, number, line))
            entries.append((os.path.join(root, name), int(label)))
    return entries


def encoded_bytes(path, resize):
    with open(path, "rb") as f:
        data = f.read()
    if not resize:
        return data
    from PIL import Image
    with Image.open(io.BytesIO(data)) as img:
        img = img.convert("RGB")
        w, h = img.size
        scale = resize / min(w, h)
        img = img.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.BILINEAR)
        out = io.BytesIO()
        img.save(out, "JPEG", quality=90)
        return out.getvalue()


def record(data, label, datum):
    """The serialized record ImageInput reads."""
    if datum:
        return CaffeDatum(data=data, label=label, encoded=True).SerializeToString()
    protos = caffe2_pb2.TensorProtos()
    image = protos.protos.add()
    image.data_type = caffe2_pb2.TensorProto.STRING
    image.string_data.append(data)
    label_tensor = protos.protos.add()
    label_tensor.data_type = caffe2_pb2.TensorProto.INT32
    label_tensor.int32_data.append(label)
    return protos.SerializeToString()


def generated_images(n, num_labels, size, seed=0):
    """n (JPEG bytes, label): class c is a noisy size x size image of colour c."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    colours = rng.integers(0, 256, (num_labels, 3))
    for _ in range(n):
        label = int(rng.integers(num_labels))
        pixels = np.clip(colours[label] + rng.normal(0, 30, (size, size, 3)), 0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=90)
        yield out.getvalue(), label


def write_generated_db(out, n, num_labels, size=32, db_type="lmdb", datum=False, seed=0):
    """Write n generated images (generated_images) as records; returns n."""
    db = dbs.create_db(db_type, out, dbs.NEW)
    try:
        txn = db.new_transaction()
        for i, (data, label) in enumerate(generated_images(n, num_labels, size, seed)):
            txn.put(b"%08d" % i, record(data, label, datum))
        txn.commit()
    except BaseException:
        db.abort()
        raise
    db.close()
    return n


def write_db(entries, out, db_type="lmdb", datum=False, resize=0, commit_every=1000):
    """Write one record per (path, label); returns the number written."""
    db = dbs.create_db(db_type, out, dbs.NEW)
    try:
        txn = db.new_transaction()
        for i, (path, label) in enumerate(entries):
            key = "%08d_%s" % (i, os.path.basename(path))
            txn.put(key.encode("utf-8"), record(encoded_bytes(path, resize), label, datum))
            if (i + 1) % commit_every == 0:
                txn.commit()
        txn.commit()
    except BaseException:
        db.abort()
        raise
    db.close()
    return len(entries)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m caffe2py.tools.make_image_db", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", metavar="FOLDER_OR_LIST OUT",
                        help="a folder of class subfolders or a list file of 'path label' lines, then the db to "
                             "create (with --generate: only the db)")
    parser.add_argument("--db-type", default="lmdb", help="lmdb (default), leveldb or minidb")
    parser.add_argument("--datum", action="store_true", help="write Caffe Datum records (use_caffe_datum=1)")
    parser.add_argument("--shuffle", action="store_true", help="shuffle the records")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle's (or --generate's) seed")
    parser.add_argument("--root", default=None, help="folder the list's paths are relative to")
    parser.add_argument("--resize", type=int, default=0, help="re-encode with the shorter side this size")
    parser.add_argument("--generate", type=int, default=0, metavar="N", help="write N generated images instead")
    parser.add_argument("--num-labels", type=int, default=2, help="--generate's number of classes")
    parser.add_argument("--size", type=int, default=32, help="--generate's image side")
    args = parser.parse_args(argv)
    if len(args.paths) != (1 if args.generate else 2):
        parser.error("expected OUT with --generate, FOLDER_OR_LIST OUT otherwise")
    if args.generate and (args.generate < 0 or args.num_labels < 1 or args.size < 1):
        parser.error("--generate, --num-labels and --size must be positive")
    try:
        if args.generate:
            out = args.paths[0]
            n = write_generated_db(out, args.generate, args.num_labels, args.size, args.db_type, args.datum,
                                   args.seed)
        else:
            source, out = args.paths
            if os.path.isdir(source):
                entries = folder_entries(source)
            else:
                entries = list_entries(source, args.root or os.path.dirname(os.path.abspath(source)))
            if args.shuffle:
                random.Random(args.seed).shuffle(entries)
            n = write_db(entries, out, args.db_type, args.datum, args.resize)
    except dbs.DBError as exc:
        raise SystemExit("make_image_db: %s" % exc) from None
    print("make_image_db: wrote %d records to %s (%s)" % (n, out, args.db_type))
    return 0


if __name__ == "__main__":
    sys.exit(main())
