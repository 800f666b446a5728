"""Adadelta / SparseAdadelta, Storm / SparseStorm, Wngrad / SparseWngrad and DecayAdagrad
(caffe2/sgd/adadelta_op, storm_op, wngrad_op, decay_adagrad_op). The learning rate is
added, as in Caffe2 (its optimizers feed a negative one). The sparse forms update the
rows named by INDICES in place, in index order (a duplicated index is updated twice),
after every index has been checked."""
import numpy as np

from caffe2py import inplace
from caffe2py.kernels.cpu.optim import row_updates as R
from caffe2py.registry import UNKNOWN, Arg, OpSchema, register_kernel, register_schema

from ._optim_common import as_rows, float32, iteration, like_inputs, same_size, scalar, sparse_slices

F32 = np.float32


def _save_rows(table2, flat):
    """The rows an update is about to change (for undo), or None outside a net run."""
    saved = inplace.row_buffer(table2, flat)
    if saved is not None:
        np.take(table2, flat, axis=0, out=saved)
    return saved


def _dense_inputs(ctx, param, pairs):
    """Checks float32 and same size as param for each (input index, array)."""
    float32(ctx, 0, param)
    for k, a in pairs:
        float32(ctx, k, a)
        same_size(ctx, k, a, param.size, "param '%s'" % ctx.inputs[0])


# ----------------------------------------------------------------- Adadelta

_ADADELTA_ARGS = (Arg("epsilon", "float", 1e-5, doc="added under both square roots"),
                  Arg("decay", "float", 0.95, doc="moving-average factor of both moments"))
_ADADELTA_DOC = ("moment' = decay * moment + (1 - decay) * g^2; u = sqrt(moment_delta + epsilon) / "
                 "sqrt(moment' + epsilon) * g; param' = param + lr * u; moment_delta' = decay * "
                 "moment_delta + (1 - decay) * u^2")

register_schema(OpSchema(
    "Adadelta", num_inputs=5, num_outputs=3, allow_inplace={(0, 0), (1, 1), (2, 2)},
    inputs=("param", "moment", "moment_delta", "grad", "lr"),
    outputs=("output_param", "output_moment", "output_moment_delta"),
    args=_ADADELTA_ARGS, inference=like_inputs(0, 1, 2), doc="Adadelta (Zeiler 2012): " + _ADADELTA_DOC))

register_schema(OpSchema(
    "SparseAdadelta", num_inputs=6, num_outputs=3, enforce_inplace={(0, 0), (1, 1), (2, 2)},
    inputs=("param", "moment", "moment_delta", "indices", "grad", "lr"),
    outputs=("output_param", "output_moment", "output_moment_delta"),
    args=_ADADELTA_ARGS, inference=like_inputs(0, 1, 2),
    doc="Adadelta on the rows of param named by indices, in place and in index order: " + _ADADELTA_DOC))


@register_kernel("Adadelta")
def adadelta(ctx):
    epsilon, decay = F32(ctx.float("epsilon")), F32(ctx.float("decay"))

    def run(param, moment, delta, grad, lr):
        _dense_inputs(ctx, param, ((1, moment), (2, delta), (3, grad)))
        rate = F32(scalar(ctx, 4, lr, "lr must hold one value"))
        w, h, d = R.adadelta_dense(param, moment.reshape(param.shape), delta.reshape(param.shape),
                                   grad.reshape(param.shape), rate, epsilon, decay)
        return w, h.reshape(moment.shape), d.reshape(delta.shape)
    return run


@register_kernel("SparseAdadelta")
def sparse_adadelta(ctx):
    epsilon, decay = F32(ctx.float("epsilon")), F32(ctx.float("decay"))

    def run(param, moment, delta, indices, grad, lr):
        rows, block, flat = sparse_slices(ctx, 0, 3, 4, param, indices, grad)
        for k, a in ((1, moment), (2, delta)):
            float32(ctx, k, a)
            same_size(ctx, k, a, param.size, "param '%s'" % ctx.inputs[0])
        rate = F32(scalar(ctx, 5, lr, "lr must hold one value"))
        param = inplace.claim(param)
        moment = inplace.claim(moment)
        delta = inplace.claim(delta)
        if flat.size and block:
            tables = [as_rows(a, rows, block) for a in (param, moment, delta)]
            saved = [_save_rows(t, flat) for t in tables]
            R.sparse_adadelta(*tables, flat, np.ascontiguousarray(grad).reshape(flat.size, block),
                              rate, epsilon, decay)
            for t, s in zip(tables, saved):
                inplace.remember_rows(t, flat, s)
        return param, moment, delta
    return run


# ----------------------------------------------------------------- Storm

_STORM_ARGS = (Arg("momentum", "float", 10.0, doc="alpha = momentum * nlr^2"),
               Arg("beta", "float", 0.1, doc="nlr = lr * (beta + grad_sq_sum')^(-1/3)"))
