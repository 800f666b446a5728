"""ONNX NN ops: Conv, ConvTranspose, pooling (max/average/Lp/global), Gemm,
MatMul, BatchNormalization, InstanceNormalization, LRN, Softmax/LogSoftmax/
Hardmax (opset 1-12 coerce-to-2-D, 13+ one axis), Dropout."""
import numpy as np

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import conv_transpose as conv_transpose_k
from caffe2py.kernels.cpu.math import gemm as gemm_k
from caffe2py.kernels.cpu.cnn import norm as norm_k
from caffe2py.kernels.cpu.cnn import onnx_nn as nn_k
from caffe2py.kernels.cpu.cnn import pool as pool_k
from caffe2py.kernels.cpu.math.softmax_rows import softmax_rows
from caffe2py.registry import Cost
from caffe2py.tensors import numpy_dtype

from caffe2py.registry import Arg
from caffe2py.schema_rules import Finite, OneOf, Range, Rank

from ..onnx_base import axis_of, onnx_op

# Window geometry shared by the convolutions and pools: onnx's attribute rules.
_WINDOW_ARGS = (Arg("kernel_shape", "ints", check=Range(1)), Arg("strides", "ints", check=Range(1)),
                Arg("dilations", "ints", check=Range(1)), Arg("pads", "ints", check=Range(0)),
                Arg("auto_pad", "string", check=OneOf("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")),
                Arg("ceil_mode", "int", check=OneOf(0, 1)))
_GROUP = Arg("group", "int", check=Range(1))


def _geometry(ctx, x, kernel):
    """(strides, pads, dilations) for input x and a kernel shape, auto_pad applied."""
    k = len(kernel)
    strides = ctx.ints("strides", None) or [1] * k
    dilations = ctx.ints("dilations", None) or [1] * k
    pads = ctx.ints("pads", None) or [0] * (2 * k)
    if len(strides) != k or len(dilations) != k or len(pads) != 2 * k:
        raise ctx.error("strides/dilations/pads do not match a %d-D kernel (input shape %s)"
                        % (k, list(x.shape)))
    pads = nn_k.auto_pads(ctx.string("auto_pad", "NOTSET"), x.shape[2:], kernel, strides, dilations, pads)
    return strides, pads, dilations


def _pool_geometry(ctx, x, kernel):
    """_geometry for the pooling ops, with every dilated window fitting the padded
    input (a pool has at least one output per axis; onnxruntime refuses the rest)."""
    strides, pads, dilations = _geometry(ctx, x, kernel)
    k = len(kernel)
    if any(pads[i] >= kernel[i] or pads[k + i] >= kernel[i] for i in range(k)):
        # onnxruntime's rule (a window wholly in padding has nothing to pool)
        raise ctx.error("pads %s: each pad must be smaller than kernel_shape %s" % (list(pads), list(kernel)))
    for i in range(k):
        padded = x.shape[2 + i] + pads[i] + pads[k + i]
        window = (kernel[i] - 1) * dilations[i] + 1
        if window > padded:
            raise ctx.input_error(0, "kernel_shape %s (dilations %s) is larger than the padded input on axis %d: "
                                     "a window of %d over %d values (input shape %s, pads %s)"
                                  % (list(kernel), list(dilations), 2 + i, window, padded, list(x.shape), list(pads)))
    return strides, pads, dilations


def _check_rank(ctx, x, k, what="input"):
    if x.ndim != k + 2:
        raise ctx.input_error(0, "%s of shape %s should have rank %d (N, C and %d spatial dims)"
                              % (what, list(x.shape), k + 2, k))


# ----------------------------------------------------------------- costs
# For `caffe2py bench` / BenchmarkNet's flop tables; inputs are known only by dims.

class _Dims:
    """The `.shape` the geometry helpers read, from a TensorType's dims."""
    def __init__(self, dims):
        self.shape = tuple(dims)


def _itemsize(t):
    return numpy_dtype(t.dtype).itemsize if t.dtype is not None else 4


