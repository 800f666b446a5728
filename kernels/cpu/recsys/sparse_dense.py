"""Sparse <-> dense conversions of Caffe2's feature pipelines: SparseToDense,
SparseToDenseMask, BatchSparseToDense, BatchDenseToSparse.

Whole-array NumPy (one scatter or gather each). Indices are checked first; errors
are LookupInputError(role, message) with Caffe2's texts.
"""
import numpy as np

from .sparse_lengths import LookupInputError


def _rows_of(lengths, n_values, role="lengths"):
    """Row of every value given per-row LENGTHS (non-negative, summing to n_values)."""
    lengths = np.asarray(lengths).reshape(-1).astype(np.int64, copy=False)
    if lengths.size and lengths.min() < 0:
        raise LookupInputError(role, "lengths must be non-negative")
    if int(lengths.sum()) != n_values:
        raise LookupInputError(role, "lengths sum to %d, but there are %d indices" % (int(lengths.sum()), n_values))
    return np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)


def _last_wins(keys):
    """Positions of the last occurrence of each distinct key (in key order)."""
    rev = keys[::-1]
    _, first_in_rev = np.unique(rev, return_index=True)
    return keys.size - 1 - first_in_rev


def sparse_to_dense(indices, values, first_dim):
    """out[indices[i]] += values[i] (duplicates add up); out has first_dim rows."""
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    if idx.size and (idx.min() < 0 or idx.max() >= first_dim):
        bad = int(idx[(idx < 0) | (idx >= first_dim)][0])
        raise LookupInputError("indices", "index %d is out of range [0, %d) of the output's first dimension"
                               % (bad, first_dim))
    out = np.zeros((first_dim,) + values.shape[1:], values.dtype)
    if values.dtype.kind in "fiuc":
        np.add.at(out, idx, values)
    else:
        keep = _last_wins(idx)
        out[idx[keep]] = values[keep]
    return out


def sparse_to_dense_mask(indices, values, default, mask, lengths=None):
    """Caffe2 SparseToDenseMask: (output [rows,] len(mask) + default.shape, presence
    [rows,] len(mask), number of negative ids skipped). The value of id mask[j] goes to
    column j (the last one wins); ids not in the mask are ignored."""
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    n_rows = 1 if lengths is None else np.asarray(lengths).size
    rows = np.zeros(idx.size, np.int64) if lengths is None else _rows_of(lengths, idx.size)
    cols_n = len(mask)
    out = np.empty((n_rows, cols_n) + default.shape, values.dtype)
    out[...] = default
    presence = np.zeros((n_rows, cols_n), np.bool_)
    skipped = int((idx < 0).sum())
    mask_arr = np.asarray(mask, np.int64)
    perm = np.argsort(mask_arr, kind="stable")
    sorted_mask = mask_arr[perm]
    pos = np.searchsorted(sorted_mask, idx)
    pos_c = np.minimum(pos, max(cols_n - 1, 0))
    hit = (idx >= 0) & (pos < cols_n) & (sorted_mask[pos_c] == idx) if cols_n else np.zeros(idx.size, bool)
    sel = np.flatnonzero(hit)
    if sel.size:
        cols = perm[pos_c[sel]]
        keys = rows[sel] * cols_n + cols
        last = _last_wins(keys)
        chosen = sel[last]
        out[rows[chosen], cols[last]] = values[chosen]
        presence[rows[chosen], cols[last]] = True
    if lengths is None:
        out, presence = out[0], presence[0]
    return out, presence, skipped


def batch_sparse_to_dense(lengths, indices, values, dense_dim, default_value):
    """Caffe2 BatchSparseToDense: [len(lengths), dense_dim] filled with default_value,
    row i gets values at its indices (the last one wins)."""
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    rows = _rows_of(lengths, idx.size)
    if idx.size and (idx.min() < 0 or idx.max() >= dense_dim):
        bad = int(idx[(idx < 0) | (idx >= dense_dim)][0])
        raise LookupInputError("indices", "An indice (%d) is larger then last dim of dense (%d)." % (bad, dense_dim))
    out = np.full((np.asarray(lengths).size, dense_dim), default_value, values.dtype)
    if idx.size:
        keys = rows * dense_dim + idx
        last = _last_wins(keys)
        out[rows[last], idx[last]] = values.reshape(-1)[last]
    return out


def batch_dense_to_sparse(lengths, indices, dense):
    """Caffe2 BatchDenseToSparse: dense[i, indices of row i], concatenated."""
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    rows = _rows_of(lengths, idx.size)
    if np.asarray(lengths).size != dense.shape[0]:
        raise LookupInputError("dense", "dense has %d rows, lengths has %d entries"
                               % (dense.shape[0], np.asarray(lengths).size))
    if idx.size and (idx.min() < 0 or idx.max() >= dense.shape[1]):
        bad = int(idx[(idx < 0) | (idx >= dense.shape[1])][0])
        raise LookupInputError("indices", "An indice (%d) is larger then last dim of dense (%d)."
                               % (bad, dense.shape[1]))
    return dense[rows, idx].reshape(np.asarray(indices).shape)
