"""Caffe2's MatMul on the CPU: Y = op(A) @ op(B) of 2-D views, with its gradient.

A is viewed as (size before axis_a, size from axis_a) and B likewise at axis_b, as
Caffe2's MatMulOp flattens them; trans_a / trans_b transpose those views. Y is the
2-D (M, N) product. The product runs on the team GEMM (kernels/cpu/tensor/team_gemm),
the transposes as strided views, with no copies. Until this module only the CUDA
device had a MatMul kernel, so every Caffe2 net using MatMul failed on the CPU.
"""
import math

import numpy as np

from caffe2py.errors import Caffe2Error
from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.math.team_gemm import gemm_into
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, SameDType


def _views(ctx, a_dims, b_dims):
    """((a_rows, a_cols), (b_rows, b_cols)) after flattening and the transposes, or a
    named error for an axis outside the input's dims."""
    shapes = []
    for pos, (dims, name) in enumerate(((a_dims, "axis_a"), (b_dims, "axis_b"))):
        axis = ctx.int(name, 1)
        rank = len(dims)
        if not -rank <= axis < rank:
            raise ctx.input_error(pos, "has %d dims; %s %d is outside [%d, %d)" % (rank, name, axis, -rank, rank))
        axis %= rank
        rows, cols = math.prod(dims[:axis]), math.prod(dims[axis:])
        transposed = ctx.bool("trans_a" if pos == 0 else "trans_b")
        shapes.append((cols, rows) if transposed else (rows, cols))
    (m, k), (kb, n) = shapes
    if k != kb:
        raise ctx.input_error(1, "A %s gives rows of %d values (axis_a %d, trans_a %d) but B %s has %d "
                                 "(axis_b %d, trans_b %d)" % (list(a_dims), k, ctx.int("axis_a", 1),
                                                              ctx.bool("trans_a"), list(b_dims), kb,
                                                              ctx.int("axis_b", 1), ctx.bool("trans_b")))
    return m, k, n


def _infer(ctx, ins):
    a, b = ins[:2]
    if len(ins) == 3:                # the gradient form: Y takes input 2's shape
        return [TensorType(ins[2].dims, a.dtype) if ins[2].known else UNKNOWN]
    if not a.known or not b.known:
        return [UNKNOWN]
    m, _, n = _views(ctx, a.dims, b.dims)
    return [TensorType((m, n), a.dtype)]


def shaped_like(ctx, y, like):
    """Caffe2's three-input MatMul (its gradient ops): the (M, N) product reshaped
    to input 2's shape, which must hold as many values."""
    if like is None:
        return y
    shape = np.shape(like)
    if math.prod(shape) != y.size:
        raise ctx.input_error(2, "shape %s holds %d values but the product is %s (%d values); input 2 "
                                 "gives the output's shape (the gradient of A or B)"
                              % (list(shape), math.prod(shape), list(y.shape), y.size))
    return y.reshape(shape)


def _cost(ctx, ins):
    a, b = ins[:2]
    if not a.known or not b.known:
        return Cost()
    m, k, n = _views(ctx, a.dims, b.dims)
    return Cost(flops=2.0 * m * k * n, bytes_read=4.0 * (m * k + k * n), bytes_written=4.0 * m * n)


register_schema(OpSchema(
    "MatMul", num_inputs=(2, 3), num_outputs=1, inputs=("A", "B", "shape_like"), outputs=("Y",),
    args=(Arg("trans_a", "bool", False, doc="transpose A's 2-D view"),
          Arg("trans_b", "bool", False, doc="transpose B's 2-D view"),
          Arg("axis_a", "int", 1, doc="A is viewed as (dims before axis_a, dims from it)"),
          Arg("axis_b", "int", 1, doc="B is viewed as (dims before axis_b, dims from it)")),
    checks=(DTypes((0, 1), "float"), SameDType((0, 1))), inference=_infer, cost=_cost,
    doc="Matrix product Y (M x N) = op(A) (M x K) @ op(B) (K x N) of A and B flattened to 2-D at "
        "axis_a / axis_b, op transposing when trans_a / trans_b is set. With a third input (Caffe2's "
        "gradient ops) Y takes that input's shape."))


@register_kernel("MatMul")
def matmul(ctx):
    ta, tb = ctx.bool("trans_a"), ctx.bool("trans_b")
    axis_a, axis_b = ctx.int("axis_a", 1), ctx.int("axis_b", 1)

    def run(a, b, like=None):
        m, k, n = _views(ctx, a.shape, b.shape)
        a2 = np.ascontiguousarray(a).reshape(math.prod(a.shape[:axis_a % a.ndim]), -1 if a.size else 0)
        b2 = np.ascontiguousarray(b).reshape(math.prod(b.shape[:axis_b % b.ndim]), -1 if b.size else 0)
        out = np.empty((m, n), a.dtype)
        if out.size:
            if k == 0:
                out.fill(0)
            else:
                gemm_into(a2.T if ta else a2, b2.T if tb else b2, out)
        return shaped_like(ctx, out, like)
    return run


@register_gradient("MatMul", copy_arguments=False)
def _matmul_gradient(g):
    """Caffe2's GetMatMulGradient: two three-input MatMuls whose transposes follow the
    forward's, each reshaped to its input (input 2) and flattened at the forward's
    axis_a / axis_b. Caffe2 reads those axes into a bool, so an axis above 1 became
    1 and the gradient of a 3-D input flattened at 2 failed; the real values are
    passed here (they equal Caffe2's wherever its gradient worked)."""
    if len(g.def_.input) not in (2, 3):
        raise Caffe2Error("%s: MatMul's gradient needs 2 or 3 inputs, got %d" % (g.label, len(g.def_.input)))
    a, b, dy = g.I(0), g.I(1), g.GO(0)
    ta, tb = bool(g.arg("trans_a", 0)), bool(g.arg("trans_b", 0))
    axis_a, axis_b = int(g.arg("axis_a", 1)), int(g.arg("axis_b", 1))
    if ta and tb:        # Y = A'B': dA = B'G', dB = G'A'
        return [g.op("MatMul", [b, dy, a], [g.GI(0)], trans_a=1, trans_b=1, axis_a=axis_b),
                g.op("MatMul", [dy, a, b], [g.GI(1)], trans_a=1, trans_b=1, axis_b=axis_a)]
    if ta:               # Y = A'B: dA = B G', dB = A G
        return [g.op("MatMul", [b, dy, a], [g.GI(0)], trans_b=1, axis_a=axis_b),
                g.op("MatMul", [a, dy, b], [g.GI(1)], axis_a=axis_a)]
    if tb:               # Y = A B': dA = G B, dB = G'A
        return [g.op("MatMul", [dy, b, a], [g.GI(0)], axis_b=axis_b),
                g.op("MatMul", [dy, a, b], [g.GI(1)], trans_a=1, axis_b=axis_a)]
    return [g.op("MatMul", [dy, b, a], [g.GI(0)], trans_b=1, axis_b=axis_b),      # Y = A B: dA = G B', dB = A'G
            g.op("MatMul", [a, dy, b], [g.GI(1)], trans_a=1, axis_a=axis_a)]
