"""Convolution, pooling and normalisation kernels of CNNs."""