_STORM_DOC = ("grad_sq_sum' = grad_sq_sum + sum(g^2); nlr = lr * (beta + grad_sq_sum')^(-1/3); alpha = "
              "momentum * nlr^2; moment' = g + (1 - alpha) * (moment - g); param' = param + nlr * moment'")

register_schema(OpSchema(
    "Storm", num_inputs=5, num_outputs=3, allow_inplace={(0, 0), (1, 1), (2, 2)},
    inputs=("param", "moment", "grad_sq_sum", "grad", "lr"),
    outputs=("output_param", "output_moment", "output_grad_sq_sum"),
    args=_STORM_ARGS, inference=like_inputs(0, 1, 2), doc="STORM (Cutkosky & Orabona 2019): " + _STORM_DOC))

register_schema(OpSchema(
    "SparseStorm", num_inputs=6, num_outputs=3, enforce_inplace={(0, 0), (1, 1)},
    allow_inplace={(2, 2)},
    inputs=("param", "moment", "grad_sq_sum", "grad", "indices", "lr"),
    outputs=("output_param", "output_moment", "output_grad_sq_sum"),
    args=_STORM_ARGS, inference=like_inputs(0, 1, 2),
    doc="STORM on the rows of param named by indices (note: grad before indices), in place and in "
        "index order; grad_sq_sum sums the squares of every given gradient row: " + _STORM_DOC))


def _storm_state(ctx, index, grad_sq_sum, lr_index, lr, grad):
    float32(ctx, index, grad_sq_sum)
    total = F32(scalar(ctx, index, grad_sq_sum, "grad_sq_sum must hold one value"))
    rate = F32(scalar(ctx, lr_index, lr, "lr must hold one value"))
    flat = grad.reshape(-1)
    new_sum = F32(total + np.dot(flat, flat))
    return new_sum, rate


@register_kernel("Storm")
def storm(ctx):
    momentum, beta = F32(ctx.float("momentum")), F32(ctx.float("beta"))

    def run(param, moment, grad_sq_sum, grad, lr):
        _dense_inputs(ctx, param, ((1, moment), (3, grad)))
        new_sum, rate = _storm_state(ctx, 2, grad_sq_sum, 4, lr, grad)
        nlr, alpha = R.storm_rate(new_sum, rate, momentum, beta)
        w, m = R.storm_dense(param, moment.reshape(param.shape), grad.reshape(param.shape), nlr, alpha)
        return w, m.reshape(moment.shape), np.full(grad_sq_sum.shape, new_sum, F32)
    return run


@register_kernel("SparseStorm")
def sparse_storm(ctx):
    momentum, beta = F32(ctx.float("momentum")), F32(ctx.float("beta"))

    def run(param, moment, grad_sq_sum, grad, indices, lr):
        rows, block, flat = sparse_slices(ctx, 0, 4, 3, param, indices, grad)
        float32(ctx, 1, moment)
        same_size(ctx, 1, moment, param.size, "param '%s'" % ctx.inputs[0])
        new_sum, rate = _storm_state(ctx, 2, grad_sq_sum, 5, lr, grad)
        nlr, alpha = R.storm_rate(new_sum, rate, momentum, beta)
        param = inplace.claim(param)
        moment = inplace.claim(moment)
        if flat.size and block:
            tables = [as_rows(a, rows, block) for a in (param, moment)]
            saved = [_save_rows(t, flat) for t in tables]
            R.sparse_storm(*tables, flat, np.ascontiguousarray(grad).reshape(flat.size, block), nlr, alpha)
            for t, s in zip(tables, saved):
                inplace.remember_rows(t, flat, s)
        return param, moment, np.full(grad_sq_sum.shape, new_sum, F32)
    return run


# ----------------------------------------------------------------- Wngrad

_EPS = (Arg("epsilon", "float", 1e-5, doc="added to seq_b"),)

register_schema(OpSchema(
    "Wngrad", num_inputs=4, num_outputs=(2, 4), allow_inplace={(0, 0), (1, 1)},
    inputs=("param", "seq_b", "grad", "lr"),
    outputs=("output_param", "output_seq_b", "output_effective_lr", "output_update"),
    args=_EPS, inference=lambda ctx, ins: [ins[0], ins[1], ins[1], ins[2]][:ctx.n_outputs],
    doc="WNGrad (Wu et al. 2018): effective_lr = lr / (seq_b + epsilon); update = effective_lr * grad; "
        "param' = param + update; seq_b' = seq_b + sum(grad^2) / (seq_b + epsilon). Outputs 3 and 4 "
        "(optional) are effective_lr and update."))

