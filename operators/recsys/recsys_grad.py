"""Gradients of the recommendation ops (recsys.py, sparse_lengths.py):

  Gather (axis 0) -> GradientSlice(INDICES, dY): no op, the rows' gradients are the
    output gradient itself (Caffe2's sparse gradient); Gather on another axis, or
    with dense_gradient=1, -> BatchGatherGradient (a dense gradient of DATA's shape).
  BatchGather -> BatchGatherGradient(DATA, INDICES, dY) -> dDATA.
  BatchMatMul -> two BatchMatMuls with the transposes Caffe2 uses (no broadcast=1).
  SparseLengthsSum / WeightedSum / Mean -> late Caffe2's
    SparseLengthsIndicesInGradient{Sum,WeightedSum,Mean}Gradient, whose output is the
    values of GradientSlice(INDICES, DATA_grad_values); WeightedSum with
    grad_on_weights=1 -> ...WeightedSumWithMainInputGradient, which also gives
    WEIGHTS' gradient. The older names SparseLengths{Sum,WeightedSum,Mean}Gradient
    (without the INDICES input) run too.
  LengthsSum / LengthsMean -> dense gradients (Lengths{Sum,Mean}Gradient).
  The fused 8/4/2-bit lookups have no gradient (Caffe2's NO_GRADIENT: quantised
  tables are not trained). The float offsets-based ...Idx forms and
  PositionalWeightedSum have no gradient maker: a gradient through them is an error.
"""
import numpy as np

from caffe2py.errors import Caffe2Error
from caffe2py.gradients import no_gradient, register_gradient
from caffe2py.kernels.cpu.recsys import lookup_grad as K
from caffe2py.kernels.cpu.recsys.sparse_lengths import LookupInputError
from caffe2py.registry import UNKNOWN, Arg, OpSchema, register_kernel, register_schema

from .sparse_lengths import SPECS


def _wrap(ctx, roles, fn, *args):
    try:
        return fn(*args)
    except LookupInputError as exc:
        raise ctx.input_error(roles.get(exc.input, 0), str(exc)) from None


# ----------------------------------------------------------------- Gather / BatchGather

register_schema(OpSchema(
    "BatchGatherGradient", num_inputs=3, num_outputs=1,
    args=(Arg("axis", "int", 1, doc="the forward's gather axis"),),
    inference=lambda ctx, ins: [ins[0]], inputs=("DATA", "INDICES", "dY"), outputs=("dDATA",),
    doc="Gradient of BatchGather (and of Gather along another axis): zeros of DATA's shape "
        "with each dY slice added at its index along axis (repeated indices accumulate)."))


@register_kernel("BatchGatherGradient")
def batch_gather_gradient(ctx):
    axis = ctx.int("axis", 1)

    def run(data, indices, dy):
        if np.asarray(indices).dtype.kind not in "iu":
            raise ctx.input_error(1, "INDICES must be int32 or int64, got %s" % indices.dtype)
        if not -data.ndim <= axis < data.ndim:
            raise ctx.input_error(0, "axis %d is out of range for %d-D DATA" % (axis, data.ndim))
        dtype = dy.dtype if dy.dtype.kind == "f" else np.float32
        return _wrap(ctx, {"indices": 1, "grad": 2}, K.gather_grad, data.shape, indices, dy, axis, dtype)
    return run


