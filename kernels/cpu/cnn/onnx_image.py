"""Decoding an encoded image (ONNX ImageDecoder) through Pillow, an optional
dependency (`pip install caffe2py[image]`): JPEG, PNG, BMP, TIFF, WebP, PNM and
JPEG 2000, whatever formats the installed Pillow reads."""
import io

import numpy as np

PIXEL_FORMATS = ("RGB", "BGR", "Grayscale")


def pillow():
    """The PIL.Image module, or None when Pillow is not installed."""
    try:
        import PIL.Image
    except ImportError:
        return None
    return PIL.Image


class DecodeError(ValueError):
    pass


def decode_image(encoded, pixel_format, image_module):
    """uint8 bytes -> uint8 (H, W, 3) in RGB or BGR order, or (H, W, 1) grayscale."""
    try:
        with image_module.open(io.BytesIO(encoded.tobytes())) as img:
            img.load()
            if pixel_format == "Grayscale":
                return np.asarray(img.convert("L"), dtype=np.uint8)[:, :, None].copy()
            rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for bad data
        raise DecodeError("cannot decode the image (%s: %s)" % (type(exc).__name__, exc)) from None
    return np.ascontiguousarray(rgb[:, :, ::-1]) if pixel_format == "BGR" else rgb.copy()
