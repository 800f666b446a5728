"""caffe2.python.brew: helper functions that add ops (and their parameters) to a
ModelHelper, with the model's arg_scope applied.

    with brew.arg_scope([brew.conv, brew.fc], weight_init=("MSRAFill", {})):
        brew.conv(model, "data", "conv1", 3, 64, kernel=3)   # gets weight_init

A helper's arguments come from, in increasing precedence: the model's arg_scope
(the layout `order`; for conv also use_cudnn, which ModelHelper turns on, so convs
carry engine='CUDNN' as in Caffe2 and the CPU runs its default kernel), the arg_scope blocks around the call (innermost last;
per helper name, per thread), and the call itself. brew.cond and brew.loop add
If / While ops running other models' nets (control_ops_util).
"""
import contextlib
import copy
import functools
import threading

from . import core, scope
from .control_ops_util import add_if_op, add_while_op
from .errors import Caffe2Error
from .modeling import initializers
from .modeling.parameter_info import ParameterTags
from .proto import caffe2_pb2

_HELPERS = {}


def Register(helper, name=None):
    name = name or helper.__name__
    if name in _HELPERS:
        raise AttributeError("Helper {} already exists. Please change your helper name.".format(name))
    _HELPERS[name] = helper
    return helper


def has_helper(helper_or_helper_name):
    name = helper_or_helper_name if isinstance(helper_or_helper_name, str) else helper_or_helper_name.__name__
    return name in _HELPERS


_scopes = threading.local()


def get_current_scope():
    """{helper name: default arguments} of the arg_scope blocks around this point."""
    if not hasattr(_scopes, "current"):
        _scopes.current = {}
    return _scopes.current


@contextlib.contextmanager
def arg_scope(single_helper_or_list, **kwargs):
    """Default arguments for the helpers named (functions, e.g. brew.conv) inside the block."""
    helpers = single_helper_or_list if isinstance(single_helper_or_list, list) else [single_helper_or_list]
    for helper in helpers:
        assert callable(helper), "arg_scope is only supporting a list of callable helper functions."
    previous = copy.deepcopy(get_current_scope())
    current = get_current_scope()
    for helper in helpers:
        current.setdefault(helper.__name__, {}).update(kwargs)
    try:
        yield
    finally:
        _scopes.current = previous


def __getattr__(name):  # brew.fc etc. resolve through the registry (PEP 562)
    if name in _HELPERS:
        return _wrap(_HELPERS[name])
    raise AttributeError("brew has no helper '%s'" % name)


def _wrap(helper):
    name = helper.__name__

    @functools.wraps(helper)
    def call(model, *args, **kwargs):
        merged = {key: value for key, value in getattr(model, "arg_scope", {}).items()
                  if key in _SCOPED_KEYS.get(name, ())}
        merged.update(get_current_scope().get(name, {}))
        merged.update(kwargs)
        return helper(model, *args, **merged)
    return call


_scope = threading.local()


def get_current_scope():
    """{helper name: default keyword arguments} set by the enclosing arg_scope blocks
    (this thread's)."""
    if not hasattr(_scope, "current"):
        _scope.current = {}
    return _scope.current


@contextlib.contextmanager
def arg_scope(single_helper_or_list, **kwargs):
    """Within the block, calls of the given brew helpers get kwargs as defaults (an
    explicit argument wins; an inner block's value wins over an outer one's)."""
    helpers = single_helper_or_list if isinstance(single_helper_or_list, (list, tuple)) else [single_helper_or_list]
    for helper in helpers:
        if not callable(helper):
            raise Caffe2Error("brew.arg_scope takes brew helpers (brew.conv, ...), got %r" % (helper,))
    old = get_current_scope()
    new = copy.copy(old)
    for helper in helpers:
        new[helper.__name__] = dict(old.get(helper.__name__, {}), **kwargs)
    _scope.current = new
    try:
        yield
    finally:
        _scope.current = old


_SCOPED_KEYS = {"conv": ("order", "use_cudnn", "cudnn_exhaustive_search", "ws_nbytes_limit"), "max_pool": ("order",), "average_pool": ("order",),
                "spatial_bn": ("order",), "instance_norm": ("order",), "concat": ("order",), "softmax": ()}


def _init(model, initializer_class, op_and_kwargs, default_op, default_kwargs):
    """Caffe2's rule: an Initializer of initializer_class (or Initializer) for the given
    (op, kwargs) or the default; an ExternalInitializer when model.init_params is off."""
    if not getattr(model, "init_params", True):
        return initializers.ExternalInitializer()
    return initializers.update_initializer(initializer_class, op_and_kwargs, (default_op, default_kwargs))


