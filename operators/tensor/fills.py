"""Fill ops (caffe2/operators/filler_op, given_tensor_fill_op): ConstantFill,
GivenTensor*Fill, and the initialisers brew and the optimizers use: XavierFill,
MSRAFill, GaussianFill, UniformFill, UniformIntFill, RangeFill, Float16ConstantFill,
Float16UniformFill. (DiagonalFill lives with Caffe2's shape utilities.)

Shapes follow Caffe2's FillerOp: with no input the `shape` argument; with one input
its shape plus `extra_shape`, or (input_as_shape=1) the input's values. Fan rules:
XavierFill is uniform in +-sqrt(3 / fan_in), fan_in = size / shape[0]; MSRAFill is
normal with std sqrt(2 / fan_out), fan_out = size / shape[1]. Random fills draw from
one generator per op, seeded by the op's device_option.random_seed when set.
"""
import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import Finite, Range

DT = caffe2_pb2.TensorProto
_FILL_ARGS = (Arg("shape", "ints", None, doc="output shape (no input)", check=Range(0)),
              Arg("extra_shape", "ints", None, doc="appended to the input's shape", check=Range(0)),
              Arg("input_as_shape", "bool", False, doc="input 0 holds the shape values"))


# ----------------------------------------------------------------- shapes

def check_fill_args(ctx, n_shape_inputs=1):
    """Caffe2 FillerOp's constructor checks; n_shape_inputs is how many inputs may
    give the shape (UniformFill's min/max inputs come after it)."""
    # Caffe2 reads `shape` as a repeated argument: a single int is no shape at all, and
    # without inputs it is refused rather than taken for a 1-D shape.
    scalar_shape = isinstance(ctx.arg("shape"), int)
    if ctx.n_inputs:
        if ctx.has("shape") and not scalar_shape and ctx.ints("shape"):
            raise ctx.error("cannot set the shape argument and pass in an input at the same time")
    else:
        if scalar_shape:
            raise ctx.error("Fill 'shape' argument was a scalar (%d), list expected" % ctx.arg("shape"))
        if ctx.ints("extra_shape"):
            raise ctx.error("cannot set extra_shape when there is no input")
        if ctx.bool("input_as_shape"):
            raise ctx.error("an input must be given if input_as_shape is true")
    shape = [] if scalar_shape else ctx.ints("shape") or []
    if any(d < 0 for d in shape):
        raise ctx.error("shape %s has a negative dimension" % shape)
    if any(d > _MAX_ELEMENTS for d in shape):    # even beside a 0: NumPy refuses such a dim
        raise ctx.error("shape %s has a dimension of %d elements, more than any memory holds" % (shape, max(shape)))


_MAX_ELEMENTS = 1 << 48      # far beyond any memory; keeps element counts exact in int64


def _shape(ctx, inputs):
    shape = _requested_shape(ctx, inputs)
    count = 1
    for d in shape:                      # Python ints: no int64 wrap-around
        count *= d
    if count > _MAX_ELEMENTS:
        raise ctx.error("shape %s asks for %d elements, more than any memory holds" % (list(shape), count))
    return shape


def _requested_shape(ctx, inputs):
    if ctx.n_inputs == 0 or not inputs:
        return tuple(ctx.ints("shape") or [])
    extra = list(ctx.ints("extra_shape") or [])
    if ctx.bool("input_as_shape"):
        values = inputs[0]
        if not isinstance(values, np.ndarray) or values.ndim != 1 or values.size == 0 or values.dtype.kind not in "iu":
            raise ctx.input_error(0, "with input_as_shape=1 the input must be a non-empty 1-D integer tensor "
                                     "(int64 in Caffe2), got %s %s" % (getattr(values, "dtype", "?"),
                                                                       list(np.shape(values))))
        shape = [int(v) for v in values]
        if any(d < 0 for d in shape):
            raise ctx.input_error(0, "shape %s has a negative dimension" % shape)
        return tuple(shape + extra)
    return tuple(list(np.shape(inputs[0])) + extra)


def _infer_dims(ctx, ins):
    if ctx.n_inputs == 0:
        return tuple(ctx.ints("shape") or [])
    if ctx.bool("input_as_shape") or not ins[0].known:
        return None
    return tuple(ins[0].dims) + tuple(ctx.ints("extra_shape") or [])


def _fill_inference(dtype_of):
    def infer(ctx, ins):
        dims = _infer_dims(ctx, ins)
        return [UNKNOWN if dims is None else TensorType(dims, dtype_of(ctx))]
    return infer


