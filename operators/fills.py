"""Fill ops: ConstantFill, GivenTensor*Fill, XavierFill, GaussianFill, UniformFill."""
import numpy as np

from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.proto import caffe2_pb2

DT = caffe2_pb2.TensorProto
_FILL_ARGS = (Arg("shape", "ints", None, doc="output shape"),
              Arg("extra_shape", "ints", None, doc="appended to the input's shape"),
              Arg("input_as_shape", "bool", False, doc="input 0 holds the shape values"))


def _shape(ctx, inputs):
    if ctx.n_inputs == 0 or not inputs:
        shape = ctx.ints("shape") or []
    elif ctx.bool("input_as_shape"):
        shape = [int(v) for v in np.asarray(inputs[0]).reshape(-1)]
    else:
        shape = list(np.shape(inputs[0]))
    return tuple(shape + list(ctx.ints("extra_shape") or []))


def _infer_shape(ctx, ins):
    if ctx.n_inputs == 0:
        dims = tuple(ctx.ints("shape") or []) + tuple(ctx.ints("extra_shape") or [])
    elif ctx.bool("input_as_shape"):
        return None
    else:
        dims = ins[0].dims + tuple(ctx.ints("extra_shape") or [])
    return dims


def _fill_inference(dtype_of):
    def infer(ctx, ins):
        dims = _infer_shape(ctx, ins)
        if dims is None:
            from caffe2py.registry import UNKNOWN
            return [UNKNOWN]
        return [TensorType(tuple(dims), dtype_of(ctx))]
    return infer


def _rng(ctx):
    seed = ctx.op_def.device_option.random_seed if ctx.op_def.HasField("device_option") and \
        ctx.op_def.device_option.HasField("random_seed") else None
    return np.random.default_rng(seed)


# ----------------------------------------------------------------- ConstantFill

_CONSTANT_DTYPES = {DT.FLOAT: np.float32, DT.DOUBLE: np.float64, DT.INT32: np.int32,
                    DT.INT64: np.int64, DT.BOOL: np.bool_, DT.UINT8: np.uint8,
                    DT.FLOAT16: np.float16, DT.INT8: np.int8, DT.INT16: np.int16,
                    DT.UINT16: np.uint16, DT.STRING: object}

register_schema(OpSchema(
    "ConstantFill", num_inputs=(0, 1), num_outputs=1, allow_inplace={(0, 0)},
    args=_FILL_ARGS + (Arg("value", "any", 0.0), Arg("dtype", "int", DT.FLOAT),
                       Arg("require_scalar_input", "bool", False,
                           doc="caffe2py: input 0 must hold one value (the loss whose gradient "
                               "ModelHelper.AddGradientOperators seeds with 1.0)")),
    inference=_fill_inference(lambda ctx: ctx.int("dtype", DT.FLOAT)),
    doc="Fill the output with a constant `value` of `dtype`; shape from `shape` or input 0."))


@register_kernel("ConstantFill")
def constant_fill(ctx):
    dtype = _CONSTANT_DTYPES.get(ctx.int("dtype", DT.FLOAT))
    if dtype is None:
        raise ctx.error("unsupported dtype %d" % ctx.int("dtype"))
    value = ctx.arg("value", 0.0)
    if ctx.n_inputs == 0:
        shape = _shape(ctx, ())

        def run():
            return np.full(shape, value, dtype=dtype)
        return run

    scalar_only = ctx.bool("require_scalar_input", False)

    def run_like(x):
        if scalar_only and np.size(x) != 1:
            raise ctx.input_error(0, "a loss must be a scalar to seed its gradient with %s, got shape %s; "
                                     "average it (AveragedLoss) or pass its gradient blob explicitly"
                                  % (value, list(np.shape(x))))
        return np.full(_shape(ctx, (x,)), value, dtype=dtype)
    return run_like


# ----------------------------------------------------------------- GivenTensor*Fill

_GIVEN = {
    "GivenTensorFill": (np.float32, DT.FLOAT), "GivenTensorDoubleFill": (np.float64, DT.DOUBLE),
    "GivenTensorIntFill": (np.int32, DT.INT32), "GivenTensorInt64Fill": (np.int64, DT.INT64),
    "GivenTensorBoolFill": (np.bool_, DT.BOOL), "GivenTensorStringFill": (object, DT.STRING),
    "GivenTensorInt16Fill": (np.int16, DT.INT16), "GivenTensorByteStringToUInt8Fill": (np.uint8, DT.UINT8),
}


