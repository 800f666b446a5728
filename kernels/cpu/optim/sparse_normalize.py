"""SparseNormalize (Caffe2's sparse_normalize_op): scale the rows named by indices to
L2 norm `norm` (use_max_norm: only rows whose norm + 1e-12 is not below it), in index
order and in place, so a repeated row is measured again after its first scaling.
Callers check the indices first."""
import numpy as np

from ..runtime.jit import compiled

F32 = np.float32


@compiled(error_model="numpy")
def _sparse_normalize(table, indices, norm, use_max_norm):
    block = table.shape[1]
    for i in range(indices.shape[0]):
        row = table[indices[i]]
        s = np.float32(0.0)
        for j in range(block):
            s += row[j] * row[j]
        length = np.float32(np.sqrt(s)) + np.float32(1e-12)
        if use_max_norm and length < norm:
            continue
        scale = norm / length
        for j in range(block):
            row[j] = row[j] * scale


@_sparse_normalize.numpy_twin
def _sparse_normalize_numpy(table, indices, norm, use_max_norm):
    for idx in indices:
        row = table[idx]
        length = F32(np.sqrt(np.dot(row, row))) + F32(1e-12)
        if use_max_norm and length < norm:
            continue
        table[idx] = row * (norm / length)


def sparse_normalize(table, indices, norm, use_max_norm):
    """In place on table [rows, block] (callers pass their own copy)."""
    _sparse_normalize(table, indices, F32(norm), bool(use_max_norm))
