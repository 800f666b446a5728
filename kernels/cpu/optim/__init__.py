"""Optimizer kernels: dense updates (NumPy), row-sparse updates (compiled, in place on
the team), learning-rate policies, FTRL (dense and row-sparse), RMSProp, LARS, YellowFin,
SparseNormalize and ONNX's training steps."""
