"""Weight and learning-rate helpers of Caffe2's optimizers (EnsureClipped is in
optim_extra_ops.py, with undo records for its in-place sparse form): SparseLpRegularizer, WeightScale, LearningRateAdaption and ScaleBlobs
(caffe2/sgd/*, caffe2/operators/ensure_clipped_op, scale_blobs_op)."""
import numpy as np

from caffe2py import inplace
from caffe2py.kernels.cpu.optim import lp_regularizer as LP
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from ._optim_common import as_rows, float32, iteration, like_inputs, scalar, table_rows

F32 = np.float32
_FLOAT_MAX = float(np.finfo(np.float32).max)


def _indices(ctx, index, indices, rows, table):
    """Flat int64 indices, every one in [0, rows), checked before anything is written."""
    if not isinstance(indices, np.ndarray) or indices.dtype not in (np.int32, np.int64):
        raise ctx.input_error(index, "indices must be int32 or int64, got %s"
                              % getattr(indices, "dtype", type(indices).__name__))
    flat = np.ascontiguousarray(indices.reshape(-1), np.int64)
    bad = np.flatnonzero((flat < 0) | (flat >= rows))
    if bad.size:
        raise ctx.input_error(index, "index %d at position %d is out of range [0, %d) for '%s'; nothing "
                                     "was updated" % (flat[bad[0]], bad[0], rows, ctx.inputs[table]))
    return flat


# ----------------------------------------------------------------- SparseLpRegularizer

register_schema(OpSchema(
    "SparseLpRegularizer", num_inputs=(2, 3), num_outputs=1, enforce_inplace={(0, 0)},
    inputs=("param", "indices", "grad"), outputs=("output_param",),
    args=(Arg("p", "float", 2.0, doc="1 (L1) or 2 (L2)"),
          Arg("reg_lambda", "float", 1e-5, doc="regularisation strength")),
    inference=like_inputs(0),
    doc="Regularises the rows of param named by indices, in place and in index order: p = 2 scales a "
        "row by (1 - reg_lambda); p = 1 moves each value reg_lambda towards zero, zeroing values with "
        "|w| <= reg_lambda. grad (optional) is not read."))


@register_kernel("SparseLpRegularizer")
def sparse_lp_regularizer(ctx):
    p, reg_lambda = ctx.float("p"), F32(ctx.float("reg_lambda"))
    if p not in (1.0, 2.0):
        raise ctx.error("p must be 1 or 2, got %g" % p)

    def run(param, indices, *grad):
        float32(ctx, 0, param)
        rows, block = table_rows(ctx, 0, param)
        flat = _indices(ctx, 1, indices, rows, 0)
        param = inplace.claim(param)
        if flat.size and block:
            table = as_rows(param, rows, block)
            saved = inplace.row_buffer(table, flat)
            if saved is not None:
                np.take(table, flat, axis=0, out=saved)
            LP.sparse_lp(table, flat, p == 1.0, reg_lambda)
            inplace.remember_rows(table, flat, saved)
        return param
    return run


# ----------------------------------------------------------------- WeightScale

_INT64_MAX = int(np.iinfo(np.int64).max)

register_schema(OpSchema(
    "WeightScale", num_inputs=2, num_outputs=1, allow_inplace={(0, 0)},
    inputs=("w", "iter"), outputs=("nw",),
    args=(Arg("stepsize", "int", _INT64_MAX, doc="scale every stepsize-th iteration"),
          Arg("upper_bound_iter", "int", _INT64_MAX, doc="scale only while iter + 1 < upper_bound_iter"),
          Arg("scale", "float", 1.0)),
    inference=like_inputs(0),
    doc="nw = w * scale when (iter + 1) % stepsize == 0 and iter + 1 < upper_bound_iter, else a copy of w."))


@register_kernel("WeightScale")
def weight_scale(ctx):
    stepsize, upper, scale = ctx.int("stepsize"), ctx.int("upper_bound_iter"), F32(ctx.float("scale"))
    if stepsize <= 0:
        raise ctx.error("stepsize must be positive, got %d" % stepsize)

    def run(w, it):
        if not isinstance(w, np.ndarray) or w.dtype.kind != "f":
            raise ctx.input_error(0, "w must be a float tensor, got %s" % getattr(w, "dtype", type(w).__name__))
        t = iteration(ctx, 1, it) + 1
        if t % stepsize != 0 or t >= upper:
            return w.copy()
        return (w * w.dtype.type(scale)).astype(w.dtype)
    return run


# ----------------------------------------------------------------- LearningRateAdaption

register_schema(OpSchema(
    "LearningRateAdaption", num_inputs=3, num_outputs=1, allow_inplace={(0, 0)},
    inputs=("lr", "grad", "effgrad"), outputs=("output_lr",),
    args=(Arg("lr_alpha", "float", 0.01, doc="adaption rate"),
          Arg("normalized_lr_adaption", "bool", True, doc="use the cosine of grad and effgrad")),
    inference=like_inputs(0),
    doc="Hypergradient learning-rate adaption: x = dot(grad, effgrad); normalized: output_lr = lr - lr * "
        "lr_alpha * x / (max(|grad|, 1e-12) * max(|effgrad|, 1e-12)); otherwise output_lr = lr - lr_alpha * x."))


@register_kernel("LearningRateAdaption")
def learning_rate_adaption(ctx):
    alpha, normalized = F32(ctx.float("lr_alpha")), ctx.bool("normalized_lr_adaption")
    eps = F32(1e-12)

    def run(lr, grad, effgrad):
        for k, a in ((0, lr), (1, grad), (2, effgrad)):
            float32(ctx, k, a)
        rate = F32(scalar(ctx, 0, lr, "lr must hold one value"))
        if effgrad.size != grad.size:
            raise ctx.input_error(2, "effgrad has %d elements but grad '%s' has %d"
                                  % (effgrad.size, ctx.inputs[1], grad.size))
        g, e = grad.reshape(-1), effgrad.reshape(-1)
        x = F32(np.dot(g, e))
        with np.errstate(all="ignore"):
            if normalized:
                y = max(F32(np.sqrt(np.dot(g, g))), eps)
                z = max(F32(np.sqrt(np.dot(e, e))), eps)
                new = rate - rate * alpha * F32(x / (y * z))
            else:
                new = rate - alpha * x
        return np.full(lr.shape, new, F32)
    return run


# ----------------------------------------------------------------- ScaleBlobs

register_schema(OpSchema(
    "ScaleBlobs", num_inputs=(1, None), num_outputs=(1, None), allow_inplace=lambda i, o: i == o,
    inputs_outputs_check=lambda n_in, n_out: n_in == n_out, args=(Arg("scale", "float", 1.0),),
    inference=lambda ctx, ins: list(ins[:ctx.n_outputs]),
    doc="Output i = scale * input i, for as many outputs as inputs (float tensors)."))


@register_kernel("ScaleBlobs")
def scale_blobs(ctx):
    scale = ctx.float("scale")

    def run(*blobs):
        outs = []
        for k, x in enumerate(blobs):
            if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
                raise ctx.input_error(k, "must be a float tensor, got %s" % getattr(x, "dtype", type(x).__name__))
            outs.append((x * x.dtype.type(scale)).astype(x.dtype))
        return tuple(outs) if len(outs) > 1 else outs[0]      # one output is returned bare
    return run
