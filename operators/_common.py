"""Helpers shared by operator modules: inference shorthands and Caffe2's
convolution/pooling argument spellings."""
import numpy as np

from caffe2py.registry import UNKNOWN, TensorType
from caffe2py.proto import caffe2_pb2

FLOAT = caffe2_pb2.TensorProto.FLOAT


def same_as_input(i=0):
    """Inference: every output is typed like input i."""
    def infer(ctx, ins):
        return [ins[i]] * ctx.n_outputs
    return infer


def elementwise_cost(ctx, ins):
    from caffe2py.registry import Cost
    t = ins[0]
    n = int(np.prod(t.dims)) if t.known else 0
    return Cost(flops=n, bytes_read=4 * n * len(ins), bytes_written=4 * n)


def typed(dims, dtype=FLOAT):
    return TensorType(tuple(int(d) for d in dims), dtype)


def unknown(n):
    return [UNKNOWN] * n


def _pick(ctx, single, plural, per_dim, rank, default):
    """Caffe2's three spellings of a per-spatial-dim argument."""
    if ctx.has(plural):
        values = ctx.ints(plural)
        if len(values) == 1 and rank > 1:
            values = values * rank
        return list(values)
    if ctx.has(single):
        return [ctx.int(single)] * rank
    names = [per_dim % s for s in ("h", "w")] if rank == 2 else []
    if names and any(ctx.has(n) for n in names):
        return [ctx.int(n, default) for n in names]
    return [default] * rank


def spatial_rank(ctx, default=2):
    if ctx.has("kernels"):
        return len(ctx.ints("kernels"))
    if ctx.has("strides"):
        return len(ctx.ints("strides"))
    if ctx.has("pads") and len(ctx.ints("pads")) % 2 == 0 and len(ctx.ints("pads")) > 0:
        return len(ctx.ints("pads")) // 2
    return default


def conv_geometry(ctx, rank, kernel_from=None):
    """(kernel, strides, pads[begins+ends], dilations) from Caffe2 args.
    kernel_from: a kernel shape to use when the op gives none (conv weights)."""
    if kernel_from is not None and not (ctx.has("kernel") or ctx.has("kernels") or ctx.has("kernel_h")):
        kernel = list(kernel_from)
    else:
        kernel = _pick(ctx, "kernel", "kernels", "kernel_%s", rank, 0)
    strides = _pick(ctx, "stride", "strides", "stride_%s", rank, 1)
    dilations = _pick(ctx, "dilation", "dilations", "dilation_%s", rank, 1)
    if ctx.has("pads"):
        pads = list(ctx.ints("pads"))
        if len(pads) == rank:
            pads = pads + pads
    elif ctx.has("pad"):
        pads = [ctx.int("pad")] * (2 * rank)
    elif rank == 2 and any(ctx.has(n) for n in ("pad_t", "pad_l", "pad_b", "pad_r")):
        pads = [ctx.int("pad_t", 0), ctx.int("pad_l", 0), ctx.int("pad_b", 0), ctx.int("pad_r", 0)]
    else:
        pads = [0] * (2 * rank)
    for name, values, want in (("kernel", kernel, rank), ("strides", strides, rank), ("pads", pads, 2 * rank),
                               ("dilations", dilations, rank)):
        if len(values) != want:
            raise ctx.error("%s %s has %d values; a %d-D window needs %d" % (name, list(values), len(values),
                                                                          rank, want))
    return kernel, strides, pads, dilations


POOL_KERNEL_ARGS = ("kernel", "kernels", "kernel_h", "kernel_w")


def pool_window_problem(ctx):
    """None when a pool's window arguments pass Caffe2's ConvPoolOpBase, else why not.
    A kernel of 0 (what Caffe2's model-zoo nets store for their global pools) is taken
    exactly when global_pooling is set, the window then being the input's spatial
    size; global_pooling refuses any pad, stride or dilation other than 0 / 1 / 1.
    Negative values are the schema's Range checks' business."""
    if not ctx.bool("global_pooling"):
        for name in POOL_KERNEL_ARGS:
            if ctx.has(name):
                values = ctx.ints(name) if name == "kernels" else [ctx.int(name)]
                if any(v < 1 for v in values):
                    return ("argument '%s' must be >= 1 unless global_pooling is set, got %s"
                            % (name, values if name == "kernels" else values[0]))
        return None
    for names, neutral in ((("pad", "pads", "pad_t", "pad_l", "pad_b", "pad_r"), 0),
                           (("stride", "strides", "stride_h", "stride_w"), 1),
                           (("dilation", "dilations", "dilation_h", "dilation_w"), 1)):
        for name in names:
            if ctx.has(name):
                values = ctx.ints(name) if name.endswith("s") else [ctx.int(name)]
                if any(v != neutral for v in values):
                    return ("global_pooling takes no %s: argument '%s' must be %d, got %s"
                            % (names[0], name, neutral, values if name.endswith("s") else values[0]))
    return None


LEGACY_NOTSET, LEGACY_VALID, LEGACY_SAME, LEGACY_CAFFE_POOLING = 0, 1, 2, 3


def legacy_pads(legacy, spatial, kernel, strides, dilations, pads):
    """Caffe2's legacy_pad modes rewrite pads from the input size."""
    k = len(kernel)
    if legacy == LEGACY_VALID:
        return [0] * (2 * k)
    if legacy == LEGACY_SAME:
        out = list(pads)
        for i in range(k):
            span = (kernel[i] - 1) * dilations[i] + 1
            total = max(0, (-(-spatial[i] // strides[i]) - 1) * strides[i] + span - spatial[i])
            out[i], out[i + k] = total // 2, total - total // 2
        return out
    return pads


def legacy_broadcast_shape(a_shape, b_shape, axis):
    """Shape B is viewed as for Caffe2's broadcast=1: B matches A's dims from axis."""
    if axis < 0 or axis == -1:
        axis = len(a_shape) - len(b_shape)
    b_shape = list(b_shape)
    while b_shape and b_shape[-1] == 1 and axis + len(b_shape) > len(a_shape):
        b_shape.pop()
    if axis < 0:
        while b_shape and b_shape[0] == 1 and axis < 0:
            b_shape.pop(0)
            axis += 1
    if axis < 0 or axis + len(b_shape) > len(a_shape):
        raise ValueError("B of shape %s does not fit A of shape %s at axis %d" % (b_shape, list(a_shape), axis))
    for i, d in enumerate(b_shape):
        if d != a_shape[axis + i] and d != 1:
            raise ValueError("B of shape %s does not match A of shape %s at axis %d"
                             % (b_shape, list(a_shape), axis))
    return [1] * axis + b_shape + [1] * (len(a_shape) - axis - len(b_shape))
