"""NumPy CPU kernels."""
