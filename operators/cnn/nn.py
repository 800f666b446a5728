"""FC, Conv (and ConvRelu, the fused form caffe2py.optimize makes), MaxPool,
AveragePool, SpatialBN, LRN, InstanceNorm, Dropout (Caffe2 argument spellings).
Conv and pooling kernels own a Scratch so padding and im2col buffers are
allocated at the first run and reused afterwards."""
import dataclasses

import numpy as np

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.math import gemm as gemm_k
from caffe2py.kernels.cpu.cnn import norm as norm_k
from caffe2py.kernels.cpu.cnn import pool as pool_k
from caffe2py.kernels.cpu.runtime.output_pool import output_array
from caffe2py.kernels.cpu.runtime.packed_weights import values_of
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import Axis, DTypes, Finite, OneOf, Range, Rank, SameDType

from .._common import LEGACY_CAFFE_POOLING, POOL_KERNEL_ARGS, conv_geometry, legacy_pads, pool_window_problem

# ----------------------------------------------------------------- FC


def _fc_dims(ctx, x_dims, w_dims, transposed):
    axis, axis_w = ctx.int("axis", 1), ctx.int("axis_w", 1)
    axis = axis % len(x_dims) if x_dims else 0
    axis_w = axis_w % len(w_dims) if w_dims else 0
    k = int(np.prod(x_dims[axis:], dtype=np.int64))
    if transposed:
        kw, n = int(np.prod(w_dims[:axis_w], dtype=np.int64)), int(np.prod(w_dims[axis_w:], dtype=np.int64))
    else:
        n, kw = int(np.prod(w_dims[:axis_w], dtype=np.int64)), int(np.prod(w_dims[axis_w:], dtype=np.int64))
    return axis, k, kw, n


def _fc_schema(op_type, transposed):
    def infer(ctx, ins):
        x, w = ins[0], ins[1]
        axis, _, _, n = _fc_dims(ctx, x.dims, w.dims, transposed)
        return [TensorType(tuple(x.dims[:axis]) + (n,), x.dtype)]

    def cost(ctx, ins):
        x, w = ins[0], ins[1]
        axis, k, _, n = _fc_dims(ctx, x.dims, w.dims, transposed)
        m = int(np.prod(x.dims[:axis], dtype=np.int64))
        return Cost(flops=2.0 * m * k * n, bytes_read=4.0 * (m * k + k * n + n), bytes_written=4.0 * m * n,
                    params_bytes=4.0 * (k * n + n))

    register_schema(OpSchema(
        op_type, num_inputs=3, num_outputs=1,
        args=(Arg("axis", "int", 1, doc="X is flattened to 2-D at this axis", check=Axis(0)),
              Arg("axis_w", "int", 1, doc="W is flattened to 2-D at this axis", check=Axis(1)),
              Arg("float16_compute", "bool", False)),
        checks=(DTypes("*", "float"), SameDType("*")),
        inference=infer, cost=cost,
        inputs=("X", "W", "b"), outputs=("Y",),
        doc="Y = X W%s + b with X flattened at `axis` and W at `axis_w`." % ("" if transposed else "^T")))

    @register_kernel(op_type)
    def fc(ctx):
        def run(x, w, b):
            axis, k, kw, n = _fc_dims(ctx, x.shape, w.shape, transposed)
            if k != kw:
                raise ctx.input_error(1, "W of shape %s needs %d inputs per row but X '%s' of shape %s "
                                      "gives %d" % (list(w.shape), kw, ctx.inputs[0], list(x.shape), k))
            if b.size != n:
                raise ctx.input_error(2, "bias has %d elements, expected %d" % (b.size, n))
            w2 = w.reshape(k, n) if transposed else w.reshape(n, k)
            y = gemm_k.fc(x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), k), w2, b.reshape(n), transposed)
            return y.reshape(tuple(x.shape[:axis]) + (n,))
        return run


_fc_schema("FC", transposed=False)
_fc_schema("FCTransposed", transposed=True)


# ----------------------------------------------------------------- Conv

def _nchw(ctx):
    order = ctx.string("order", "NCHW")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    return order == "NCHW"


