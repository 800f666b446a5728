"""Row-sparse Adadelta, Storm and Wngrad updates, in place (Caffe2's SparseAdadelta,
SparseStorm, SparseWngrad). Each walks INDICES in order, as Caffe2's CPU loops do: a
row named twice is updated twice, the second time from the first update's result.
float32 arithmetic; hyper-parameters come in as np.float32.

Callers validate everything first (the compiled loops have no bounds checks):
tables float32 C-contiguous [rows, block], indices int32/int64 1-D in [0, rows),
grad float32 C-contiguous [len(indices), block].
"""
import numpy as np

from ..runtime.jit import compiled

F32 = np.float32


# ----------------------------------------------------------------- Adadelta

def adadelta_dense(w, h, d, g, lr, epsilon, decay):
    """(w', h', d'): h' = decay h + (1 - decay) g^2; u = sqrt(d + eps) / sqrt(h' + eps) g;
    w' = w + lr u; d' = decay d + (1 - decay) u^2."""
    one = F32(1) - decay
    with np.errstate(all="ignore"):
        new_h = decay * h + one * g * g
        u = np.sqrt(d + epsilon) / np.sqrt(new_h + epsilon) * g
        return (w + lr * u).astype(F32), new_h.astype(F32), (decay * d + one * u * u).astype(F32)


@compiled(error_model="numpy")
def _sparse_adadelta(w, h, d, indices, g, lr, epsilon, decay):
    one = np.float32(1.0) - decay
    block = w.shape[1]
    for i in range(indices.shape[0]):
        row = indices[i]
        wr = w[row]
        hr = h[row]
        dr = d[row]
        gr = g[i]
        for j in range(block):
            gj = gr[j]
            hj = decay * hr[j] + one * gj * gj
            u = np.sqrt(dr[j] + epsilon) / np.sqrt(hj + epsilon) * gj
            hr[j] = hj
            wr[j] = wr[j] + lr * u
            dr[j] = decay * dr[j] + one * u * u


@_sparse_adadelta.numpy_twin
def _sparse_adadelta_numpy(w, h, d, indices, g, lr, epsilon, decay):
    for i, row in enumerate(indices):
        w[row], h[row], d[row] = adadelta_dense(w[row], h[row], d[row], g[i], lr, epsilon, decay)


def sparse_adadelta(w, h, d, indices, g, lr, epsilon, decay):
    _sparse_adadelta(w, h, d, indices, g, F32(lr), F32(epsilon), F32(decay))


# ----------------------------------------------------------------- Storm

def storm_rate(grad_sq_sum, lr, momentum, beta):
    """(nlr, alpha): nlr = lr (beta + grad_sq_sum)^(-1/3), alpha = momentum nlr^2."""
    nlr = F32(lr * np.power(F32(beta) + F32(grad_sq_sum), F32(-1.0 / 3.0), dtype=F32))
    return nlr, F32(momentum * nlr * nlr)


def storm_dense(w, m, g, nlr, alpha):
    """(w', m'): m' = g + (1 - alpha) (m - g); w' = w + nlr m'."""
    with np.errstate(all="ignore"):
        new_m = (g + (F32(1) - alpha) * (m - g)).astype(F32)
        return (w + nlr * new_m).astype(F32), new_m


@compiled
def _sparse_storm(w, m, indices, g, nlr, alpha):
    keep = np.float32(1.0) - alpha
    block = w.shape[1]
    for i in range(indices.shape[0]):
        row = indices[i]
        wr = w[row]
        mr = m[row]
        gr = g[i]
        for j in range(block):
            mj = gr[j] + keep * (mr[j] - gr[j])
            mr[j] = mj
            wr[j] = wr[j] + nlr * mj


@_sparse_storm.numpy_twin
def _sparse_storm_numpy(w, m, indices, g, nlr, alpha):
    for i, row in enumerate(indices):
        w[row], m[row] = storm_dense(w[row], m[row], g[i], nlr, alpha)


def sparse_storm(w, m, indices, g, nlr, alpha):
    _sparse_storm(w, m, indices, g, F32(nlr), F32(alpha))


# ----------------------------------------------------------------- Wngrad

@compiled(error_model="numpy")
def _sparse_wngrad(w, indices, g, lr, denom):
    block = w.shape[1]
    for i in range(indices.shape[0]):
        wr = w[indices[i]]
        gr = g[i]
        for j in range(block):
            wr[j] = wr[j] + lr * gr[j] / denom


@_sparse_wngrad.numpy_twin
def _sparse_wngrad_numpy(w, indices, g, lr, denom):
    np.add.at(w, indices, lr * g / denom)


def sparse_wngrad(w, indices, g, lr, denom):
    """w[indices[i]] += lr * g[i] / denom, in index order (denom = seq_b + epsilon)."""
    _sparse_wngrad(w, indices, g, F32(lr), F32(denom))
