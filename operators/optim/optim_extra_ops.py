"""Optimizers beyond the training work's SGD / Adagrad / Adam: Ftrl, SparseFtrl, RmsProp,
Lars, YellowFin and SparseNormalize (caffe2/sgd, caffe2/operators/sparse_normalize_op).

SparseFtrl and SparseNormalize must run in place, as in Caffe2, and they do: the table
is updated where it lies when only the workspace holds it (caffe2py.inplace.claim;
otherwise a private copy is updated), the touched rows' old values are kept so that a
net failing later gets its old table back (inplace.remember_rows), and every index is
checked before anything is written."""
import numpy as np

from caffe2py import inplace
from caffe2py.gradients import should_not_do_gradient
from caffe2py.kernels.cpu.optim import dense_updates as D
from caffe2py.kernels.cpu.optim import ftrl as F
from caffe2py.kernels.cpu.optim import sparse_normalize as SN
from caffe2py.kernels.cpu.optim import yellowfin as Y
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

F32 = np.float32


def _float(ctx, index, a, what):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ctx.input_error(index, "%s must be a float32 tensor, got %s"
                              % (what, getattr(a, "dtype", type(a).__name__)))
    return a


def _scalar(ctx, index, a, what):
    _float(ctx, index, a, what)
    if a.size != 1:
        raise ctx.input_error(index, "%s should be real-valued (one value), got shape %s" % (what, list(a.shape)))
    return F32(a.reshape(-1)[0])


def _like(*positions):
    return lambda ctx, ins: [ins[p] if p < len(ins) else UNKNOWN for p in positions][:ctx.n_outputs]


