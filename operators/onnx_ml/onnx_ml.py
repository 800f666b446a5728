"""A first slice of the ai.onnx.ml domain: ArrayFeatureExtractor, Binarizer,
LabelEncoder (1-4, including tensor keys/values)."""
import numpy as np

from caffe2py.tensors import tensor_to_numpy

from caffe2py.schema_rules import Rank

from ..onnx_base import onnx_op

ML = "ai.onnx.ml"


def _key(v):
    return v.decode() if isinstance(v, bytes) else (v.item() if isinstance(v, np.generic) else v)


@onnx_op("ArrayFeatureExtractor", (1, None), domain=ML, checks=(Rank(0, 1),))
def array_feature_extractor(ctx):
    def run(x, indices):
        idx = indices.reshape(-1).astype(np.int64)
        last = x.shape[-1]
        if idx.size and (idx.min() < 0 or idx.max() >= last):
            raise ctx.input_error(1, "index out of range [0, %d)" % last)
        out = np.take(x, idx, axis=-1)
        return out.reshape(1, -1) if x.ndim == 1 else out
    return run


@onnx_op("Binarizer", (1, None), domain=ML)
def binarizer(ctx):
    threshold = ctx.float("threshold", 0.0)
    return lambda x: (x > threshold).astype(x.dtype)


def _values(ctx, prefix):
    """The first of prefix_strings / _int64s / _floats / _tensor given, as a list."""
    if ctx.has(prefix + "_strings"):
        return ctx.strings(prefix + "_strings")
    if ctx.has(prefix + "_int64s"):
        return ctx.ints(prefix + "_int64s")
    if ctx.has(prefix + "_floats"):
        return ctx.floats(prefix + "_floats")
    if ctx.has(prefix + "_tensor"):
        return [_key(v) for v in tensor_to_numpy(ctx.tensor(prefix + "_tensor")).reshape(-1)]
    return None


@onnx_op("LabelEncoder", (1, None), domain=ML)
def label_encoder(ctx):
    if ctx.op_version < 2:
        keys, values = ctx.strings("classes_strings", []), None
    else:
        keys, values = _values(ctx, "keys"), _values(ctx, "values")
    if keys is None or (ctx.op_version >= 2 and values is None) or (values is not None and len(keys) != len(values)):
        raise ctx.error("LabelEncoder needs keys and values of the same length")
    if ctx.has("values_tensor"):
        out_dtype = tensor_to_numpy(ctx.tensor("values_tensor")).dtype
    elif ctx.has("values_strings"):
        out_dtype = np.dtype(object)
    elif ctx.has("values_floats"):
        out_dtype = np.dtype(np.float32)
    else:
        out_dtype = np.dtype(np.int64)
    if ctx.has("default_tensor"):
        given = tensor_to_numpy(ctx.tensor("default_tensor")).reshape(-1)
        if given.size != 1:
            raise ctx.error("default_tensor must hold one value, got %d" % given.size)
        default = _key(given[0])
    elif out_dtype.kind == "O":
        default = ctx.string("default_string", "_Unused")
    elif out_dtype.kind == "f":
        default = ctx.float("default_float", -0.0)
    else:
        default = ctx.int("default_int64", -1)
    if ctx.op_version < 2:   # opset 1: strings <-> their index in classes_strings
        table = {k: i for i, k in enumerate(keys)}
    else:
        table = dict(zip(keys, values))

    def run(x):
        flat = [table.get(_key(v), default) for v in x.reshape(-1)]
        return np.array(flat, dtype=out_dtype).reshape(x.shape)
    return run
