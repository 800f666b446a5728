"""Tensor layout and data movement: layout copies (Concat, Transpose, image layouts), fills and scatters, selection, strings, ONNX tensor ops."""
