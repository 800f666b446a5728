"""CUDA kernels (device=CUDA) for Conv (2-D, NCHW, groups, dilation, Caffe2's pad
spellings and legacy_pad; optional bias), MaxPool / AveragePool (2-D, NCHW,
global_pooling, count_include_pad, ceil mode) and Reshape (a view; no copy).

Arguments are parsed and checked exactly as by the CPU ops (their schemas and
geometry helpers); the compute is kernels/cuda/cnn/cnn.cu: im2col per chunk of images and
a strided-batched GEMM (cuBLAS, or gemm.cu's fallback) per group, one thread per
output for pooling.
"""
import numpy as np

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import pool as pool_k
from caffe2py.registry import CUDA, register_kernel

from .. import _cuda_runtime
from .._common import conv_geometry, legacy_pads
from .._cuda_runtime import _elementwise_launch, _prod, _ptr
from .nn import _pool_geometry, check_pool_window
from ..tensor.tensor import _resolve_shape

_CONV_FORMAT = "Pq" + "qqqqq" + "i" * 8 + "P"
_POOL_FORMAT = "Pq" + "qqqq" + "i" * 12 + "P"
COL_CHUNK_FLOATS = 1 << 24   # im2col buffer per launch: 64 MB of float32 at most


def _nchw_only(ctx, what):
    if ctx.string("order", "NCHW") != "NCHW":
        raise ctx.error("the CUDA %s supports order NCHW only, got %s" % (what, ctx.string("order")))


