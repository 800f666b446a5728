"""ImageInput (caffe2/image/image_input_op.h): batches of decoded, augmented images
and their labels from a db of image records, decoded on a thread pool one batch ahead
of the net.

Each run hands over the batch prefetched during the previous run (the first run
waits for its own) and starts the next one in the background: a loader thread reads
batch_size records from the DBReader (input 0, shared and thread-safe; or, Caffe2's
old style with no input, a reader the op opens from `db` / `db_type`), then
`decode_threads` workers decode and transform the images (Pillow decodes and releases
the GIL; the resize is a compiled loop that releases it too).

Records and transforms: kernels/cpu/io/image_records.py, image_transforms.py. The
image output is NHWC float32 in BGR channel order, as Caffe2's CPU op gives it
(brew.image_input adds NHWC2NCHW); with use_gpu_transform it is NCHW (what Caffe2's
GPU transform produced), in output_type. Problems with a record are Caffe2Errors
naming the op, the reader blob and the record's key.
"""
import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from caffe2py import db as dbs
from caffe2py.kernels.cpu.io import image_records as R
from caffe2py.kernels.cpu.io import image_transforms as T
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import Range

DT = caffe2_pb2.TensorProto

# label_type values (Caffe2's enum)
SINGLE_LABEL, MULTI_LABEL_SPARSE, MULTI_LABEL_DENSE = 0, 1, 2
MULTI_LABEL_WEIGHTED_SPARSE, SINGLE_LABEL_WEIGHTED, EMBEDDING_LABEL = 3, 4, 5
LABEL_TYPES = range(6)
# what Caffe2 substitutes for an image that does not decode (when errors are tolerated)
_PLACEHOLDER = np.zeros((224, 224, 3), np.uint8)

_ARGS = (
    Arg("batch_size", "int", 0, doc="images per batch (> 0)"),
    Arg("label_type", "int", 0, doc="0 single label, 1 sparse multi-label, 2 dense multi-label, 3 weighted "
                                     "sparse multi-label, 4 single label (weighted sampling), 5 embedding"),
    Arg("num_labels", "int", 0, doc="label width for label types 1, 2, 3, 5"),
    Arg("color", "int", 1, doc="1: 3-channel BGR images; 0: grayscale"),
    Arg("color_jitter", "int", 0, doc="random saturation / brightness / contrast (training)"),
    Arg("img_saturation", "float", 0.4), Arg("img_brightness", "float", 0.4), Arg("img_contrast", "float", 0.4),
    Arg("color_lighting", "int", 0, doc="AlexNet's PCA lighting noise (training)"),
    Arg("color_lighting_std", "float", 0.1),
    Arg("scale_jitter_type", "int", 0, doc="0 none; 1 Inception-style random-sized crop (training)"),
    Arg("scale", "int", -1, doc="resize the shorter side to scale (one of scale / minsize)"),
    Arg("minsize", "int", -1, doc="upscale so that the shorter side is at least minsize"),
    Arg("warp", "int", 0, doc="resize to a square instead of keeping the aspect ratio"),
    Arg("crop", "int", -1, doc="output height and width (> 0, <= scale / minsize)"),
    Arg("mirror", "int", 0, doc="random left-right flips (training)"),
    Arg("mean", "float", 0.0), Arg("std", "float", 1.0),
    Arg("mean_per_channel", "floats", None, doc="per-channel mean (BGR order); overrides mean"),
    Arg("std_per_channel", "floats", None, doc="per-channel std (BGR order); overrides std"),
    Arg("bounding_ymin", "int", -1), Arg("bounding_xmin", "int", -1),
    Arg("bounding_height", "int", -1), Arg("bounding_width", "int", -1),
    Arg("is_test", "int", 0, doc="centre crop, no random augmentation"),
    Arg("use_caffe_datum", "int", 0, doc="records are Caffe Datums"),
    Arg("use_gpu_transform", "int", 0, doc="output NCHW in output_type (Caffe2's GPU transform's output)"),
    Arg("decode_threads", "int", 4, check=Range(1, 256), doc="threads decoding and transforming"),
    Arg("output_type", "string", "float", doc="float or float16 (with use_gpu_transform)"),
    Arg("output_sizes", "ints", None, doc="values per record of each additional output (default 1 each)"),
    Arg("random_scale", "ints", None, doc="[min, max]: a random shorter-side size per image"),
    Arg("max_decode_error_ratio", "float", None,
        doc="tolerate up to this fraction of undecodable images per batch (each replaced by a black image, as "
            "Caffe2 does); not given: an undecodable image is an error naming its key"),
    Arg("db", "string", "", doc="old style (no input): the db to open"),
    Arg("db_type", "string", "leveldb", doc="old style (no input): its type"),
)


