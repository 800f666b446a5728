"""Gradients of the embedding lookups and gathers.

Public:
    segment_ids(lengths, n_indices) -> int64 segment of each index (LENGTHS checked)
    sparse_lengths_values(grad, lengths, n_indices, weights=None, mean=False) -> values
        the GradientSlice values of SparseLengths{Sum,WeightedSum,Mean}: row j is the
        output gradient of j's segment (times WEIGHTS[j], or / the segment length)
    sparse_lengths_weight_grad(grad, lengths, data, indices) -> dWEIGHTS
        WEIGHTS[j]'s gradient: <output gradient of j's segment, DATA[INDICES[j]]>
    gather_grad(data_shape, indices, grad, axis, dtype) -> dense dDATA
        (Caffe2's BatchGatherGradient: repeated indices accumulate)
Bad LENGTHS or INDICES raise LookupInputError naming the input.
"""
import numpy as np

from .sparse_lengths import LookupInputError, check_indices, check_lengths


def segment_ids(lengths, n_indices):
    lengths = np.asarray(lengths).reshape(-1)
    if lengths.dtype.kind not in "iu":
        raise LookupInputError("lengths", "LENGTHS must be integers, got %s" % lengths.dtype)
    check_lengths(lengths, n_indices)
    return np.repeat(np.arange(lengths.size, dtype=np.int64), lengths.astype(np.int64))


def sparse_lengths_values(grad, lengths, n_indices, weights=None, mean=False):
    lengths = np.asarray(lengths).reshape(-1)
    if grad.ndim < 1 or grad.shape[0] != lengths.size:
        raise LookupInputError("grad", "the output gradient has %d rows for %d segments"
                               % (grad.shape[0] if grad.ndim else 0, lengths.size))
    seg = segment_ids(lengths, n_indices)
    values = np.take(grad, seg, axis=0)
    tail = (1,) * (grad.ndim - 1)
    if weights is not None:
        if weights.shape != (n_indices,):
            raise LookupInputError("weights", "WEIGHTS must be a vector of %d values, got shape %s"
                                   % (n_indices, list(weights.shape)))
        values *= weights.astype(values.dtype, copy=False).reshape((-1,) + tail)
    if mean and n_indices:
        inv = 1.0 / np.maximum(lengths, 1).astype(np.float64)
        values *= inv[seg].astype(values.dtype).reshape((-1,) + tail)
    return values


def sparse_lengths_weight_grad(grad, lengths, data, indices):
    check_indices(indices, data.shape[0])
    seg = segment_ids(lengths, indices.size)
    # explicit widths: reshape(0, -1) cannot work out -1 when there are no indices
    rows = np.take(data, indices, axis=0).reshape(indices.size, int(np.prod(data.shape[1:]))) \
        .astype(np.float32, copy=False)
    g = np.take(grad, seg, axis=0).reshape(indices.size, int(np.prod(grad.shape[1:])))
    if g.shape[1] != rows.shape[1]:
        raise LookupInputError("grad", "the output gradient rows hold %d values, DATA rows %d"
                               % (g.shape[1], rows.shape[1]))
    return np.einsum("ij,ij->i", g, rows).astype(np.float32)


def gather_grad(data_shape, indices, grad, axis, dtype):
    axis %= len(data_shape)
    idx = np.asarray(indices).astype(np.int64, copy=False).reshape(-1)
    check_indices(idx, data_shape[axis])
    lead, tail = tuple(data_shape[:axis]), tuple(data_shape[axis + 1:])
    want = lead + tuple(np.shape(indices)) + tail
    if tuple(grad.shape) != want:
        raise LookupInputError("grad", "the output gradient has shape %s, the gather's output %s"
                               % (list(grad.shape), list(want)))
    g = grad.reshape(lead + (idx.size,) + tail)
    out = np.zeros(data_shape, dtype)
    if np.unique(idx).size == idx.size:        # no repeats: a plain scatter
        out[(slice(None),) * axis + (idx,)] = g
    else:
        np.add.at(np.moveaxis(out, axis, 0), idx, np.moveaxis(g, axis, 0))
    return out
