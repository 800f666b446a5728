"""Caffe2's cost functions for Concat and Split (workspace.GetOperatorCost): data is
moved, not computed (0 flops); Concat also writes its split_info output (one int32
per input)."""
from caffe2py.cost_inference import nbytes_of_item, nelem, register_cost_inference
from caffe2py.registry import Cost

_ORDER_AXIS = {"NCHW": 1, "NHWC": 3}


@register_cost_inference("Concat")
def concat_cost(ctx, ins):
    if not ins:
        raise ctx.error("Concat needs at least one input")
    if ctx.has("axis"):
        axis = ctx.int("axis", -1)
    else:
        order = ctx.string("order", "NCHW")
        if order not in _ORDER_AXIS:
            raise ctx.error("order must be NCHW or NHWC, got %r" % order)
        axis = _ORDER_AXIS[order]
    add_axis = ctx.int("add_axis", 0) != 0
    rank = len(ins[0].dims) + (1 if add_axis else 0)
    canonical = axis + rank if axis < 0 else axis
    if not 0 <= canonical < rank:
        raise ctx.error("Axis not in input ndim range: axis %d for %d dimensions" % (axis, rank))
    out = list(ins[0].dims)
    if add_axis:
        out.insert(canonical, len(ins))
    else:
        for t in ins[1:]:
            if len(t.dims) <= canonical:
                raise ctx.error("input of rank %d has no axis %d" % (len(t.dims), canonical))
            out[canonical] += t.dims[canonical]
    out_elements = 1
    for d in out:
        out_elements *= d
    size = nbytes_of_item(ins[0])
    split_info_bytes = len(ins) * 4
    return Cost(bytes_read=sum(nelem(t) for t in ins) * size,
                bytes_written=out_elements * size + split_info_bytes)


@register_cost_inference("Split")
def split_cost(ctx, ins):
    if not ins:
        raise ctx.error("Split needs an input")
    input_bytes = nelem(ins[0]) * nbytes_of_item(ins[0])
    split_bytes = nelem(ins[1]) * nbytes_of_item(ins[1]) if len(ins) > 1 else 0
    # the outputs hold the input's elements again, in pieces
    return Cost(bytes_read=input_bytes + split_bytes, bytes_written=input_bytes)
