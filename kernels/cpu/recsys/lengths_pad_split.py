"""LengthsPad (each segment copied into a fixed-length slot) and LengthsSplit (each
length split into n nearly equal parts), in NumPy. Callers validate lengths first."""
import numpy as np


def lengths_pad(data, lengths, target_length, padding_value):
    n = len(lengths)
    out = np.full((n * target_length,) + data.shape[1:], padding_value, dtype=data.dtype)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n else np.zeros(0, np.int64)
    for i, (start, length) in enumerate(zip(starts, lengths)):
        out[i * target_length:i * target_length + length] = data[start:start + length]
    return out


def lengths_split(lengths, n_splits):
    """Each length L becomes n_splits parts: the first L % n get L // n + 1, the rest L // n."""
    lengths = lengths.astype(np.int64)
    base = (lengths // n_splits)[:, None]
    extra = (np.arange(n_splits)[None, :] < (lengths % n_splits)[:, None])
    return (base + extra).reshape(-1).astype(np.int32)
