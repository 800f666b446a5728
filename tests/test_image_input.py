"""ImageInput against a NumPy reference of Caffe2's transforms, written here: dbs of
JPEG and PNG records (lmdb, leveldb, minidb; Caffe2 TensorProtos and Caffe Datums),
bounding boxes, OpenCV's INTER_AREA scaling, centre crops, mean / std per channel
(exact where nothing is resized; within one grey level where the area resize
rounds), random crops, mirroring, colour jitter and lighting by their statistics,
Caffe2's label types and additional outputs, and the named errors for bad records.
make_image_db's folder and list inputs are read back the same way."""
import io
import math
import os

import numpy as np
import pytest
from PIL import Image

import caffe2py.compat  # noqa: F401
from caffe2.python import brew, core, model_helper, workspace
from caffe2py import db as dbs
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.proto.caffe2_legacy_pb2 import CaffeDatum
from caffe2py.tools import make_image_db

DT = caffe2_pb2.TensorProto
F32 = np.float32


# ----------------------------------------------------------------- writing records

def encode(pixels_rgb, fmt):
    out = io.BytesIO()
    Image.fromarray(pixels_rgb).save(out, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return out.getvalue()


def tensor_protos(image_bytes=None, label=None, label_dtype=DT.INT32, extra=(), bbox=None, raw=None):
    protos = caffe2_pb2.TensorProtos()
    image = protos.protos.add()
    if raw is not None:
        image.data_type = DT.BYTE
        image.dims.extend(raw.shape)
        image.byte_data = raw.tobytes()
    else:
        image.data_type = DT.STRING
        image.string_data.append(image_bytes)
    if label is not None:
        t = protos.protos.add()
        t.data_type = label_dtype
        (t.float_data if label_dtype == DT.FLOAT else t.int32_data).extend(np.atleast_1d(label).tolist())
    for dtype, values in extra:
        t = protos.protos.add()
        t.data_type = dtype
        (t.float_data if dtype == DT.FLOAT else t.int32_data).extend(values)
    if bbox is not None:
        t = protos.protos.add()
        t.data_type = DT.INT32
        t.int32_data.extend(bbox)
    return protos.SerializeToString()


def write(path, values, db_type="lmdb"):
    db = dbs.create_db(db_type, str(path), dbs.NEW)
    txn = db.new_transaction()
    for i, value in enumerate(values):
        txn.put(("%04d" % i).encode(), value)
    txn.commit()
    db.close()
    return str(path)


def images(rng, shapes):
    return [rng.integers(0, 256, shape + (3,)).astype(np.uint8) for shape in shapes]


def decoded_bgr(data):
    """The reference decoder: Pillow's pixels, channels reversed (OpenCV's BGR)."""
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"))[:, :, ::-1].astype(np.float64)


def run_image_input(db_path, outputs=("data", "label"), db_type="lmdb", runs=1, **kwargs):
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("CreateDB", [], ["reader"], db=db_path, db_type=db_type))
    net = core.Net("image_input_test")
    net.ImageInput(["reader"], list(outputs), **kwargs)
    workspace.CreateNet(net)
    batches = []
    for _ in range(runs):
        workspace.RunNet(net.Proto().name)
        batches.append([workspace.FetchBlob(o) for o in outputs])
    return batches if runs > 1 else batches[0]


# ----------------------------------------------------------------- the reference

def area_matrix(src, dst):
    """OpenCV's INTER_AREA shrinking src -> dst as a [dst, src] matrix: each output pixel
    averages the source pixels it covers, weighted by the covered fraction."""
    m = np.zeros((dst, src))
    scale = src / dst
    for d in range(dst):
        lo, hi = d * scale, min((d + 1) * scale, src)
        for s in range(int(math.floor(lo)), int(math.ceil(hi))):
            m[d, s] = max(0.0, min(hi, s + 1) - max(lo, s)) / (hi - lo)
    return m


def blend_matrix(src, dst):
    """OpenCV's INTER_AREA when a side grows: each output pixel blends source pixel
    floor(d * src / dst) and the next one by the fraction of the output pixel that lies
    past the source pixel's edge."""
    m = np.zeros((dst, src))
    for d in range(dst):
        s = int(math.floor(d * src / dst))
        f = (d + 1) - (s + 1) * dst / src
        f = 0.0 if f <= 0 else f - math.floor(f)
        if s >= src - 1:
            s, f = src - 1, 0.0
        m[d, s] += 1 - f
        m[d, min(s + 1, src - 1)] += f
    return m


