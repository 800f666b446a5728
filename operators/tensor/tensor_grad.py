"""Gradient makers of the shape and layout family (tensor.py), as Caffe2 writes
them with forward ops:
  Concat -> Split of dY by the forward's split_info output;
  Split -> Concat of the outputs' gradients (an output without one contributes zeros
    of its shape: Caffe2 leaves it out, which misplaces the others);
  Reshape -> Reshape of dY to the forward's old_shape output (no arguments copied);
  Flatten, FlattenToVec -> ResizeLike(dY, X); Transpose -> Transpose with the inverse permutation;
  Copy / CopyFromCPUInput / EnsureDense -> Copy of dY; Sum: see elementwise_grad;
  Alias -> dY itself (no op); CopyCPUToGPU / CopyGPUToCPU -> the copy back (of a
    sparse dY's indices and values each).
Ops with no gradient by design: StopGradient, Iter, Shape, LengthsRangeFill,
Bucketize and the fills (their outputs are constants)."""
from caffe2py.errors import Caffe2Error
from caffe2py.gradients import GradientSlice, no_gradient, register_gradient


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


@register_gradient("Copy", "CopyFromCPUInput", "EnsureDense", copy_arguments=False)
def _copy_maker(g):
    return [g.op("Copy", [g.GO(0)], [g.GI(0)])]


@register_gradient("Alias")
def _alias_maker(g):
    """Caffe2's GetAliasGradient: dY is X's gradient as it is, no op."""
    g.SetDense(0, g.GO(0))
    return []


def _device_copy_maker(copy_back):
    """Caffe2's GetCPUToGPUGradient / GetGPUToCPUGradient: the copy the other way,
    of dY, or of a sparse dY's indices and values one copy each."""
    def maker(g):
        grad = g.GradOut(0)
        if isinstance(grad, GradientSlice):
            return [g.op(copy_back, [g.GO_I(0)], [g.GI_I(0)]), g.op(copy_back, [g.GO_V(0)], [g.GI_V(0)])]
        return [g.op(copy_back, [g.GO(0)], [g.GI(0)])]
    return maker


register_gradient("CopyCPUToGPU")(_device_copy_maker("CopyGPUToCPU"))
register_gradient("CopyGPUToCPU")(_device_copy_maker("CopyCPUToGPU"))


no_gradient("StopGradient", "Iter", "Shape", "LengthsRangeFill", "Bucketize",
            "ConstantFill", "GivenTensorFill", "GivenTensorDoubleFill", "GivenTensorIntFill",
            "GivenTensorInt64Fill", "GivenTensorBoolFill", "GivenTensorStringFill",
            "GivenTensorInt16Fill", "GivenTensorByteStringToUInt8Fill",
            "XavierFill", "MSRAFill", "GaussianFill", "UniformFill")
