"""The records Caffe2's ImageInput reads, parsed into pixels and labels.

A Caffe2 record is a serialized TensorProtos: protos[0] the image (STRING: the encoded
file's bytes; BYTE: raw uint8 pixels, dims [H, W] or [H, W, C]), protos[1] the label
(INT32 or FLOAT values), then, for the weighted label types, protos[2] the weights,
then one tensor per additional output, then optionally a bounding box (INT32 ymin,
xmin, height, width). A Caffe record (use_caffe_datum) is a Datum: encoded or raw
channels x height x width pixels and one int label.

Pixels come back HWC uint8, 3 channels when `color`, else 1; decoded images in RGB
order (`rgb`: Pillow's, turned into OpenCV's BGR, which Caffe2 worked in, only on the
small crop), raw pixels as stored (BGR by Caffe's convention). Problems raise
RecordError; the op adds the key.
"""
import io
from dataclasses import dataclass
from typing import Optional

import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.proto.caffe2_legacy_pb2 import CaffeDatum

from ..cnn import onnx_image as codec

DT = caffe2_pb2.TensorProto
# BGR -> gray as OpenCV's cvtColor: 0.299 R + 0.587 G + 0.114 B
_GRAY = np.array([0.114, 0.587, 0.299], np.float32)


class RecordError(ValueError):
    """A record ImageInput cannot use (the message says why; the caller names the key)."""


class UndecodableImage(RecordError):
    """The image bytes of a well-formed record do not decode."""


class MissingCodec(RecordError):
    """An encoded image and no Pillow to decode it."""


@dataclass
class ImageRecord:
    image: np.ndarray                 # HWC uint8: RGB when rgb, else BGR, or gray
    label: np.ndarray                 # the label tensor's values (int32 or float32)
    weights: Optional[np.ndarray]     # protos[2]'s float values for the weighted label types
    extras: list                      # additional outputs' value arrays
    bbox: Optional[tuple]             # (ymin, xmin, height, width) from the record
    rgb: bool = False


def _decode(data, color):
    """(pixels, rgb): Pillow's decoding, RGB (no copy) when color, else grayscale."""
    module = codec.pillow()
    if module is None:
        raise MissingCodec("the image is encoded and ImageInput decodes through Pillow, which is not "
                           "installed (pip install 'caffe2py[image]' or pip install pillow)")
    try:
        with module.open(io.BytesIO(data)) as img:
            img.load()
            if color:
                return np.asarray(img.convert("RGB")), True
            return np.asarray(img.convert("L"))[:, :, None], False
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for bad data
        raise UndecodableImage("cannot decode the image (%s: %s)" % (type(exc).__name__, exc)) from None


def to_channels(img, color, rgb=False):
    """img with 3 channels (gray repeated) when color, else 1 (-> gray, rounded)."""
    c = img.shape[2]
    if color and c == 1:
        return np.repeat(img, 3, axis=2)
    if not color and c == 3:
        gray = np.rint(img.astype(np.float32) @ (_GRAY[::-1] if rgb else _GRAY))
        return np.clip(gray, 0, 255).astype(np.uint8)[:, :, None]
    return img


def _raw_image(proto):
    dims = list(proto.dims)
    if len(dims) not in (2, 3):
        raise RecordError("a raw (BYTE) image must have dims [H, W] or [H, W, C], got %s" % dims)
    c = dims[2] if len(dims) == 3 else 1
    if c not in (1, 3):
        raise RecordError("a raw image must have 1 or 3 channels, got %d" % c)
    data = proto.byte_data
    if len(data) != dims[0] * dims[1] * c:
        raise RecordError("a raw %s image needs %d bytes, the record holds %d"
                          % ("x".join(map(str, dims)), dims[0] * dims[1] * c, len(data)))
    return np.frombuffer(data, np.uint8).reshape(dims[0], dims[1], c)