@register_gradient("Gather")
def _gather_maker(g):
    axis = g.arg("axis", 0)
    if axis == 0 and not g.arg("dense_gradient", 0):
        g.SetSparse(0, g.I(1), g.GO(0))
        return []
    return [g.op("BatchGatherGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)], axis=axis)]


@register_gradient("BatchGather")
def _batch_gather_maker(g):
    return [g.op("BatchGatherGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)], axis=g.arg("axis", 1))]


# ----------------------------------------------------------------- BatchMatMul

@register_gradient("BatchMatMul", copy_arguments=False)
def _batch_matmul_maker(g):
    if g.arg("broadcast", 0):
        raise Caffe2Error("%s: the gradient of BatchMatMul with broadcast=1 is not supported (as in Caffe2)"
                          % g.label)
    a, b, dy = g.input_value(0), g.input_value(1), g.GO(0)
    ta, tb = bool(g.arg("trans_a", 0)), bool(g.arg("trans_b", 0))
    mm = "BatchMatMul"
    if ta and tb:        # Y = A'B': dA = B'G', dB = G'A'
        return [g.op(mm, [b, dy], [g.GI(0)], trans_a=1, trans_b=1),
                g.op(mm, [dy, a], [g.GI(1)], trans_a=1, trans_b=1)]
    if ta:               # Y = A'B: dA = B G', dB = A G
        return [g.op(mm, [b, dy], [g.GI(0)], trans_b=1), g.op(mm, [a, dy], [g.GI(1)])]
    if tb:               # Y = A B': dA = G B, dB = G'A
        return [g.op(mm, [dy, b], [g.GI(0)]), g.op(mm, [dy, a], [g.GI(1)], trans_a=1)]
    return [g.op(mm, [dy, b], [g.GI(0)], trans_b=1),      # Y = A B: dA = G B', dB = A'G
            g.op(mm, [a, dy], [g.GI(1)], trans_a=1)]


# ----------------------------------------------------------------- SparseLengths*

def _values_infer(ctx, ins):
    return [UNKNOWN] * ctx.n_outputs


def _register_values_grad(name, inputs, weighted, mean, with_main_input=False):
    n_in = len(inputs)
    register_schema(OpSchema(
        name, num_inputs=n_in, num_outputs=2 if with_main_input else 1, inference=_values_infer,
        inputs=inputs, outputs=("DATA_grad_values",) + (("WEIGHTS_grad",) if with_main_input else ()),
        doc="Gradient of SparseLengths%s: row j of the output is the gradient of index j's segment%s%s "
            "(the values of DATA's GradientSlice)." % (
                "WeightedSum" if weighted else ("Mean" if mean else "Sum"),
                " times WEIGHTS[j]" if weighted else "", " divided by the segment's length" if mean else "")
        + (" Output 1: WEIGHTS' gradient, <segment gradient, DATA[INDICES[j]]>." if with_main_input else "")))
    at = {role: i for i, role in enumerate(inputs)}

    @register_kernel(name)
    def values_grad(ctx):
        roles = {"grad": at["GRAD"], "lengths": at["LENGTHS"], "weights": at.get("WEIGHTS", 0),
                 "indices": at.get("INDICES", 0), "data": at.get("DATA", 0)}

        def run(*ins):
            grad, lengths = ins[at["GRAD"]], ins[at["LENGTHS"]]
            weights = ins[at["WEIGHTS"]] if weighted else None
            if "INDICES" in at:
                indices = ins[at["INDICES"]]
                if indices.ndim != 1 or indices.dtype.kind not in "iu":
                    raise ctx.input_error(at["INDICES"], "INDICES must be an int vector, got %s %s"
                                          % (indices.dtype, list(indices.shape)))
                n = indices.size
            elif weighted:
                n = weights.size
            else:
                n = int(np.asarray(lengths).sum(dtype=np.int64))
            values = _wrap(ctx, roles, K.sparse_lengths_values, grad, lengths, n, weights, mean)
            if not with_main_input:
                return values
            dweights = _wrap(ctx, roles, K.sparse_lengths_weight_grad, grad, lengths, ins[at["DATA"]],
                             ins[at["INDICES"]])
            return values, dweights
        return run


_register_values_grad("SparseLengthsIndicesInGradientSumGradient", ("GRAD", "LENGTHS", "INDICES"), False, False)
_register_values_grad("SparseLengthsIndicesInGradientMeanGradient", ("GRAD", "LENGTHS", "INDICES"), False, True)
_register_values_grad("SparseLengthsIndicesInGradientWeightedSumGradient",
                      ("WEIGHTS", "GRAD", "LENGTHS", "INDICES"), True, False)
_register_values_grad("SparseLengthsIndicesInGradientWeightedSumWithMainInputGradient",
                      ("WEIGHTS", "GRAD", "LENGTHS", "DATA", "INDICES"), True, False, with_main_input=True)
_register_values_grad("SparseLengthsSumGradient", ("GRAD", "LENGTHS"), False, False)
_register_values_grad("SparseLengthsMeanGradient", ("GRAD", "LENGTHS"), False, True)
_register_values_grad("SparseLengthsWeightedSumGradient", ("WEIGHTS", "GRAD", "LENGTHS"), True, False)


@register_gradient("SparseLengthsSum", "SparseLengthsMean")
def _sls_maker(g):
    reducer = g.def_.type[len("SparseLengths"):]
    values = g.GI_V(0)
    g.SetSparse(0, g.I(1), values)
    return [g.op("SparseLengthsIndicesInGradient%sGradient" % reducer, [g.GO(0), g.I(2), g.I(1)], [values])]


@register_gradient("SparseLengthsWeightedSum")
def _slws_maker(g):
    data, weights, indices, lengths = (g.I(i) for i in range(4))
    values = g.GI_V(0)
    g.SetSparse(0, indices, values)
    if g.arg("grad_on_weights", 0):
        return [g.op("SparseLengthsIndicesInGradientWeightedSumWithMainInputGradient",
                     [weights, g.GO(0), lengths, data, indices], [values, g.GI(1)])]
    return [g.op("SparseLengthsIndicesInGradientWeightedSumGradient",
                 [weights, g.GO(0), lengths, indices], [values])]


no_gradient(*[spec.name for spec in SPECS if spec.fused])
no_gradient("SparseLengthsSumSparseLookup")


# ----------------------------------------------------------------- LengthsSum / LengthsMean

for _name, _mean in (("LengthsSumGradient", False), ("LengthsMeanGradient", True)):
    register_schema(OpSchema(
        _name, num_inputs=2, num_outputs=1, inference=lambda ctx, ins: [UNKNOWN],
        inputs=("GRAD", "LENGTHS"), outputs=("DATA_grad",),
        doc="Gradient of %s: each DATA row gets its segment's gradient%s." % (
            _name[:-8], " divided by the segment's length" if _mean else "")))

    @register_kernel(_name)
    def _lengths_grad(ctx, mean=_mean):
        def run(grad, lengths):
            n = int(np.asarray(lengths).sum(dtype=np.int64))
            return _wrap(ctx, {"grad": 0, "lengths": 1}, K.sparse_lengths_values, grad, lengths, n, None, mean)
        return run


@register_gradient("LengthsSum", "LengthsMean")
def _lengths_maker(g):
    return [g.op(g.def_.type + "Gradient", [g.GO(0), g.I(1)], [g.GI(0)])]
