"""Optimizer updates, learning-rate policies, iteration counters, ONNX training ops."""