@register_kernel("Conv", device=CUDA)
def conv(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
    _nchw_only(ctx, "Conv")
    if ctx.has("concat_channels"):
        raise ctx.error("the CUDA Conv does not write into a concat buffer (concat_channels)")
    if ctx.has("shuffle_group"):
        raise ctx.error("the CUDA Conv does not read its input through a channel shuffle (shuffle_group)")
    if ctx.n_inputs > 3:
        raise ctx.error("the CUDA Conv takes X, filter and an optional bias, got %d inputs" % ctx.n_inputs)
    group, legacy = ctx.int("group", 1), ctx.int("legacy_pad", 0)
    plans = {}

    def plan(x, w):
        key = (x.shape, w.shape)
        found = plans.get(key)
        if found is not None:
            return found
        if x.ndim != 4 or w.ndim != 4:
            raise ctx.input_error(0, "the CUDA Conv is 2-D: X and filter must be 4-D NCHW, got %s and %s"
                                  % (list(x.shape), list(w.shape)))
        kernel, strides, pads, dil = conv_geometry(ctx, 2, kernel_from=w.shape[2:])
        if list(kernel) != list(w.shape[2:]):
            raise ctx.input_error(1, "filter spatial shape %s differs from kernel %s" % (list(w.shape[2:]), kernel))
        if group < 1 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
            raise ctx.input_error(1, "filter of shape %s with group %d does not fit %d input channels"
                                  % (list(w.shape), group, x.shape[1]))
        pads = legacy_pads(legacy, x.shape[2:], kernel, strides, dil, pads)
        out_hw = [conv_k.conv_output_size(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[2 + i], dil[i])
                  for i in range(2)]
        if min(out_hw) < 1 or min(strides) < 1 or min(dil) < 1 or min(pads) < 0:
            raise ctx.input_error(0, "input of shape %s gives no output with kernel %s, strides %s, pads %s, "
                                  "dilations %s" % (list(x.shape), kernel, strides, pads, dil))
        geometry = [x.shape[1], x.shape[2], x.shape[3], out_hw[0], out_hw[1],
                    kernel[0], kernel[1], strides[0], strides[1], pads[0], pads[1], dil[0], dil[1]]
        found = plans[key] = ((x.shape[0], w.shape[0]) + tuple(out_hw), geometry)
        return found

    def run(x, w, b=None):
        rt.expect(0, x, (np.float32,), "X")
        rt.expect(1, w, (np.float32,), "filter")
        out_shape, geometry = plan(x, w)
        m = w.shape[0]
        if b is not None:
            rt.expect(2, b, (np.float32,), "bias")
            if b.size != m:
                raise ctx.input_error(2, "bias has %d elements, expected %d" % (b.size, m))
        y = rt.empty(out_shape, np.float32)
        n, hw = out_shape[0], out_shape[2] * out_shape[3]
        ckk = _prod(w.shape[1:]) * group          # rows of one image's column matrix
        if y.size == 0:
            return y
        per_chunk = max(1, min(n, COL_CHUNK_FLOATS // max(1, ckk * hw)))
        col = rt.empty((per_chunk, ckk, hw), np.float32)
        im2col = rt.fn("cnn", "im2col_f32", _CONV_FORMAT)
        from caffe2py.cuda import cublas  # noqa: PLC0415
        mg, kg = m // group, ckk // group
        image_in, image_out = _prod(x.shape[1:]) * 4, m * hw * 4
        for lo in range(0, n, per_chunk):
            count = min(per_chunk, n - lo)
            im2col(_elementwise_launch(rt, count * ckk * hw), _ptr(x) + lo * image_in, count, *geometry, _ptr(col))
            for g in range(group):  # Y[img, g] (mg x hw) = W[g] (mg x kg) . col[img, g] (kg x hw)
                cublas.sgemm_batched(_ptr(w) + g * mg * kg * 4, _ptr(col) + g * kg * hw * 4,
                                     _ptr(y) + lo * image_out + g * mg * hw * 4, mg, hw, kg, count,
                                     stride_a=0, stride_b=ckk * hw, stride_c=m * hw, device_id=rt.device_id)
        if b is not None:
            rt.fn("cnn", "add_bias_channels", "PPqqq")(_elementwise_launch(rt, y.size), _ptr(y), _ptr(b), n, m, hw)
        return y
    return run


def _register_pool(op_type, function):
    @register_kernel(op_type, device=CUDA)
    def pool(ctx):
        rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
        _nchw_only(ctx, op_type)
        check_pool_window(ctx)
        include_pad = int(ctx.bool("count_include_pad"))
        plans = {}

        def plan(x):
            found = plans.get(x.shape)
            if found is not None:
                return found
            if x.ndim != 4:
                raise ctx.input_error(0, "the CUDA %s is 2-D: X must be 4-D NCHW, got %s" % (op_type, list(x.shape)))
            spatial = list(x.shape[2:])
            kernel, strides, pads, dil, ceil = _pool_geometry(ctx, spatial)
            if len(kernel) != 2 or min(kernel) <= 0 or min(strides) <= 0 or min(dil) <= 0:
                raise ctx.error("kernel %s / strides %s do not suit 2-D input '%s'" % (kernel, strides, ctx.inputs[0]))
            if function == "avg_pool2d_f32" and tuple(dil) != (1, 1):
                raise ctx.error("AveragePool takes no dilation")
            out_hw = pool_k.pool_output_shape(spatial, kernel, strides, pads, dil, ceil)
            if min(out_hw) < 1:
                raise ctx.input_error(0, "input of shape %s gives no output with kernel %s" % (list(x.shape), kernel))
            geometry = [x.shape[2], x.shape[3], out_hw[0], out_hw[1], kernel[0], kernel[1], strides[0], strides[1],
                        pads[0], pads[1], pads[2], pads[3], dil[0], dil[1], include_pad, 0]
            found = plans[x.shape] = ((x.shape[0], x.shape[1]) + tuple(out_hw), geometry)
            return found

        def run(x):
            rt.expect(0, x, (np.float32,), "X")
            out_shape, geometry = plan(x)
            y = rt.empty(out_shape, np.float32)
            if y.size:
                rt.fn("cnn", function, _POOL_FORMAT)(_elementwise_launch(rt, y.size), _ptr(x),
                                                     x.shape[0] * x.shape[1], *geometry, _ptr(y))
            return y
        return run


_register_pool("MaxPool", "max_pool2d_f32")
_register_pool("AveragePool", "avg_pool2d_f32")


@register_kernel("Reshape", device=CUDA)
def reshape(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
    if ctx.n_inputs != 1 or not ctx.has("shape"):
        raise ctx.error("the CUDA Reshape takes its shape from argument 'shape' (a shape input lives on the host)")
    target = ctx.ints("shape")
    two = ctx.n_outputs == 2

    def run(x):
        rt.expect(0, x)
        y = rt.adapter.tag(x.reshape(_resolve_shape(ctx, x.shape, target)), rt.device_id)
        if not two:
            return y
        old = rt.adapter.tag(rt.allocator.to_device(np.asarray(x.shape, np.int64), rt.device_id), rt.device_id)
        return y, old
    return run
