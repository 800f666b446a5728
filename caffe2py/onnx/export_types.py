"""Element types on the way out: Caffe2's TensorProto.DataType, numpy dtypes and
ONNX's TensorProto element types (the two enums number their types differently)."""
import numpy as np

from caffe2py.errors import Caffe2Error
from caffe2py.tensors import data_type_of, numpy_dtype

# Names accepted for an element type in `--input name:TYPE:dims` and value_info.
TYPE_NAMES = {
    "float": np.float32, "float32": np.float32, "float16": np.float16, "half": np.float16,
    "double": np.float64, "float64": np.float64, "int8": np.int8, "uint8": np.uint8,
    "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "int64": np.int64,
    "bool": np.bool_, "string": object,
}


def onnx_elem_type(dtype):
    """ONNX TensorProto element type of a numpy dtype."""
    from onnx import helper
    dtype = np.dtype(dtype)
    if dtype.kind in "SUO":
        return 8   # STRING
    try:
        return int(helper.np_dtype_to_tensor_dtype(dtype))
    except (KeyError, ValueError, TypeError):
        raise Caffe2Error("numpy dtype %s has no ONNX element type" % dtype) from None


def numpy_of_onnx(elem_type):
    """numpy dtype of an ONNX element type."""
    from onnx import helper
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type)))
    except (KeyError, ValueError, TypeError):
        raise Caffe2Error("ONNX element type %r is not a tensor type caffe2py exports" % (elem_type,)) from None


def onnx_of_caffe2(data_type):
    """ONNX element type of a Caffe2 TensorProto.DataType."""
    return onnx_elem_type(numpy_dtype(data_type))


def caffe2_of_onnx(elem_type):
    """Caffe2 TensorProto.DataType of an ONNX element type."""
    return data_type_of(numpy_of_onnx(elem_type))


def parse_elem_type(value, what):
    """An element type given as an ONNX enum value, a numpy dtype or a name -> ONNX enum."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        numpy_of_onnx(value)          # validates
        return int(value)
    if isinstance(value, str):
        dtype = TYPE_NAMES.get(value.strip().lower())
        if dtype is None:
            raise Caffe2Error("%s: unknown element type '%s' (known: %s)"
                              % (what, value, ", ".join(sorted(TYPE_NAMES))))
        return onnx_elem_type(dtype)
    try:
        return onnx_elem_type(np.dtype(value))
    except TypeError:
        raise Caffe2Error("%s: element type must be an onnx.TensorProto type, a numpy dtype or a name, "
                          "got %r" % (what, value)) from None
