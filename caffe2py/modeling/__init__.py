"""caffe2.python.modeling: parameter bookkeeping (ParameterInfo, ParameterTags), the
initializers ModelHelper.create_param uses, parameter sharing across name scopes
(parameter_sharing) and the net modifiers (net_modifier, gradient_clipping,
compute_norm_for_blobs, compute_statistics_for_blobs, compute_histogram_for_blobs,
get_entry_from_blobs)."""
