"""Gradient makers of the shape and layout family (tensor.py), as Caffe2 writes
them with forward ops:
  Concat -> Split of dY by the forward's split_info output;
  Split -> Concat of the outputs' gradients (an output without one contributes zeros
    of its shape: Caffe2 leaves it out, which misplaces the others);
  Reshape -> Reshape of dY to the forward's old_shape output (no arguments copied);
  Flatten, FlattenToVec -> ResizeLike(dY, X); Transpose -> Transpose with the inverse permutation;
  Copy / CopyFromCPUInput / EnsureDense -> Copy of dY; Sum: see elementwise_grad;
  ChannelShuffle -> ChannelShuffleGradient(dY) (the shuffle with C / group groups);
  Alias -> dY itself (no op); CopyGPUToCPU <-> CopyCPUToGPU of dY (of a sparse dY's
    indices and values, one op each).
Ops with no gradient by design: StopGradient, Iter, Shape, LengthsRangeFill,
Bucketize, EnsureCPUOutput and the fills (their outputs are constants); Append
refuses one (Caffe2's SHOULD_NOT_DO_GRADIENT)."""
from caffe2py.errors import Caffe2Error
from caffe2py.gradients import GradientSlice, no_gradient, register_gradient, should_not_do_gradient
from caffe2py.registry import OpSchema, register_kernel, register_schema

from .._common import same_as_input
from .tensor import channel_shuffle_args, shuffle_channels


@register_gradient("Concat")
def _concat_maker(g):
    if len(g.def_.output) < 2:
        raise Caffe2Error("%s: the gradient splits dY by the split_info output (output 1); give the "
                          "Concat two outputs" % g.label)
    return [g.op("Split", [g.GO(0), g.O(1)], [g.GI(i) for i in range(len(g.def_.input))])]


@register_gradient("Split")
def _split_maker(g):
    ops, parts = [], []
    if not any(g.has_grad(i) for i in range(len(g.def_.output))):
        return []
    for i, out in enumerate(g.def_.output):
        if g.has_grad(i):
            parts.append(g.GO(i))
        else:
            zeros = "_%s_grad_zeros" % out
            ops.append(g.op("ConstantFill", [out], [zeros], value=0.0))
            parts.append(zeros)
    concat = g.op("Concat", parts, [g.GI(0), "_" + g.GI(0) + "_dims"])
    return ops + [concat]


@register_gradient("Reshape", copy_arguments=False)
def _reshape_maker(g):
    if len(g.def_.output) < 2:
        raise Caffe2Error("%s: the gradient reshapes dY to the old_shape output (output 1); give the "
                          "Reshape two outputs" % g.label)
    return [g.op("Reshape", [g.GO(0), g.O(1)], [g.GI(0), "_" + g.GI(0) + "_dims"])]


@register_gradient("Flatten", "FlattenToVec", copy_arguments=False)
def _flatten_maker(g):
    return [g.op("ResizeLike", [g.GO(0), g.I(0)], [g.GI(0)])]


@register_gradient("Transpose", copy_arguments=False)
def _transpose_maker(g):
    axes = g.arg("axes", None)
    if not axes:                  # the default reverses the dims: its own inverse
        return [g.op("Transpose", [g.GO(0)], [g.GI(0)])]
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a % len(axes)] = i
    return [g.op("Transpose", [g.GO(0)], [g.GI(0)], axes=inverse)]


@register_gradient("Copy", "CopyFromCPUInput", copy_arguments=False)
def _copy_maker(g):
    return [g.op("Copy", [g.GO(0)], [g.GI(0)])]


@register_gradient("EnsureDense", copy_arguments=False)
def _ensure_dense_maker(g):
    """Caffe2's: a dense gradient is handed over as the input's (no op); a sparse one
    (indices, values) becomes dense with SparseToDense, X giving the first dimension,
    so ops that take dense gradients only (FCGradient) can follow."""
    if isinstance(g.GradOut(0), GradientSlice):
        return [g.op("SparseToDense", [g.GO_I(0), g.GO_V(0), g.I(0)], [g.GI(0)])]
    g.SetDense(0, g.GO(0))
    return []


# ----------------------------------------------------------------- ChannelShuffle

register_schema(OpSchema(
    "ChannelShuffleGradient", num_inputs=1, num_outputs=1, inputs=("dY",), outputs=("dX",),
    inference=same_as_input(0),
    doc="Gradient of ChannelShuffle (same `group` and `order`): the inverse shuffle, i.e. the "
        "shuffle with C / group groups."))


@register_kernel("ChannelShuffleGradient")
def channel_shuffle_gradient(ctx):
    group, nchw = channel_shuffle_args(ctx)
    return lambda dy: shuffle_channels(ctx, dy, group, nchw, inverse=True)


@register_gradient("ChannelShuffle")
def _channel_shuffle_maker(g):
    return [g.op("ChannelShuffleGradient", [g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- Alias, device copies

@register_gradient("Alias")
def _alias_maker(g):
    g.SetDense(0, g.GO(0))         # the output is the input: its gradient passes through
    return []


def _device_copy_maker(copy_type):
    def maker(g):
        grad = g.GradOut(0)
        if isinstance(grad, GradientSlice):
            return [g.op(copy_type, [g.GO_I(0)], [g.GI_I(0)]), g.op(copy_type, [g.GO_V(0)], [g.GI_V(0)])]
        return [g.op(copy_type, [g.GO(0)], [g.GI(0)])]
    return maker


register_gradient("CopyGPUToCPU")(_device_copy_maker("CopyCPUToGPU"))
register_gradient("CopyCPUToGPU")(_device_copy_maker("CopyGPUToCPU"))

should_not_do_gradient("Append")
no_gradient("EnsureCPUOutput", "Float16ConstantFill")
no_gradient("StopGradient", "Iter", "Shape", "LengthsRangeFill", "Bucketize",
            "ConstantFill", "GivenTensorFill", "GivenTensorDoubleFill", "GivenTensorIntFill",
            "GivenTensorInt64Fill", "GivenTensorBoolFill", "GivenTensorStringFill",
            "GivenTensorInt16Fill", "GivenTensorByteStringToUInt8Fill",
            "XavierFill", "MSRAFill", "GaussianFill", "UniformFill")
