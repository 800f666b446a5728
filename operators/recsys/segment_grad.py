"""Gradients of the segment reductions (segment_ops.py), with Caffe2's gradient
operator names and input layouts:

  {Sorted,Unsorted}Segment{R}          -> {Sorted,Unsorted}Segment{R}Gradient
                                          ([SCALARS], dOUTPUT, SEGMENT_IDS) -> dDATA
  Sparse{Sorted,Unsorted}Segment{R}    -> the same op; its output is the values of
                                          GradientSlice(INDICES, ...)
  SortedSegmentRange{R}                -> SortedSegmentRange{R}Gradient
                                          (DATA, OUTPUT, dOUTPUT, SEGMENT_IDS)
  LengthsMax                           -> LengthsMaxWithMainInputAndForwardOutputGradient
                                          (OUTPUT, dOUTPUT, LENGTHS, DATA)
  LengthsWeightedSum                   -> LengthsWeightedSumGradient (SCALARS, dOUTPUT,
                                          LENGTHS); grad_on_weights=1:
                                          LengthsWeightedSumWithMainInputGradient
                                          (+ DATA) -> dDATA, dSCALARS
  ReduceFrontWeightedSum               -> Shape(DATA), ReduceFrontWeightedSumGradient
                                          (SCALARS, dOUTPUT, shape)

The Max gradients go to every entry equal to the maximum, as Caffe2's loops do. The
segment ops take no gradient for SCALARS (Caffe2: "grads on aux inputs are not yet
implemented for Segment operators").
"""
import numpy as np

from caffe2py.errors import Caffe2Error
from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.recsys import segment_grad as K
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, Rank

from ._checks import call, check_float_data, check_int_vector, check_rank


def _like_input(i):
    return lambda ctx, ins: [ins[i]]


# --------------------------------------------------------------------------- segment ids

def _register_segment_grad(sorted_ids, reducer):
    name = ("Sorted" if sorted_ids else "Unsorted") + "Segment" + reducer + "Gradient"
    weighted = reducer == "WeightedSum"
    inputs = (("SCALARS",) if weighted else ()) + ("SEGMENT_GRADS", "SEGMENT_IDS")
    register_schema(OpSchema(
        name, num_inputs=len(inputs), num_outputs=1, inputs=inputs, outputs=("DATA_GRADS",),
        inference=lambda ctx, ins: [TensorType((ins[-1].dims[0],) + tuple(ins[-2].dims[1:]), ins[-2].dtype)],
        doc="Gradient of %sSegment%s: entry i gets SEGMENT_GRADS[SEGMENT_IDS[i]]%s." % (
            "Sorted" if sorted_ids else "Unsorted", reducer,
            {"Mean": " divided by its segment's size", "WeightedSum": " times SCALARS[i]"}.get(reducer, ""))))

    @register_kernel(name)
    def factory(ctx):
        def run(*ins):
            scalars = ins[0] if weighted else None
            grad, ids = ins[-2], ins[-1]
            check_float_data(ctx, len(ins) - 2, grad, "SEGMENT_GRADS")
            check_int_vector(ctx, len(ins) - 1, ids, "SEGMENT_IDS")
            if weighted and (scalars.ndim != 1 or scalars.shape[0] != ids.shape[0]):
                raise ctx.input_error(0, "Input 0 must have the same first dim as SEGMENT_IDS")
            return call(ctx, {"segment_ids": len(ins) - 1}, K.segment_grad, grad, ids, reducer, scalars, sorted_ids)
        return run


for _sorted in (True, False):
    for _reducer in ("Sum", "Mean", "WeightedSum"):
        _register_segment_grad(_sorted, _reducer)


def _segment_maker(g):
    op_type = g.def_.type
    sparse = op_type.startswith("Sparse")
    base = op_type[len("Sparse"):] if sparse else op_type
    weighted = base.endswith("WeightedSum")
    if weighted and g.arg("grad_on_weights", 0):
        raise Caffe2Error("%s: grads on aux inputs are not yet implemented for Segment operators." % g.label)
    ids = g.I(len(g.def_.input) - 1)
    inputs = ([g.I(1)] if weighted else []) + [g.GO(0), ids]
    if sparse:
        values = g.GI_V(0)
        g.SetSparse(0, g.I(len(g.def_.input) - 2), values)
        return [g.op(base + "Gradient", inputs, [values])]
    return [g.op(base + "Gradient", inputs, [g.GI(0)])]


