"""Convolution, pooling, normalisation, resize and the other image kernels of CNNs (Caffe2 and ONNX)."""
