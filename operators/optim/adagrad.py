"""Adagrad, SparseAdagrad, RowWiseSparseAdagrad (caffe2/sgd/adagrad_op). The learning
rate is added (Caffe2's optimizers feed a negative one), epsilon defaults to 1e-5 in
the ops (build_adagrad passes 1e-4)."""
import numpy as np

from caffe2py import inplace
from caffe2py.kernels.cpu.optim import dense as D
from caffe2py.kernels.cpu.optim import sparse as S
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from ._optim_common import (as_rows, float32, like_inputs, same_size, scalar,
                            sparse_slices)

F32 = np.float32
_ARGS = (Arg("epsilon", "float", 1e-5, doc="added to sqrt(moment)"),
         Arg("decay", "float", 1.0, doc="moment' = decay * moment + g^2 (dense Adagrad only)"),
         Arg("weight_decay", "float", 0.0, doc="g' = g + weight_decay * param before the update"))


def _adagrad_infer(ctx, ins):
    outs = [ins[0], ins[1]] + [ins[2] if len(ins) > 2 else UNKNOWN] * 2
    return outs[:ctx.n_outputs]


register_schema(OpSchema(
    "Adagrad", num_inputs=4, num_outputs=(2, 4), allow_inplace={(0, 0), (1, 1)},
    inputs=("param", "moment", "grad", "lr"),
    outputs=("output_param", "output_moment", "output_effective_lr", "output_update"),
    args=_ARGS, inference=_adagrad_infer,
    doc="g' = grad + weight_decay * param; moment' = decay * moment + g'^2; effective_lr = lr / "
        "(sqrt(moment') + epsilon); update = effective_lr * g'; param' = param + update. Outputs 3 "
        "and 4 (optional) are effective_lr and update."))


@register_kernel("Adagrad")
def adagrad(ctx):
    epsilon, decay, wd = F32(ctx.float("epsilon")), F32(ctx.float("decay")), F32(ctx.float("weight_decay"))
    n_out = ctx.n_outputs

    def run(param, moment, grad, lr):
        for k, a in ((0, param), (1, moment), (2, grad)):
            float32(ctx, k, a)
        same_size(ctx, 1, moment, param.size, "param '%s'" % ctx.inputs[0])
        same_size(ctx, 2, grad, param.size, "param '%s'" % ctx.inputs[0])
        rate = F32(scalar(ctx, 3, lr, "lr must hold one value"))
        new_param, new_moment, effective, update = D.adagrad(
            param, moment.reshape(param.shape), grad.reshape(param.shape), rate, epsilon, decay, wd)
        outs = (new_param, new_moment.reshape(moment.shape), effective.reshape(grad.shape),
                update.reshape(grad.shape))
        return outs[:n_out]
    return run


_SPARSE_DOC = ("on the rows of param named by indices (grad holds one row per index), in place; "
               "indices apply in order, so a duplicated index is updated twice, the second time "
               "from the first update's moment and param. An out-of-range index raises before "
               "anything is written.")

register_schema(OpSchema(
    "SparseAdagrad", num_inputs=5, num_outputs=2, enforce_inplace={(0, 0), (1, 1)},
    inputs=("param", "moment", "indices", "grad", "lr"), outputs=("output_param", "output_moment"),
    args=_ARGS, inference=like_inputs(0, 1),
    doc="Adagrad (decay 1) " + _SPARSE_DOC))

register_schema(OpSchema(
    "RowWiseSparseAdagrad", num_inputs=5, num_outputs=2, enforce_inplace={(0, 0), (1, 1)},
    inputs=("param", "moment", "indices", "grad", "lr"), outputs=("output_param", "output_moment"),
    args=_ARGS, inference=lambda ctx, ins: [ins[0], TensorType(ins[0].dims[:1], ins[0].dtype)
                                            if ins[0].known and ins[0].dims else UNKNOWN],
    doc="Adagrad with one moment per row (moment shaped [rows]): moment[r] += mean over the row of "
        "g'^2, param[r] += g' * lr / (sqrt(moment[r]) + epsilon), " + _SPARSE_DOC))


def _sparse_factory(kernel, rowwise):
    def factory(ctx):
        epsilon, wd = F32(ctx.float("epsilon")), F32(ctx.float("weight_decay"))

        def run(param, moment, indices, grad, lr):
            rows, block, flat = sparse_slices(ctx, 0, 2, 3, param, indices, grad)
            float32(ctx, 1, moment)
            if rowwise:
                same_size(ctx, 1, moment, rows, "param '%s''s first dimension" % ctx.inputs[0])
            else:
                same_size(ctx, 1, moment, param.size, "param '%s'" % ctx.inputs[0])
            rate = F32(scalar(ctx, 4, lr, "lr must hold one value"))
            param = inplace.claim(param)
            moment = inplace.claim(moment)
            p2 = as_rows(param, rows, block)
            m2 = moment.reshape(rows) if rowwise else as_rows(moment, rows, block)
            saved = inplace.row_buffer(p2, flat), inplace.row_buffer(m2, flat)
            kernel(p2, m2, flat, np.ascontiguousarray(grad).reshape(flat.size, block), rate, epsilon, wd,
                   None if saved[0] is None else saved)
            for table, rows_saved in zip((p2, m2), saved):
                inplace.remember_rows(table, flat, rows_saved)
            return param, moment
        return run
    return factory


register_kernel("SparseAdagrad")(_sparse_factory(S.sparse_adagrad, rowwise=False))
register_kernel("RowWiseSparseAdagrad")(_sparse_factory(S.rowwise_sparse_adagrad, rowwise=True))
