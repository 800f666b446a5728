"""Optimizer kernels beyond the training work's SGD / Adagrad / Adam: FTRL (dense and
row-sparse), RMSProp, LARS, YellowFin and SparseNormalize."""