register_gradient(*["%s%sSegment%s" % (sp, so, r) for sp in ("", "Sparse") for so in ("Sorted", "Unsorted")
                    for r in ("Sum", "Mean", "WeightedSum")], copy_arguments=False)(_segment_maker)


# --------------------------------------------------------------------------- range reducers

for _reducer in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp"):
    _name = "SortedSegmentRange%sGradient" % _reducer
    register_schema(OpSchema(
        _name, num_inputs=4, num_outputs=1, inputs=("DATA_IN", "DATA_OUT", "SEGMENT_GRADS", "SEGMENT_IDS"),
        outputs=("DATA_GRADS",), inference=_like_input(0),
        doc="Gradient of SortedSegmentRange%s." % _reducer))

    @register_kernel(_name)
    def _range_grad(ctx, reducer=_reducer):
        def run(data, out, grad, ids):
            check_float_data(ctx, 2, grad, "SEGMENT_GRADS")
            check_int_vector(ctx, 3, ids, "SEGMENT_IDS")
            return call(ctx, {"segment_ids": 3, "data": 0}, K.range_grad, data, out, grad, ids, reducer)
        return run


@register_gradient(*["SortedSegmentRange" + r for r in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp")],
                   copy_arguments=False)
def _range_maker(g):
    return [g.op(g.def_.type + "Gradient", [g.input_value(0), g.O(0), g.GO(0), g.I(1)], [g.GI(0)])]


# --------------------------------------------------------------------------- lengths reducers

register_schema(OpSchema(
    "LengthsMaxWithMainInputAndForwardOutputGradient", num_inputs=4, num_outputs=1,
    inputs=("FORWARD_OUTPUT", "SEGMENT_GRADS", "LENGTHS", "DATA_INPUT"), outputs=("DATA_GRADS",),
    checks=(Rank((0, 1, 3), 1),),
    inference=_like_input(3), doc="Gradient of LengthsMax: the segment's gradient where DATA equals its max."))


@register_kernel("LengthsMaxWithMainInputAndForwardOutputGradient")
def lengths_max_grad(ctx):
    def run(out, grad, lengths, data):
        check_int_vector(ctx, 2, lengths, "LENGTHS")
        return call(ctx, {"lengths": 2}, K.lengths_max_grad, out, grad, lengths, data)
    return run


@register_gradient("LengthsMax", copy_arguments=False)
def _lengths_max_maker(g):
    return [g.op("LengthsMaxWithMainInputAndForwardOutputGradient",
                 [g.O(0), g.GO(0), g.I(1), g.input_value(0)], [g.GI(0)])]


register_schema(OpSchema(
    "LengthsWeightedSumGradient", num_inputs=3, num_outputs=1, inputs=("SCALARS", "SEGMENT_GRADS", "LENGTHS"),
    outputs=("DATA_GRADS",), inference=lambda ctx, ins: [TensorType((ins[0].dims[0],) + tuple(ins[1].dims[1:]),
                                                                     ins[1].dtype)],
    doc="Gradient of LengthsWeightedSum with respect to DATA: SCALARS[i] times its segment's gradient."))
register_schema(OpSchema(
    "LengthsWeightedSumWithMainInputGradient", num_inputs=4, num_outputs=(1, 2),
    inputs=("SCALARS", "SEGMENT_GRADS", "LENGTHS", "DATA_INPUT"), outputs=("DATA_GRADS", "SCALARS_GRADS"),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0],) + tuple(ins[1].dims[1:]), ins[1].dtype), ins[0]],
    doc="Gradient of LengthsWeightedSum with grad_on_weights=1: DATA's, and SCALARS' (<segment gradient, "
        "DATA[i]>)."))