def reference_resize(img, h, w):
    rows, cols = img.shape[:2]
    matrix = area_matrix if rows >= h and cols >= w else blend_matrix
    out = np.einsum("yh,hwc,xw->yxc", matrix(rows, h), img, matrix(cols, w))
    return np.clip(np.rint(out), 0, 255)


def reference_transform(img, crop, mean, std, scale=-1, minsize=-1, box=None):
    """Caffe2's deterministic path (is_test=1): bounding box, scaling, centre crop,
    (x - mean) / std per channel, on a float64 BGR HWC image."""
    if box is not None:
        y0, x0, bh, bw = box
        if y0 + bh <= img.shape[0] and x0 + bw <= img.shape[1]:
            img = img[y0:y0 + bh, x0:x0 + bw]
    rows, cols = img.shape[:2]
    target = scale if scale > 0 else minsize
    if rows > cols:
        h, w = int(F32(rows) * F32(target) / F32(cols)), target
    else:
        h, w = target, int(F32(cols) * F32(target) / F32(rows))
    if (scale > 0 and (h, w) != (rows, cols)) or h > rows or w > cols:
        img = reference_resize(img, h, w)
    y0, x0 = (img.shape[0] - crop) // 2, (img.shape[1] - crop) // 2
    out = img[y0:y0 + crop, x0:x0 + crop]
    return (out - np.asarray(mean)) / np.asarray(std)


# ----------------------------------------------------------------- deterministic transforms

