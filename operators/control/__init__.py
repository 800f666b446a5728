"""Control flow: If, While, Do, ONNX's If/Loop/Scan."""