def _rng(ctx):
    seed = ctx.op_def.device_option.random_seed if ctx.op_def.HasField("device_option") and \
        ctx.op_def.device_option.HasField("random_seed") else None
    return np.random.default_rng(seed)


def _shaped_kernel(ctx, fill):
    """The kernel callable: fill(shape, inputs) with the shape per Caffe2's rules."""
    if ctx.n_inputs == 0:
        shape = _shape(ctx, ())
        return lambda: fill(shape, ())
    return lambda *inputs: fill(_shape(ctx, inputs), inputs)


# ----------------------------------------------------------------- ConstantFill

_CONSTANT_DTYPES = {DT.FLOAT: np.float32, DT.DOUBLE: np.float64, DT.INT32: np.int32,
                 DT.INT64: np.int64, DT.BOOL: np.bool_, DT.UINT8: np.uint8,
                 DT.FLOAT16: np.float16, DT.INT8: np.int8, DT.INT16: np.int16,
                 DT.UINT16: np.uint16, DT.STRING: object}


def _value_arg(ctx):
    return next((a for a in ctx.op_def.arg if a.name == "value"), None)


def constant_dtype(ctx):
    """Caffe2's rule: `dtype` when given, else FLOAT for a float `value`, INT64 for an
    int one, FLOAT when there is no value."""
    if ctx.has("dtype"):
        return ctx.int("dtype")
    arg = _value_arg(ctx)
    if arg is None or arg.HasField("f"):
        return DT.FLOAT
    if arg.HasField("i"):
        return DT.INT64
    return None


register_schema(OpSchema(
    "ConstantFill", num_inputs=(0, 1), num_outputs=1, allow_inplace={(0, 0)},
    args=_FILL_ARGS + (Arg("value", "any", 0.0, doc="the fill value"),
                       Arg("dtype", "int", None, doc="TensorProto data type; default from value's type"),
                       Arg("require_scalar_input", "bool", False,
                           doc="caffe2py: input 0 must hold one value (the loss whose gradient "
                               "ModelHelper.AddGradientOperators seeds with 1.0)")),
    inference=_fill_inference(lambda ctx: constant_dtype(ctx)),
    doc="Fill the output with a constant `value`; dtype from `dtype`, else FLOAT for a float value "
        "and INT64 for an int one. Shape from `shape` or input 0."))


@register_kernel("ConstantFill")
def constant_fill(ctx):
    check_fill_args(ctx)
    code = constant_dtype(ctx)
    if code is None:
        raise ctx.error("argument 'value' is of unexpected type (give dtype=STRING for a string value)")
    if code == DT.UNDEFINED:
        raise ctx.error("ConstantFill op cannot have undefined 'dtype' argument")
    dtype = _CONSTANT_DTYPES.get(code)
    if dtype is None:
        raise ctx.error("unexpected 'dtype' argument value: %d" % code)
    value = ctx.arg("value", "" if dtype is object else 0)
    if dtype is object:
        value = ctx.string("value", "")
    elif isinstance(value, (str, bytes)):
        raise ctx.error("argument 'value' is a string but dtype is %s" % DT.DataType.Name(code))
    elif isinstance(value, (list, tuple)):
        raise ctx.error("argument 'value' must be one value, got a list of %d" % len(value))
    elif np.dtype(dtype).kind in "iu" and not (
            float(value).is_integer() and np.iinfo(dtype).min <= value <= np.iinfo(dtype).max):
        raise ctx.error("argument 'value' %r is not a %s value" % (value, DT.DataType.Name(code)))
    scalar_only = ctx.bool("require_scalar_input", False)

    def fill(shape, inputs):
        if scalar_only and inputs and np.size(inputs[0]) != 1:
            raise ctx.input_error(0, "a loss must be a scalar to seed its gradient with %s, got shape %s; "
                                     "average it (AveragedLoss) or pass its gradient blob explicitly"
                                  % (value, list(np.shape(inputs[0]))))
        return np.full(shape, value, dtype=dtype)
    return _shaped_kernel(ctx, fill)


# ----------------------------------------------------------------- GivenTensor*Fill