@dataclass
class Settings:
    batch_size: int
    label_type: int
    num_labels: int
    color: bool
    channels: int
    color_jitter: bool
    saturation: float
    brightness: float
    contrast: float
    color_lighting: bool
    lighting_std: float
    inception: bool
    scale: int
    minsize: int
    random_scale: tuple
    warp: bool
    crop: int
    mirror: bool
    mean: np.ndarray
    inv_std: np.ndarray
    default_box: tuple
    is_test: bool
    use_caffe_datum: bool
    gpu_transform: bool
    output_dtype: type
    extra_sizes: list
    max_error_ratio: float


def _settings(ctx):
    """Caffe2's constructor checks, as named errors at plan time."""
    batch = ctx.int("batch_size")
    if batch <= 0:
        raise ctx.error("batch_size must be > 0, got %d" % batch)
    label_type = ctx.int("label_type")
    if label_type not in LABEL_TYPES:
        raise ctx.error("label_type must be 0..5, got %d" % label_type)
    num_labels = ctx.int("num_labels")
    single = label_type in (SINGLE_LABEL, SINGLE_LABEL_WEIGHTED)
    if not single and num_labels <= 0:
        raise ctx.error("num_labels must be set (> 0) for label_type %d" % label_type)
    use_datum = bool(ctx.int("use_caffe_datum"))
    if use_datum and not single:
        raise ctx.error("Caffe datum only supports single integer label (label_type 0 or 4)")
    if use_datum and ctx.n_outputs != 2:
        raise ctx.error("with use_caffe_datum there can only be 2 outputs (data, label), got %d" % ctx.n_outputs)
    n_extras = ctx.n_outputs - 2
    sizes = ctx.ints("output_sizes") if ctx.has("output_sizes") else None
    if sizes is None or len(sizes) == 0:
        sizes = [1] * n_extras
    elif len(sizes) != n_extras:
        raise ctx.error("output_sizes must give one size per additional output (%d), got %d" % (n_extras, len(sizes)))
    if any(s <= 0 for s in sizes):
        raise ctx.error("output_sizes must be positive, got %s" % list(sizes))
    scale, minsize = ctx.int("scale"), ctx.int("minsize")
    random_scale = tuple(ctx.ints("random_scale")) if ctx.has("random_scale") else (-1, -1)
    if len(random_scale) != 2:
        raise ctx.error("random_scale must be [scale_min, scale_max], got %s" % list(random_scale))
    if -1 not in random_scale:
        if random_scale[1] < random_scale[0]:
            raise ctx.error("random scale must provide a range [min, max], got %s" % list(random_scale))
        minsize = random_scale[0]
    else:
        random_scale = None
    if (scale > 0) == (minsize > 0):
        raise ctx.error("Must provide one and only one of scaling or minsize (scale=%d, minsize=%d)" % (scale, minsize))
    crop = ctx.int("crop")
    if crop <= 0:
        raise ctx.error("Must provide the cropping value (crop > 0), got %d" % crop)
    if (scale if scale > 0 else minsize) < crop:
        raise ctx.error("The scale/minsize value (%d) must be no smaller than the crop value (%d)"
                        % (scale if scale > 0 else minsize, crop))
    mean = ctx.floats("mean_per_channel") if ctx.has("mean_per_channel") else [ctx.float("mean")]
    std = ctx.floats("std_per_channel") if ctx.has("std_per_channel") else [ctx.float("std")]
    if len(mean) != len(std):
        raise ctx.error("The mean and std. dev vectors must be of the same size (%d vs %d)" % (len(mean), len(std)))
    if len(mean) not in (1, 3):
        raise ctx.error("The mean and std. dev vectors must be of size 1 or 3, got %d" % len(mean))
    if any(s == 0 or not math.isfinite(s) for s in std):
        raise ctx.error("std values must be finite and non-zero, got %s" % list(std))
    mean = np.resize(np.asarray(mean, np.float32), 3)
    inv_std = (1.0 / np.resize(np.asarray(std, np.float32), 3)).astype(np.float32)
    box = tuple(ctx.int(n) for n in ("bounding_ymin", "bounding_xmin", "bounding_height", "bounding_width"))
    output_type = ctx.string("output_type")
    dtypes = {"float": np.float32, "float16": np.float16, "": np.float32, "unknown": np.float32}
    if output_type.lower() not in dtypes:
        raise ctx.error("output_type must be float or float16, got '%s'" % output_type)
    ratio = ctx.float("max_decode_error_ratio") if ctx.has("max_decode_error_ratio") else None
    color = bool(ctx.int("color"))
    return Settings(
        batch, label_type, num_labels, color, 3 if color else 1, bool(ctx.int("color_jitter")),
        ctx.float("img_saturation"), ctx.float("img_brightness"), ctx.float("img_contrast"),
        bool(ctx.int("color_lighting")), ctx.float("color_lighting_std"), ctx.int("scale_jitter_type") == 1,
        scale, minsize, random_scale, bool(ctx.int("warp")), crop, bool(ctx.int("mirror")), mean, inv_std,
        box if min(box) >= 0 else None, bool(ctx.int("is_test")), use_datum, bool(ctx.int("use_gpu_transform")),
        dtypes[output_type.lower()], list(sizes), ratio)


