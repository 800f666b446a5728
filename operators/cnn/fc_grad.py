"""FCGradient and FCTransposedGradient (Caffe2's names), and the FC makers.

Inputs X, W, dY; outputs dW, db and, when asked for, dX (two or three outputs).
X and W are flattened at axis / axis_w as in the forward; dW has W's shape, db is
a vector of N, dX has X's shape. The products run on the team's GEMM."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.math import gemm as gemm_k
from caffe2py.kernels.cpu.math.reduce import column_sums
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .nn import _fc_dims


def _infer(ctx, ins):
    x, w = ins[0], ins[1]
    _, _, _, n = _fc_dims(ctx, x.dims, w.dims, ctx.type == "FCTransposedGradient")
    return [w, TensorType((n,), w.dtype), x][:ctx.n_outputs]


def _cost(ctx, ins):
    x, w = ins[0], ins[1]
    axis, k, _, n = _fc_dims(ctx, x.dims, w.dims, ctx.type == "FCTransposedGradient")
    m = int(np.prod(x.dims[:axis], dtype=np.int64))
    flops = 2.0 * m * k * n * (2 if ctx.n_outputs == 3 else 1) + m * n
    return Cost(flops=flops, bytes_read=4.0 * (m * k + k * n + m * n), bytes_written=4.0 * (k * n + n + m * k))


for _name, _transposed in (("FCGradient", False), ("FCTransposedGradient", True)):
    register_schema(OpSchema(
        _name, num_inputs=3, num_outputs=(2, 3),
        args=(Arg("axis", "int", 1), Arg("axis_w", "int", 1)),
        inference=_infer, cost=_cost, inputs=("X", "W", "dY"), outputs=("dW", "db", "dX"),
        doc="Gradient of %s: dW = %s, db = column sums of dY, dX = dY %s (with X and W "
            "flattened at axis / axis_w)." % (_name[:-8], "X^T dY" if _transposed else "dY^T X",
                                               "W^T" if _transposed else "W")))

    @register_kernel(_name)
    def _fc_grad(ctx, transposed=_transposed):
        want_dx = ctx.n_outputs == 3

        def run(x, w, dy):
            axis, k, kw, n = _fc_dims(ctx, x.shape, w.shape, transposed)
            if k != kw:
                raise ctx.input_error(1, "W of shape %s needs %d inputs per row but X '%s' of shape %s gives %d"
                                      % (list(w.shape), kw, ctx.inputs[0], list(x.shape), k))
            m = int(np.prod(x.shape[:axis], dtype=np.int64))
            if dy.size != m * n or tuple(dy.shape[:-1]) != tuple(x.shape[:axis]):
                raise ctx.input_error(2, "gradient of shape %s does not match the output shape %s"
                                      % (list(dy.shape), list(x.shape[:axis]) + [n]))
            x2 = np.ascontiguousarray(x).reshape(m, k)
            dy2 = np.ascontiguousarray(dy, dtype=x.dtype).reshape(m, n)
            w2 = np.ascontiguousarray(w, dtype=x.dtype).reshape((k, n) if transposed else (n, k))
            dw = gemm_k.matmul(x2.T, dy2) if transposed else gemm_k.matmul(dy2.T, x2)
            db = column_sums(dy2).astype(x.dtype, copy=False)
            if not want_dx:
                return dw.reshape(w.shape), db
            dx = gemm_k.matmul(dy2, w2.T if transposed else w2)
            return dw.reshape(w.shape), db, dx.reshape(x.shape)
        return run


@register_gradient("FC", "FCTransposed")
def _fc_maker(g):
    return [g.op(g.def_.type + "Gradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(1), g.GI(2), g.GI(0)])]
