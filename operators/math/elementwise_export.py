"""ONNX translations of elementwise.py's ops: the activations, Softmax (Caffe2's
2-D meaning of `axis`), Sum, and Add / Sub / Mul / Div with Caffe2's legacy
`broadcast=1, axis` rule."""
import numpy as np

from caffe2py.onnx.export_registry import register_exporter

_UNARY = {"Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Exp": "Exp", "Log": "Log",
          "Sqrt": "Sqrt", "Abs": "Abs", "Negative": "Neg"}


@register_exporter(*_UNARY, onnx_form="the ONNX op of the same meaning (Negative: Neg)")
def export_unary(ex):
    ex.node(_UNARY[ex.type], [ex.inputs[0]], ex.outputs)


@register_exporter("Softmax", onnx_form="Softmax on the last axis; for another `axis` (Caffe2 coerces "
                                        "the input to 2-D there) Flatten -> Softmax -> Reshape")
def export_softmax(ex):
    x = ex.inputs[0]
    rank = ex.need_rank(x, "Softmax's axis is read against it")
    axis = ex.args.int("axis", 1)
    if not -rank <= axis < max(rank, 1):
        raise ex.error("axis %d is out of range for %d-D input" % (axis, rank), blob=x)
    axis %= max(rank, 1)
    if axis == rank - 1:
        ex.node("Softmax", [x], ex.outputs, axis=-1)
        return
    flat = ex.node("Flatten", [x], axis=axis)
    y = ex.node("Softmax", [flat], axis=-1)
    ex.reshape(y, ex.shape_of(x), ex.outputs[0])


@register_exporter("Sum", onnx_form="Sum")
def export_sum(ex):
    ex.node("Sum", ex.inputs, ex.outputs)


def legacy_view(ex, rank_a, b_dims, axis):
    """The shape B is reshaped to so that ONNX broadcasting computes Caffe2's
    broadcast=1 (B's dims line up with A's from `axis`; trailing 1s of B that
    stick out are dropped, as the kernel does)."""
    b = list(b_dims)
    if axis < 0:
        axis = rank_a - len(b)
    while b and b[-1] == 1 and axis + len(b) > rank_a:
        b.pop()
    if axis < 0 or axis + len(b) > rank_a:
        raise ex.error("with broadcast=1, B of shape %s does not fit %d-D A at axis %d"
                       % (list(b_dims), rank_a, axis), blob=ex.inputs[1])
    return [1] * axis + b + [1] * (rank_a - axis - len(b))


def _legacy_axis(ex):
    axis, axis_str = ex.args.int("axis", -1), ex.args.string("axis_str", "")
    if not axis_str:
        return axis
    order = ex.args.string("order", "NCHW")
    if len(axis_str) != 1 or axis_str not in order:
        raise ex.error("axis_str '%s' is not one letter of order '%s'" % (axis_str, order))
    return order.index(axis_str)


@register_exporter("Add", "Sub", "Mul", "Div",
                   onnx_form="Add / Sub / Mul / Div; with broadcast=1 B is first reshaped so its dims "
                             "line up with A's from `axis`; inputs of two types are cast to the wider")
def export_binary(ex):
    a, b = ex.inputs
    ta, tb = ex.dtype(a), ex.dtype(b)
    if ta is not None and tb is not None and ta != tb:
        wide = np.result_type(ta, tb)
        a = a if ta == wide else ex.cast(a, wide)
        b = b if tb == wide else ex.cast(b, wide)
    if ex.args.bool("broadcast"):
        rank_a = ex.need_rank(ex.inputs[0], "broadcast=1 lines B up with A's dims")
        b_dims = ex.need_dims(ex.inputs[1], "broadcast=1 reshapes B")
        view = legacy_view(ex, rank_a, b_dims, _legacy_axis(ex))
        if len(b_dims) and view[-len(b_dims):] != list(b_dims):   # else ONNX aligns it already
            b = ex.reshape(b, view)
    ex.node(ex.type, [a, b], ex.outputs)
