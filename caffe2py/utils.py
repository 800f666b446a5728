"""caffe2.python.utils: argument and tensor helpers scripts import."""
import numpy as np

from .args import ArgumentHelper, argument_value, make_argument
from .tensors import numpy_to_tensor, tensor_to_numpy


def MakeArgument(key, value):
    return make_argument(key, value)


def Caffe2TensorToNumpyArray(tensor):
    return tensor_to_numpy(tensor)


def NumpyArrayToCaffe2Tensor(arr, name=None):
    return numpy_to_tensor(np.asarray(arr), name)


def MakeNDArray(values, shape, dtype=np.float32):
    return np.asarray(values, dtype=dtype).reshape(shape)


def GetArgumentValue(arg):
    return argument_value(arg)


def ArgsToDict(args):
    """{name: value} of Arguments (unnamed ones are skipped): the one field that is
    set, as protobuf holds it (strings as bytes, lists as repeated fields), or None."""
    found = {}
    for arg in args:
        if not arg.HasField("name"):
            continue
        found[arg.name] = None
        for field in arg.DESCRIPTOR.fields:
            if field.name == "name":
                continue
            # newer protobuf has is_repeated, older only label
            repeated = getattr(field, "is_repeated", None)
            if repeated is None:
                repeated = field.label == field.LABEL_REPEATED
            if (not repeated and arg.HasField(field.name)) or (repeated and len(getattr(arg, field.name)) > 0):
                found[arg.name] = getattr(arg, field.name)
                break
    return found


def debug(f):
    return f


OPTIMIZER_ITERATION_NAME = "optimizer_iteration"
OPTIMIZER_ITERATION_LR_NAME = "optimizer_iteration_lr"
ITERATION_MUTEX_NAME = "iteration_mutex"
ITERATION_MUTEX_LR_NAME = "iteration_mutex_lr"


def BuildUniqueMutexIter(init_net, net, iter=None, iter_mutex=None, iter_val=0):  # noqa: A002
    """The mutex-guarded iteration counter optimizers share: an int64 [1] blob set to
    iter_val and a mutex in init_net (on the CPU), stepped by AtomicIter in net; only
    created once per init net. Returns the counter blob."""
    from . import core
    from .proto import caffe2_pb2
    iter = iter if iter is not None else OPTIMIZER_ITERATION_NAME  # noqa: A001
    iter_mutex = iter_mutex if iter_mutex is not None else ITERATION_MUTEX_NAME
    if init_net.BlobIsDefined(iter):
        return init_net.GetBlobRef(iter)
    # pinned to the CPU even inside a GPU device scope (Caffe2 marks the ops so)
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, extra_info=["device_type_override:cpu"])):
        iteration = init_net.ConstantFill([], iter, shape=[1], value=iter_val, dtype=core.DataType.INT64)
        mutex = init_net.CreateMutex([], [iter_mutex])
        net.AtomicIter([mutex, iteration], [iteration])
    return iteration


def EnumClassKeyVals(cls):
    """{NAME: value} of a class's upper-case string attributes (Caffe2's enum
    classes, such as regularizer.RegularizationBy); values must be unique."""
    assert isinstance(cls, type), "expected a class"
    enum = {}
    for key in dir(cls):
        if key == key.upper():
            value = getattr(cls, key)
            if isinstance(value, str):
                assert value not in enum.values(), "Failed to resolve %s as Enum: duplicate value %r" % (cls, value)
                enum[key] = value
    return enum


__all__ = ["MakeArgument", "ArgumentHelper", "Caffe2TensorToNumpyArray",
           "NumpyArrayToCaffe2Tensor", "MakeNDArray", "GetArgumentValue", "debug", "BuildUniqueMutexIter", "EnumClassKeyVals", "ArgsToDict",
           "OPTIMIZER_ITERATION_NAME", "ITERATION_MUTEX_NAME"]


def NHWC2NCHW(tensor):
    """Caffe2's utils.NHWC2NCHW: a NumPy array's channel axis moved from last to second."""
    assert tensor.ndim >= 1
    return tensor.transpose((0, tensor.ndim - 1) + tuple(range(1, tensor.ndim - 1)))


def NCHW2NHWC(tensor):
    """Caffe2's utils.NCHW2NHWC: a NumPy array's channel axis moved from second to last."""
    assert tensor.ndim >= 2
    return tensor.transpose((0,) + tuple(range(2, tensor.ndim)) + (1,))
