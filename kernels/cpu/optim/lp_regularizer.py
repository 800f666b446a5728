"""SparseLpRegularizer's row update, in place: for each index in order, L2 shrinks the
row (w *= 1 - lambda), L1 moves each value lambda towards zero and zeroes the values
within lambda of it. A duplicated index is regularised twice, as Caffe2's loop does.
Callers check every index first (no bounds checks): w float32 C-contiguous
[rows, block], indices int32/int64 1-D in [0, rows)."""
import numpy as np

from ..runtime.jit import compiled

F32 = np.float32


def lp_rows(w, p_is_l1, reg_lambda):
    """One regularisation step of the rows w (any shape), as a new array."""
    if not p_is_l1:
        return (w * (F32(1) - reg_lambda)).astype(F32)
    return np.where(np.abs(w) <= reg_lambda, F32(0), w - reg_lambda * np.sign(w)).astype(F32)


@compiled
def _sparse_lp(w, indices, p_is_l1, reg_lambda):
    keep = np.float32(1.0) - reg_lambda
    block = w.shape[1]
    for i in range(indices.shape[0]):
        wr = w[indices[i]]
        for j in range(block):
            v = wr[j]
            if not p_is_l1:
                wr[j] = v * keep
            elif abs(v) <= reg_lambda:
                wr[j] = np.float32(0.0)
            elif v > 0:
                wr[j] = v - reg_lambda
            else:
                wr[j] = v + reg_lambda


@_sparse_lp.numpy_twin
def _sparse_lp_numpy(w, indices, p_is_l1, reg_lambda):
    for row in indices:
        w[row] = lp_rows(w[row], p_is_l1, reg_lambda)


def sparse_lp(w, indices, p_is_l1, reg_lambda):
    _sparse_lp(w, indices, bool(p_is_l1), F32(reg_lambda))