def _image_dims(s):
    if s.gpu_transform:
        return (s.batch_size, s.channels, s.crop, s.crop)
    return (s.batch_size, s.crop, s.crop, s.channels)


def _infer(ctx, ins):
    try:
        s = _settings(ctx)
    except Exception:  # noqa: BLE001 - the factory reports bad arguments
        return [TensorType(None, None)] * ctx.n_outputs
    image = TensorType(_image_dims(s), DT.FLOAT16 if s.output_dtype == np.float16 else DT.FLOAT)
    single = s.label_type in (SINGLE_LABEL, SINGLE_LABEL_WEIGHTED)
    label = TensorType((s.batch_size,) if single else (s.batch_size, s.num_labels), None)
    return [image, label] + [TensorType((s.batch_size, n), None) for n in s.extra_sizes]


register_schema(OpSchema(
    "ImageInput", num_inputs=(0, 1), num_outputs=(2, None), args=_ARGS, inputs=("reader",),
    outputs=("data", "label"), inference=_infer,
    doc="Batches of images and labels from a db of image records (TensorProtos: encoded or raw image, label, "
        "label weights for types 3 and 4, additional outputs, optional bounding box; or Caffe Datums with "
        "use_caffe_datum), decoded by Pillow on decode_threads threads one batch ahead: bounding box, scale "
        "(shorter side to scale, or up to minsize, or random_scale), crop (random when training, central with "
        "is_test), random mirror, colour jitter and lighting, (x - mean) / std per channel. data [batch, crop, "
        "crop, C] float (BGR; NCHW with use_gpu_transform), label [batch] or [batch, num_labels], then each "
        "additional output [batch, size]."))


# ----------------------------------------------------------------- one image

def _scale(img, s, rng):
    rows, cols = img.shape[:2]
    target = s.scale if s.scale > 0 else s.minsize
    if s.random_scale is not None:
        target = int(rng.integers(s.random_scale[0], s.random_scale[1] + 1))
    h, w = T.scaled_size(rows, cols, target, s.warp)
    if (s.scale > 0 and (h, w) != (rows, cols)) or h > rows or w > cols:
        img = T.resize_area(img, h, w)
    return img


def _bounded(img, box):
    """The bounding box's window of img, when the box fits (else the whole image)."""
    if box is None:
        return img
    ymin, xmin, height, width = box
    rows, cols = img.shape[:2]
    if rows < ymin + height or cols < xmin + width:
        return img
    if min(box) < 0 or height == 0 or width == 0:
        raise R.RecordError("the bounding box %s is empty or negative" % (list(box),))
    return img[ymin:ymin + height, xmin:xmin + width]


def transform(img, box, s, rng, rgb=False):
    """Caffe2's DecodeAndTransform after decoding: float32 crop x crop x C (NHWC, BGR;
    `rgb`: img's channels are RGB)."""
    img = _bounded(img, box if box is not None else s.default_box)
    jittered = None
    if s.inception and not s.is_test:
        jittered = T.random_sized_crop(img, s.crop, rng)
    img = jittered if jittered is not None else _scale(img, s, rng)
    if img.shape[0] < s.crop or img.shape[1] < s.crop:
        raise R.RecordError("the scaled image is %dx%d, smaller than crop %d" % (img.shape[0], img.shape[1], s.crop))
    out = T.crop_and_mirror(img, s.crop, s.is_test, s.mirror, rng, reverse_channels=rgb)
    if s.channels == 3 and not s.is_test and not s.gpu_transform:
        if s.color_jitter:
            T.color_jitter(out, s.saturation, s.brightness, s.contrast, rng)
        if s.color_lighting:
            T.color_lighting(out, s.lighting_std, rng)
    return T.normalize(out, s.mean, s.inv_std)


