"""ONNX translation of Clip (misc_ops.py)."""
import numpy as np

from caffe2py.onnx.export_registry import register_exporter


@register_exporter("Clip", onnx_form="Clip with min / max as scalar inputs of X's type (absent bound: "
                                     "no input)")
def export_clip(ex):
    x = ex.inputs[0]
    dtype = ex.dtype(x) or np.dtype(np.float32)
    lo = ex.scalar(ex.args.float("min"), dtype, "min") if ex.args.has("min") else ""
    hi = ex.scalar(ex.args.float("max"), dtype, "max") if ex.args.has("max") else ""
    if lo and hi and ex.args.float("min") > ex.args.float("max"):
        raise ex.error("min %g is above max %g" % (ex.args.float("min"), ex.args.float("max")))
    inputs = [x, lo, hi] if hi else ([x, lo] if lo else [x])
    ex.node("Clip", inputs, ex.outputs)