def _check_weighted_sum_grad(ctx, scalars, grad, lengths, data=None):
    """SCALARS a float32 vector, SEGMENT_GRADS float32 with one row per segment, and
    DATA (WithMainInput) one row per scalar, each row shaped like a gradient row."""
    check_float_data(ctx, 0, scalars, "SCALARS")
    check_rank(ctx, 0, scalars, 1, "SCALARS")
    check_float_data(ctx, 1, grad, "SEGMENT_GRADS")
    check_int_vector(ctx, 2, lengths, "LENGTHS")
    if grad.shape[0] != lengths.size:
        raise ctx.input_error(1, "SEGMENT_GRADS has %d rows; LENGTHS has %d segments" % (grad.shape[0], lengths.size))
    if data is not None:
        check_float_data(ctx, 3, data, "DATA_INPUT")
        if data.shape[0] != scalars.size or data.shape[1:] != grad.shape[1:]:
            raise ctx.input_error(3, "DATA_INPUT of shape %s must have %d rows (one per scalar) shaped like "
                                     "SEGMENT_GRADS' rows %s" % (list(data.shape), scalars.size, list(grad.shape[1:])))


@register_kernel("LengthsWeightedSumGradient")
def lengths_weighted_sum_grad(ctx):
    def run(scalars, grad, lengths):
        _check_weighted_sum_grad(ctx, scalars, grad, lengths)
        return call(ctx, {"lengths": 2}, K.lengths_weighted_sum_grad, scalars, grad, lengths)
    return run


@register_kernel("LengthsWeightedSumWithMainInputGradient")
def lengths_weighted_sum_main_grad(ctx):
    def run(scalars, grad, lengths, data):
        _check_weighted_sum_grad(ctx, scalars, grad, lengths, data)
        d, dw = call(ctx, {"lengths": 2, "data": 3}, K.lengths_weighted_sum_grad, scalars, grad, lengths, data)
        return (d, dw) if ctx.n_outputs == 2 else d
    return run


@register_gradient("LengthsWeightedSum", copy_arguments=False)
def _lengths_weighted_sum_maker(g):
    if g.arg("grad_on_weights", 0):
        return [g.op("LengthsWeightedSumWithMainInputGradient", [g.I(1), g.GO(0), g.I(2), g.input_value(0)],
                     [g.GI(0), g.GI(1)])]
    return [g.op("LengthsWeightedSumGradient", [g.I(1), g.GO(0), g.I(2)], [g.GI(0)])]


# --------------------------------------------------------------------------- ReduceFrontWeightedSum

register_schema(OpSchema(
    "ReduceFrontWeightedSumGradient", num_inputs=3, num_outputs=1,
    inputs=("SCALARS", "REDUCTION_GRAD", "SOURCE_SHAPE"), outputs=("DATA_GRADS",),
    checks=(DTypes(2, "int"),),
    args=(Arg("num_reduce_dim", "int", 1, doc="leading dims the forward reduced"),),
    inference=lambda ctx, ins: [TensorType(None, ins[1].dtype)],
    doc="Gradient of ReduceFrontWeightedSum: SCALARS[i...] times the output gradient, shaped like DATA."))


@register_kernel("ReduceFrontWeightedSumGradient")
def reduce_front_weighted_sum_grad(ctx):
    def run(scalars, grad, shape):
        shape = [int(v) for v in np.asarray(shape).reshape(-1)]
        r = np.ndim(scalars)
        if tuple(shape[:r]) != tuple(np.shape(scalars)) or tuple(shape[r:]) != tuple(grad.shape):
            raise ctx.input_error(2, "SOURCE_SHAPE %s does not fit SCALARS %s and the gradient %s"
                                  % (shape, list(np.shape(scalars)), list(grad.shape)))
        return K.reduce_front_weighted_sum_grad(scalars, grad, shape)
    return run


@register_gradient("ReduceFrontWeightedSum", copy_arguments=False)
def _reduce_front_maker(g):
    if g.arg("grad_on_weights", 0):
        raise Caffe2Error("%s: ReduceFrontWeightedSum has no gradient for SCALARS (as in Caffe2)" % g.label)
    dims = "_" + g.O(0) + "_dims"
    return [g.op("Shape", [g.input_value(0)], [dims]),
            g.op("ReduceFrontWeightedSumGradient", [g.I(1), g.GO(0), dims], [g.GI(0)],
                 num_reduce_dim=g.arg("num_reduce_dim", 1))]
