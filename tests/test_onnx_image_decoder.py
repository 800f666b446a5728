"""ONNX ImageDecoder through Pillow (optional): lossless formats decode to exactly
the pixels that were encoded; pixel formats; named errors without Pillow and on
bad data. The node suite's 9 ImageDecoder cases cover JPEG, JPEG 2000 and WebP too."""
import io

import numpy as np
import pytest
from onnx import TensorProto, helper

import caffe2py.onnx.backend as c2_backend
from caffe2py.errors import Caffe2Error
from caffe2py.kernels.cpu.cnn import onnx_image as image_k

Image = pytest.importorskip("PIL.Image")


def _decoder(pixel_format=None):
    attrs = {} if pixel_format is None else {"pixel_format": pixel_format}
    node = helper.make_node("ImageDecoder", ["data"], ["image"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("data", TensorProto.UINT8, [None])],
                              [helper.make_tensor_value_info("image", TensorProto.UINT8, None)])
    return c2_backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]))


def _encode(pixels, fmt, mode="RGB"):
    buf = io.BytesIO()
    Image.fromarray(pixels, mode).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), np.uint8)


PIXELS = np.random.default_rng(0).integers(0, 256, (13, 21, 3), dtype=np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "PPM"])
def test_lossless_formats_decode_to_the_encoded_pixels(fmt):
    (rgb,) = _decoder().run([_encode(PIXELS, fmt)])
    assert rgb.dtype == np.uint8 and rgb.shape == (13, 21, 3)
    np.testing.assert_array_equal(rgb, PIXELS)
    (bgr,) = _decoder("BGR").run([_encode(PIXELS, fmt)])
    np.testing.assert_array_equal(bgr, PIXELS[:, :, ::-1])


def test_grayscale_of_a_grey_image_is_its_values():
    grey = PIXELS[:, :, 0]
    (out,) = _decoder("Grayscale").run([_encode(grey, "PNG", mode="L")])
    assert out.shape == (13, 21, 1)
    np.testing.assert_array_equal(out[:, :, 0], grey)


def test_grayscale_of_colour_uses_itu_601_weights():
    (out,) = _decoder("Grayscale").run([_encode(PIXELS, "PNG")])
    r, g, b = (PIXELS[:, :, i].astype(np.float64) for i in range(3))
    luma = r * 0.299 + g * 0.587 + b * 0.114
    assert np.abs(out[:, :, 0] - luma).max() <= 1.0


def test_rgb_of_a_grey_png_has_three_equal_channels():
    grey = PIXELS[:, :, 1]
    (out,) = _decoder().run([_encode(grey, "PNG", mode="L")])
    assert out.shape == (13, 21, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[:, :, c], grey)


def test_bad_data_is_a_named_error():
    with pytest.raises(Caffe2Error, match="ImageDecoder.*cannot decode"):
        _decoder().run([np.arange(40, dtype=np.uint8)])


def test_unknown_pixel_format_is_named():
    with pytest.raises(Caffe2Error, match="pixel_format"):
        _decoder("CMYK").run([_encode(PIXELS, "PNG")])


def test_missing_pillow_is_a_named_error(monkeypatch):
    monkeypatch.setattr(image_k, "pillow", lambda: None)
    with pytest.raises(Caffe2Error, match="Pillow"):
        _decoder().run([_encode(PIXELS, "PNG")])