@pytest.mark.parametrize("db_type", ["lmdb", "leveldb", "minidb"])
def test_centre_crops_and_normalisation_are_exact(tmp_path, db_type):
    """No resize (minsize below every side): crops, bounding boxes and mean / std match the
    reference exactly, for PNG and JPEG records alike (the same decoder on both sides)."""
    rng = np.random.default_rng(0)
    pix = images(rng, [(30, 40), (41, 33), (36, 36), (50, 31)])
    data = [encode(p, fmt) for p, fmt in zip(pix, ["PNG", "JPEG", "PNG", "JPEG"])]
    boxes = [None, (2, 3, 30, 25), None, (60, 0, 10, 10)]         # the last does not fit: ignored
    values = [tensor_protos(d, i, bbox=b) for i, (d, b) in enumerate(zip(data, boxes))]
    path = write(tmp_path / "db", values, db_type)
    mean, std = [10.0, 120.0, 250.0], [2.0, 64.0, 0.5]
    out, label = run_image_input(path, db_type=db_type, batch_size=4, minsize=20, crop=20, is_test=1,
                                 mean_per_channel=mean, std_per_channel=std)
    assert out.shape == (4, 20, 20, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(label, np.arange(4, dtype=np.int32))
    for i in range(4):
        expected = reference_transform(decoded_bgr(data[i]), 20, mean, std, minsize=20, box=boxes[i])
        np.testing.assert_allclose(out[i], expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("shape,kw", [((48, 64), {"scale": 32}), ((64, 40), {"scale": 40}),
                                      ((20, 26), {"minsize": 30}), ((37, 53), {"scale": 24}),
                                      ((24, 24), {"scale": 24})])
def test_scaling_matches_opencvs_area_resize(tmp_path, shape, kw):
    """The shorter side goes to scale (or up to minsize) by INTER_AREA; equal to the
    reference up to one grey level where the rounding of a .5 differs."""
    rng = np.random.default_rng(1)
    smooth = np.clip(np.cumsum(rng.integers(-9, 10, shape + (3,)), axis=1) + 128, 0, 255).astype(np.uint8)
    data = encode(smooth, "PNG")
    path = write(tmp_path / "db", [tensor_protos(data, 0)])
    crop = min(kw.values())
    (out, _) = run_image_input(path, batch_size=1, crop=crop, is_test=1, **kw)
    expected = reference_transform(decoded_bgr(data), crop, [0, 0, 0], [1, 1, 1], **kw)
    diff = np.abs(out[0] - expected)
    assert diff.max() <= 1.0 and (diff == 0).mean() > 0.98


def test_warp_resizes_to_a_square(tmp_path):
    rng = np.random.default_rng(2)
    data = encode(images(rng, [(30, 60)])[0], "PNG")
    path = write(tmp_path / "db", [tensor_protos(data, 0)])
    (out, _) = run_image_input(path, batch_size=1, scale=20, crop=20, warp=1, is_test=1)
    img = decoded_bgr(data)
    expected = np.clip(np.rint(np.einsum("yh,hwc,xw->yxc", area_matrix(30, 20), img, area_matrix(60, 20))), 0, 255)
    assert np.abs(out[0] - expected).max() <= 1.0


def test_raw_pixels_grayscale_and_channel_conversion(tmp_path):
    rng = np.random.default_rng(3)
    raw_bgr = rng.integers(0, 256, (12, 14, 3)).astype(np.uint8)
    raw_gray = rng.integers(0, 256, (12, 14, 1)).astype(np.uint8)
    path = write(tmp_path / "db", [tensor_protos(raw=raw_bgr, label=0), tensor_protos(raw=raw_gray, label=1)])
    (out, _) = run_image_input(path, batch_size=2, minsize=10, crop=10, is_test=1)
    np.testing.assert_array_equal(out[0], raw_bgr[1:11, 2:12].astype(F32))         # raw bytes are BGR already
    np.testing.assert_array_equal(out[1], np.repeat(raw_gray[1:11, 2:12], 3, axis=2).astype(F32))
    (gray, _) = run_image_input(path, batch_size=2, minsize=10, crop=10, is_test=1, color=0)
    expected = np.rint(raw_bgr[1:11, 2:12].astype(F32) @ np.array([0.114, 0.587, 0.299], F32))
    assert gray.shape == (2, 10, 10, 1)
    np.testing.assert_array_equal(gray[0, :, :, 0], expected)


# ----------------------------------------------------------------- random transforms

def column_image(h, w):
    """Pixels that say where they are: B = column, G = row, R = 7."""
    cols, rows = np.meshgrid(np.arange(w), np.arange(h))
    return np.stack([np.full((h, w), 7), rows, cols], axis=2).astype(np.uint8)     # RGB, so B = column


def test_random_crops_and_mirrors_have_caffe2s_distribution(tmp_path):
    """Offsets uniform over [0, size - crop]; about half the crops mirrored."""
    data = encode(column_image(20, 30), "PNG")
    path = write(tmp_path / "db", [tensor_protos(data, 0)] * 8)
    batches = run_image_input(path, runs=25, batch_size=8, minsize=16, crop=16, mirror=1)
    x_offsets, y_offsets, mirrored = [], [], 0
    for out, _ in batches:
        for img in out:
            b, g, r = img[..., 0], img[..., 1], img[..., 2]
            assert (r == 7).all()
            row_step = np.diff(b[0])
            flipped = bool((row_step == -1).all())
            assert flipped or (row_step == 1).all()
            mirrored += flipped
            x_offsets.append(int(b[0].min()))
            y_offsets.append(int(g[0, 0]))
            np.testing.assert_array_equal(g[:, 0], np.arange(g[0, 0], g[0, 0] + 16))
    n = len(x_offsets)
    assert set(x_offsets) <= set(range(15)) and set(y_offsets) <= set(range(5))
    assert abs(np.mean(x_offsets) - 7.0) < 1.5 and abs(np.mean(y_offsets) - 2.0) < 0.6
    assert len(set(x_offsets)) >= 12 and len(set(y_offsets)) == 5
    assert 0.35 < mirrored / n < 0.65


def test_color_jitter_on_a_gray_image_is_a_brightness_factor(tmp_path):
    """On a grey image saturation and contrast change nothing; brightness multiplies by
    U(1 - 0.4, 1 + 0.4)."""
    gray = np.full((16, 16, 3), 100, np.uint8)
    path = write(tmp_path / "db", [tensor_protos(encode(gray, "PNG"), 0)] * 16)
    batches = run_image_input(path, runs=12, batch_size=16, minsize=16, crop=16, color_jitter=1)
    factors = np.array([img[0, 0, 0] / 100.0 for out, _ in batches for img in out])
    for out, _ in batches:
        assert np.allclose(out, out[:, :1, :1, :1], rtol=1e-5)         # uniform within each image
    assert factors.min() >= 0.6 - 1e-5 and factors.max() <= 1.4 + 1e-5
    assert abs(factors.mean() - 1.0) < 0.06 and abs(factors.std() - 0.4 / math.sqrt(3)) < 0.05


def test_color_lighting_shift_has_the_pca_covariance(tmp_path):
    gray = np.full((8, 8, 3), 128, np.uint8)
    path = write(tmp_path / "db", [tensor_protos(encode(gray, "PNG"), 0)] * 32)
    batches = run_image_input(path, runs=12, batch_size=32, minsize=8, crop=8, color_lighting=1,
                              color_lighting_std=0.1)
    shifts = np.array([img[0, 0] - 128.0 for out, _ in batches for img in out])      # BGR
    vecs = np.array([[-144.7125, 183.396, 102.2295], [-148.104, -1.1475, -207.57],
                     [-148.818, -177.174, 107.1765]])
    vals = np.array([0.2175, 0.0188, 0.0045])
    cov_rgb = (vecs * vals * 0.1) @ (vecs * vals * 0.1).T
    expected_std = np.sqrt(np.diag(cov_rgb))[::-1]
    np.testing.assert_allclose(shifts.std(axis=0), expected_std, rtol=0.2)
    assert np.all(np.abs(shifts.mean(axis=0)) < 0.3 * expected_std)


def test_inception_scale_jitter_and_random_scale(tmp_path):
    data = encode(column_image(40, 60), "PNG")
    path = write(tmp_path / "db", [tensor_protos(data, 0)] * 4)
    outs = run_image_input(path, runs=6, batch_size=4, scale=24, crop=24, scale_jitter_type=1)
    widths = {float(img[0, -1, 0] - img[0, 0, 0]) for out, _ in outs for img in out}
    assert all(o.shape == (4, 24, 24, 3) for o, _ in outs) and len(widths) > 3      # regions of many sizes
    # random_scale draws the minsize per image: a 16 x 24 image is upscaled by a random amount
    small = write(tmp_path / "small", [tensor_protos(encode(column_image(16, 24), "PNG"), 0)] * 4)
    outs = run_image_input(small, runs=4, batch_size=4, crop=16, random_scale=[16, 40], is_test=1)
    spans = {float(img[0, -1, 0] - img[0, 0, 0]) for out, _ in outs for img in out}
    assert len(spans) > 2      # different scales: the 16 columns cover different source spans


# ----------------------------------------------------------------- labels and extra outputs

def test_label_types_and_additional_outputs(tmp_path):
    rng = np.random.default_rng(4)
    data = encode(images(rng, [(10, 10)])[0], "PNG")
    common = dict(batch_size=2, minsize=8, crop=8, is_test=1)
    # 1: sparse indices -> multi-hot, 2: dense, with a FLOAT extra and an INT32 extra of 3 values
    sparse = write(tmp_path / "sparse", [tensor_protos(data, [1, 4], extra=[(DT.FLOAT, [2.5]), (DT.INT32, [1, 2, 3])]),
                                         tensor_protos(data, [0], extra=[(DT.FLOAT, [7.0]), (DT.INT32, [4, 5, 6])])])
    _, label, e1, e2 = run_image_input(sparse, outputs=("d", "l", "e1", "e2"), label_type=1, num_labels=5,
                                       output_sizes=[1, 3], **common)
    np.testing.assert_array_equal(label, [[0, 1, 0, 0, 1], [1, 0, 0, 0, 0]])
    assert label.dtype == np.int32 and e1.dtype == np.float32 and e2.dtype == np.int32
    np.testing.assert_array_equal(e1, [[2.5], [7.0]])
    np.testing.assert_array_equal(e2, [[1, 2, 3], [4, 5, 6]])
    dense = write(tmp_path / "dense", [tensor_protos(data, [0.5, 1.5, 2.5], DT.FLOAT)] * 2)
    _, label = run_image_input(dense, label_type=2, num_labels=3, **common)
    np.testing.assert_array_equal(label, [[0.5, 1.5, 2.5]] * 2)
    # 3: weighted sparse, weights in protos[2]
    weighted = write(tmp_path / "weighted", [tensor_protos(data, [2, 0], extra=[(DT.FLOAT, [0.25, 4.0])])] * 2)
    _, label = run_image_input(weighted, label_type=3, num_labels=4, **common)
    np.testing.assert_array_equal(label, [[4.0, 0, 0.25, 0]] * 2)
    assert label.dtype == np.float32
    floats = write(tmp_path / "float", [tensor_protos(data, 1.5, DT.FLOAT)] * 2)
    _, label = run_image_input(floats, **common)
    assert label.dtype == np.float32 and list(label) == [1.5, 1.5]


def test_caffe_datum_records(tmp_path):
    rng = np.random.default_rng(5)
    pix = images(rng, [(12, 12)])[0]
    raw_chw = rng.integers(0, 256, (3, 12, 12)).astype(np.uint8)
    values = [CaffeDatum(data=encode(pix, "PNG"), encoded=True, label=3).SerializeToString(),
              CaffeDatum(data=raw_chw.tobytes(), channels=3, height=12, width=12, label=9).SerializeToString()]
    path = write(tmp_path / "db", values)
    out, label = run_image_input(path, batch_size=2, minsize=12, crop=12, is_test=1, use_caffe_datum=1)
    np.testing.assert_array_equal(label, [3, 9])
    np.testing.assert_array_equal(out[0], pix[:, :, ::-1].astype(F32))
    np.testing.assert_array_equal(out[1], raw_chw.transpose(1, 2, 0).astype(F32))


# ----------------------------------------------------------------- threads, helpers, outputs

def test_decode_threads_give_the_same_batches_and_batches_follow_the_db(tmp_path):
    rng = np.random.default_rng(6)
    pix = images(rng, [(20, 24)] * 6)
    path = write(tmp_path / "db", [tensor_protos(encode(p, "PNG"), i) for i, p in enumerate(pix)])
    one = run_image_input(path, runs=3, batch_size=4, minsize=16, crop=16, is_test=1, decode_threads=1)
    two = run_image_input(path, runs=3, batch_size=4, minsize=16, crop=16, is_test=1, decode_threads=2)
    for (a, la), (b, lb) in zip(one, two):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)
    # the reader starts over at the end: records 0-3, 4 5 0 1, 2-5
    assert [list(lab) for _, lab in one] == [[0, 1, 2, 3], [4, 5, 0, 1], [2, 3, 4, 5]]


def test_a_seeded_op_draws_the_same_crops_whatever_the_decode_threads(tmp_path):
    """With a random_seed each image's crop, mirror and jitter come from a generator of its
    own in record order: 1 and 3 decode threads, and two runs, give the same batches."""
    pix = images(np.random.default_rng(7), [(24, 30)] * 6)
    path = write(tmp_path / "db", [tensor_protos(encode(p, "PNG"), i) for i, p in enumerate(pix)])

    def seeded(seed, threads):
        option = core.DeviceOption(0, random_seed=seed)
        with core.DeviceScope(option):
            return run_image_input(path, runs=3, batch_size=4, minsize=20, crop=16, mirror=1, color_jitter=1,
                                   decode_threads=threads)
    one, three, again, other = seeded(5, 1), seeded(5, 3), seeded(5, 3), seeded(6, 3)
    for a, b, c in zip(one, three, again):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[0], c[0])
    assert any(not np.array_equal(a[0], d[0]) for a, d in zip(one, other))
    # random crops: the batches are not all centre crops
    centre = run_image_input(path, runs=3, batch_size=4, minsize=20, crop=16, is_test=1)
    assert any(not np.array_equal(a[0], c[0]) for a, c in zip(one, centre))


