"""CUDA kernels (device=CUDA) of FC and FCTransposed: the cuBLAS GEMM and the bias add."""
import numpy as np

from caffe2py.registry import CUDA, register_kernel

from .. import _cuda_runtime
from .._cuda_runtime import _elementwise_launch, _gemm, _prod, _ptr


# --------------------------------------------------------------------------- GEMMs

def _register_fc(op_type, transposed):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
        axis_arg, axis_w = ctx.int("axis", 1), ctx.int("axis_w", 1)

        def run(x, w, b):
            for i, v in enumerate((x, w, b)):
                rt.expect(i, v, (np.float32,))
            axis = axis_arg % max(x.ndim, 1)
            m, k = _prod(x.shape[:axis]), _prod(x.shape[axis:])
            aw = axis_w % max(w.ndim, 1)
            rows_w, cols_w = _prod(w.shape[:aw]), _prod(w.shape[aw:])
            n, kw = (cols_w, rows_w) if transposed else (rows_w, cols_w)
            if k != kw:
                raise ctx.input_error(1, "W of shape %s needs %d inputs per row but X '%s' of shape %s gives %d"
                                      % (list(w.shape), kw, ctx.inputs[0], list(x.shape), k))
            if b.size != n:
                raise ctx.input_error(2, "bias has %d elements, expected %d" % (b.size, n))
            y = rt.empty(tuple(x.shape[:axis]) + (n,), np.float32)
            if m * n:
                _gemm(rt, x, w, y, m, n, k, trans_b=not transposed)
                rt.fn("tensor_ops", "add_bias_rows", "PPqq")(_elementwise_launch(rt, m * n), _ptr(y), _ptr(b), m, n)
            return y
        return run


_register_fc("FC", transposed=False)
_register_fc("FCTransposed", transposed=True)
