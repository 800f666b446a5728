"""ai.onnx.ml kernels: tree ensembles (compiled), SVM probabilities."""
