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


def debug(f):
    return f


__all__ = ["MakeArgument", "ArgumentHelper", "Caffe2TensorToNumpyArray",
           "NumpyArrayToCaffe2Tensor", "MakeNDArray", "GetArgumentValue", "debug"]
