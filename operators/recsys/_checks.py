"""Input checks and error mapping shared by the sparse/segment operator modules."""
import numpy as np

from caffe2py.kernels.cpu.recsys.sparse_lengths import LookupInputError

_NAMES = {np.dtype(np.float64): "double", np.dtype(np.float16): "at::Half", np.dtype(np.int32): "int",
          np.dtype(np.int64): "long", np.dtype(np.uint8): "unsigned char", np.dtype(np.bool_): "bool",
          np.dtype(object): "std::string"}


def call(ctx, roles, fn, *args, **kwargs):
    """Run a kernel; its LookupInputError becomes a Caffe2Error naming the blob
    (roles: the kernel's input role -> the op's input index)."""
    try:
        return fn(*args, **kwargs)
    except LookupInputError as exc:
        index = roles.get(exc.input)
        raise ctx.input_error(0 if index is None else index, str(exc)) from None


def type_name(dtype):
    return _NAMES.get(np.dtype(dtype), str(dtype))


def check_float_data(ctx, index, data, what="DATA"):
    """float32 (the type Caffe2 registers for these ops), at least 1-D."""
    if data.dtype != np.float32:
        raise ctx.input_error(index, "Unsupported input type: %s." % type_name(data.dtype))
    if data.ndim < 1:
        raise ctx.input_error(index, "%s must be at least 1-D" % what)


def check_int_vector(ctx, index, a, what):
    if a.ndim != 1:
        raise ctx.input_error(index, "%s must be a vector" % what)
    check_int(ctx, index, a, what)


def check_int(ctx, index, a, what):
    if a.dtype not in (np.int32, np.int64):
        raise ctx.input_error(index, "%s must be int32 or int64, got %s" % (what, type_name(a.dtype)))


def check_rank(ctx, index, a, rank, what):
    if a.ndim != rank:
        raise ctx.input_error(index, "%s must be %d-D, got shape %s" % (what, rank, list(a.shape)))


def scalar_of(ctx, index, a, what):
    a = np.asarray(a)
    if a.size != 1:
        raise ctx.input_error(index, "%s must hold one value, got shape %s" % (what, list(a.shape)))
    return a.reshape(-1)[0]