def test_brew_image_input_gives_nchw_and_the_gpu_transform_output(tmp_path):
    rng = np.random.default_rng(7)
    pix = images(rng, [(10, 10)])[0]
    path = write(tmp_path / "db", [tensor_protos(encode(pix, "PNG"), 1)] * 2)
    workspace.ResetWorkspace()
    model = model_helper.ModelHelper(name="reader_model")
    reader = model.CreateDB("reader", db=path, db_type="lmdb")
    data, label = brew.image_input(model, reader, ["data", "label"], batch_size=2, minsize=8, crop=8, is_test=1,
                                   mean=128.0, std=128.0)
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    expected = (pix[1:9, 1:9, ::-1].astype(F32) - 128) / 128
    got = workspace.FetchBlob(str(data))
    assert got.shape == (2, 3, 8, 8)
    np.testing.assert_allclose(got[0], expected.transpose(2, 0, 1), rtol=1e-6)
    (nchw, _) = run_image_input(path, batch_size=2, minsize=8, crop=8, is_test=1, mean=128.0, std=128.0,
                                use_gpu_transform=1, output_type="float16")
    assert nchw.shape == (2, 3, 8, 8) and nchw.dtype == np.float16
    np.testing.assert_allclose(nchw[0], expected.transpose(2, 0, 1), atol=1e-3)


