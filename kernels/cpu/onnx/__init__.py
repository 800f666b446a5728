"""Kernels of ONNX-semantics ops that Caffe2 has no counterpart for."""
