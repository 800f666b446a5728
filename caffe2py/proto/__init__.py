"""Protobuf bindings for Caffe2's schema (generated; see tools/gen_proto.py)."""
from . import caffe2_pb2

# Caffe2's Python package exposed the device enum under short names; scripts use them.
for _short in ("CPU", "CUDA", "MKLDNN", "OPENGL", "OPENCL", "IDEEP", "HIP", "FPGA",
               "MSNPU", "XLA", "MLC", "COMPILE_TIME_MAX_DEVICE_TYPES"):
    setattr(caffe2_pb2, _short, getattr(caffe2_pb2, "PROTO_" + _short))
del _short

__all__ = ["caffe2_pb2"]