def test_shape_inference():
    workspace.ResetWorkspace()
    net = core.Net("infer")
    net.ImageInput(["reader"], ["data", "label", "extra"], batch_size=5, scale=32, crop=28, label_type=1,
                   num_labels=7, output_sizes=[3])
    shapes, _ = workspace.InferShapesAndTypes([net], {"reader": []})      # the reader: a known blob
    assert shapes["data"] == [5, 28, 28, 3] and shapes["label"] == [5, 7] and shapes["extra"] == [5, 3]


# ----------------------------------------------------------------- errors name the record

def error_of(path, db_type="lmdb", **kwargs):
    args = dict(batch_size=1, minsize=8, crop=8, is_test=1)
    args.update(kwargs)
    with pytest.raises(Caffe2Error) as info:
        run_image_input(path, db_type=db_type, **args)
    return str(info.value)


def test_bad_records_are_named_errors_with_their_key(tmp_path):
    rng = np.random.default_rng(8)
    good = encode(images(rng, [(10, 10)])[0], "JPEG")
    cases = [
        ("corrupt", [b"\xff\x00not a protobuf at all\x01"], {}, "record '0000'"),
        ("bad_image", [tensor_protos(good[:40] + b"garbage", 0)], {}, "record '0000': cannot decode the image"),
        ("no_label", [tensor_protos(good)], {}, "record '0000': the record holds 1 tensor"),
        ("datum_db", [CaffeDatum(data=good, encoded=True, label=1).SerializeToString()], {},
         "record '0000': the record holds 0 tensor.*use_caffe_datum=1"),
        ("protos_db", [tensor_protos(good, 1)], {"use_caffe_datum": 1}, "record '0000': the Datum holds no image"),
        ("label_range", [tensor_protos(good, [9])], {"label_type": 1, "num_labels": 4},
         "record '0000': label index 9 is outside"),
    ]
    import re
    for name, values, kwargs, pattern in cases:
        message = error_of(write(tmp_path / name, values), **kwargs)
        assert re.search(pattern, message), (name, message)
        assert "ImageInput" in message and "reader" in message


