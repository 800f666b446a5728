"""Recurrent units: LSTMUnit and GRUUnit steps, ONNX's RNN/GRU/LSTM sequences."""
