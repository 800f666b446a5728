"""caffe2.python.modeling: parameter bookkeeping (ParameterInfo, ParameterTags) and
the initializers ModelHelper.create_param uses."""