def _rows(ctx, index, table, what):
    if table.ndim == 0:
        raise ctx.input_error(index, "%s must have at least one dimension" % what)
    rows = table.shape[0]
    return rows, (table.size // rows if rows else 0)


def _indices(ctx, index, indices, rows, table_name):
    if not isinstance(indices, np.ndarray) or indices.dtype not in (np.int32, np.int64):
        raise ctx.input_error(index, "indices must be int32 or int64, got %s"
                              % getattr(indices, "dtype", type(indices).__name__))
    flat = indices.reshape(-1).astype(np.int64)
    bad = np.flatnonzero((flat < 0) | (flat >= rows))
    if bad.size:
        raise ctx.input_error(index, "index %d at position %d is out of range [0, %d) for '%s'; nothing was "
                                     "updated" % (flat[bad[0]], bad[0], rows, table_name))
    return flat


# ----------------------------------------------------------------- Ftrl / SparseFtrl

_FTRL_ARGS = (Arg("alpha", "float", 0.005, doc="learning rate (the optional alpha input overrides it)"),
              Arg("beta", "float", 1.0), Arg("lambda1", "float", 0.001, doc="L1 strength"),
              Arg("lambda2", "float", 0.001, doc="L2 strength"))

register_schema(OpSchema(
    "Ftrl", num_inputs=(3, 4), num_outputs=2, allow_inplace={(0, 0), (1, 1)}, args=_FTRL_ARGS,
    inputs=("var", "n_z", "grad", "alpha"), outputs=("output_var", "output_n_z"), inference=_like(0, 1),
    doc="FTRL-proximal step: n_z holds (n, z) per weight, interleaved (twice var's size); n' = n + g^2, "
        "z' = z + g - (sqrt(n') - sqrt(n)) / alpha * w, w' = (lambda1 sign(z') - z') / ((beta + sqrt(n')) / "
        "alpha + lambda2) where |z'| > lambda1, else 0."))

register_schema(OpSchema(
    "SparseFtrl", num_inputs=(4, 5), num_outputs=2, enforce_inplace={(0, 0), (1, 1)}, args=_FTRL_ARGS,
    inputs=("var", "n_z", "indices", "grad", "alpha"), outputs=("var", "n_z"), inference=_like(0, 1),
    doc="Ftrl on the rows of var named by indices (grad holds one row per index), in place; indices apply "
        "in order. An out-of-range index raises before anything is written."))


def _ftrl_params(ctx):
    alpha = ctx.float("alpha")
    if alpha == 0:
        raise ctx.error("alpha must be non-zero")
    return F32(1.0 / alpha), F32(ctx.float("beta")), F32(ctx.float("lambda1")), F32(ctx.float("lambda2"))


def _alpha_inv(ctx, index, rest, default):
    if not rest:
        return default
    a = _scalar(ctx, index, rest[0], "alpha")
    if a == 0:
        raise ctx.input_error(index, "alpha must be non-zero")
    return F32(1.0) / a


def _check_dense_ftrl(ctx, var, nz, grad):
    """Ftrl / GFtrl inputs: float var, n_z and grad; grad as many values as var, n_z twice."""
    for k, (a, what) in enumerate(((var, "var"), (nz, "n_z"), (grad, "grad"))):
        _float(ctx, k, a, what)
    if grad.size != var.size:
        raise ctx.input_error(2, "grad has %d values, var %d" % (grad.size, var.size))
    if nz.size != 2 * var.size:
        raise ctx.input_error(1, "n_z must hold 2 values per weight (%d), got %d" % (2 * var.size, nz.size))


@register_kernel("Ftrl")
def ftrl(ctx):
    alpha_inv, beta, l1, l2 = _ftrl_params(ctx)

    def run(var, nz, grad, *rest):
        _check_dense_ftrl(ctx, var, nz, grad)
        inv = _alpha_inv(ctx, 3, rest, alpha_inv)
        w, z = F.ftrl_dense(var.reshape(-1), nz.reshape(-1), grad.reshape(-1), inv, beta, l1, l2)
        return w.reshape(var.shape), z.reshape(nz.shape)
    return run


register_schema(OpSchema(
    "GFtrl", num_inputs=(3, 4), num_outputs=2, allow_inplace={(0, 0), (1, 1)}, args=_FTRL_ARGS,
    inputs=("var", "n_z", "grad", "alpha"), outputs=("output_var", "output_n_z"), inference=_like(0, 1),
    doc="Group FTRL: Ftrl's n / z updates, with the L1 step applied per group: var viewed as "
        "[grad.shape[0] outputs, the rest inputs], each input's column is a group, zeroed unless the L2 "
        "norm of its new z exceeds lambda1 * sqrt(outputs); otherwise w' = z' (lambda1 sqrt(outputs) / "
        "|z'| - 1) / ((beta + sqrt(n')) / alpha + lambda2)."))


@register_kernel("GFtrl")
def gftrl(ctx):
    alpha_inv, beta, l1, l2 = _ftrl_params(ctx)

    def run(var, nz, grad, *rest):
        _check_dense_ftrl(ctx, var, nz, grad)
        if grad.ndim == 0:
            raise ctx.input_error(2, "needs at least 1 dimension (its first is the number of outputs)")
        inv = _alpha_inv(ctx, 3, rest, alpha_inv)
        if grad.size == 0:
            return var.copy(), nz.copy()
        outputs = grad.shape[0]
        w, z = F.gftrl_dense(var.reshape(outputs, -1), nz.reshape(outputs, -1), grad.reshape(outputs, -1),
                             inv, beta, l1, l2)
        return w.reshape(var.shape), z.reshape(nz.shape)
    return run


def _save_rows(table2, flat):
    """The rows an update is about to change (for undo), or None outside a net run."""
    saved = inplace.row_buffer(table2, flat)
    if saved is not None:
        np.take(table2, flat, axis=0, out=saved)
    return saved


@register_kernel("SparseFtrl")
def sparse_ftrl(ctx):
    alpha_inv, beta, l1, l2 = _ftrl_params(ctx)

    def run(var, nz, indices, grad, *rest):
        _float(ctx, 0, var, "var")
        _float(ctx, 1, nz, "n_z")
        _float(ctx, 3, grad, "grad")
        rows, block = _rows(ctx, 0, var, "var")
        if nz.size != 2 * var.size:
            raise ctx.input_error(1, "n_z must hold 2 values per weight (%d), got %d" % (2 * var.size, nz.size))
        flat = _indices(ctx, 2, indices, rows, ctx.inputs[0])
        if grad.size != flat.size * block:
            raise ctx.input_error(3, "grad must hold one %d-value row per index (%d values), got %d"
                                  % (block, flat.size * block, grad.size))
        inv = _alpha_inv(ctx, 4, rest, alpha_inv)
        var = inplace.claim(var)
        nz = inplace.claim(nz)
        if flat.size and block:
            w2, z2 = var.reshape(rows, block), nz.reshape(rows, 2 * block)
            saved = _save_rows(w2, flat), _save_rows(z2, flat)
            F.sparse_ftrl(w2, z2, flat, np.ascontiguousarray(grad, F32).reshape(flat.size, block), inv, beta, l1, l2)
            inplace.remember_rows(w2, flat, saved[0])
            inplace.remember_rows(z2, flat, saved[1])
        return var, nz
    return run


# ----------------------------------------------------------------- RmsProp

register_schema(OpSchema(
    "RmsProp", num_inputs=4, num_outputs=3, allow_inplace={(0, 0), (1, 1), (2, 2)},
    args=(Arg("decay", "float", 0.9), Arg("momentum", "float", 0.0), Arg("epsilon", "float", 1e-5)),
    inputs=("grad", "mean_squares", "mom", "lr"), outputs=("grad_o", "mean_squares_o", "mom_o"),
    inference=_like(0, 1, 2),
    doc="RMSProp: mean_squares_o = mean_squares + (1 - decay) * (grad^2 - mean_squares); mom_o = momentum * "
        "mom + lr * grad / sqrt(epsilon + mean_squares_o); grad_o = mom_o (the step to add)."))


@register_kernel("RmsProp")
def rmsprop(ctx):
    decay, momentum, epsilon = ctx.float("decay"), ctx.float("momentum"), ctx.float("epsilon")

    def run(g, ms, mom, lr):
        for k, (a, what) in enumerate(((g, "grad"), (ms, "mean_squares"), (mom, "mom"))):
            _float(ctx, k, a, what)
            if a.size != g.size:
                raise ctx.input_error(k, "%s has %d values, grad %d" % (what, a.size, g.size))
        rate = _scalar(ctx, 3, lr, "lr")
        grad_o, ms_o, mom_o = D.rmsprop(g, ms.reshape(g.shape), mom.reshape(g.shape), rate, decay, momentum,
                                        epsilon)
        return grad_o, ms_o.reshape(ms.shape), mom_o.reshape(mom.shape)
    return run


# ----------------------------------------------------------------- Lars

register_schema(OpSchema(
    "Lars", num_inputs={2, 3, 5}, num_outputs=1, args=(Arg("offset", "float", 0.5), Arg("lr_min", "float", 0.02)),
    inputs=("X", "dX", "wd", "trust", "lr_max"), outputs=("lr_rescaled",),
    inference=lambda ctx, ins: [TensorType((1,), ins[0].dtype)],
    doc="Layer-wise adaptive rate scaling: [trust / (|dX| / |X| + wd + offset)] clipped to [lr_min, lr_max] "
        "(l2 norms; 1 clipped when |X| is 0). wd, trust and lr_max hold one value each. Caffe2's older "
        "forms are told by arity: (X, dX) gives [1 / (|dX| / |X| + offset)] and (X, dX, wd) "
        "[1 / (|dX| / |X| + wd + offset)] (1 when |X| is 0), neither trust nor clipping."))


@register_kernel("Lars")
def lars(ctx):
    offset, lr_min = ctx.float("offset"), ctx.float("lr_min")
    if offset < 0 or lr_min < 0:
        raise ctx.error("offset and lr_min must be >= 0, got %g and %g" % (offset, lr_min))

    def run(x, dx, *rate_inputs):
        _float(ctx, 0, x, "X")
        _float(ctx, 1, dx, "dX")
        if dx.size != x.size:
            raise ctx.input_error(1, "Gradient size doesn't match parameter size.")
        names = ("wd", "trust", "lr_max")
        rate = [_scalar(ctx, 2 + k, v, names[k]) for k, v in enumerate(rate_inputs)]
        if len(rate) < 3:               # Caffe2's older Lars: no trust, no clipping
            return np.array([D.lars_rescale(x, dx, rate[0] if rate else 0.0, offset)], np.float32)
        return D.lars(x, dx, *rate, offset, lr_min)
    return run


# ----------------------------------------------------------------- YellowFin

register_schema(OpSchema(
    "YellowFin", num_inputs=10, num_outputs=8, allow_inplace={(k, k) for k in range(8)},
    args=(Arg("beta", "float", 0.999, doc="moving-average coefficient"),
          Arg("curv_win_width", "int", 20, doc="iterations of squared gradient norms remembered"),
          Arg("epsilon", "float", 1e-6), Arg("nesterov", "bool", False), Arg("zero_debias", "bool", True)),
    inputs=("param", "moment", "lr", "mu", "curv_win", "g_avg", "g2_avg", "scalars_memory", "grad", "iter"),
    outputs=("output_param", "output_moment", "output_lr", "output_mu", "output_curv_win", "output_g_avg",
             "output_g2_avg", "output_scalars_memory"),
    inference=_like(0, 1, 2, 3, 4, 5, 6, 7),
    doc="YellowFin (arXiv 1706.03471): a momentum SGD step with the moving-average lr and mu, then the "
        "moving averages that tune lr and mu (from the second iteration). Run in place as Caffe2's optimizer "
        "does; lr, mu [1], curv_win [curv_win_width], scalars_memory [5], iter int64 >= 1."))


@register_kernel("YellowFin")
def yellowfin(ctx):
    beta, width, epsilon = ctx.float("beta"), ctx.int("curv_win_width"), ctx.float("epsilon")
    nesterov, zero_debias = ctx.bool("nesterov"), ctx.bool("zero_debias")
    if width <= 0:
        raise ctx.error("curv_win_width must be positive, got %d" % width)

    def run(param, moment, lr, mu, curv_win, g_avg, g2_avg, memory, grad, it):
        names = ("param", "moment", "lr", "mu", "curv_win", "g_avg", "g2_avg", "scalars_memory", "grad")
        values = (param, moment, lr, mu, curv_win, g_avg, g2_avg, memory, grad)
        for k, (a, what) in enumerate(zip(values, names)):
            _float(ctx, k, a, what)
        for k in (1, 5, 6, 8):
            if values[k].shape != param.shape:
                raise ctx.input_error(k, "%s must be shaped like param %s, got %s"
                                      % (names[k], list(param.shape), list(values[k].shape)))
        for k, size in ((2, 1), (3, 1), (4, width), (7, 5)):
            if values[k].size != size:
                raise ctx.input_error(k, "%s must hold %d value(s), got %d" % (names[k], size, values[k].size))
        if not isinstance(it, np.ndarray) or it.size != 1 or it.dtype.kind not in "iu":
            raise ctx.input_error(9, "iter must be one int64 value")
        step = int(it.reshape(-1)[0])
        if step < 1:
            raise ctx.input_error(9, "iter must be >= 1 (the curvature window is indexed by iter - 1), got %d" % step)
        return Y.yellowfin(param, moment, lr, mu, curv_win, g_avg, g2_avg, memory, grad, step, beta, width,
                           epsilon, nesterov, zero_debias)
    return run


# ----------------------------------------------------------------- SparseNormalize

register_schema(OpSchema(
    "SparseNormalize", num_inputs=(2, 3), num_outputs=1, enforce_inplace={(0, 0)},
    args=(Arg("use_max_norm", "bool", True, doc="only shrink rows longer than norm (else scale every row to it)"),
          Arg("norm", "float", 1.0, doc="target L2 norm")),
    inputs=("param", "indices", "grad"), outputs=("output_param",), inference=_like(0),
    doc="Rescales the rows of param named by indices to L2 norm `norm` (with use_max_norm, only rows whose "
        "norm + 1e-12 is at least `norm`), in index order, in place. grad (optional) is only checked to hold "
        "one row per index."))


@register_kernel("SparseNormalize")
def sparse_normalize(ctx):
    norm, use_max = ctx.float("norm"), ctx.bool("use_max_norm")
    if not norm > 0:
        raise ctx.error("norm must be positive, got %g" % norm)

    def run(param, indices, *rest):
        _float(ctx, 0, param, "param")
        rows, block = _rows(ctx, 0, param, "param")
        flat = _indices(ctx, 1, indices, rows, ctx.inputs[0])
        if rest and rest[0].size != flat.size * block:
            raise ctx.input_error(2, "grad must hold one %d-value row per index, got %d values"
                                  % (block, rest[0].size))
        param = inplace.claim(param)
        if flat.size and block:
            table = param.reshape(rows, block)
            saved = _save_rows(table, flat)
            SN.sparse_normalize(table, flat, norm, use_max)
            inplace.remember_rows(table, flat, saved)
        return param
    return run


# ----------------------------------------------------------------- EnsureClipped

register_schema(OpSchema(
    "EnsureClipped", num_inputs={1, 3}, num_outputs=1, allow_inplace={(0, 0)},
    args=(Arg("min", "float", None, doc="lower bound (default: none)"),
          Arg("max", "float", None, doc="upper bound (default: none)")),
    inputs=("param", "indices", "grad"), outputs=("output_param",), inference=_like(0),
    doc="Clips param to [min, max] after an optimizer step (the regularizers' projection). With indices and "
        "grad (a sparse update) only the rows named by indices are clipped, in place; grad is only checked "
        "to hold one row per index."))


@register_kernel("EnsureClipped")
def ensure_clipped(ctx):
    low = ctx.float("min") if ctx.has("min") else None
    high = ctx.float("max") if ctx.has("max") else None
    sparse = ctx.n_inputs == 3
    if sparse and ctx.outputs[0] != ctx.inputs[0]:
        raise ctx.error("with indices and grad the param must be updated in place (output 0 = input 0)")
    if low is not None and high is not None and low > high:
        raise ctx.error("min %g is above max %g" % (low, high))

    def run(param, *sparse_inputs):
        _float(ctx, 0, param, "param")
        if not sparse:
            return np.clip(param, low, high) if (low is not None or high is not None) else param.copy()
        indices, grad = sparse_inputs
        rows, block = _rows(ctx, 0, param, "param")
        flat = _indices(ctx, 1, indices, rows, ctx.inputs[0])
        if grad.size != flat.size * block:
            raise ctx.input_error(2, "grad must hold one %d-value row per index, got %d values" % (block, grad.size))
        param = inplace.claim(param)
        if flat.size and block and (low is not None or high is not None):
            table = param.reshape(rows, block)
            touched = np.unique(flat)
            saved = _save_rows(table, touched)
            table[touched] = np.clip(table[touched], low, high)
            inplace.remember_rows(table, touched, saved)
        return param
    return run


should_not_do_gradient("Ftrl", "SparseFtrl", "GFtrl", "RmsProp", "Lars", "YellowFin", "SparseNormalize", "EnsureClipped")