def _to_nchw(x):
    return np.moveaxis(x, -1, 1)


def _from_nchw(y):
    return np.ascontiguousarray(np.moveaxis(y, 1, -1))


# ConvPoolOpBase's rules: kernels, strides and dilations positive, pads not negative
_POSITIVE, _NOT_NEGATIVE = Range(1), Range(0)
_ORDER = Arg("order", "string", "NCHW", check=OneOf("NCHW", "NHWC"))
_CONV_ARGS = (Arg("kernel", "int", check=_POSITIVE), Arg("kernels", "ints", check=_POSITIVE),
              Arg("stride", "int", 1, check=_POSITIVE), Arg("strides", "ints", check=_POSITIVE),
              Arg("pad", "int", 0, check=_NOT_NEGATIVE), Arg("pads", "ints", check=_NOT_NEGATIVE),
              Arg("dilation", "int", 1, check=_POSITIVE), Arg("dilations", "ints", check=_POSITIVE),
              Arg("group", "int", 1, check=_POSITIVE), _ORDER,
              Arg("legacy_pad", "int", 0, check=OneOf(0, 1, 2, 3)),
              Arg("kernel_h", "int", check=_POSITIVE), Arg("kernel_w", "int", check=_POSITIVE),
              Arg("stride_h", "int", check=_POSITIVE), Arg("stride_w", "int", check=_POSITIVE),
              Arg("pad_t", "int", check=_NOT_NEGATIVE), Arg("pad_l", "int", check=_NOT_NEGATIVE),
              Arg("pad_b", "int", check=_NOT_NEGATIVE), Arg("pad_r", "int", check=_NOT_NEGATIVE))
# Caffe2's CPU convolutions and pools are float ops; X and W have N, C and spatial dims
_CONV_CHECKS = (DTypes("*", "float"), SameDType((0, 1, 2)), Rank(0, 3), Rank(1, 3))


def _conv_out_dims(ctx, x_dims, w_dims):
    nchw = _nchw(ctx)
    spatial = list(x_dims[2:]) if nchw else list(x_dims[1:-1])
    rank = len(spatial)
    kernel_shape = w_dims[2:] if nchw else w_dims[1:-1]
    kernel, strides, pads, dil = conv_geometry(ctx, rank, kernel_from=kernel_shape)
    pads = legacy_pads(ctx.int("legacy_pad", 0), spatial, kernel, strides, dil, pads)
    out = [conv_k.conv_output_size(spatial[i], kernel[i], strides[i], pads[i], pads[i + rank], dil[i])
           for i in range(rank)]
    m = w_dims[0]
    placed = ctx.ints("concat_channels") if ctx.has("concat_channels") else None
    if placed:
        m = placed[0]          # the op writes its channels into a concat buffer of placed[0]
    return (x_dims[0], m) + tuple(out) if nchw else (x_dims[0],) + tuple(out) + (m,)


def _conv_infer(ctx, ins):
    return [TensorType(_conv_out_dims(ctx, ins[0].dims, ins[1].dims), ins[0].dtype)]


def _conv_cost(ctx, ins):
    out = _conv_out_dims(ctx, ins[0].dims, ins[1].dims)
    w = ins[1].dims
    macs = float(np.prod(out, dtype=np.float64)) * float(np.prod(w[1:], dtype=np.float64))
    return Cost(flops=2 * macs, bytes_read=4.0 * (np.prod(ins[0].dims) + np.prod(w)),
                bytes_written=4.0 * np.prod(out), params_bytes=4.0 * np.prod(w))


_PLACED_DOC = (" With concat_channels = [total, offset] (NCHW; what caffe2py.optimize makes of "
               "convs whose outputs only a channel Concat reads) Y has `total` channels and the op "
               "writes its own into channels offset.. of it: a new array, or `into` (the 4th "
               "input, the same blob as Y) that an earlier conv of the concat made.")
_PLACED_ARG = Arg("concat_channels", "ints", None, doc="[total channels of Y, first channel written]")
_SHUFFLE_DOC = (" With shuffle_group = g (NCHW) the op convolves ChannelShuffle(X, group=g) without "
                "making it: what caffe2py.optimize folds a shuffle read only by a depthwise conv into.")
