"""ONNX import: ONNX models become Caffe2 NetDefs (`convert`) and run through
the standard onnx backend interface (`caffe2py.onnx.backend`)."""
from .convert import UnsupportedModelError, convert
from .loader import load_model

__all__ = ["convert", "load_model", "UnsupportedModelError"]
