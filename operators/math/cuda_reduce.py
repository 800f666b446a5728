"""CUDA kernels (device=CUDA) of the sum reductions: ReduceSum and ReduceMean (`axes`,
`keepdims`), ReduceFrontSum / ReduceFrontMean / ReduceBackSum / ReduceBackMean
(`num_reduce_dim`), float32 and float16 with float32 accumulation
(kernels/cuda/math/reduce.cu). They are what a fused CUDA chain ending in a
last-axis reduction (caffe2py/fusion_cuda.py) is checked against. Not on CUDA: the
`lengths` input of the Front/Back ops, integer dtypes."""
import numpy as np

from caffe2py.registry import CUDA, register_kernel

from .. import _cuda_runtime
from .._cuda_runtime import _padded, _prod, _ptr
from .caffe2_reduce import _front_back_view, num_reduce_dims, reduce_axes

_FLOATS = (np.float32, np.float16)


def _launch_reduce(rt, ctx, x, axes, out_shape, mean):
    """out = the sum (mean) of contiguous device array x over sorted axes."""
    out = rt.empty(tuple(out_shape), x.dtype)
    n_out = _prod(out_shape)
    r = _prod([x.shape[a] for a in axes])
    if n_out == 0:
        return out
    if r == 0:      # an empty sum is 0; an empty mean 0/0 (NaN), as NumPy gives
        if mean:
            out.fill(np.nan)
        else:
            rt.zero(out)
        return out
    try:
        kd, ks, rd, rs = rt.launch.reduction_strides(tuple(x.shape), set(axes))
    except ValueError as exc:
        raise ctx.input_error(0, str(exc)) from None
    geometry = [len(kd)] + _padded(kd, fill=1) + _padded(ks) + [len(rd)] + _padded(rd, fill=1) + _padded(rs)
    fn = rt.fn("reduce", "reduce_sum_f32" if x.dtype == np.float32 else "reduce_sum_f16", "PPqq" + "q" * 26 + "f")
    fn(rt.launch.reduction(n_out, r), _ptr(x), _ptr(out), n_out, r, *geometry, float(r) if mean else 1.0)
    return out


def _register_reduce(op_type, mean):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
        keep = ctx.bool("keepdims", True)

        def run(x):
            rt.expect(0, x, _FLOATS)
            axes = reduce_axes(ctx, x.ndim)
            out_shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
            return _launch_reduce(rt, ctx, x, axes, out_shape, mean)
        return run


def _register_front_back(op_type, front, mean):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake

        def run(x, lengths=None):
            rt.expect(0, x, _FLOATS)
            if lengths is not None:
                raise ctx.input_error(1, "the lengths input is not supported by the CUDA kernel; run %s on "
                                         "the CPU" % op_type)
            _, _, out_shape = _front_back_view(ctx, x.shape, front)
            n = num_reduce_dims(ctx)
            axes = tuple(range(n)) if front else tuple(range(x.ndim - n, x.ndim))
            return _launch_reduce(rt, ctx, x, axes, out_shape, mean)
        return run


_register_reduce("ReduceSum", mean=False)
_register_reduce("ReduceMean", mean=True)
for _op, (_front, _mean) in {"ReduceFrontSum": (True, False), "ReduceFrontMean": (True, True),
                             "ReduceBackSum": (False, False), "ReduceBackMean": (False, True)}.items():
    _register_front_back(_op, _front, _mean)