def _conv_cost(ctx, ins):
    x, w = ins[0].dims, ins[1].dims
    kernel = list(w[2:])
    k = len(kernel)
    strides, pads, dilations = _geometry(ctx, _Dims(x), kernel)
    out = [conv_k.conv_output_size(x[2 + i], kernel[i], strides[i], pads[i], pads[k + i], dilations[i])
           for i in range(k)]
    out_elems = float(x[0]) * w[0] * float(np.prod(out))
    size = _itemsize(ins[0])
    w_elems = float(np.prod(w))
    return Cost(flops=2.0 * out_elems * float(np.prod(w[1:])), bytes_read=size * (float(np.prod(x)) + w_elems),
                bytes_written=size * out_elems, params_bytes=size * w_elems)


def _matmul_flops(a, b):
    """2 * batch * M * K * N under NumPy matmul rules (1-D operands promoted)."""
    a = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    batch = np.broadcast_shapes(a[:-2], b[:-2])
    return 2.0 * float(np.prod(batch)) * a[-2] * a[-1] * b[-1], float(np.prod(batch)) * a[-2] * b[-1]


def _product_cost(ins, a, b, b_is_param):
    """Cost of op(A) @ op(B) with op(A), op(B) of dims a, b; B counted as a parameter
    for Gemm (its weights), not for MatMul."""
    flops, out = _matmul_flops(a, b)
    size = _itemsize(ins[0])
    b_bytes = size * float(np.prod(ins[1].dims))
    return Cost(flops=flops, bytes_read=size * float(np.prod(ins[0].dims)) + b_bytes,
                bytes_written=size * out, params_bytes=b_bytes if b_is_param else 0.0)


def _gemm_cost(ctx, ins):
    a, b = ins[0].dims, ins[1].dims
    return _product_cost(ins, a[::-1] if ctx.int("transA", 0) else a, b[::-1] if ctx.int("transB", 0) else b, True)


def _matmul_cost(ctx, ins):
    return _product_cost(ins, ins[0].dims, ins[1].dims, False)


# ----------------------------------------------------------------- convolution

@onnx_op("Conv", (1, None), cost=_conv_cost, args=_WINDOW_ARGS + (_GROUP,), checks=(Rank(0, 3), Rank(1, 3)))
def conv(ctx):
    group = ctx.int("group", 1)
    kernel_attr = ctx.ints("kernel_shape", None)

    def run(x, w, b=None):
        kernel = list(w.shape[2:])
        if kernel_attr and list(kernel_attr) != kernel:
            raise ctx.input_error(1, "kernel_shape %s does not match W of shape %s"
                                  % (kernel_attr, list(w.shape)))
        _check_rank(ctx, x, len(kernel))
        if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
            raise ctx.input_error(1, "W of shape %s does not fit X of shape %s with group %d"
                                  % (list(w.shape), list(x.shape), group))
        if b is not None and b.shape != (w.shape[0],):
            raise ctx.input_error(2, "B must have shape [%d] (one bias per output channel), got %s"
                                  % (w.shape[0], list(b.shape)))
        strides, pads, dilations = _geometry(ctx, x, kernel)
        if x.dtype == np.float16:   # accumulate in float32, round once
            b32 = None if b is None else b.astype(np.float32)
            return conv_k.conv_nchw(x.astype(np.float32), w.astype(np.float32), b32, strides, pads,
                                    dilations, group).astype(np.float16)
        try:
            return conv_k.conv_nchw(x, w, b, strides, pads, dilations, group)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run


@onnx_op("ConvTranspose", (1, None), args=_WINDOW_ARGS + (_GROUP, Arg("output_padding", "ints", check=Range(0)),
                                                     Arg("output_shape", "ints", check=Range(0))),
         checks=(Rank(0, 3), Rank(1, 3)))