def tensor_values(proto, what):
    """A TensorProto's values (FLOAT, INT32, INT64; UINT8 in int32_data) as an array."""
    kinds = {DT.FLOAT: ("float_data", np.float32), DT.INT32: ("int32_data", np.int32),
             DT.INT64: ("int64_data", np.int64), DT.UINT8: ("int32_data", np.uint8)}
    if proto.data_type not in kinds:
        raise RecordError("%s must be a FLOAT, INT32, INT64 or UINT8 tensor, got %s"
                          % (what, DT.DataType.Name(proto.data_type) if proto.data_type in DT.DataType.values()
                             else proto.data_type))
    field, dtype = kinds[proto.data_type]
    return np.asarray(getattr(proto, field), dtype)


def parse_caffe2_record(value, color, weighted, n_extras):
    """ImageRecord of a TensorProtos record; `weighted`: protos[2] holds label weights."""
    protos = caffe2_pb2.TensorProtos()
    try:
        protos.ParseFromString(value)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise RecordError("the value is not a serialized TensorProtos (%s); a Caffe Datum db needs "
                          "use_caffe_datum=1" % type(exc).__name__) from None
    first_extra = 3 if weighted else 2
    need = first_extra + n_extras
    n = len(protos.protos)
    if n < 2:
        raise RecordError("the record holds %d tensor(s); ImageInput needs the image and its label%s"
                          % (n, " (is this a Caffe Datum db? then use_caffe_datum=1)" if n == 0 else ""))
    if n < need:
        raise RecordError("the record holds %d tensors; the label type and %d additional output(s) need %d"
                          % (n, n_extras, need))
    image_proto = protos.protos[0]
    rgb = False
    if image_proto.data_type == DT.STRING:
        if len(image_proto.string_data) != 1:
            raise RecordError("an encoded image tensor must hold one string, got %d" % len(image_proto.string_data))
        image, rgb = _decode(image_proto.string_data[0], color)
    elif image_proto.data_type == DT.BYTE:
        image = _raw_image(image_proto)
    else:
        raise RecordError("the image tensor (protos[0]) must be STRING (encoded) or BYTE (raw pixels), got %s"
                          % DT.DataType.Name(image_proto.data_type))
    label_proto = protos.protos[1]
    if label_proto.data_type not in (DT.INT32, DT.FLOAT):
        raise RecordError("the label tensor (protos[1]) must be INT32 or FLOAT, got %s"
                          % DT.DataType.Name(label_proto.data_type))
    label = tensor_values(label_proto, "the label")
    weights = tensor_values(protos.protos[2], "the label weights").astype(np.float32) if weighted else None
    extras = [tensor_values(protos.protos[first_extra + i], "additional output %d's tensor" % i)
              for i in range(n_extras)]
    bbox = None
    if n == need + 1:
        box = protos.protos[need]
        if box.data_type != DT.INT32 or len(box.int32_data) != 4:
            raise RecordError("the bounding box tensor must be INT32 (ymin, xmin, height, width)")
        bbox = tuple(int(v) for v in box.int32_data)
    return ImageRecord(to_channels(image, color, rgb), label, weights, extras, bbox, rgb and color)


def parse_datum_record(value, color):
    """ImageRecord of a Caffe Datum record (one int label)."""
    datum = CaffeDatum()
    try:
        datum.ParseFromString(value)
    except Exception as exc:  # noqa: BLE001
        raise RecordError("the value is not a serialized Caffe Datum (%s)" % type(exc).__name__) from None
    if not datum.data:
        raise RecordError("the Datum holds no image data (a TensorProtos db is read with use_caffe_datum=0)")
    rgb = False
    if datum.encoded:
        image, rgb = _decode(datum.data, color)
    else:
        c, h, w = datum.channels, datum.height, datum.width
        if c not in (1, 3):
            raise RecordError("a raw Datum must have 1 or 3 channels, got %d" % c)
        if len(datum.data) != c * h * w:
            raise RecordError("a raw %dx%dx%d Datum needs %d bytes, it holds %d"
                              % (c, h, w, c * h * w, len(datum.data)))
        image = np.frombuffer(datum.data, np.uint8).reshape(c, h, w).transpose(1, 2, 0)
    return ImageRecord(to_channels(np.ascontiguousarray(image), color, rgb), np.array([datum.label], np.int32),
                       None, [], None, rgb and color)
