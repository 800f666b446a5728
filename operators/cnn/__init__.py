"""Convolution, pooling, normalisation, FC and the image ops of CNNs (Caffe2's and ONNX's), and their gradients."""