def test_undecodable_images_are_tolerated_up_to_max_decode_error_ratio(tmp_path):
    rng = np.random.default_rng(9)
    good = encode(images(rng, [(10, 10)])[0], "PNG")
    path = write(tmp_path / "db", [tensor_protos(good, 1), tensor_protos(b"\x89PNG broken", 2)])
    out, label = run_image_input(path, batch_size=2, minsize=8, crop=8, is_test=1, max_decode_error_ratio=0.5)
    assert out.shape == (2, 8, 8, 3) and (out[1] == 0).all() and label[0] == 1
    message = error_of(path, batch_size=2, max_decode_error_ratio=0.25)
    assert "record '0001'" in message and "max_decode_error_ratio" in message


def test_mixed_label_types_and_empty_dbs_are_named(tmp_path):
    rng = np.random.default_rng(10)
    good = encode(images(rng, [(10, 10)])[0], "PNG")
    mixed = write(tmp_path / "mixed", [tensor_protos(good, 1), tensor_protos(good, 1.0, DT.FLOAT)])
    assert "record '0001'" in error_of(mixed, batch_size=2)
    os.makedirs(tmp_path / "empty_src")
    empty = write(tmp_path / "empty", [])
    assert "no records" in error_of(empty)


def test_missing_pillow_is_a_named_error(tmp_path, monkeypatch):
    from caffe2py.kernels.cpu.cnn import onnx_image
    rng = np.random.default_rng(11)
    path = write(tmp_path / "db", [tensor_protos(encode(images(rng, [(10, 10)])[0], "PNG"), 0)])
    monkeypatch.setattr(onnx_image, "pillow", lambda: None)
    assert "caffe2py[image]" in error_of(path)