register_schema(OpSchema(
    "SparseWngrad", num_inputs=5, num_outputs=2, enforce_inplace={(0, 0)}, allow_inplace={(1, 1)},
    inputs=("param", "seq_b", "indices", "grad", "lr"), outputs=("output_param", "output_seq_b"),
    args=_EPS, inference=like_inputs(0, 1),
    doc="Wngrad on the rows of param named by indices, in place: param[r] += lr * g / (seq_b + "
        "epsilon); seq_b' = seq_b + sum(g^2) / seq_b (Caffe2's sparse form leaves epsilon out here); "
        "no indices leaves seq_b as it is."))


def _seq_b(ctx, index, seq_b):
    float32(ctx, index, seq_b)
    return F32(scalar(ctx, index, seq_b, "seq_b must hold one value"))


@register_kernel("Wngrad")
def wngrad(ctx):
    epsilon = F32(ctx.float("epsilon"))
    n_out = ctx.n_outputs

    def run(param, seq_b, grad, lr):
        _dense_inputs(ctx, param, ((2, grad),))
        b = _seq_b(ctx, 1, seq_b)
        rate = F32(scalar(ctx, 3, lr, "lr must hold one value"))
        g = grad.reshape(param.shape)
        flat = g.reshape(-1)
        with np.errstate(all="ignore"):
            denom = F32(b + epsilon)
            new_b = np.full(seq_b.shape, F32(b + F32(np.dot(flat, flat)) / denom), F32)
            if n_out == 2:
                return (param + rate * g / denom).astype(F32), new_b
            effective = F32(rate / denom)
            update = (effective * g).astype(F32)
            outs = ((param + update).astype(F32), new_b, np.full(seq_b.shape, effective, F32),
                    update.reshape(grad.shape))
        return outs[:n_out]
    return run


@register_kernel("SparseWngrad")
def sparse_wngrad(ctx):
    epsilon = F32(ctx.float("epsilon"))

    def run(param, seq_b, indices, grad, lr):
        rows, block, flat = sparse_slices(ctx, 0, 2, 3, param, indices, grad)
        b = _seq_b(ctx, 1, seq_b)
        rate = F32(scalar(ctx, 4, lr, "lr must hold one value"))
        param = inplace.claim(param)
        if flat.size == 0:
            return param, seq_b.copy()
        g = np.ascontiguousarray(grad).reshape(flat.size, block)
        if block:
            table = as_rows(param, rows, block)
            saved = _save_rows(table, flat)
            R.sparse_wngrad(table, flat, g, rate, F32(b + epsilon))
            inplace.remember_rows(table, flat, saved)
        with np.errstate(all="ignore"):
            new_b = F32(F32(np.dot(g.reshape(-1), g.reshape(-1))) / b + b)
        return param, np.full(seq_b.shape, new_b, F32)
    return run


# ----------------------------------------------------------------- DecayAdagrad

register_schema(OpSchema(
    "DecayAdagrad", num_inputs=6, num_outputs=3, allow_inplace={(0, 0), (1, 1), (2, 2)},
    inputs=("param", "moment_1", "moment_2", "grad", "lr", "iter"),
    outputs=("output_param", "output_moment_1", "output_moment_2"),
    args=(Arg("beta1", "float", 0.9), Arg("beta2", "float", 0.999, doc="accepted, unused (as in Caffe2)"),
          Arg("epsilon", "float", 1e-5), Arg("weight_decay", "float", 0.0),
          Arg("bias_correction_first", "bool", True)),
    inference=like_inputs(0, 1, 2),
    doc="t = iter + 1; m1' = beta1 * m1 + (1 - beta1) * g; m2' = m2 + g^2; c = 1 - beta1^t when "
        "bias_correction_first else 1; param' = param + lr * (m1' / c / (sqrt(m2') + epsilon) + "
        "weight_decay * param)."))


@register_kernel("DecayAdagrad")
def decay_adagrad(ctx):
    beta1, epsilon = F32(ctx.float("beta1")), F32(ctx.float("epsilon"))
    wd, correct = F32(ctx.float("weight_decay")), ctx.bool("bias_correction_first")

    def run(param, m1, m2, grad, lr, it):
        _dense_inputs(ctx, param, ((1, m1), (2, m2), (3, grad)))
        rate = F32(scalar(ctx, 4, lr, "lr must hold one value"))
        t = iteration(ctx, 5, it) + 1
        c = F32(1 - np.power(np.float64(beta1), t)) if correct else F32(1)
        g = grad.reshape(param.shape)
        with np.errstate(all="ignore"):
            new_m1 = (beta1 * m1.reshape(param.shape) + (F32(1) - beta1) * g).astype(F32)
            new_m2 = (m2.reshape(param.shape) + g * g).astype(F32)
            step = new_m1 / c / (np.sqrt(new_m2) + epsilon) + wd * param
            new_param = (param + rate * step).astype(F32)
        return new_param, new_m1.reshape(m1.shape), new_m2.reshape(m2.shape)
    return run
