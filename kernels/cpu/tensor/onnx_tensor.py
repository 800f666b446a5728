"""Shape and data-movement compute with ONNX semantics: Pad modes, Slice with
clamped starts/ends/steps, Reshape's 0/-1 rules, Split sizes."""
import math
import numpy as np


def pad(x, pads, mode="constant", value=0):
    """pads: begins then ends, one pair per axis; negative pads crop."""
    r = x.ndim
    begins, ends = list(pads[:r]), list(pads[r:])
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[crop]
    width = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=value)
    if mode == "reflect":
        return np.pad(x, width, mode="reflect")
    if mode == "edge":
        return np.pad(x, width, mode="edge")
    if mode == "wrap":
        return np.pad(x, width, mode="wrap")
    raise ValueError("unknown pad mode '%s'" % mode)


def slice_index(shape, starts, ends, axes, steps):
    """The tuple of slices ONNX Slice selects (starts/ends clamped per step sign)."""
    index = [slice(None)] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        dim = shape[axis]
        if step == 0:
            raise ValueError("Slice step cannot be 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, -1), dim - 1), min(max(end, -1), dim - 1)
        # A negative end of -1 after clamping means "through index 0", which a
        # Python slice can only say with None.
        index[axis] = slice(start, None if end < 0 else end, step)
    return tuple(index)


def reshape_target(in_shape, shape, allowzero=False):
    """ONNX Reshape: 0 copies the input dim (unless allowzero), -1 is inferred."""
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            out.append(in_shape[i])
        else:
            out.append(int(d))
    return out


def split_sizes(dim, split, n_outputs):
    if split:
        if sum(split) != dim:
            raise ValueError("split sizes %s do not add up to %d" % (list(split), dim))
        return list(split)
    chunk = -(-dim // n_outputs)
    sizes = [chunk] * (n_outputs - 1)
    sizes.append(dim - chunk * (n_outputs - 1))
    if sizes[-1] < 0:
        raise ValueError("cannot split %d into %d parts" % (dim, n_outputs))
    return sizes


_REDUCE_AT = {"add": np.add.at, "mul": np.multiply.at, "max": np.maximum.at, "min": np.minimum.at}


def scatter_nd(data, indices, updates, reduction="none"):
    """Copy of data with updates written (or reduced) at index tuples indices[..., :k]."""
    out = data.copy()
    k = indices.shape[-1]
    count = math.prod(indices.shape[:-1])          # index tuples; k = 0 selects the whole tensor
    if k == 0:
        upd = updates.reshape((count,) + data.shape)
        if reduction == "none":
            return upd[-1].copy() if count else out
        if reduction not in _REDUCE_AT:
            raise ValueError("unknown reduction '%s'" % reduction)
        combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
        for u in upd:
            out = combine(out, u)
        return out.astype(data.dtype, copy=False)
    idx = tuple(indices.reshape(count, k).T)
    upd = updates.reshape((count,) + data.shape[k:])
    if reduction == "none":
        out[idx] = upd
    elif reduction in _REDUCE_AT:
        _REDUCE_AT[reduction](out, idx, upd)
    else:
        raise ValueError("unknown reduction '%s'" % reduction)
    return out


def scatter_elements(data, indices, updates, axis, reduction="none"):
    out = data.copy()
    grids = list(np.indices(indices.shape, sparse=True))
    grids[axis] = indices
    idx = tuple(np.broadcast_arrays(*grids))
    if reduction == "none":
        out[idx] = updates
    elif reduction in _REDUCE_AT:
        _REDUCE_AT[reduction](out, idx, updates)
    else:
        raise ValueError("unknown reduction '%s'" % reduction)
    return out


def gather_nd(data, indices, batch_dims=0):
    k = indices.shape[-1]
    batch = data.shape[:batch_dims]
    nb = math.prod(batch)
    d = data.reshape((nb,) + data.shape[batch_dims:])
    m = math.prod(indices.shape[batch_dims:-1])      # explicit: -1 is ambiguous when k is 0
    ind = indices.reshape((nb, m, k))
    if k == 0:      # empty index tuples select the whole slice, once per index
        parts = [np.broadcast_to(d[b], (m,) + d[b].shape) for b in range(nb)]
    else:
        parts = [d[b][tuple(ind[b].T)] for b in range(nb)]
    out = np.stack(parts) if parts else np.zeros((0,) + data.shape[batch_dims + k:], data.dtype)
    return out.reshape(indices.shape[:-1] + data.shape[batch_dims + k:])