def test_bad_arguments_are_named_at_plan_time():
    for kwargs, pattern in (({"crop": 8}, "one and only one of scaling or minsize"),
                            ({"scale": 8, "crop": 16}, "no smaller than the crop"),
                            ({"scale": 8, "crop": 8, "mean_per_channel": [1, 2]}, "same size"),
                            ({"scale": 8, "crop": 8, "label_type": 2}, "num_labels"),
                            ({"scale": 8, "crop": 8, "batch_size": 0}, "batch_size")):
        args = dict(batch_size=2)
        args.update(kwargs)
        net = core.Net("bad_args")
        net.ImageInput(["reader"], ["d", "l"], **args)
        workspace.ResetWorkspace()
        workspace.FeedBlob("reader", np.zeros(1, F32))
        with pytest.raises(Caffe2Error, match=pattern):
            workspace.RunNetOnce(net)


# ----------------------------------------------------------------- make_image_db

def test_make_image_db_from_a_folder_and_a_list(tmp_path):
    rng = np.random.default_rng(12)
    pix = images(rng, [(12, 14)] * 4)
    for cls, (a, b) in (("cat", (0, 1)), ("dog", (2, 3))):
        os.makedirs(tmp_path / "imgs" / cls)
        Image.fromarray(pix[a]).save(tmp_path / "imgs" / cls / ("%d.png" % a))
        Image.fromarray(pix[b]).save(tmp_path / "imgs" / cls / ("%d.jpg" % b), quality=95)
    assert make_image_db.main([str(tmp_path / "imgs"), str(tmp_path / "out.lmdb")]) == 0
    out, label = run_image_input(str(tmp_path / "out.lmdb"), batch_size=4, minsize=12, crop=12, is_test=1)
    np.testing.assert_array_equal(label, [0, 0, 1, 1])
    np.testing.assert_array_equal(out[0], pix[0][:, 1:13, ::-1].astype(F32))       # the PNG, exact
    listing = tmp_path / "imgs" / "list.txt"
    listing.write_text("dog/3.jpg 5\ncat/0.png 7\n")
    assert make_image_db.main([str(listing), str(tmp_path / "datum.db"), "--db-type", "minidb", "--datum"]) == 0
    out, label = run_image_input(str(tmp_path / "datum.db"), db_type="minidb", batch_size=2, minsize=12, crop=12,
                                 is_test=1, use_caffe_datum=1)
    np.testing.assert_array_equal(label, [5, 7])
    np.testing.assert_array_equal(out[1], pix[0][:, 1:13, ::-1].astype(F32))


def test_make_image_db_generates_a_db_of_datums(tmp_path, capsys):
    """--generate N: N JPEG Caffe Datums of --size, one noisy colour per class; ImageInput reads them."""
    out = str(tmp_path / "gen.lmdb")
    assert make_image_db.main(["--generate", "12", "--num-labels", "3", "--size", "20", "--datum", out]) == 0
    assert "wrote 12 records" in capsys.readouterr().out
    db = dbs.create_db("lmdb", out, dbs.READ)
    cursor, records = db.new_cursor(), []
    while cursor.valid():
        datum = CaffeDatum.FromString(cursor.value())
        assert datum.encoded
        records.append((cursor.key(), datum.label, np.asarray(Image.open(io.BytesIO(datum.data)))))
        cursor.next()
    db.close()
    assert [key for key, _, _ in records] == [b"%08d" % i for i in range(12)]
    assert {label for _, label, _ in records} <= {0, 1, 2} and len({label for _, label, _ in records}) > 1
    assert all(pix.shape == (20, 20, 3) for _, _, pix in records)
    # images of one class share their mean colour (noise sd 30 over 400 pixels), other classes' differ
    means = {}
    for _, label, pix in records:
        means.setdefault(label, []).append(pix.reshape(-1, 3).mean(0))
    for colours in means.values():
        assert np.ptp(np.array(colours), axis=0).max() < 12
    batch, label = run_image_input(out, batch_size=12, minsize=20, crop=20, is_test=1, use_caffe_datum=1)
    assert batch.shape == (12, 20, 20, 3)            # ImageInput writes NHWC
    np.testing.assert_array_equal(label, [l for _, l, _ in records])


def test_make_image_db_generate_wants_only_the_output(tmp_path):
    with pytest.raises(SystemExit):
        make_image_db.main(["--generate", "4", str(tmp_path / "a"), str(tmp_path / "b")])
    with pytest.raises(SystemExit):
        make_image_db.main(["--generate", "4", "--num-labels", "0", str(tmp_path / "a")])
