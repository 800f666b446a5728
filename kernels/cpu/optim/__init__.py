"""Optimizer kernels: dense updates (NumPy), row-sparse updates (compiled, in place on
the team), learning-rate policies."""