_SHUFFLE_ARG = Arg("shuffle_group", "int", None, check=_POSITIVE,
                   doc="read X's channels as ChannelShuffle(group=shuffle_group) orders them")
# the CPU kernel reads the filter only through conv.conv_nchw, which takes packed stand-ins
_PACKED_FILTER = frozenset({1})
register_schema(OpSchema(
    "Conv", num_inputs=(2, 4), num_outputs=1, args=_CONV_ARGS + (_PLACED_ARG, _SHUFFLE_ARG), allow_inplace={(3, 0)},
    packed_inputs=_PACKED_FILTER,
    checks=_CONV_CHECKS, inference=_conv_infer, cost=_conv_cost, inputs=("X", "filter", "bias", "into"), outputs=("Y",),
    doc="N-d convolution, NCHW or NHWC, with groups, dilation and Caffe2's pad spellings." + _PLACED_DOC
    + _SHUFFLE_DOC))
register_schema(OpSchema(
    "ConvRelu", num_inputs=(2, 4), num_outputs=1, args=_CONV_ARGS + (_PLACED_ARG, _SHUFFLE_ARG), allow_inplace={(3, 0)},
    packed_inputs=_PACKED_FILTER,
    checks=_CONV_CHECKS, inference=_conv_infer, cost=_conv_cost, inputs=("X", "filter", "bias", "into"), outputs=("Y",),
    doc="Conv followed by Relu in one pass (what caffe2py.optimize fuses Conv + Relu into)." + _PLACED_DOC
    + _SHUFFLE_DOC))
for _name, _doc in (("ConvSum", "Y = Conv(X, filter, bias) + S"),
                    ("ConvSumRelu", "Y = Relu(Conv(X, filter, bias) + S)")):
    register_schema(OpSchema(
        _name, num_inputs=4, num_outputs=1, args=_CONV_ARGS + (_SHUFFLE_ARG,), checks=_CONV_CHECKS,
        packed_inputs=_PACKED_FILTER,
        inference=_conv_infer, cost=_conv_cost, inputs=("X", "filter", "bias", "S"), outputs=("Y",),
        doc=_doc + ", S of Y's shape, in one output pass (what caffe2py.optimize fuses a Conv "
        "whose output only a Sum/Add with another tensor reads, and a Relu after it, into: "
        "ResNet's and ShuffleNet's residual joins)." + _SHUFFLE_DOC))


def _conv_factory(activation):
    def factory(ctx):
        return _conv_kernel(ctx, activation)
    return factory


