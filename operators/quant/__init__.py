"""Quantised tensors and ops: ONNX quantisation, compressed weights."""
