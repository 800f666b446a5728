"""CUDA kernels (device=CUDA) of the elementwise math: Add, Sub, Mul, Div (NumPy and
Caffe2's legacy broadcasting), Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Abs, Negative,
Softmax, and MatMul (cuBLAS)."""
import numpy as np

from caffe2py.registry import CUDA, register_kernel

from .. import _cuda_runtime
from .._cuda_runtime import _elementwise_launch, _gemm, _padded, _prod, _ptr
from .._common import legacy_broadcast_shape


# --------------------------------------------------------------------------- elementwise

_BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}
_UNARY_OPS = {"Relu": 0, "Sigmoid": 1, "Tanh": 2, "Exp": 3, "Log": 4, "Sqrt": 5, "Abs": 6, "Negative": 7}
_FLOATS = (np.float32, np.float16)


def _register_binary(op_type, code):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
        legacy = ctx.bool("broadcast", False)
        axis = ctx.int("axis", -1)
        if legacy and ctx.string("axis_str", ""):
            axis = ctx.string("order", "NCHW").index(ctx.string("axis_str"))

        def run(a, b):
            rt.expect(0, a, _FLOATS)
            rt.expect(1, b, (a.dtype,))
            if legacy:
                try:
                    b_shape = tuple(legacy_broadcast_shape(a.shape, b.shape, axis))
                except ValueError as exc:
                    raise ctx.input_error(1, str(exc)) from None
                out_shape = tuple(a.shape)
            else:
                b_shape = tuple(b.shape)
                try:
                    out_shape = tuple(np.broadcast_shapes(a.shape, b.shape))
                except ValueError:
                    raise ctx.error("shapes %s of '%s' and %s of '%s' do not broadcast"
                                    % (list(a.shape), ctx.inputs[0], list(b.shape), ctx.inputs[1])) from None
            out = rt.empty(out_shape, a.dtype)
            n = _prod(out_shape)
            if n == 0:
                return out
            same = tuple(a.shape) == out_shape and b_shape == out_shape
            dims, (sa, sb) = rt.launch.broadcast_strides(out_shape, a.shape, b_shape)
            geometry = [len(dims)] + _padded(dims, fill=1) + _padded(sa) + _padded(sb)
            fn = rt.fn("tensor_ops", "binary_f32" if a.dtype == np.float32 else "binary_f16", "PPPq" + "q" * 19 + "ii")
            fn(_elementwise_launch(rt, n), _ptr(a), _ptr(b), _ptr(out), n, *geometry, code, int(same))
            return out
        return run


for _op, _code in _BINARY_OPS.items():
    _register_binary(_op, _code)


def _register_unary(op_type, code):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake

        def run(x):
            rt.expect(0, x, _FLOATS)
            out = rt.empty(x.shape, x.dtype)
            if x.size:
                fn = rt.fn("tensor_ops", "unary_f32" if x.dtype == np.float32 else "unary_f16", "PPqi")
                fn(_elementwise_launch(rt, x.size), _ptr(x), _ptr(out), x.size, code)
            return out
        return run


for _op, _code in _UNARY_OPS.items():
    _register_unary(_op, _code)


@register_kernel("Softmax", device=CUDA)
def softmax(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
    axis_arg = ctx.int("axis", 1)

    def run(x):
        rt.expect(0, x, (np.float32,))
        if not -x.ndim <= axis_arg < max(x.ndim, 1):
            raise ctx.input_error(0, "axis %d is out of range for %d-D input" % (axis_arg, x.ndim))
        axis = axis_arg % max(x.ndim, 1)
        rows, cols = _prod(x.shape[:axis]), _prod(x.shape[axis:])
        out = rt.empty(x.shape, np.float32)
        if rows and cols:
            rt.fn("tensor_ops", "softmax_rows", "PqqP")(rt.launch.rows(rows, cols, 1024), _ptr(x), rows, cols, _ptr(out))
        return out
    return run


@register_kernel("MatMul", device=CUDA)
def matmul(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
    ta, tb = bool(ctx.int("trans_a", 0)), bool(ctx.int("trans_b", 0))

    def run(a, b, like=None):
        rt.expect(0, a, (np.float32,))
        rt.expect(1, b, (np.float32,))
        if a.ndim != 2 or b.ndim != 2:
            raise ctx.error("the CUDA MatMul takes 2-D inputs, got %s and %s" % (list(a.shape), list(b.shape)))
        m, k = (a.shape[1], a.shape[0]) if ta else a.shape
        kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
        if k != kb:
            raise ctx.input_error(1, "inner dimensions differ: %d vs %d" % (k, kb))
        out = rt.empty((m, n), np.float32)
        _gemm(rt, a, b, out, m, n, k, 1, ta, tb)
        if like is not None and tuple(like.shape) != (m, n):   # Caffe2's gradient form: input 2's shape
            if _prod(like.shape) != m * n:
                raise ctx.input_error(2, "shape %s does not hold the %d x %d product" % (list(like.shape), m, n))
            out = rt.adapter.tag(out.reshape(tuple(like.shape)), rt.device_id)
        return out
    return run
