"""Caffe2's cost functions for convolutions and fully connected ops
(workspace.GetOperatorCost): ConvPoolOpBase's CostInferenceForConv, and
CostInferenceForFC / CostInferenceForFCGradient."""
import math

from caffe2py.cost_inference import nbytes_of_item, nelem, register_cost_inference
from caffe2py.registry import Cost

from .nn import _conv_out_dims, _nchw


@register_cost_inference("Conv", "Conv1D", "Conv2D", "Conv3D")
def conv_cost(ctx, ins):
    if len(ins) < 2:
        raise ctx.error("Conv requires at least 2 inputs, got %d" % len(ins))
    x, w = ins[0], ins[1]
    if not x.dims or not w.dims:
        return Cost()
    if len(x.dims) >= 4 and len(w.dims) != len(x.dims):
        raise ctx.error("a %d-D input needs a %d-D filter, got %d-D" % (len(x.dims), len(x.dims), len(w.dims)))
    y = _conv_out_dims(ctx, x.dims, w.dims)
    nchw = _nchw(ctx)
    y_spatial = y[2:] if nchw else y[1:-1]
    kernel = w.dims[2:] if nchw else w.dims[1:-1]
    in_channels = w.dims[1] if nchw else w.dims[-1]
    out_channels = w.dims[0]
    # groups are not counted (in_channels is the filter's, C / group): Caffe2's formula
    outputs = x.dims[0] * out_channels * math.prod(y_spatial)
    taps = math.prod(kernel) * in_channels
    bias = ins[2] if len(ins) > 2 else None
    return Cost(flops=2 * outputs * taps,
                bytes_read=nelem(x) * nbytes_of_item(x) + nelem(w) * nbytes_of_item(w)
                + (nelem(bias) * nbytes_of_item(bias) if bias is not None else 0),
                bytes_written=outputs * nbytes_of_item(x),
                params_bytes=out_channels * taps * nbytes_of_item(w))


def _fc_sizes(ctx, x, w, transposed):
    """(M, K, N): X flattened to M x K at `axis`, N outputs from W flattened at `axis_w`."""
    axis = ctx.int("axis", 1)
    axis = axis + len(x.dims) if axis < 0 else axis
    axis_w = ctx.int("axis_w", 1)
    axis_w = axis_w + len(w.dims) if axis_w < 0 else axis_w
    if not (0 <= axis <= len(x.dims) and 0 <= axis_w <= len(w.dims)):
        raise ctx.error("axis %d / axis_w %d out of range for X of rank %d and W of rank %d"
                        % (ctx.int("axis", 1), ctx.int("axis_w", 1), len(x.dims), len(w.dims)))
    m, k = math.prod(x.dims[:axis]), math.prod(x.dims[axis:])
    n = math.prod(w.dims[axis_w:]) if transposed else math.prod(w.dims[:axis_w])
    return m, k, n


def _fc_cost(transposed):
    def cost(ctx, ins):
        if len(ins) < 3:
            raise ctx.error("FC requires at least three inputs, got %d" % len(ins))
        m, k, n = _fc_sizes(ctx, ins[0], ins[1], transposed)
        size = nbytes_of_item(ins[0])
        return Cost(flops=m * n * (2 * k + 1), bytes_read=(k * (m + n) + n) * size,
                    bytes_written=m * n * size, params_bytes=(k * n + n) * size)
    return cost


def _fc_gradient_cost(transposed):
    def cost(ctx, ins):
        if len(ins) < 2:
            raise ctx.error("FCGradient requires X and W, got %d inputs" % len(ins))
        m, k, n = _fc_sizes(ctx, ins[0], ins[1], transposed)
        # Caffe2 counts the gradients at 4 bytes an element (float) whatever the types
        cost = Cost(flops=m * n * (2 * k + 1), bytes_written=(nelem(ins[1]) + n) * 4,
                    params_bytes=(k * n + n) * 4)
        if len(ctx.op_def.output) == 3:     # dX too
            cost.flops += 2 * m * n * k
            cost.bytes_written += nelem(ins[0]) * 4
        return cost
    return cost


register_cost_inference("FC")(_fc_cost(False))
register_cost_inference("FCTransposed")(_fc_cost(True))
register_cost_inference("FCGradient")(_fc_gradient_cost(False))
register_cost_inference("FCTransposedGradient")(_fc_gradient_cost(True))