def fc(model, blob_in, blob_out, dim_in, dim_out, weight_init=None, bias_init=None,
       WeightInitializer=None, BiasInitializer=None, enable_tensor_core=False,  # noqa: ARG001
       float16_compute=False, **kwargs):  # noqa: ARG001
    bias_tags = [ParameterTags.BIAS] + ([ParameterTags.COMPUTED_PARAM] if kwargs.pop("freeze_bias", False) else [])
    w = model.create_param(str(blob_out) + "_w", [dim_out, dim_in],
                           _init(model, WeightInitializer, weight_init, "XavierFill", {}), tags=ParameterTags.WEIGHT)
    b = model.create_param(str(blob_out) + "_b", [dim_out],
                           _init(model, BiasInitializer, bias_init, "ConstantFill", {}), tags=bias_tags)
    return model.net.FC([blob_in, w, b], blob_out, **kwargs)


def _cudnn_engine(helper, use_cudnn, kwargs):
    """Caffe2's rule for its cuDNN-aware helpers: use_cudnn sets engine='CUDNN' and
    refuses an explicit other engine (and the reverse); the CPU runs its default
    kernel for an engine it lacks, as Caffe2 does."""
    engine = kwargs.get("engine")
    if engine is not None:
        if use_cudnn and engine != "CUDNN":
            raise ValueError("brew.%s: when use_cudnn=True, the only engine you can specify is 'CUDNN', got %r"
                             % (helper, engine))
        if not use_cudnn and engine == "CUDNN":
            raise ValueError("brew.%s: when use_cudnn=False, the engine cannot be 'CUDNN'" % helper)
    if use_cudnn:
        kwargs["engine"] = "CUDNN"
    return bool(use_cudnn)


