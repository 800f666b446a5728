"""caffe2.python.models.seq2seq: the model helper of Caffe2's sequence-to-sequence models."""
