"""Caffe2's build flags (caffe2.python.build), as caffe2py's build answers them."""
from . import extension

CAFFE2_NO_OPERATOR_SCHEMA = extension.define_caffe2_no_operator_schema
build_options = extension.get_build_options()
