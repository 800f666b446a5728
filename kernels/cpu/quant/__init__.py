"""Quantisation kernels: ONNX QuantizeLinear and friends, codebook-compressed weights."""
