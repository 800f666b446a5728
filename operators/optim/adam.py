"""Adam, SparseAdam, RowWiseSparseAdam (caffe2/sgd/adam_op). The learning rate is
added (Caffe2's optimizers feed a negative one); the bias correction uses t = iter + 1."""
import numpy as np

from caffe2py import inplace
from caffe2py.kernels.cpu.optim import dense as D
from caffe2py.kernels.cpu.optim import sparse as S
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from ._optim_common import (as_rows, float32, iteration, like_inputs, same_size,
                            scalar, sparse_slices)

F32 = np.float32
_ARGS = (Arg("beta1", "float", 0.9), Arg("beta2", "float", 0.999),
         Arg("epsilon", "float", 1e-5, doc="added to sqrt(second moment); build_adam passes 1e-8"),
         Arg("enableRAdam", "bool", False, doc="Rectified Adam (SparseAdam only; not supported here)"))

register_schema(OpSchema(
    "Adam", num_inputs=6, num_outputs=(3, 4), allow_inplace={(0, 0), (1, 1), (2, 2)},
    inputs=("param", "moment_1", "moment_2", "grad", "lr", "iter"),
    outputs=("output_param", "output_moment_1", "output_moment_2", "output_grad"),
    args=_ARGS[:3], inference=like_inputs(0, 1, 2, 3),
    doc="t = iter + 1; c = sqrt(1 - beta2^t) / (1 - beta1^t); m1' = beta1 m1 + (1 - beta1) g; "
        "m2' = beta2 m2 + (1 - beta2) g^2; grad_o = c m1' / (sqrt(m2') + epsilon); param' = param "
        "+ lr grad_o. Output 4 (optional) is grad_o."))


def _hyper(ctx):
    return F32(ctx.float("beta1")), F32(ctx.float("beta2")), F32(ctx.float("epsilon"))


@register_kernel("Adam")
def adam(ctx):
    beta1, beta2, epsilon = _hyper(ctx)
    want_grad = ctx.n_outputs == 4

    def run(param, m1, m2, grad, lr, it):
        for k, a in ((0, param), (1, m1), (2, m2), (3, grad)):
            float32(ctx, k, a)
            if k:
                same_size(ctx, k, a, param.size, "param '%s'" % ctx.inputs[0])
        rate = F32(scalar(ctx, 4, lr, "lr must hold one value"))
        correction = D.adam_correction(beta1, beta2, iteration(ctx, 5, it))
        shape = param.shape
        p, a, b, g = D.adam(param, m1.reshape(shape), m2.reshape(shape), grad.reshape(shape), rate,
                            correction, beta1, beta2, epsilon, want_grad)
        outs = (p, a.reshape(m1.shape), b.reshape(m2.shape))
        return outs + (g.reshape(grad.shape),) if want_grad else outs
    return run


_SPARSE_DOC = ("on the rows of param named by indices (grad holds one row per index), in place; "
               "indices apply in order (a duplicate is updated twice). Output 4 (optional) gets "
               "the effective gradient per index, shaped like grad. An out-of-range index raises "
               "before anything is written.")

register_schema(OpSchema(
    "SparseAdam", num_inputs=7, num_outputs=(3, 4), enforce_inplace={(0, 0), (1, 1), (2, 2)},
    inputs=("param", "moment_1", "moment_2", "indices", "grad", "lr", "iter"),
    outputs=("output_param", "output_moment_1", "output_moment_2", "output_grad"),
    args=_ARGS, inference=like_inputs(0, 1, 2, 4), doc="Adam " + _SPARSE_DOC))

register_schema(OpSchema(
    "RowWiseSparseAdam", num_inputs=7, num_outputs=(3, 4), enforce_inplace={(0, 0), (1, 1), (2, 2)},
    inputs=("param", "moment_1", "moment_2", "indices", "grad", "lr", "iter"),
    outputs=("output_param", "output_moment_1", "output_moment_2", "output_grad"),
    args=_ARGS[:3], inference=like_inputs(0, 1, 2, 4),
    doc="Adam with one second moment per row (moment_2 shaped [rows], updated with the mean of "
        "the row's squared gradient) " + _SPARSE_DOC))


def _sparse_factory(kernel, rowwise):
    def factory(ctx):
        if ctx.bool("enableRAdam"):
            raise ctx.error("enableRAdam=1 (Rectified Adam) is not supported by caffe2py")
        beta1, beta2, epsilon = _hyper(ctx)
        want_grad = ctx.n_outputs == 4

        def run(param, m1, m2, indices, grad, lr, it):
            rows, block, flat = sparse_slices(ctx, 0, 3, 4, param, indices, grad)
            float32(ctx, 1, m1)
            float32(ctx, 2, m2)
            same_size(ctx, 1, m1, param.size, "param '%s'" % ctx.inputs[0])
            if rowwise:
                same_size(ctx, 2, m2, rows, "param '%s''s first dimension" % ctx.inputs[0])
            else:
                same_size(ctx, 2, m2, param.size, "param '%s'" % ctx.inputs[0])
            rate = F32(scalar(ctx, 5, lr, "lr must hold one value"))
            correction = D.adam_correction(beta1, beta2, iteration(ctx, 6, it))
            param = inplace.claim(param)
            m1 = inplace.claim(m1)
            m2 = inplace.claim(m2)
            p2, a2 = as_rows(param, rows, block), as_rows(m1, rows, block)
            b2 = m2.reshape(rows) if rowwise else as_rows(m2, rows, block)
            saved = tuple(inplace.row_buffer(table, flat) for table in (p2, a2, b2))
            grad_out = np.empty((flat.size, block), F32) if want_grad else None
            kernel(p2, a2, b2, flat, np.ascontiguousarray(grad).reshape(flat.size, block), rate,
                   correction, beta1, beta2, epsilon, grad_out, None if saved[0] is None else saved)
            for table, rows_saved in zip((p2, a2, b2), saved):
                inplace.remember_rows(table, flat, rows_saved)
            if want_grad:
                return param, m1, m2, grad_out.reshape(grad.shape)
            return param, m1, m2
        return run
    return factory


register_kernel("SparseAdam")(_sparse_factory(S.sparse_adam, rowwise=False))
register_kernel("RowWiseSparseAdam")(_sparse_factory(S.rowwise_sparse_adam, rowwise=True))