def _shuffle_map_reader(ctx, nchw):
    """x -> the channel map of the conv's shuffle_group (None without one): channel
    k * g + i reads channel i * K + k of the C = g * K channels, as ChannelShuffle
    orders them; one map per channel count."""
    if ctx.type not in ("Conv", "ConvRelu", "ConvSum", "ConvSumRelu") or not ctx.has("shuffle_group"):
        return lambda x: None
    group = ctx.int("shuffle_group")
    if group < 1 or not nchw:
        raise ctx.error("shuffle_group must be positive on an NCHW conv, got %d (order %s)"
                        % (group, ctx.string("order", "NCHW")))
    maps = {}

    def channel_map(x):
        c = x.shape[1]
        found = maps.get(c)
        if found is None:
            if c % group:
                raise ctx.input_error(0, "%d channels (shape %s) do not split into %d shuffle groups"
                                      % (c, list(x.shape), group))
            # an array of its own (no base another holder could write through), read-only:
            # the depthwise kernel then checks it once (depthwise.py)
            found = np.array(np.arange(c, dtype=np.intp).reshape(group, c // group).T.reshape(c))
            found.flags.writeable = False
            maps[c] = found
        return found
    return channel_map


def _conv_kernel(ctx, activation):
    nchw = _nchw(ctx)
    group = ctx.int("group", 1)
    legacy = ctx.int("legacy_pad", 0)
    scratch = conv_k.Scratch()
    placed = ctx.ints("concat_channels") if ctx.type in ("Conv", "ConvRelu") and ctx.has("concat_channels") \
        else None
    if placed is not None and (len(placed) != 2 or not nchw or placed[1] < 0):
        raise ctx.error("concat_channels must be [total, offset] on an NCHW conv, got %s" % (placed,))
    shuffle_map = _shuffle_map_reader(ctx, nchw)

    geometries = {}      # (input shape, filter shape) -> (strides, pads, dilations, output shape)

    def geometry(x, w):
        # Arguments are parsed and checked once per shape pair, not on every run.
        key = (x.shape, w.shape)
        found = geometries.get(key)
        if found is not None:
            return found
        rank = x.ndim - 2
        if w.ndim != x.ndim:
            raise ctx.input_error(1, "filter of shape %s does not match %d-D input" % (list(w.shape), x.ndim))
        kernel, strides, pads, dil = conv_geometry(ctx, rank, kernel_from=w.shape[2:])
        if list(kernel) != list(w.shape[2:]):
            raise ctx.input_error(1, "filter spatial shape %s differs from kernel %s" % (list(w.shape[2:]), kernel))
        if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
            raise ctx.input_error(1, "filter of shape %s with group %d does not fit %d input channels"
                                  % (list(w.shape), group, x.shape[1]))
        if w.shape[1] == 0:
            raise ctx.input_error(1, "filter of shape %s has no input channels" % list(w.shape))
        pads = legacy_pads(legacy, x.shape[2:], kernel, strides, dil, pads)
        out_shape = (x.shape[0], w.shape[0]) + tuple(
            conv_k.conv_output_size(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[rank + i], dil[i])
            for i in range(rank))
        if len(geometries) > 64:
            geometries.clear()
        found = geometries[key] = (tuple(strides), tuple(pads), tuple(dil), out_shape)
        return found

    def placed_output(x, w, into, out_shape):
        total, offset = placed
        if offset + out_shape[1] > total:
            raise ctx.error("channels %d..%d do not fit concat_channels total %d"
                            % (offset, offset + out_shape[1], total))
        want = (out_shape[0], total) + out_shape[2:]
        dtype = np.result_type(x.dtype, w.dtype)
        if into is None:        # the plan's pool, as conv outputs: not fresh pages every run
            into = output_array(want, dtype)
        elif into.shape != want or into.dtype != dtype or not into.flags.writeable:
            raise ctx.input_error(3, "concat buffer of shape %s (%s) does not match %s (%s)"
                                  % (list(into.shape), into.dtype, list(want), dtype))
        return into

    def run(x, w, b=None, s=None):
        xc = x if nchw else _to_nchw(x)
        wc = w if nchw else _to_nchw(values_of(w))     # a packed stand-in is NCHW
        strides, pads, dil, out_shape = geometry(xc, wc)
        if b is not None and b.shape != (wc.shape[0],):
            raise ctx.input_error(2, "bias must be [M] = [%d] (one value per output channel), got %s"
                                  % (wc.shape[0], list(b.shape)))
        if placed is not None:
            into = placed_output(xc, wc, s, out_shape)
            try:
                conv_k.conv_nchw(xc, wc, b, strides, pads, dil, group, scratch=scratch, activation=activation,
                                 out=into[:, placed[1]:placed[1] + out_shape[1]], channel_map=shuffle_map(xc))
            except ValueError as exc:
                raise ctx.input_error(0, str(exc)) from None
            return into
        residual = None if s is None else (s if nchw else _to_nchw(s))
        broadcast = residual is not None and residual.shape != out_shape
        try:
            y = conv_k.conv_nchw(xc, wc, b, strides, pads, dil, group, scratch=scratch,
                                 activation=None if broadcast else activation,
                                 residual=None if broadcast else residual, channel_map=shuffle_map(xc))
        except ValueError as exc:
            raise ctx.input_error(0, str(exc)) from None
        if broadcast:     # an Add whose other operand broadcasts: NumPy's rules, then the ReLU
            try:
                y = y + residual
            except ValueError:
                raise ctx.input_error(3, "shape %s does not broadcast against the convolution output %s"
                                      % (list(s.shape), list(out_shape))) from None
            if activation == "relu":
                np.maximum(y, 0, out=y)
        return y if nchw else _from_nchw(y)
    return run


register_kernel("Conv")(_conv_factory(None))
register_kernel("ConvRelu")(_conv_factory("relu"))
register_kernel("ConvSum")(_conv_factory(None))
register_kernel("ConvSumRelu")(_conv_factory("relu"))


# ----------------------------------------------------------------- pooling

# A pool's kernel may be 0 (global_pooling: the window is the input; check_pool_window)
_POOL_ARGS = tuple(dataclasses.replace(a, check=_NOT_NEGATIVE) if a.name in POOL_KERNEL_ARGS else a
                   for a in _CONV_ARGS) + (
    Arg("global_pooling", "bool", False), Arg("count_include_pad", "bool", False), Arg("ceil_mode", "bool", False))


def check_pool_window(ctx):
    """Plan-time: Caffe2's rules tying the kernel, pads, strides and dilations to
    global_pooling (operators/_common.pool_window_problem)."""
    problem = pool_window_problem(ctx)
    if problem:
        raise ctx.error(problem)


def _pool_geometry(ctx, spatial):
    rank = len(spatial)
    if ctx.bool("global_pooling"):      # the stored kernel (often 0) is not used
        return list(spatial), [1] * rank, [0] * (2 * rank), [1] * rank, False
    kernel, strides, pads, dil = conv_geometry(ctx, rank)
    _check_pads_below_kernel(ctx, kernel, pads)
    legacy = ctx.int("legacy_pad", 0)
    pads = legacy_pads(legacy, spatial, kernel, strides, dil, pads)
    return kernel, strides, pads, dil, legacy == LEGACY_CAFFE_POOLING or ctx.bool("ceil_mode")


def _check_pads_below_kernel(ctx, kernel, pads):
    """Caffe2's PoolOp (and onnxruntime's pools) refuse a pad as large as the kernel:
    a window wholly in padding has no input value to pool."""
    k = len(kernel)
    if any(pads[i] >= kernel[i] or pads[k + i] >= kernel[i] for i in range(k)):
        raise ctx.error("pads %s: each pad must be smaller than the kernel %s" % (list(pads), list(kernel)))


def _pool_infer(ctx, ins):
    check_pool_window(ctx)
    x = ins[0].dims
    nchw = _nchw(ctx)
    spatial = list(x[2:]) if nchw else list(x[1:-1])
    kernel, strides, pads, dil, ceil = _pool_geometry(ctx, spatial)
    rank = len(spatial)
    out = []
    for i in range(rank):
        span = (kernel[i] - 1) * dil[i] + 1
        total = spatial[i] + pads[i] + pads[i + rank] - span
        o = (-(-total // strides[i]) if ceil else total // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= spatial[i] + pads[i]:
            o -= 1
        out.append(o)
    dims = (x[0], x[1]) + tuple(out) if nchw else (x[0],) + tuple(out) + (x[-1],)
    return [TensorType(dims, ins[0].dtype)]


def _register_pool(op_type, kind):
    register_schema(OpSchema(op_type, num_inputs=1, num_outputs=1, args=_POOL_ARGS,
                             checks=(DTypes(0, "float"), Rank(0, 3)), inference=_pool_infer, inputs=("X",), outputs=("Y",),
                             doc="%s pooling (kernel/stride/pad spellings as Conv; global_pooling; "
                                 "legacy_pad=3 rounds the output size up)." % kind.capitalize()))

    @register_kernel(op_type)
    def pool(ctx):
        check_pool_window(ctx)
        nchw = _nchw(ctx)
        include_pad = ctx.bool("count_include_pad")
        scratch = conv_k.Scratch()
        if ctx.bool("global_pooling"):
            def run_global(x):
                try:
                    y = pool_k.global_pool(x if nchw else _to_nchw(x), kind)
                except ValueError as exc:
                    raise ctx.input_error(0, str(exc)) from None
                return y if nchw else _from_nchw(y)
            return run_global

        def run(x):
            xc = x if nchw else _to_nchw(x)
            kernel, strides, pads, dil, ceil = _pool_geometry(ctx, list(xc.shape[2:]))
            if any(k <= 0 for k in kernel) or len(kernel) != xc.ndim - 2:
                raise ctx.error("kernel %s does not suit %d-D input '%s'" % (kernel, x.ndim, ctx.inputs[0]))
            try:
                if kind == "max":
                    y = pool_k.max_pool(xc, kernel, strides, pads, dil, ceil, scratch=scratch)
                else:
                    y = pool_k.average_pool(xc, kernel, strides, pads, include_pad, ceil, scratch=scratch)
            except ValueError as exc:
                raise ctx.input_error(0, str(exc)) from None
            return y if nchw else _from_nchw(y)
        return run


_register_pool("MaxPool", "max")
_register_pool("AveragePool", "average")


# ----------------------------------------------------------------- SpatialBN

# X is (N, C, ...) or (N, ..., C); the statistics are float vectors of C values
_BN_CHECKS = (DTypes("*", "float"), Rank(0, 2), Rank((1, 2, 3, 4), 1, 1))
register_schema(OpSchema(
    "SpatialBN", num_inputs=(5, 7), num_outputs={1, 5}, allow_inplace={(0, 0), (5, 3), (6, 4)},
    enforce_inplace={(3, 1), (4, 2)},
    args=(Arg("is_test", "bool", True), Arg("epsilon", "float", 1e-5, check=Range(0.0)),
          Arg("momentum", "float", 0.9, check=Finite()), _ORDER,
          Arg("num_batches", "int", 1, doc="training: inputs 5 / 6 are X's per-channel sums and sums of "
                                           "squares over this many equal batches (combine_spatial_bn)")),
    checks=_BN_CHECKS,
    inference=lambda ctx, ins: [ins[0]] + [TensorType((ins[0].dims[1 if _nchw(ctx) else -1],), ins[0].dtype)] * (ctx.n_outputs - 1),
    inputs=("X", "scale", "bias", "mean", "var"),
    outputs=("Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"),
    doc="Batch normalisation. is_test=1: (x - mean) / sqrt(var + eps) * scale + bias with the "
        "running statistics, one output. is_test=0 (training, five outputs): normalised with "
        "the batch's statistics; running_mean / running_var (in place on inputs 3 / 4) become "
        "momentum * old + (1 - momentum) * batch value (the unbiased variance); saved_mean and "
        "saved_inv_std = 1 / sqrt(batch var + eps) feed SpatialBNGradient."))


register_schema(OpSchema(
    "SpatialBNRelu", num_inputs=5, num_outputs=1, allow_inplace={(0, 0)},
    args=(Arg("is_test", "bool", True), Arg("epsilon", "float", 1e-5, check=Range(0.0)), _ORDER),
    checks=_BN_CHECKS,
    inference=lambda ctx, ins: [ins[0]],
    inputs=("X", "scale", "bias", "mean", "var"), outputs=("Y",),
    doc="SpatialBN (inference) followed by Relu in one kernel (what caffe2py.optimize fuses "
        "a pre-activation BN + Relu pair into)."))


def _spatial_bn_factory(relu):
    def spatial_bn(ctx):
        # Caffe2 defaults to training; without is_test the output count tells
        is_test = ctx.bool("is_test") if ctx.has("is_test") else ctx.n_outputs == 1
        if not relu and not is_test:
            from .spatial_bn_train import training_kernel
            return training_kernel(ctx)
        if not is_test or ctx.n_outputs != 1:
            raise ctx.error("inference mode (is_test=1) has one output, got %d" % ctx.n_outputs)
        eps = ctx.float("epsilon")
        nchw = _nchw(ctx)

        def run(x, scale, bias, mean, var):
            c = x.shape[1] if nchw else x.shape[-1]
            for k, v in enumerate((scale, bias, mean, var), 1):
                if v.size != c:
                    raise ctx.input_error(k, "has %d elements, expected %d channels" % (v.size, c))
            return norm_k.batch_norm(x, scale, bias, mean, var, eps, axis=1 if nchw else -1, relu=relu)
        return run
    return spatial_bn


spatial_bn = register_kernel("SpatialBN")(_spatial_bn_factory(False))
register_kernel("SpatialBNRelu")(_spatial_bn_factory(True))


# ----------------------------------------------------------------- LRN

def _lrn_infer(ctx, ins):
    return [ins[0]] * ctx.n_outputs


register_schema(OpSchema(
    "LRN", num_inputs=1, num_outputs=(1, 2),
    args=(Arg("size", "int", required=True), Arg("alpha", "float", 0.0), Arg("beta", "float", 0.0),
          Arg("bias", "float", 1.0), Arg("order", "string", "NCHW")),
    checks=(DTypes(0, "float"),),
    inference=_lrn_infer, inputs=("X",), outputs=("Y", "scale"),
    doc="Local response normalisation across channels: Y = X / scale ** beta with "
        "scale = bias + alpha / size * (sum of X^2 over `size` neighbouring channels)."))


@register_kernel("LRN")
def lrn(ctx):
    size = ctx.int("size")
    if size <= 0:
        raise ctx.error("size must be positive, got %d" % size)
    alpha, beta, bias = ctx.float("alpha"), ctx.float("beta"), ctx.float("bias")
    nchw = _nchw(ctx)
    two = ctx.n_outputs == 2

    def run(x):
        if x.ndim < 2:
            raise ctx.input_error(0, "needs a channel axis, got shape %s" % list(x.shape))
        xc = x if nchw else _to_nchw(x)
        y, scale = norm_k.lrn(xc, size, alpha, beta, bias, return_scale=True)
        if not nchw:
            y, scale = _from_nchw(y), _from_nchw(scale)
        return (y, scale) if two else y
    return run


# ----------------------------------------------------------------- InstanceNorm

register_schema(OpSchema(
    "InstanceNorm", num_inputs=3, num_outputs={1, 3}, allow_inplace={(0, 0)},
    args=(Arg("epsilon", "float", 1e-5), Arg("order", "string", "NCHW")),
    inference=lambda ctx, ins: [ins[0]] + [TensorType(
        (ins[0].dims[0], ins[0].dims[1 if _nchw(ctx) else -1]) if ins[0].known else None, ins[0].dtype)] * (ctx.n_outputs - 1),
    inputs=("input", "scale", "bias"), outputs=("output", "mean", "inv_stdev"),
    doc="Per (image, channel) normalisation over the spatial dims: (x - mean) / sqrt(var + eps) * scale + bias; "
        "optional outputs: the means and 1 / sqrt(var + eps), shape (N, C)."))


@register_kernel("InstanceNorm")
def instance_norm(ctx):
    eps = ctx.float("epsilon")
    nchw = _nchw(ctx)
    three = ctx.n_outputs == 3

    def run(x, scale, bias):
        if x.ndim < 3:
            raise ctx.input_error(0, "needs (N, C, spatial...) input, got shape %s" % list(x.shape))
        xc = x if nchw else _to_nchw(x)
        try:
            y, mean, inv_std = norm_k.instance_norm(xc, scale, bias, eps, return_stats=True)
        except ValueError as exc:
            raise ctx.input_error(1, str(exc)) from None
        y = y if nchw else _from_nchw(y)
        return (y, mean, inv_std) if three else y
    return run


# ----------------------------------------------------------------- Dropout

register_schema(OpSchema(
    "Dropout", num_inputs=1, num_outputs=(1, 2), allow_inplace={(0, 0)},
    args=(Arg("ratio", "float", 0.5), Arg("is_test", "bool", False)),
    inference=lambda ctx, ins: [ins[0]] + ([TensorType(ins[0].dims, 5)] if ctx.n_outputs == 2 else []),
    doc="Identity when is_test=1; otherwise zeroes with probability `ratio` and scales by 1/(1-ratio)."))


@register_kernel("Dropout")
def dropout(ctx):
    ratio = ctx.float("ratio")
    is_test = ctx.bool("is_test")
    rng = np.random.default_rng(ctx.op_def.device_option.random_seed or None)
    two = ctx.n_outputs == 2

    def run(x):
        if is_test or ratio == 0.0:
            y, mask = x.copy(), np.ones(x.shape, dtype=bool)
        else:
            mask = rng.random(x.shape) >= ratio
            y = (x * mask / (1.0 - ratio)).astype(x.dtype, copy=False)
        return (y, mask) if two else y
    return run

