"""ONNX translation of Cast (caffe2_math.py): Caffe2's DataType enum read as the
kernel reads it, written as ONNX's (the two enums number types differently)."""
from caffe2py.onnx.export_registry import register_exporter
from caffe2py.tensors import numpy_dtype

from .caffe2_math import cast_target


@register_exporter("Cast", onnx_form="Cast (`to` mapped from Caffe2's DataType to ONNX's)")
def export_cast(ex):
    ex.cast(ex.inputs[0], numpy_dtype(cast_target(ex.args)), ex.outputs[0])


@register_exporter("Scale", onnx_form="Mul by a scalar constant of X's type")
def export_scale(ex):
    x = ex.inputs[0]
    scale = ex.scalar(ex.args.float("scale", 1.0), ex.dtype(x) or "float32", "scale")
    ex.node("Mul", [x, scale], ex.outputs)
