"""caffe2.python.modeling.initializers: how ModelHelper.create_param fills a parameter.

An initializer's create_param(param_name, init_net, shape) adds the fill op(s) to the
init net and returns the ParameterInfo. brew's helpers build them from the
(op name, kwargs) pairs scripts pass as weight_init / bias_init.
"""
from .. import core
from ..errors import Caffe2Error
from .parameter_info import ParameterInfo


class Initializer:
    """Fills the parameter with one op: `operator_name` with `operator_kwargs`
    (XavierFill, ConstantFill, GaussianFill, ...)."""

    def __init__(self, operator_name=None, **kwargs):
        self.operator_name = operator_name
        self.operator_kwargs = kwargs

    def update(self, operator_name, kwargs):
        if self.operator_name is not None:
            raise Caffe2Error("Operator name overwrites are not allowed")
        self.operator_name = operator_name
        self.operator_kwargs = kwargs

    def create_param(self, param_name, init_net, shape):
        if self.operator_name is None:
            raise Caffe2Error("initializer for '%s' has no operator" % param_name)
        param = init_net.__getattr__(self.operator_name)([], param_name, shape=list(shape),
                                                         **self.operator_kwargs)
        return ParameterInfo(param_id=None, param=param, shape=shape)


class ExternalInitializer:
    """The parameter is not filled by the init net: the caller feeds it into the
    workspace before running it (model.init_params=False)."""

    def create_param(self, param_name, init_net, shape):
        if isinstance(param_name, core.BlobReference):
            param = core.BlobReference(str(param_name), init_net)
        elif isinstance(param_name, str):
            param = core.ScopedBlobReference(param_name, init_net)
        else:
            raise Caffe2Error("unsupported type for param_name: %s" % type(param_name).__name__)
        return ParameterInfo(param_id=None, param=param, shape=shape)


class PseudoFP16Initializer(Initializer):
    """float16 parameter for compute with a float32 master copy (`<name>_fp32`) that the
    optimizer updates (blob_copy[FLOAT]); see build_multi_precision_sgd."""

    def create_param(self, param_name, init_net, shape):
        param_fp32 = init_net.__getattr__(self.operator_name)(
            [], param_name + "_fp32", shape=list(shape), **self.operator_kwargs)
        param = init_net.FloatToHalf(param_fp32, param_name)
        return ParameterInfo(param_id=None, param=param, shape=shape,
                             blob_copy={core.DataType.FLOAT: param_fp32})


# Caffe2's earlier name for PseudoFP16Initializer
pFP16Initializer = PseudoFP16Initializer


class ReversePseudoFP16Initializer(Initializer):
    """float32 parameter with a float16 copy (`<name>_fp16`, blob_copy[FLOAT16])."""

    def create_param(self, param_name, init_net, shape):
        param_fp32 = init_net.__getattr__(self.operator_name)(
            [], param_name, shape=list(shape), **self.operator_kwargs)
        param_fp16 = init_net.FloatToHalf(param_fp32, param_name + "_fp16")
        return ParameterInfo(param_id=None, param=param_fp32, shape=shape,
                             blob_copy={core.DataType.FLOAT16: param_fp16})


def update_initializer(initializer_class, operator_name_and_kwargs, default_operator_name_and_kwargs):
    """An initializer of `initializer_class` (Initializer when None) for the given
    (op name, kwargs), or the default pair when none is given. As in Caffe2, only the
    first two items count: ('UniformFill', {'min': -1.0}, {'max': 1.0}) fills with
    min -1 and the op's default max (Caffe2's crf_test passes such a triple)."""
    chosen = operator_name_and_kwargs or default_operator_name_and_kwargs
    name, kwargs = chosen[0], chosen[1]
    cls = initializer_class if initializer_class is not None else Initializer
    return cls(name, **kwargs)
