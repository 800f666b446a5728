"""Shape, layout, fill, indexing and selection ops (Caffe2's and ONNX's)."""
