"""ONNX ImageDecoder (opset 20): an encoded image (1-D uint8) to HWC uint8 pixels,
decoded by Pillow (an optional extra: `pip install caffe2py[image]`)."""
from caffe2py.kernels.cpu.cnn import onnx_image as image_k
from caffe2py.schema_rules import Rank

from ..onnx_base import onnx_op


@onnx_op("ImageDecoder", (20, None), checks=(Rank(0, 1),))
def image_decoder(ctx):
    pixel_format = ctx.string("pixel_format", "RGB")
    if pixel_format not in image_k.PIXEL_FORMATS:
        raise ctx.error("pixel_format must be one of %s, got '%s'"
                        % (", ".join(image_k.PIXEL_FORMATS), pixel_format))
    module = image_k.pillow()
    if module is None:
        raise ctx.error("ImageDecoder decodes through Pillow, which is not installed "
                        "(pip install 'caffe2py[image]' or pip install pillow)")

    def run(encoded):
        try:
            return image_k.decode_image(encoded, pixel_format, module)
        except image_k.DecodeError as exc:
            raise ctx.input_error(0, str(exc)) from None
    return run
