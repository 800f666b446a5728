"""LSTM and GRU units, RecurrentNetwork, ONNX's RNN/GRU/LSTM."""
