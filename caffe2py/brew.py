"""caffe2.python.brew: helper functions that add ops (and their parameters) to a
ModelHelper, with the model's arg_scope applied."""
import functools


_HELPERS = {}


def Register(helper, name=None):
    _HELPERS[name or helper.__name__] = helper
    return helper


def has_helper(name):
    return name in _HELPERS


def __getattr__(name):  # brew.fc etc. resolve through the registry (PEP 562)
    if name in _HELPERS:
        return _wrap(_HELPERS[name])
    raise AttributeError("brew has no helper '%s'" % name)


def _wrap(helper):
    @functools.wraps(helper)
    def call(model, *args, **kwargs):
        for key, value in getattr(model, "arg_scope", {}).items():
            if key in _SCOPED_KEYS.get(helper.__name__, ()) and key not in kwargs:
                kwargs[key] = value
        return helper(model, *args, **kwargs)
    return call


_SCOPED_KEYS = {"conv": ("order",), "max_pool": ("order",), "average_pool": ("order",),
                "spatial_bn": ("order",), "concat": ("order",), "softmax": ()}


def _init(initializer, default_op, default_kwargs):
    if initializer is None:
        return (default_op, default_kwargs)
    return initializer


def fc(model, blob_in, blob_out, dim_in, dim_out, weight_init=None, bias_init=None,
       WeightInitializer=None, BiasInitializer=None, enable_tensor_core=False,  # noqa: ARG001
       float16_compute=False, **kwargs):  # noqa: ARG001
    w = model.create_param(str(blob_out) + "_w", [dim_out, dim_in], _init(weight_init, "XavierFill", {}))
    b = model.create_param(str(blob_out) + "_b", [dim_out], _init(bias_init, "ConstantFill", {"value": 0.0}))
    return model.net.FC([blob_in, w, b], blob_out, **kwargs)


def conv(model, blob_in, blob_out, dim_in, dim_out, kernel, weight_init=None, bias_init=None,
         group=1, transform_inputs=None, order="NCHW", no_bias=False, **kwargs):  # noqa: ARG001
    shape = [dim_out, dim_in // group, kernel, kernel] if order == "NCHW" else [dim_out, kernel, kernel, dim_in // group]
    w = model.create_param(str(blob_out) + "_w", shape, _init(weight_init, "XavierFill", {}))
    inputs = [blob_in, w]
    if not no_bias:
        inputs.append(model.create_param(str(blob_out) + "_b", [dim_out],
                                         _init(bias_init, "ConstantFill", {"value": 0.0})))
    return model.net.Conv(inputs, blob_out, kernel=kernel, order=order, group=group, **kwargs)


def spatial_bn(model, blob_in, blob_out, dim_in, epsilon=1e-5, momentum=0.9, is_test=True,
               order="NCHW", **kwargs):
    scale = model.create_param(str(blob_out) + "_s", [dim_in], ("ConstantFill", {"value": 1.0}))
    bias = model.create_param(str(blob_out) + "_b", [dim_in], ("ConstantFill", {"value": 0.0}))
    mean = model.create_param(str(blob_out) + "_rm", [dim_in], ("ConstantFill", {"value": 0.0}))
    var = model.create_param(str(blob_out) + "_riv", [dim_in], ("ConstantFill", {"value": 1.0}))
    # training also writes the running statistics (in place) and the saved batch ones
    outputs = blob_out if is_test else [blob_out, mean, var, str(blob_out) + "_sm", str(blob_out) + "_siv"]
    out = model.net.SpatialBN([blob_in, scale, bias, mean, var], outputs, epsilon=epsilon,
                              momentum=momentum, is_test=int(bool(is_test)), order=order, **kwargs)
    return out if is_test else out[0]


def _simple(op_type, name):
    def helper(model, blob_in, blob_out, **kwargs):
        return getattr(model.net, op_type)(blob_in, blob_out, **kwargs)
    helper.__name__ = name
    helper.__doc__ = "Add a %s op." % op_type
    return helper


def max_pool(model, blob_in, blob_out, use_cudnn=False, order="NCHW", **kwargs):  # noqa: ARG001
    return model.net.MaxPool(blob_in, blob_out, order=order, **kwargs)


def average_pool(model, blob_in, blob_out, use_cudnn=False, order="NCHW", **kwargs):  # noqa: ARG001
    return model.net.AveragePool(blob_in, blob_out, order=order, **kwargs)


def concat(model, blobs_in, blob_out, **kwargs):
    if "order" in kwargs and "axis" in kwargs:
        kwargs.pop("order")
    return model.net.Concat(blobs_in, [blob_out, "_" + str(blob_out) + "_concat_dims"], **kwargs)[0]


def dropout(model, blob_in, blob_out, use_cudnn=False, **kwargs):  # noqa: ARG001
    return model.net.Dropout(blob_in, [blob_out, "_" + str(blob_out) + "_mask"], **kwargs)[0]


def sum(model, blob_in, blob_out, **kwargs):  # noqa: A001 - Caffe2's name
    return model.net.Sum(blob_in, blob_out, **kwargs)


def transpose(model, blob_in, blob_out, use_cudnn=False, **kwargs):  # noqa: ARG001
    return model.net.Transpose(blob_in, blob_out, **kwargs)


def iter(model, blob_out, **kwargs):  # noqa: A001 - Caffe2's name
    model.param_init_net.ConstantFill([], blob_out, shape=[1], value=0, dtype=10)  # INT64
    return model.net.Iter(blob_out, blob_out, **kwargs)


def softmax(model, blob_in, blob_out=None, use_cudnn=False, **kwargs):  # noqa: ARG001
    return model.net.Softmax(blob_in, blob_out, **kwargs)


for _fn in (fc, conv, spatial_bn, max_pool, average_pool, concat, dropout, sum, transpose, iter, softmax):
    Register(_fn)
for _op, _name in (("Relu", "relu"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh")):
    Register(_simple(_op, _name))
del _fn, _op, _name

globals().update({name: _wrap(fn) for name, fn in list(_HELPERS.items())})