_GIVEN = {
    "GivenTensorFill": (np.float32, DT.FLOAT), "GivenTensorDoubleFill": (np.float64, DT.DOUBLE),
    "GivenTensorIntFill": (np.int32, DT.INT32), "GivenTensorInt64Fill": (np.int64, DT.INT64),
    "GivenTensorBoolFill": (np.bool_, DT.BOOL), "GivenTensorStringFill": (object, DT.STRING),
    "GivenTensorInt16Fill": (np.int16, DT.INT16), "GivenTensorByteStringToUInt8Fill": (np.uint8, DT.UINT8),
    "GivenTensorStringToUInt8Fill": (np.uint8, DT.UINT8),
}
# both read `values` as one byte string whose bytes are the uint8 elements
_BYTE_STRING_FILLS = ("GivenTensorByteStringToUInt8Fill", "GivenTensorStringToUInt8Fill")


def _given_dtype(ctx, dtype, code):
    """GivenTensorFill reads its values as `dtype` when that argument is given."""
    if ctx.type == "GivenTensorFill" and ctx.has("dtype"):
        code = ctx.int("dtype")
        dtype = _CONSTANT_DTYPES.get(code)
        if dtype is None or code in (DT.FLOAT16, DT.UNDEFINED):
            raise ctx.error("unsupported dtype %d for GivenTensorFill" % code)
    return dtype, code


def _given_values(ctx, dtype):
    if dtype is object:
        values = ctx.strings("values") or []
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    if ctx.type in _BYTE_STRING_FILLS:
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
    if raw and np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        bad = next((v for v in raw if not (np.isfinite(v) and info.min <= v <= info.max)), None)
        if bad is not None:
            raise ctx.error("value %r does not fit %s (%d to %d)" % (bad, np.dtype(dtype).name, info.min, info.max))
    return np.asarray(raw, dtype=dtype)


def _register_given(op_type, dtype, data_type):
    extra = (Arg("dtype", "int", None, doc="read the values as this type"),) if op_type == "GivenTensorFill" else ()
    register_schema(OpSchema(
        op_type, num_inputs=(0, 1), num_outputs=1, allow_inplace={(0, 0)},
        args=_FILL_ARGS + (Arg("values", "any", None, required=True, doc="the values, row-major"),) + extra,
        inference=_fill_inference(lambda ctx: _given_dtype(ctx, dtype, data_type)[1]),
        doc="Fill the output with the given `values` reshaped to `shape`."))

    @register_kernel(op_type)
    def given_fill(ctx):
        check_fill_args(ctx)
        values = _given_values(ctx, _given_dtype(ctx, dtype, data_type)[0])
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


# ----------------------------------------------------------------- random initialisers

def _random_schema(op_type, extra_args, doc, num_inputs=(0, 1), dtype=DT.FLOAT):
    register_schema(OpSchema(op_type, num_inputs=num_inputs, num_outputs=1, allow_inplace={(0, 0)},
                             args=_FILL_ARGS + extra_args,
                             inference=_fill_inference(lambda ctx: dtype), doc=doc))


_random_schema("XavierFill", (), "Uniform in [-scale, scale), scale = sqrt(3 / fan_in), fan_in = "
                                 "size / shape[0] (Caffe2's rule; brew's default weight fill).")
_random_schema("MSRAFill", (), "Normal(0, std) with std = sqrt(2 / fan_out), fan_out = size / shape[1] "
                               "(needs at least 2 dims).")
_random_schema("GaussianFill", (Arg("mean", "float", 0.0, check=Finite()), Arg("std", "float", 1.0, check=Range(0.0))),
               "Normal(mean, std).")
_random_schema("UniformFill", (Arg("min", "float", 0.0, check=Finite()), Arg("max", "float", 1.0, check=Finite())),
               "Uniform in [min, max) (min < max). With 3 inputs (shape source, min, max) the bounds "
               "come from inputs 1 and 2, and min > max gives an output with first dimension 0.",
               num_inputs={0, 1, 3})
_random_schema("UniformIntFill", (Arg("min", "int", 0), Arg("max", "int", 1)),
               "int32 uniform in [min, max], both ends included (min < max); 3 inputs as UniformFill.",
               num_inputs={0, 1, 3}, dtype=DT.INT32)
_random_schema("Float16UniformFill", (Arg("min", "float", 0.0, check=Finite()),
                                      Arg("max", "float", 1.0, check=Finite())),
               "float16 uniform in [min, max).", num_inputs=0, dtype=DT.FLOAT16)


def _fan(ctx, shape, axis, what):
    if len(shape) <= axis:
        raise ctx.error("%s needs an output with at least %d dimensions, got shape %s"
                        % (what, axis + 1, list(shape)), blob=ctx.outputs[0])
    if shape[axis] == 0:
        raise ctx.error("%s: shape %s has 0 in dimension %d" % (what, list(shape), axis), blob=ctx.outputs[0])
    return int(np.prod(shape, dtype=np.int64)) // shape[axis]


