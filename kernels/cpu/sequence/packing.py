"""Time-major packed sequences: SequenceMask, ReversePackedSegs, PackRNNSequence /
UnpackRNNSequence. Sequence b of a batch occupies rows offsets[b] .. offsets[b] +
lengths[b] of a values array, or column b (time along dim 0) of a [T, B, ...] one.
Callers check lengths (non-negative, within T, summing to the rows)."""
import numpy as np


def _positions(lengths):
    """(time step, sequence) of every packed row, in packed order."""
    seq = np.repeat(np.arange(lengths.size), lengths)
    starts = np.cumsum(lengths) - lengths
    return np.arange(seq.size) - np.repeat(starts, lengths), seq


def pack(values, lengths):
    """[sum(lengths), ...] -> [max(lengths), B, ...], zero padded."""
    t, b = _positions(lengths)
    rows = int(lengths.max()) if lengths.size else 0
    out = np.zeros((rows, lengths.size) + values.shape[1:], values.dtype)
    out[t, b] = values[:t.size]
    return out


def unpack(packed, lengths):
    """[T, B, ...] -> [sum(lengths), ...]."""
    t, b = _positions(lengths)
    return np.ascontiguousarray(packed[t, b])


def reverse_packed(data, lengths):
    """data [T, B, ...]: each column's first lengths[b] steps reversed, the rest kept."""
    out = data.copy()
    t_max = data.shape[0]
    t = np.arange(t_max)[:, None]
    lens = lengths[None, :]
    src = np.where(t < lens, lens - 1 - t, t)           # [T, B]
    cols = np.broadcast_to(np.arange(data.shape[1])[None, :], src.shape)
    out[...] = data[src, cols]
    return out


def sequence_mask(x, mode, axis, batch, lengths, radius, fill, repeat_from):
    """Caffe2's SequenceMask: x viewed as [B?, rows, cols] (cols from `axis` on; with a
    batch axis, rows are the dims between it and axis and every batch item is masked
    alike); entries where the mode's test holds become `fill`."""
    left = int(np.prod(x.shape[batch + 1 if batch >= 0 else 0:axis], dtype=np.int64))
    right = int(np.prod(x.shape[axis:], dtype=np.int64))
    repeat = 1
    if repeat_from is not None:
        repeat = int(np.prod(x.shape[repeat_from:], dtype=np.int64))
        right = right // repeat if repeat else 0
    if x.size == 0:
        return x.copy()
    view = x.reshape(-1, left, right, repeat)
    i = np.arange(left)[:, None]
    j = np.arange(right)[None, :]
    if mode == "sequence":
        masked = j >= lengths[:left, None]
    elif mode == "window":
        masked = (j > lengths[:left, None] + radius) | (j < lengths[:left, None] - radius)
    elif mode == "upper":
        masked = j > i
    elif mode == "lower":
        masked = j < i
    elif mode == "upperdiag":
        masked = j >= i
    else:
        masked = j <= i
    out = np.where(masked[None, :, :, None], x.dtype.type(fill), view)
    return out.reshape(x.shape)