def conv(model, blob_in, blob_out, dim_in, dim_out, kernel, weight_init=None, bias_init=None,
         WeightInitializer=None, BiasInitializer=None, group=1, transform_inputs=None,  # noqa: ARG001
         order="NCHW", no_bias=False, use_cudnn=False, cudnn_exhaustive_search=False,
         ws_nbytes_limit=None, **kwargs):
    if _cudnn_engine("conv", use_cudnn, kwargs):
        kwargs.setdefault("exhaustive_search", cudnn_exhaustive_search)
        if ws_nbytes_limit:
            kwargs.setdefault("ws_nbytes_limit", ws_nbytes_limit)
    # a 2-D kernel given as one size or as [kernel_h, kernel_w] (Caffe2's helper takes both)
    if isinstance(kernel, (list, tuple)):
        if len(kernel) != 2:
            raise Caffe2Error("brew.conv: a 2-D kernel is one size or [kernel_h, kernel_w], got %r" % (kernel,))
        kernels = [int(k) for k in kernel]
        kwargs["kernels"] = kernels
    else:
        kernels = [kernel, kernel]
        kwargs["kernel"] = kernel
    shape = [dim_out, dim_in // group] + kernels if order == "NCHW" else [dim_out] + kernels + [dim_in // group]
    w = model.create_param(str(blob_out) + "_w", shape,
                           _init(model, WeightInitializer, weight_init, "XavierFill", {}), tags=ParameterTags.WEIGHT)
    inputs = [blob_in, w]
    if not no_bias:
        inputs.append(model.create_param(str(blob_out) + "_b", [dim_out],
                                         _init(model, BiasInitializer, bias_init, "ConstantFill", {}),
                                         tags=ParameterTags.BIAS))
    return model.net.Conv(inputs, blob_out, order=order, group=group, **kwargs)


def spatial_bn(model, blob_in, blob_out, dim_in, epsilon=1e-5, momentum=0.9, is_test=True,
               order="NCHW", **kwargs):
    def param(suffix, value, tags):
        return model.create_param(str(blob_out) + suffix, [dim_in],
                                  _init(model, None, None, "ConstantFill", {"value": value}), tags=tags)
    scale = param("_s", 1.0, ParameterTags.WEIGHT)
    bias = param("_b", 0.0, ParameterTags.BIAS)
    mean = param("_rm", 0.0, ParameterTags.COMPUTED_PARAM)     # running statistics: computed, not trained
    var = param("_riv", 1.0, ParameterTags.COMPUTED_PARAM)
    # training also writes the running statistics (in place) and the saved batch ones
    outputs = blob_out if is_test else [blob_out, mean, var, str(blob_out) + "_sm", str(blob_out) + "_siv"]
    out = model.net.SpatialBN([blob_in, scale, bias, mean, var], outputs, epsilon=epsilon,
                              momentum=momentum, is_test=int(bool(is_test)), order=order, **kwargs)
    return out if is_test else out[0]


def instance_norm(model, blob_in, blob_out, dim_in, order="NCHW", **kwargs):
    """InstanceNorm with a per-channel scale (ones) and bias (zeros) named
    <blob_out>_s / _b, as Caffe2's brew.instance_norm; in training (not is_test) the
    op also writes the saved mean and inverse std <blob_out>_sm / _siv."""
    def param(suffix, value, tags):
        return model.create_param(str(blob_out) + suffix, [dim_in],
                                  _init(model, None, None, "ConstantFill", {"value": value}), tags=tags)
    scale = param("_s", 1.0, ParameterTags.WEIGHT)
    bias = param("_b", 0.0, ParameterTags.BIAS)
    if kwargs.get("is_test"):
        return model.net.InstanceNorm([blob_in, scale, bias], [blob_out], order=order, **kwargs)
    outputs = [blob_out, str(blob_out) + "_sm", str(blob_out) + "_siv"]
    return model.net.InstanceNorm([blob_in, scale, bias], outputs, order=order, **kwargs)[0]


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
    """An int64 counter blob, 0 in param_init_net (on the CPU), +1 per run of model.net."""
    kwargs.pop("device_option", None)
    model.param_init_net.ConstantFill([], blob_out, shape=[1], value=0, dtype=core.DataType.INT64,
                                      device_option=core.DeviceOption(caffe2_pb2.CPU, 0), **kwargs)
    return model.net.Iter(blob_out, blob_out, **kwargs)


def accuracy(model, blob_in, blob_out, **kwargs):
    """Top-k accuracy of predictions [N, D] against int labels [N] (a metric: no gradient)."""
    return model.net.Accuracy(blob_in, blob_out, **kwargs)


def db_input(model, blobs_out, batch_size, db, db_type):
    """Batches of TensorProtos records from a db: a DBReader made by CreateDB in
    param_init_net (blob `dbreader_<db>`), read by TensorProtosDBInput in model.net."""
    reader = model.param_init_net.CreateDB([], "dbreader_" + str(db), db=db, db_type=db_type)
    return model.net.TensorProtosDBInput(reader, blobs_out, batch_size=batch_size)


def image_input(model, blob_in, blob_out, order="NCHW", use_gpu_transform=False, **kwargs):
    """ImageInput reading `blob_in` (a DBReader) into blob_out = [data, label, ...]. In
    NCHW order without use_gpu_transform the op writes `<data>_nhwc` and an NHWC2NCHW
    gives `data` (the GPU transform, here its CPU equivalent, outputs NCHW itself).
    Returns the output blobs (data, label for two)."""
    blob_out = [str(b) for b in blob_out]
    if order == "NCHW" and not use_gpu_transform:
        outputs = list(model.net.ImageInput(blob_in, [blob_out[0] + "_nhwc"] + blob_out[1:], **kwargs))
        outputs[0] = model.net.NHWC2NCHW(outputs[0], blob_out[0])
        return tuple(outputs)
    if use_gpu_transform:
        kwargs["use_gpu_transform"] = 1
    return tuple(model.net.ImageInput(blob_in, blob_out, **kwargs))


def add_weight_decay(model, weight_decay):
    """L2 regularisation: grad += weight_decay * param for the model's weights (those
    tagged WEIGHT) in the current name scope; needs model.param_to_grad."""
    if weight_decay <= 0.0:
        return
    wd = model.param_init_net.ConstantFill([], "wd", shape=[1], value=float(weight_decay))
    one = model.param_init_net.ConstantFill([], "ONE", shape=[1], value=1.0)
    namescope = scope.CurrentNameScope()
    for param in model.weights if namescope == "" else [w for w in model.weights if w.GetNameScope() == namescope]:
        grad = model.param_to_grad.get(param)
        if grad is None:
            raise Caffe2Error("add_weight_decay: weight '%s' has no gradient in model.param_to_grad" % param)
        if hasattr(grad, "indices") and hasattr(grad, "values"):
            raise Caffe2Error("add_weight_decay: weight '%s' has a sparse gradient (GradientSlice); "
                              "weight decay supports dense gradients only" % param)
        model.net.WeightedSum([grad, one, param, wd], grad)


def softmax(model, blob_in, blob_out=None, use_cudnn=False, **kwargs):  # noqa: ARG001
    return model.net.Softmax(blob_in, blob_out, **kwargs)


def cond(model, cond_blob, external_blobs, then_model, else_model=None):
    """An If op in model.net running then_model's net (else else_model's) on cond_blob;
    external_blobs: the blobs of model.net the branches may use."""
    add_if_op(model.net, cond_blob, external_blobs, then_model.net, else_model.net if else_model else None)


def loop(model, cond_blob, external_blobs, loop_model, cond_model=None):
    """A While op in model.net running loop_model's net while cond_blob (recomputed by
    cond_model's net when given) is true."""
    add_while_op(model.net, cond_blob, external_blobs, loop_model.net, cond_model.net if cond_model else None)


for _fn in (fc, conv, spatial_bn, instance_norm, max_pool, average_pool, concat, dropout, sum, transpose, iter, softmax,
            add_weight_decay, db_input, accuracy, image_input, cond, loop):
    Register(_fn)
for _op, _name in (("Relu", "relu"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh")):
    Register(_simple(_op, _name))
del _fn, _op, _name

globals().update({name: _wrap(fn) for name, fn in list(_HELPERS.items())})