@register_kernel("XavierFill")
def xavier_fill(ctx):
    check_fill_args(ctx)
    rng = _rng(ctx)

    def fill(shape, inputs):
        scale = np.sqrt(3.0 / max(_fan(ctx, shape, 0, "fan_in = size / shape[0]"), 1))
        return rng.uniform(-scale, scale, size=shape).astype(np.float32)
    return _shaped_kernel(ctx, fill)


@register_kernel("MSRAFill")
def msra_fill(ctx):
    check_fill_args(ctx)
    rng = _rng(ctx)

    def fill(shape, inputs):
        std = np.sqrt(2.0 / max(_fan(ctx, shape, 1, "fan_out = size / shape[1]"), 1))
        return rng.normal(0.0, std, size=shape).astype(np.float32)
    return _shaped_kernel(ctx, fill)


@register_kernel("GaussianFill")
def gaussian_fill(ctx):
    check_fill_args(ctx)
    rng, mean, std = _rng(ctx), ctx.float("mean"), ctx.float("std")
    if std < 0:
        raise ctx.error("std must be non-negative, got %g" % std)
    return _shaped_kernel(ctx, lambda shape, inputs: rng.normal(mean, std, size=shape).astype(np.float32))


def _uniform_factory(draw, dtype, read):
    def factory(ctx):
        bounds_from_inputs = ctx.n_inputs == 3
        if bounds_from_inputs:
            if ctx.has("min") or ctx.has("max"):
                raise ctx.error("cannot set min/max both as arguments and as input blobs")
        else:
            check_fill_args(ctx)
            if not read(ctx, "min") < read(ctx, "max"):
                raise ctx.error("max value (%s) should be bigger than min value (%s)"
                                % (read(ctx, "max"), read(ctx, "min")))
        rng = _rng(ctx)

        def fill(shape, inputs):
            lo, hi = read(ctx, "min"), read(ctx, "max")
            if bounds_from_inputs:
                for k in (1, 2):
                    if np.size(inputs[k]) != 1:
                        raise ctx.input_error(k, "%s blob must be a scalar" % ("min" if k == 1 else "max"))
                lo, hi = np.asarray(inputs[1]).reshape(-1)[0].item(), np.asarray(inputs[2]).reshape(-1)[0].item()
                if lo > hi:
                    return np.zeros((0,) + tuple(shape[1:]), dtype)
            return draw(rng, lo, hi, shape).astype(dtype)
        if bounds_from_inputs:
            return lambda *inputs: fill(_shape(ctx, inputs[:1]), inputs)
        return _shaped_kernel(ctx, fill)
    return factory


register_kernel("UniformFill")(_uniform_factory(lambda rng, lo, hi, s: rng.uniform(lo, hi, size=s),
                                                np.float32, lambda ctx, n: ctx.float(n)))
register_kernel("UniformIntFill")(_uniform_factory(lambda rng, lo, hi, s: rng.integers(lo, hi, size=s, endpoint=True),
                                                   np.int32, lambda ctx, n: ctx.int(n)))
register_kernel("Float16UniformFill")(_uniform_factory(lambda rng, lo, hi, s: rng.uniform(lo, hi, size=s),
                                                       np.float16, lambda ctx, n: ctx.float(n)))


# ----------------------------------------------------------------- RangeFill, Float16ConstantFill

_random_schema("RangeFill", (), "Fill with 0, 1, 2, ... in row-major order (float32).")


@register_kernel("RangeFill")
def range_fill(ctx):
    check_fill_args(ctx)
    return _shaped_kernel(ctx, lambda shape, inputs: np.arange(int(np.prod(shape, dtype=np.int64)),
                                                               dtype=np.float32).reshape(shape))


register_schema(OpSchema(
    "Float16ConstantFill", num_inputs=0, num_outputs=1,
    args=(Arg("shape", "ints", None, check=Range(0)), Arg("value", "float", 0.0)),
    inference=lambda ctx, ins: [TensorType(tuple(ctx.ints("shape") or []), DT.FLOAT16)],
    doc="float16 tensor of `shape` filled with `value`."))


@register_kernel("Float16ConstantFill")
def float16_constant_fill(ctx):
    shape, value = tuple(ctx.ints("shape") or []), ctx.float("value")
    return lambda: np.full(shape, value, np.float16)