# ----------------------------------------------------------------- labels

def _label_row(rec, s):
    """(values for this record's label slot, dtype the record's label has)."""
    label, dtype = rec.label, rec.label.dtype
    lt = s.label_type
    if lt in (SINGLE_LABEL, SINGLE_LABEL_WEIGHTED):
        if label.size != 1:
            raise R.RecordError("a single label must hold one value, got %d" % label.size)
        return label[:1], dtype
    if lt in (MULTI_LABEL_DENSE, EMBEDDING_LABEL):
        if label.size != s.num_labels:
            raise R.RecordError("a dense label must hold num_labels = %d values, got %d" % (s.num_labels, label.size))
        return label, dtype
    index = label.astype(np.int64)
    bad = index[(index < 0) | (index >= s.num_labels)]
    if bad.size:
        raise R.RecordError("label index %d is outside [0, num_labels = %d)" % (bad[0], s.num_labels))
    if lt == MULTI_LABEL_SPARSE:
        row = np.zeros(s.num_labels, dtype)
        row[index] = 1
        return row, dtype
    if rec.weights is None or rec.weights.size < index.size:
        raise R.RecordError("weighted sparse labels need one weight per label index (%d), the weights tensor "
                            "holds %d" % (index.size, 0 if rec.weights is None else rec.weights.size))
    row = np.zeros(s.num_labels, np.float32)
    row[index] = rec.weights[:index.size]
    return row, np.dtype(np.float32)


# ----------------------------------------------------------------- batches

class BatchError(Exception):
    """A record of the batch failed: (key, RecordError)."""

    def __init__(self, key, error):
        super().__init__(key, error)
        self.key, self.error = key, error


class Prefetcher:
    """One batch in flight: a loader thread reads the records, a pool of decode_threads
    workers turns them into pixels; the batch is arrays ready for the outputs."""

    def __init__(self, settings, decode_threads, seed):
        self.s = settings
        self.pool = ThreadPoolExecutor(decode_threads, thread_name_prefix="ImageInput-decode")
        self._seeds = np.random.SeedSequence(seed)
        # With a random_seed every image draws from a generator of its own, spawned in
        # record order, so a seeded run's crops and mirrors do not depend on which
        # worker takes which image (~40 us an image); unseeded, one per worker thread.
        self._per_image = seed is not None
        self._lock = threading.Lock()
        self._local = threading.local()
        self.pending = None

    def _rng(self):
        rng = getattr(self._local, "rng", None)
        if rng is None:
            with self._lock:
                rng = self._local.rng = np.random.default_rng(self._seeds.spawn(1)[0])
        return rng

    def _one(self, key, value, rng=None):
        """(transformed image, record or None, the decode error when it was tolerated)."""
        s = self.s
        rng = rng if rng is not None else self._rng()
        try:
            try:
                if s.use_caffe_datum:
                    rec = R.parse_datum_record(value, s.color)
                else:
                    weighted = s.label_type in (MULTI_LABEL_WEIGHTED_SPARSE, SINGLE_LABEL_WEIGHTED)
                    rec = R.parse_caffe2_record(value, s.color, weighted, len(s.extra_sizes))
            except R.UndecodableImage as exc:
                if s.max_error_ratio is None:
                    raise
                # Caffe2's substitute: a black 224 x 224 image (its label stays 0)
                img = R.to_channels(_PLACEHOLDER, s.color)
                return transform(img, None, s, rng), None, exc
            return transform(rec.image, rec.bbox, s, rng, rec.rgb), rec, None
        except R.RecordError as exc:
            raise BatchError(key, exc) from None

    def _batch(self, reader):
        s = self.s
        records = [reader.read() for _ in range(s.batch_size)]
        if self._per_image:
            rngs = [np.random.default_rng(child) for child in self._seeds.spawn(len(records))]
            results = list(self.pool.map(lambda kv, rng: self._one(*kv, rng), records, rngs))
        else:
            results = list(self.pool.map(lambda kv: self._one(*kv), records))
        images = np.stack([r[0] for r in results])
        if s.gpu_transform:
            images = images.transpose(0, 3, 1, 2)
        images = np.ascontiguousarray(images, s.output_dtype)
        failed = [(k, r[2]) for (k, _), r in zip(records, results) if r[2] is not None]
        if failed and len(failed) / s.batch_size > s.max_error_ratio:
            raise BatchError(failed[0][0], R.RecordError(
                "%d of %d images in the batch do not decode, more than max_decode_error_ratio = %g (first: %s; "
                "keys: %s)" % (len(failed), s.batch_size, s.max_error_ratio, failed[0][1],
                               ", ".join(_key_text(k) for k, _ in failed[:8]))))
        return [images] + self._labels(records, results)

    def _labels(self, records, results):
        s = self.s
        single = s.label_type in (SINGLE_LABEL, SINGLE_LABEL_WEIGHTED)
        rows, dtype, first_key = [], None, None
        for (key, _), (_, rec, _) in zip(records, results):
            if rec is None:
                rows.append(None)
                continue
            try:
                row, row_dtype = _label_row(rec, s)
            except R.RecordError as exc:
                raise BatchError(key, exc) from None
            if dtype is None:
                dtype, first_key = row_dtype, key
            elif row_dtype != dtype:
                raise BatchError(key, R.RecordError(
                    "its label is %s but record %s's (the batch's first) is %s; a db must use one label type"
                    % (row_dtype, _key_text(first_key), dtype)))
            rows.append(row)
        dtype = dtype or np.dtype(np.int32)
        width = 1 if single else s.num_labels
        label = np.zeros((s.batch_size, width), dtype)
        for i, row in enumerate(rows):
            if row is not None:
                label[i] = row
        outs = [label.reshape(s.batch_size) if single else label]
        for j, size in enumerate(s.extra_sizes):
            outs.append(self._extra(records, results, j, size))
        return outs

    def _extra(self, records, results, j, size):
        values, dtype = [], None
        for (key, _), (_, rec, _) in zip(records, results):
            v = rec.extras[j] if rec is not None else None
            if v is not None:
                if v.size != size:
                    raise BatchError(key, R.RecordError("additional output %d needs %d value(s) (output_sizes), "
                                                        "the record holds %d" % (j, size, v.size)))
                dtype = dtype or v.dtype
                if v.dtype != dtype:
                    raise BatchError(key, R.RecordError("additional output %d is %s here and %s in the batch's "
                                                        "first record" % (j, v.dtype, dtype)))
            values.append(v)
        out = np.zeros((self.s.batch_size, size), dtype or np.float32)
        for i, v in enumerate(values):
            if v is not None:
                out[i] = v
        return out

    def _start(self, reader):
        future = Future()

        def load():
            try:
                future.set_result(self._batch(reader))
            except BaseException as exc:  # noqa: BLE001 - handed to the run that waits
                future.set_exception(exc)
        # a daemon thread: a reader that blocks (a queue db) must not hold the process at exit
        threading.Thread(target=load, name="ImageInput-prefetch", daemon=True).start()
        return future

    def next_batch(self, reader):
        """The batch prefetched for this run (waiting for it), and the next one started."""
        future = self.pending if self.pending is not None else self._start(reader)
        self.pending = None
        batch = future.result()
        self.pending = self._start(reader)
        return batch


