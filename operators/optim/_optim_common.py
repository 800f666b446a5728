"""Checks and shapes shared by the optimizer ops (sgd, adagrad, adam modules).

Every check runs before any write: a bad input raises a Caffe2Error naming the op and
the blob and leaves every input as it was.
"""
import numpy as np

from caffe2py.kernels.cpu.optim import sparse as S
from caffe2py.registry import UNKNOWN

_INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
F32 = np.float32


def scalar(ctx, index, value, what="must hold one value"):
    """The one value of a [1] / [] blob (lr, weights, iteration) as a Python number."""
    if not isinstance(value, np.ndarray) or value.size != 1:
        raise ctx.input_error(index, "%s, got shape %s" % (what, list(np.shape(value))))
    if value.dtype.kind not in "biuf":
        raise ctx.input_error(index, "%s as a number (float or int), got dtype %s" % (what, value.dtype))
    return value.reshape(-1)[0].item()


def iteration(ctx, index, value):
    if not isinstance(value, np.ndarray) or value.size != 1 or value.dtype.kind not in "iu":
        raise ctx.input_error(index, "the iteration must be one int64 value, got %s %s"
                              % (getattr(value, "dtype", type(value).__name__), list(np.shape(value))))
    return int(value.reshape(-1)[0])


def float32(ctx, index, value):
    if not isinstance(value, np.ndarray) or value.dtype != np.float32:
        raise ctx.input_error(index, "must be a float32 tensor, got %s"
                              % getattr(value, "dtype", type(value).__name__))


def same_size(ctx, index, value, size, what):
    if value.size != size:
        raise ctx.input_error(index, "has %d elements but %s has %d" % (value.size, what, size))


def table_rows(ctx, index, table):
    """(rows, block) of a table updated by rows: rows = shape[0], block = the rest."""
    if table.ndim == 0:
        raise ctx.input_error(index, "must have at least one dimension")
    rows = table.shape[0]
    block = table.size // rows if rows else int(np.prod(table.shape[1:], dtype=np.int64))
    return rows, block


def sparse_slices(ctx, table_index, indices_index, grad_index, table, indices, grad):
    """Validate a (table, INDICES, GRAD) triple as Caffe2's sparse optimizers read it:
    INDICES int32/int64 of any shape, every value in [0, rows); GRAD float32 with
    INDICES.size rows of the table's block (GRAD.shape[INDICES.ndim:] spans one table
    row). Returns (rows, block, flat indices)."""
    float32(ctx, table_index, table)
    float32(ctx, grad_index, grad)
    if not isinstance(indices, np.ndarray) or indices.dtype not in _INDEX_TYPES:
        raise ctx.input_error(indices_index, "INDICES must be int32 or int64, got %s"
                              % getattr(indices, "dtype", type(indices).__name__))
    rows, block = table_rows(ctx, table_index, table)
    n = indices.size
    tail = int(np.prod(grad.shape[indices.ndim:], dtype=np.int64)) if grad.ndim >= indices.ndim else -1
    if tail != block or grad.size != n * block:
        raise ctx.input_error(grad_index, "GRAD must hold one %d-value row of '%s' per index "
                              "(shape INDICES.shape + %s = %s), got shape %s"
                              % (block, ctx.inputs[table_index], list(table.shape[1:]),
                                 list(indices.shape) + list(table.shape[1:]), list(grad.shape)))
    flat = indices.reshape(-1)
    bad = S.check_indices(flat, rows)
    if bad is not None:
        raise ctx.input_error(indices_index, "index %d at position %d is out of range [0, %d) for "
                              "'%s'; nothing was updated" % (bad[1], bad[0], rows, ctx.inputs[table_index]))
    return rows, block, np.ascontiguousarray(flat)


def as_rows(array, rows, block):
    """A [rows, block] view of a C-contiguous table (the same memory)."""
    return array.reshape(rows, block)


def like_inputs(*positions):
    """Inference: output k is typed like input positions[k]."""
    def infer(ctx, ins):
        return [ins[p] if p < len(ins) else UNKNOWN for p in positions][:ctx.n_outputs]
    return infer