def conv_transpose(ctx):
    group = ctx.int("group", 1)

    def run(x, w, b=None):
        kernel = list(w.shape[2:])
        k = len(kernel)
        _check_rank(ctx, x, k)
        if x.shape[1] != w.shape[0]:
            raise ctx.input_error(1, "W of shape %s needs %d input channels, X has %d"
                                  % (list(w.shape), w.shape[0], x.shape[1]))
        if b is not None and b.shape != (w.shape[1] * group,):
            raise ctx.input_error(2, "B must have shape [%d] (one bias per output channel: W's dim 1 x group "
                                     "%d), got %s" % (w.shape[1] * group, group, list(b.shape)))
        strides = ctx.ints("strides", None) or [1] * k
        dilations = ctx.ints("dilations", None) or [1] * k
        output_padding = ctx.ints("output_padding", None) or [0] * k
        output_shape = ctx.ints("output_shape", None)
        if output_shape and len(output_shape) > k:
            output_shape = output_shape[-k:]
        pads, output_padding = nn_k.conv_transpose_pads(
            ctx.string("auto_pad", "NOTSET"), x.shape[2:], kernel, strides, dilations,
            ctx.ints("pads", None), output_padding, output_shape)
        out = [strides[i] * (x.shape[2 + i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
               - pads[i] - pads[k + i] for i in range(k)] if len(pads) == 2 * k else None
        if out is None or min(out, default=1) < 0 or len(strides) != k or len(dilations) != k:
            raise ctx.error("strides %s, dilations %s, pads %s and output_padding %s do not give a %d-D output "
                            "of sizes >= 0 for input %s and kernel %s (sizes %s)"
                            % (strides, dilations, pads, output_padding, k, list(x.shape[2:]), kernel, out))
        if min(pads) < 0 or x.shape[1] % group or w.shape[0] != x.shape[1]:
            return nn_k.conv_transpose(x, w, b, strides, pads, dilations, group, output_padding)
        return conv_transpose_k.conv_transpose(x, w, b, strides, pads, dilations, group, output_padding)
    return run


# ----------------------------------------------------------------- pooling

class _PreparedPools:
    """One pool op's compiled plans by input shape and dtype (pool.prepared_pool): the
    op's geometry (auto_pad included) depends on nothing else, so an input shape seen
    before skips the attribute parsing, the checks and the pool's own set-up (~15 us a
    call, a third of a small pool's time inside the light models)."""
    __slots__ = ("kernel", "ceil_mode", "is_max", "include_pad", "plans")

    def __init__(self, kernel, ceil_mode, is_max, include_pad):
        self.kernel, self.ceil_mode, self.is_max, self.include_pad = kernel, ceil_mode, is_max, include_pad
        self.plans = {}

    def get(self, x):
        """The plan for x's shape and dtype, or None / False (unknown / none)."""
        return self.plans.get((x.shape, x.dtype))

    def learn(self, x, strides, pads, dilations):
        """After a successful call on x: remember its plan (False where there is none)."""
        if len(self.plans) < 64:
            plan = pool_k.prepared_pool(x.shape, x.dtype, self.kernel, strides, pads, dilations, self.ceil_mode,
                                        self.is_max, self.include_pad)
            self.plans[(x.shape, x.dtype)] = plan or False


@onnx_op("MaxPool", (1, None), args=_WINDOW_ARGS, checks=(Rank(0, 3),))
def max_pool(ctx):
    kernel = ctx.ints("kernel_shape")
    if not kernel:
        raise ctx.error("MaxPool needs kernel_shape")
    ceil_mode = bool(ctx.int("ceil_mode", 0))
    storage_order = ctx.int("storage_order", 0)
    with_indices = ctx.n_outputs > 1
    plans = _PreparedPools(kernel, ceil_mode, True, False)

    def run(x):
        plan = plans.get(x)
        if plan:
            return pool_k.run_prepared(x, plan)
        _check_rank(ctx, x, len(kernel))
        strides, pads, dilations = _pool_geometry(ctx, x, kernel)
        try:
            if with_indices:
                return nn_k.max_pool_with_indices(x, kernel, strides, pads, dilations, ceil_mode, storage_order)
            y = np.ascontiguousarray(pool_k.max_pool(x, kernel, strides, pads, dilations, ceil_mode))
        except ValueError as exc:          # the pool kernels word geometry errors
            raise ctx.input_error(0, str(exc)) from None
        plans.learn(x, strides, pads, dilations)
        return y
    return run


@onnx_op("AveragePool", (1, None), args=_WINDOW_ARGS, checks=(Rank(0, 3),))
def average_pool(ctx):
    kernel = ctx.ints("kernel_shape")
    if not kernel:
        raise ctx.error("AveragePool needs kernel_shape")
    ceil_mode = bool(ctx.int("ceil_mode", 0))
    include_pad = bool(ctx.int("count_include_pad", 0))
    dilated = any(d != 1 for d in (ctx.ints("dilations", None) or []))
    plans = _PreparedPools(kernel, ceil_mode, False, include_pad)

    def run(x):
        plan = plans.get(x)
        if plan:
            return pool_k.run_prepared(x, plan)
        _check_rank(ctx, x, len(kernel))
        strides, pads, dilations = _pool_geometry(ctx, x, kernel)
        try:
            if dilated:
                return nn_k.average_pool_dilated(x, kernel, strides, pads, dilations, include_pad, ceil_mode)
            y = np.ascontiguousarray(pool_k.average_pool(x, kernel, strides, pads, include_pad, ceil_mode))
        except ValueError as exc:
            raise ctx.input_error(0, str(exc)) from None
        plans.learn(x, strides, pads, dilations)
        return y
    return run


@onnx_op("LpPool", (1, None), args=(Arg("kernel_shape", "ints", required=True, check=Range(1)),) + _WINDOW_ARGS[1:] +
         (Arg("p", "float", check=Range(1e-6, 1e6)),), checks=(Rank(0, 3),))
def lp_pool(ctx):
    kernel = ctx.ints("kernel_shape")
    p = ctx.float("p", 2.0)

    def run(x):
        _check_rank(ctx, x, len(kernel))
        strides, pads, dilations = _pool_geometry(ctx, x, kernel)
        return nn_k.lp_pool(x, kernel, strides, pads, dilations, p)
    return run


def _global_factory(kind):
    def factory(ctx):
        p = ctx.float("p", 2.0) if kind == "lp" else None

        def run(x):
            if x.ndim < 3:
                raise ctx.input_error(0, "needs (N, C, spatial...) input, got shape %s" % list(x.shape))
            if kind == "lp":
                axes = tuple(range(2, x.ndim))
                return (np.sum(np.abs(x) ** p, axis=axes, keepdims=True) ** (1.0 / p)).astype(x.dtype)
            try:
                return pool_k.global_pool(x, kind)
            except ValueError as exc:
                raise ctx.input_error(0, str(exc)) from None
        return run
    return factory


onnx_op("GlobalAveragePool", (1, None), checks=(Rank(0, 3),))(_global_factory("avg"))
onnx_op("GlobalMaxPool", (1, None), checks=(Rank(0, 3),))(_global_factory("max"))
onnx_op("GlobalLpPool", (1, None), args=(Arg("p", "float", check=Range(1e-6, 1e6)),),
        checks=(Rank(0, 3),))(_global_factory("lp"))


# ----------------------------------------------------------------- Gemm / MatMul

@onnx_op("Gemm", (1, None), cost=_gemm_cost,
         args=(Arg("transA", "int", 0, check=OneOf(0, 1)), Arg("transB", "int", 0, check=OneOf(0, 1))))
def gemm(ctx):
    alpha, beta = ctx.float("alpha", 1.0), ctx.float("beta", 1.0)
    trans_a, trans_b = bool(ctx.int("transA", 0)), bool(ctx.int("transB", 0))

    def run(a, b, c=None):
        try:
            y = gemm_k.gemm(a, b, c, alpha, beta, trans_a, trans_b)
            return y if y.dtype == a.dtype else y.astype(a.dtype)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run


@onnx_op("MatMul", (1, None), cost=_matmul_cost)
def matmul(ctx):
    def run(a, b):
        try:
            y = np.matmul(a, b)
            # ml_dtypes' bfloat16/float8 matmul returns float32: keep the input type
            return y if y.dtype == a.dtype or a.dtype != b.dtype else y.astype(a.dtype)
        except ValueError:
            raise ctx.error("MatMul: shapes %s and %s do not multiply" % (list(a.shape), list(b.shape))) from None
    return run


# ----------------------------------------------------------------- normalisation

def _broadcasts(a, b):
    """a broadcasts to b (b's shape unchanged)."""
    try:
        return np.broadcast_shapes(a, b) == tuple(b)
    except ValueError:
        return False


def _check_bn_params(ctx, x, params):
    channels = x.shape[1] if x.ndim > 1 else 1
    for index, p in enumerate(params, 1):
        if p.shape != (channels,):
            raise ctx.input_error(index, "must be [C] = [%d] for X of shape %s, got %s"
                                  % (channels, list(x.shape), list(p.shape)))


@onnx_op("BatchNormalization", (1, None), checks=(Rank(0, 2),))
def batch_norm(ctx):
    eps = ctx.float("epsilon", 1e-5)
    if ctx.op_version >= 14 and ctx.int("training_mode", 0):
        momentum = ctx.float("momentum", 0.9)

        def train(x, scale, bias, mean, var):
            _check_bn_params(ctx, x, (scale, bias, mean, var))
            y, run_mean, run_var = nn_k.batch_norm_training(x, scale, bias, mean, var, eps, momentum)
            return (y, run_mean, run_var)[:ctx.n_outputs] if ctx.n_outputs > 1 else y
        return train
    if ctx.op_version < 7 and not ctx.int("is_test", 0) and ctx.n_outputs > 1:
        raise ctx.error("BatchNormalization with training outputs is not supported (inference only)")
    spatial = ctx.int("spatial", 1) if ctx.op_version < 9 else 1
    extra = ctx.n_outputs - 1

    def run(x, scale, bias, mean, var):
        if spatial:
            _check_bn_params(ctx, x, (scale, bias, mean, var))
            try:
                y = norm_k.batch_norm(x, scale, bias, mean, var, eps)
            except ValueError as exc:
                raise ctx.error(str(exc)) from None
        else:   # one statistic per activation: the params have x's non-batch shape
            for index, p in enumerate((scale, bias, mean, var), 1):
                if not _broadcasts(p.shape, x.shape[1:]):
                    raise ctx.input_error(index, "with spatial=0 must broadcast to X's %s, got %s"
                                          % (list(x.shape[1:]), list(p.shape)))
            y = ((x - mean) / np.sqrt(var + eps) * scale + bias).astype(x.dtype, copy=False)
        if extra:
            return (y,) + (mean.copy(), var.copy(), mean.copy(), var.copy())[:extra]
        return y
    return run


@onnx_op("InstanceNormalization", (1, None), checks=(Rank(0, 3), Rank((1, 2), 1, 1)))
def instance_norm(ctx):
    eps = ctx.float("epsilon", 1e-5)
    def run(x, scale, bias):
        try:
            return norm_k.instance_norm(x, scale, bias, eps)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run


@onnx_op("LRN", (1, None), args=(Arg("size", "int", check=Range(1)),), checks=(Rank(0, 3),))
def lrn(ctx):
    size = ctx.int("size")
    alpha, beta, bias = ctx.float("alpha", 1e-4), ctx.float("beta", 0.75), ctx.float("bias", 1.0)
    if size is None or size <= 0:
        raise ctx.error("LRN needs a positive size")
    return lambda x: norm_k.lrn(x, size, alpha, beta, bias)


# ----------------------------------------------------------------- softmax family

def _softmax_factory(kind):
    def factory(ctx):
        modern = ctx.op_version >= 13
        axis = ctx.int("axis", -1 if modern else 1)

        def run(x):
            a = axis_of(ctx, axis, x.ndim)
            # Before opset 13 the input is coerced to 2-D at `axis` and normalised
            # over everything after it; from 13 only along `axis`.
            view = x if modern else nn_k.coerce_2d(x, a)
            ax = a if modern else 1
            if kind == "soft" and x.size and ax == view.ndim - 1:
                # normalised along the last axis: the compiled row pass (a classifier's scores)
                y = softmax_rows(view.reshape(-1, view.shape[-1]) if view.ndim != 2 else view)
                if y is not None:
                    return y.reshape(x.shape)
            if kind == "hard":
                y = nn_k.hardmax_axis(view, ax)
            else:
                y = nn_k.softmax_axis(view, ax, log=(kind == "log"))
            return y.reshape(x.shape).astype(x.dtype, copy=False)
        return run
    return factory


onnx_op("Softmax", (1, None))(_softmax_factory("soft"))
onnx_op("LogSoftmax", (1, None))(_softmax_factory("log"))
onnx_op("Hardmax", (1, None))(_softmax_factory("hard"))


@onnx_op("Dropout", (1, None))
def dropout(ctx):
    attr_ratio = ctx.float("ratio", 0.5)
    want_mask = ctx.n_outputs > 1
    bool_mask = ctx.op_version >= 10
    if ctx.op_version < 7 and ctx.int("is_test", 0) == 0 and ctx.has("is_test"):
        raise ctx.error("Dropout in training mode (is_test=0) is not supported")
    seed = ctx.int("seed", None)
    rng = np.random.default_rng(None if seed is None else seed % (1 << 64))

    def run(x, ratio=None, training=None):
        for k, v in ((1, ratio), (2, training)):
            if v is not None and np.size(v) != 1:
                raise ctx.input_error(k, "must hold one value, got shape %s" % list(np.shape(v)))
        r = attr_ratio if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
        training = None if training is None else bool(np.asarray(training).reshape(-1)[0])
        if not 0.0 <= r < 1.0:
            raise ctx.error("ratio must lie in [0, 1), got %r" % r)
        if training is not None and bool(training) and r > 0:
            keep = rng.random(x.shape) >= r
            y = (x * keep / np.asarray(1 - r, x.dtype)).astype(x.dtype, copy=False)
            return (y, keep) if want_mask else y
        y = x   # inference: the input itself (kernels never write their inputs)
        if not want_mask:
            return y
        mask = np.ones(x.shape, dtype=np.bool_ if bool_mask else x.dtype)
        return y, mask
    return run


def _check_deform_shapes(ctx, x, w, offset, b, mask, strides, pads, dilations, group, offset_group):
    """Every input's shape against X's and W's, before the kernel reshapes them."""
    if len(strides) != 2 or len(dilations) != 2 or len(pads) != 4 or min(strides + dilations) < 1 or min(pads) < 0:
        raise ctx.error("strides %s and dilations %s need 2 positive values, pads %s 4 values >= 0"
                        % (strides, dilations, pads))
    n, c, h, wd = x.shape
    if group < 1 or offset_group < 1 or c % group or c % offset_group:
        raise ctx.error("group %d and offset_group %d must be positive and divide the %d channels"
                        % (group, offset_group, c))
    if w.ndim != 4 or w.shape[1] != c // group or w.shape[0] % group:
        raise ctx.input_error(1, "W must be [M, C/group = %d, kH, kW] with M divisible by group %d, got %s"
                              % (c // group, group, list(w.shape)))
    m, _, kh, kw = w.shape
    oh = (h + pads[0] + pads[2] - ((kh - 1) * dilations[0] + 1)) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - ((kw - 1) * dilations[1] + 1)) // strides[1] + 1
    if oh < 1 or ow < 1:
        raise ctx.input_error(1, "the %dx%d kernel does not fit the padded %dx%d input" % (kh, kw, h, wd))
    want = (n, offset_group * 2 * kh * kw, oh, ow)
    if offset.shape != want:
        raise ctx.input_error(2, "offset must be %s, got %s" % (list(want), list(offset.shape)))
    if b is not None and b.shape != (m,):
        raise ctx.input_error(3, "B must be [%d], got %s" % (m, list(b.shape)))
    want = (n, offset_group * kh * kw, oh, ow)
    if mask is not None and mask.shape != want:
        raise ctx.input_error(4, "mask must be %s, got %s" % (list(want), list(mask.shape)))


@onnx_op("DeformConv", (19, None))
def deform_conv(ctx):
    from caffe2py.kernels.cpu.cnn import deform as onnx_deform
    group, offset_group = ctx.int("group", 1), ctx.int("offset_group", 1)

    def run(x, w, offset, b=None, mask=None):
        if x.ndim != 4:
            raise ctx.input_error(0, "DeformConv supports 2-D inputs (N, C, H, W), got shape %s" % list(x.shape))
        strides = ctx.ints("strides", None) or [1, 1]
        dilations = ctx.ints("dilations", None) or [1, 1]
        pads = ctx.ints("pads", None) or [0, 0, 0, 0]
        _check_deform_shapes(ctx, x, w, offset, b, mask, strides, pads, dilations, group, offset_group)
        return onnx_deform.deform_conv(x, w, offset, b, mask, strides, pads, dilations, group, offset_group)
    return run
