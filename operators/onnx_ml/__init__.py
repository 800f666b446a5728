"""The ai.onnx.ml domain: tree ensembles, linear models, SVMs, scalers and encoders."""
