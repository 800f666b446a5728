"""Caffe2's serialized operator tests (caffe2.python.serialized_test)."""
