"""Row-sparse optimizer updates, in place: Caffe2's SparseAdagrad, RowWiseSparseAdagrad,
SparseAdam, RowWiseSparseAdam, SparseMomentumSGDUpdate and ScatterWeightedSum.

Each update walks INDICES in order, as Caffe2's CPU kernels do: a row named twice is
updated twice, the second time from the first update's result (moments included).
The walk is split over the team by row owner ((row // chunk) % blocks): every block
reads all indices in order and updates only its own rows, so duplicates keep their
order and no two threads write one row (or one cache line). Arithmetic is float32 in Caffe2's order of operations.

Undo: when `save` is set, each update first copies the row it is about to change into
the saved buffers (saved[i] = old table[indices[i]], one buffer per table, shaped like
the gradient rows; [len(indices)] for a rowwise moment): the row is in cache then, so
this costs a sequential write instead of a second gather (measured: a separate gather
of the touched rows before the update doubled a 1M-row SparseAdagrad step on the
2-CPU VM). Restoring the first occurrence of every row gives the table back.

Callers validate everything first (the compiled loops have no bounds checks):
    table, moments   float32 C-contiguous 2-D [rows, block] (rowwise moments: [rows])
    indices          int32/int64 1-D, every value in [0, rows)
    grad (slices)    float32 C-contiguous 2-D [len(indices), block]
and pass hyper-parameters as np.float32 so the loops stay in float32.

The kernels divide as NumPy (and Caffe2's C++) does, x / 0 = inf or nan
(error_model="numpy", like their NumPy twins' errstate): numba's default checks every
float division for zero, which keeps the per-element loops scalar (SparseAdagrad on
20,000 rows of 64, 1 thread: 9.4-9.8 -> 4.2-5.4 ms, benchmarks/RESULTS.md).
"""
import numpy as np

from ..runtime.jit import compiled, prange, serial_variant, team_blocks


_NO_ROWS = np.empty((0, 0), np.float32)      # saved-row buffers when not saving
_NO_VALUES = np.empty(0, np.float32)