def _given_values(ctx, dtype):
    if dtype is object:
        values = ctx.strings("values") or []
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    if ctx.type == "GivenTensorByteStringToUInt8Fill":
        # Caffe2 reads `values` as a repeated string holding one byte string
        arg = next((a for a in ctx.op_def.arg if a.name == "values"), None)
        if arg is not None and len(arg.strings) > 1:
            raise ctx.error("`values` must hold one byte string, got %d" % len(arg.strings))
        data = b"" if arg is None else (arg.strings[0] if len(arg.strings) else arg.s)
        return np.frombuffer(data, dtype=np.uint8)
    arg = next((a for a in ctx.op_def.arg if a.name == "values"), None)
    if arg is None:
        return np.zeros(0, dtype=dtype)
    raw = list(arg.floats) if len(arg.floats) else list(arg.ints)
    return np.asarray(raw, dtype=dtype)


def _register_given(op_type, dtype, data_type):
    register_schema(OpSchema(
        op_type, num_inputs=(0, 1), num_outputs=1, allow_inplace={(0, 0)},
        args=_FILL_ARGS + (Arg("values", "any", None, required=True, doc="the values, row-major"),),
        inference=_fill_inference(lambda ctx: data_type),
        doc="Fill the output with the given `values` reshaped to `shape`."))

    @register_kernel(op_type)
    def given_fill(ctx):
        values = _given_values(ctx, dtype)
        if ctx.n_inputs == 0:
            shape = _shape(ctx, ())
            if int(np.prod(shape)) != values.size:
                raise ctx.error("%d values do not fill shape %s" % (values.size, list(shape)),
                                blob=ctx.outputs[0])
            result = values.reshape(shape)
            result.setflags(write=False)  # shared by every run; nobody may write into it

            def run():
                return result
            return run

        def run_like(x):
            shape = _shape(ctx, (x,))
            if int(np.prod(shape)) != values.size:
                raise ctx.error("%d values do not fill shape %s" % (values.size, list(shape)))
            return values.reshape(shape).copy()
        return run_like


for _op, (_dtype, _dt) in _GIVEN.items():
    _register_given(_op, _dtype, _dt)


# ----------------------------------------------------------------- random fills

def _random_schema(op_type, extra_args, doc):
    register_schema(OpSchema(op_type, num_inputs=(0, 1), num_outputs=1, allow_inplace={(0, 0)},
                             args=_FILL_ARGS + extra_args,
                             inference=_fill_inference(lambda ctx: DT.FLOAT), doc=doc))


_random_schema("XavierFill", (), "Uniform in ±sqrt(3 / fan_in), fan_in = numel / shape[0].")
_random_schema("MSRAFill", (), "Gaussian with std sqrt(2 / fan_out).")
_random_schema("GaussianFill", (Arg("mean", "float", 0.0), Arg("std", "float", 1.0)), "Normal(mean, std).")
_random_schema("UniformFill", (Arg("min", "float", 0.0), Arg("max", "float", 1.0)), "Uniform[min, max).")


def _random_kernel(sample):
    def factory(ctx):
        rng = _rng(ctx)
        if ctx.n_inputs == 0:
            shape = _shape(ctx, ())
            return lambda: sample(ctx, rng, shape)
        return lambda x: sample(ctx, rng, _shape(ctx, (x,)))
    return factory


def _xavier(ctx, rng, shape):
    fan_in = int(np.prod(shape)) // shape[0] if shape and shape[0] else 1
    scale = np.sqrt(3.0 / max(fan_in, 1))
    return rng.uniform(-scale, scale, size=shape).astype(np.float32)


def _msra(ctx, rng, shape):
    fan_out = int(np.prod(shape)) // shape[1] if len(shape) > 1 and shape[1] else 1
    return rng.normal(0.0, np.sqrt(2.0 / max(fan_out, 1)), size=shape).astype(np.float32)


def _gaussian(ctx, rng, shape):
    return rng.normal(ctx.float("mean"), ctx.float("std"), size=shape).astype(np.float32)


def _uniform(ctx, rng, shape):
    lo, hi = ctx.float("min"), ctx.float("max")
    if hi < lo:
        raise ctx.error("max %g is below min %g" % (hi, lo))
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


register_kernel("XavierFill")(_random_kernel(_xavier))
register_kernel("MSRAFill")(_random_kernel(_msra))
register_kernel("GaussianFill")(_random_kernel(_gaussian))
register_kernel("UniformFill")(_random_kernel(_uniform))