def _key_text(key):
    if isinstance(key, bytes):
        try:
            return "'%s'" % key.decode("utf-8")
        except UnicodeDecodeError:
            return repr(key)
    return "'%s'" % key


@register_kernel("ImageInput")
def image_input(ctx):
    s = _settings(ctx)
    threads = ctx.int("decode_threads")
    if threads < 1:
        raise ctx.error("decode_threads must be >= 1, got %d" % threads)
    if ctx.n_inputs == 0 and not ctx.string("db"):
        raise ctx.error("Must specify a db name (argument `db`) when ImageInput has no reader input")
    seed = ctx.op_def.device_option.random_seed if ctx.op_def.device_option.HasField("random_seed") else None
    prefetcher = Prefetcher(s, threads, seed)
    own = {}
    where = ctx.inputs[0] if ctx.n_inputs else ctx.string("db")

    def own_reader():
        if "reader" not in own:
            try:
                own["reader"] = dbs.DBReader(ctx.string("db_type"), ctx.string("db"))
            except dbs.DBError as exc:
                raise ctx.error(str(exc)) from None
        return own["reader"]

    def run(*inputs):
        reader = inputs[0] if inputs else own_reader()
        if not isinstance(reader, dbs.DBReader):
            raise ctx.input_error(0, "must be a DBReader (from CreateDB), got %s" % type(reader).__name__)
        try:
            outputs = prefetcher.next_batch(reader)
        except BatchError as exc:
            prefetcher.pending = None
            raise ctx.error("record %s: %s" % (_key_text(exc.key), exc.error), blob=where) from None
        except dbs.DBError as exc:
            prefetcher.pending = None
            raise ctx.error(str(exc), blob=where) from None
        return tuple(outputs)
    return run