def row_blocks(n_indices, block):
    """(chunk, blocks): the team splits an update of n_indices rows of `block` values
    into `blocks` owners; runs of `chunk` consecutive rows (>= 64 bytes) share an
    owner, so two threads never write one cache line."""
    return max(1, 16 // max(block, 1)), team_blocks(n_indices, 8 * block)


def _launch(kernel, blocks):
    """The kernel for `blocks` owners: its serial copy for one (no parallel region)."""
    return kernel if blocks > 1 else _SERIAL[kernel]


def check_indices(indices, rows):
    """None when every index is in [0, rows), else (position, value) of the first bad one."""
    if indices.size == 0:
        return None
    lo, hi = indices.min(), indices.max()
    if lo >= 0 and hi < rows:
        return None
    bad = np.flatnonzero((indices < 0) | (indices >= rows))[0]
    return int(bad), int(indices[bad])


def occurrence_rounds(indices):
    """The positions of `indices` in rounds of distinct rows: round k holds, in index
    order, every position that is its row's (k+1)-th occurrence. Updating round after
    round is Caffe2's in-order walk (a repeated row sees its earlier updates) with each
    round one vectorised NumPy step; most batches are a single round."""
    n = indices.shape[0]
    if n == 0:
        return []
    order = np.argsort(indices, kind="stable")
    ordered = indices[order]
    starts_run = np.empty(n, bool)
    starts_run[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts_run[1:])
    if starts_run.all():
        return [np.arange(n)]
    position = np.arange(n)
    run_start = np.maximum.accumulate(np.where(starts_run, position, 0))
    rank = np.empty(n, np.intp)
    rank[order] = position - run_start
    by_rank = np.argsort(rank, kind="stable")
    return np.split(by_rank, np.cumsum(np.bincount(rank))[:-1])


# ----------------------------------------------------------------- Adagrad

@compiled(parallel=True, error_model="numpy")
def _sparse_adagrad(param, moment, indices, grad, lr, epsilon, weight_decay, saved_w, saved_h, save,
                    chunk, blocks):
    n = indices.shape[0]
    d = param.shape[1]
    for t in prange(blocks):
        for i in range(n):
            row = indices[i]
            if (row // chunk) % blocks != t:
                continue
            w = param[row]
            h = moment[row]
            g = grad[i]
            if save:
                sw = saved_w[i]
                sh = saved_h[i]
                for j in range(d):
                    sw[j] = w[j]
                    sh[j] = h[j]
            for j in range(d):
                gj = g[j] + weight_decay * w[j]
                hj = h[j] + gj * gj
                h[j] = hj
                w[j] = w[j] + lr * gj / (np.sqrt(hj) + epsilon)


@_sparse_adagrad.numpy_twin
def _sparse_adagrad_numpy(param, moment, indices, grad, lr, epsilon, weight_decay, saved_w, saved_h, save,
                          chunk, blocks):
    with np.errstate(all="ignore"):
        for at in occurrence_rounds(indices):
            rows = indices[at]
            w, h = param[rows], moment[rows]
            if save:
                saved_w[at], saved_h[at] = w, h
            g = grad[at] + weight_decay * w
            h = h + g * g
            moment[rows] = h
            param[rows] = w + lr * g / (np.sqrt(h) + epsilon)


def sparse_adagrad(param, moment, indices, grad, lr, epsilon, weight_decay, saved=None):
    """h[r] += g'^2; w[r] += lr * g' / (sqrt(h[r]) + epsilon), g' = g + weight_decay * w[r].
    saved: None or (saved_w, saved_h) to receive the old rows."""
    chunk, blocks = row_blocks(indices.shape[0], param.shape[1])
    sw, sh = saved if saved is not None else (_NO_ROWS, _NO_ROWS)
    _launch(_sparse_adagrad, blocks)(param, moment, indices, grad, lr, epsilon, weight_decay, sw, sh,
                                     saved is not None, chunk, blocks)


@compiled(parallel=True, error_model="numpy")
def _rowwise_sparse_adagrad(param, moment, indices, grad, lr, epsilon, weight_decay, saved_w, saved_h, save,
                            chunk, blocks):
    n = indices.shape[0]
    d = param.shape[1]
    for t in prange(blocks):
        for i in range(n):
            row = indices[i]
            if (row // chunk) % blocks != t:
                continue
            w = param[row]
            g = grad[i]
            if save:
                sw = saved_w[i]
                for j in range(d):
                    sw[j] = w[j]
                saved_h[i] = moment[row]
            squares = np.float32(0.0)
            for j in range(d):
                gj = g[j] + weight_decay * w[j]
                squares += gj * gj
            h = moment[row] + squares / np.float32(d)
            moment[row] = h
            step = lr / (np.sqrt(h) + epsilon)
            for j in range(d):
                gj = g[j] + weight_decay * w[j]
                w[j] = w[j] + gj * step


@_rowwise_sparse_adagrad.numpy_twin
def _rowwise_sparse_adagrad_numpy(param, moment, indices, grad, lr, epsilon, weight_decay, saved_w, saved_h, save,
                                  chunk, blocks):
    d = np.float32(param.shape[1])
    with np.errstate(all="ignore"):
        for at in occurrence_rounds(indices):
            rows = indices[at]
            w = param[rows]
            if save:
                saved_w[at], saved_h[at] = w, moment[rows]
            g = grad[at] + weight_decay * w
            h = moment[rows] + (g * g).sum(axis=1, dtype=np.float32) / d
            moment[rows] = h
            param[rows] = w + g * (lr / (np.sqrt(h) + epsilon))[:, None]


def rowwise_sparse_adagrad(param, moment, indices, grad, lr, epsilon, weight_decay, saved=None):
    """One moment per row: h[r] += mean(g'^2); w[r] += g' * lr / (sqrt(h[r]) + epsilon)."""
    chunk, blocks = row_blocks(indices.shape[0], param.shape[1])
    sw, sh = saved if saved is not None else (_NO_ROWS, _NO_VALUES)
    _launch(_rowwise_sparse_adagrad, blocks)(param, moment, indices, grad, lr, epsilon, weight_decay, sw, sh,
                                             saved is not None, chunk, blocks)


# ----------------------------------------------------------------- Adam

@compiled(parallel=True, error_model="numpy")
def _sparse_adam(param, m1, m2, indices, grad, lr, correction, beta1, beta2, epsilon,
                 grad_out, write_grad, saved_w, saved_a, saved_b, save, chunk, blocks):
    n = indices.shape[0]
    d = param.shape[1]
    one = np.float32(1.0)
    for t in prange(blocks):
        for i in range(n):
            row = indices[i]
            if (row // chunk) % blocks != t:
                continue
            w = param[row]
            a = m1[row]
            b = m2[row]
            g = grad[i]
            out = grad_out[i]
            if save:
                sw = saved_w[i]
                sa = saved_a[i]
                sb = saved_b[i]
                for j in range(d):
                    sw[j] = w[j]
                    sa[j] = a[j]
                    sb[j] = b[j]
            for j in range(d):
                gj = g[j]
                mj = a[j] * beta1 + gj * (one - beta1)
                vj = b[j] * beta2 + gj * gj * (one - beta2)
                a[j] = mj
                b[j] = vj
                if write_grad:
                    step = correction * mj / (np.sqrt(vj) + epsilon)
                    out[j] = step
                    w[j] = w[j] + lr * step
                else:
                    w[j] = w[j] + lr * correction * mj / (np.sqrt(vj) + epsilon)


@_sparse_adam.numpy_twin
def _sparse_adam_numpy(param, m1, m2, indices, grad, lr, correction, beta1, beta2, epsilon,
                       grad_out, write_grad, saved_w, saved_a, saved_b, save, chunk, blocks):
    one = np.float32(1.0)
    with np.errstate(all="ignore"):
        for at in occurrence_rounds(indices):
            rows = indices[at]
            w, a, b = param[rows], m1[rows], m2[rows]
            if save:
                saved_w[at], saved_a[at], saved_b[at] = w, a, b
            g = grad[at]
            m = a * beta1 + g * (one - beta1)
            v = b * beta2 + g * g * (one - beta2)
            m1[rows], m2[rows] = m, v
            if write_grad:
                step = correction * m / (np.sqrt(v) + epsilon)
                grad_out[at] = step
                param[rows] = w + lr * step
            else:
                param[rows] = w + lr * correction * m / (np.sqrt(v) + epsilon)


def sparse_adam(param, m1, m2, indices, grad, lr, correction, beta1, beta2, epsilon, grad_out=None,
                saved=None):
    """Dense Adam on the named rows; grad_out (like grad) receives the effective gradient
    correction * m / (sqrt(v) + epsilon) when given."""
    chunk, blocks = row_blocks(indices.shape[0], param.shape[1])
    out = grad_out if grad_out is not None else np.empty((indices.shape[0], 0), np.float32)
    sw, sa, sb = saved if saved is not None else (_NO_ROWS, _NO_ROWS, _NO_ROWS)
    _launch(_sparse_adam, blocks)(param, m1, m2, indices, grad, lr, correction, beta1, beta2, epsilon,
                                  out, grad_out is not None, sw, sa, sb, saved is not None, chunk, blocks)


@compiled(parallel=True, error_model="numpy")
def _rowwise_sparse_adam(param, m1, m2, indices, grad, lr, correction, beta1, beta2, epsilon,
                         grad_out, write_grad, saved_w, saved_a, saved_b, save, chunk, blocks):
    n = indices.shape[0]
    d = param.shape[1]
    one = np.float32(1.0)
    for t in prange(blocks):
        for i in range(n):
            row = indices[i]
            if (row // chunk) % blocks != t:
                continue
            w = param[row]
            a = m1[row]
            g = grad[i]
            out = grad_out[i]
            if save:
                sw = saved_w[i]
                sa = saved_a[i]
                for j in range(d):
                    sw[j] = w[j]
                    sa[j] = a[j]
                saved_b[i] = m2[row]
            squares = np.float32(0.0)
            for j in range(d):
                squares += g[j] * g[j]
            v = m2[row] * beta2 + (squares / np.float32(d)) * (one - beta2)
            m2[row] = v
            root = np.sqrt(v) + epsilon
            for j in range(d):
                mj = a[j] * beta1 + g[j] * (one - beta1)
                a[j] = mj
                if write_grad:
                    step = correction * mj / root
                    out[j] = step
                    w[j] = w[j] + lr * step
                else:
                    w[j] = w[j] + lr * correction * mj / root


@_rowwise_sparse_adam.numpy_twin
def _rowwise_sparse_adam_numpy(param, m1, m2, indices, grad, lr, correction, beta1, beta2, epsilon,
                               grad_out, write_grad, saved_w, saved_a, saved_b, save, chunk, blocks):
    one = np.float32(1.0)
    d = np.float32(param.shape[1])
    with np.errstate(all="ignore"):
        for at in occurrence_rounds(indices):
            rows = indices[at]
            w, a = param[rows], m1[rows]
            if save:
                saved_w[at], saved_a[at], saved_b[at] = w, a, m2[rows]
            g = grad[at]
            v = m2[rows] * beta2 + ((g * g).sum(axis=1, dtype=np.float32) / d) * (one - beta2)
            m2[rows] = v
            root = (np.sqrt(v) + epsilon)[:, None]
            m = a * beta1 + g * (one - beta1)
            m1[rows] = m
            if write_grad:
                step = correction * m / root
                grad_out[at] = step
                param[rows] = w + lr * step
            else:
                param[rows] = w + lr * correction * m / root


def rowwise_sparse_adam(param, m1, m2, indices, grad, lr, correction, beta1, beta2, epsilon,
                        grad_out=None, saved=None):
    """Adam with one second moment per row (the mean of the row's squared gradient)."""
    chunk, blocks = row_blocks(indices.shape[0], param.shape[1])
    out = grad_out if grad_out is not None else np.empty((indices.shape[0], 0), np.float32)
    sw, sa, sb = saved if saved is not None else (_NO_ROWS, _NO_ROWS, _NO_VALUES)
    _launch(_rowwise_sparse_adam, blocks)(param, m1, m2, indices, grad, lr, correction, beta1, beta2, epsilon,
                                          out, grad_out is not None, sw, sa, sb, saved is not None, chunk, blocks)


# ----------------------------------------------------------------- momentum SGD

@compiled(parallel=True)
def _sparse_momentum_sgd(param, moment, indices, grad, grad_out, lr, momentum, nesterov, saved_w, saved_m, save,
                         chunk, blocks):
    n = indices.shape[0]
    d = param.shape[1]
    one = np.float32(1.0)
    for t in prange(blocks):
        for i in range(n):
            row = indices[i]
            if (row // chunk) % blocks != t:
                continue
            w = param[row]
            m = moment[row]
            g = grad[i]
            out = grad_out[i]
            if save:
                sw = saved_w[i]
                sm = saved_m[i]
                for j in range(d):
                    sw[j] = w[j]
                    sm[j] = m[j]
            for j in range(d):
                if nesterov:
                    old = m[j]
                    new = momentum * old + lr * g[j]
                    m[j] = new
                    step = (one + momentum) * new - momentum * old
                else:
                    step = lr * g[j] + momentum * m[j]
                    m[j] = step
                out[j] = step
                w[j] = w[j] - step


@_sparse_momentum_sgd.numpy_twin
def _sparse_momentum_sgd_numpy(param, moment, indices, grad, grad_out, lr, momentum, nesterov, saved_w, saved_m,
                               save, chunk, blocks):
    one = np.float32(1.0)
    with np.errstate(all="ignore"):
        for at in occurrence_rounds(indices):
            rows = indices[at]
            w, m = param[rows], moment[rows]
            if save:
                saved_w[at], saved_m[at] = w, m
            g = grad[at]
            if nesterov:
                new = momentum * m + lr * g
                moment[rows] = new
                step = (one + momentum) * new - momentum * m
            else:
                step = lr * g + momentum * m
                moment[rows] = step
            grad_out[at] = step
            param[rows] = w - step


def sparse_momentum_sgd(param, moment, indices, grad, lr, momentum, nesterov, saved=None):
    """Caffe2's momentum step per named row (param -= step); returns the steps, like grad."""
    grad_out = np.empty_like(grad)
    chunk, blocks = row_blocks(indices.shape[0], param.shape[1])
    sw, sm = saved if saved is not None else (_NO_ROWS, _NO_ROWS)
    _launch(_sparse_momentum_sgd, blocks)(param, moment, indices, grad, grad_out, lr, momentum, bool(nesterov),
                                          sw, sm, saved is not None, chunk, blocks)
    return grad_out


# ----------------------------------------------------------------- ScatterWeightedSum

@compiled(parallel=True)
def _scale_rows(table, indices, weight, saved, save, chunk, blocks):
    n = indices.shape[0]
    d = table.shape[1]
    for t in prange(blocks):
        for i in range(n):
            row = indices[i]
            if (row // chunk) % blocks != t:
                continue
            r = table[row]
            if save:
                sr = saved[i]
                for j in range(d):
                    sr[j] = r[j]
            for j in range(d):
                r[j] = r[j] * weight


@_scale_rows.numpy_twin
def _scale_rows_numpy(table, indices, weight, saved, save, chunk, blocks):
    with np.errstate(all="ignore"):
        for at in occurrence_rounds(indices):
            rows = indices[at]
            r = table[rows]
            if save:
                saved[at] = r
            table[rows] = r * weight


@compiled(parallel=True)
def _axpy_rows(table, indices, slices, weight, saved, save, chunk, blocks):
    n = indices.shape[0]
    d = table.shape[1]
    for t in prange(blocks):
        for i in range(n):
            row = indices[i]
            if (row // chunk) % blocks != t:
                continue
            r = table[row]
            s = slices[i]
            if save:
                sr = saved[i]
                for j in range(d):
                    sr[j] = r[j]
            for j in range(d):
                r[j] = r[j] + weight * s[j]


@_axpy_rows.numpy_twin
def _axpy_rows_numpy(table, indices, slices, weight, saved, save, chunk, blocks):
    with np.errstate(all="ignore"):
        for at in occurrence_rounds(indices):
            rows = indices[at]
            r = table[rows]
            if save:
                saved[at] = r
            table[rows] = r + weight * slices[at]


def scatter_weighted_sum(table, indices, weight0, slices_and_weights, saved=None):
    """table[idx] = weight0 * table[idx] (once per occurrence, so a duplicated index is
    scaled twice, as in Caffe2), then table[idx] += w_k * X_k[i] for every pair.
    saved: None or a buffer for the old rows (filled by the first pass)."""
    chunk, blocks = row_blocks(indices.shape[0], table.shape[1])
    first = True
    if weight0 != 1.0:
        _launch(_scale_rows, blocks)(table, indices, weight0, saved if saved is not None else _NO_ROWS,
                                     saved is not None, chunk, blocks)
        first = False
    for slices, weight in slices_and_weights:
        save = first and saved is not None
        _launch(_axpy_rows, blocks)(table, indices, slices, weight, saved if save else _NO_ROWS, save, chunk, blocks)
        first = False


# one-block calls (small updates, a one-thread team) run these copies: no parallel region
_SERIAL = {}
for _kernel in (_sparse_adagrad, _rowwise_sparse_adagrad, _sparse_adam, _rowwise_sparse_adam,
                _sparse_momentum_sgd, _scale_rows, _axpy_rows):
    _name = _kernel.py_func.__name__ + "_serial"
    globals()[_name] = _SERIAL[_kernel] = serial_variant(_kernel, _name)
