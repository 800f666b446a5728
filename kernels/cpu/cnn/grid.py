"""GridSample (N-d): sample x at normalised grid coordinates with nearest,
linear or cubic interpolation and zeros / border / reflection padding.

Each spatial dim contributes taps (index, weight); the output sums
x[taps] * prod(weights) over every combination of taps."""
import itertools

import numpy as np


def unnormalize(coord, size, align_corners):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def reflect(coord, low2, high2):
    """Reflect coord into [low2/2, high2/2] (bounds given doubled)."""
    if low2 == high2:
        return np.zeros_like(coord)
    lo, span = low2 / 2, (high2 - low2) / 2
    c = np.abs(coord - lo)
    extra = np.fmod(c, span)
    flips = np.floor(c / span)
    return np.where(flips % 2 == 0, extra + lo, span - extra + lo)


def pad_coordinates(coord, size, padding, align_corners):
    if padding == "border":
        return np.clip(coord, 0, size - 1)
    if padding == "reflection":
        if align_corners:
            coord = reflect(coord, 0, 2 * (size - 1))
        else:
            coord = reflect(coord, -1, 2 * size - 1)
        return np.clip(coord, 0, size - 1)
    return coord


def _cubic_weights(t, a=-0.75):
    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _taps(coord, size, mode, padding, align_corners):
    """[(index, weight, valid)] for one spatial dim."""
    if mode == "cubic":
        base = np.floor(coord)
        weights = _cubic_weights(coord - base)
        out = []
        for k, w in zip(range(-1, 3), weights):
            idx = base + k
            if padding != "zeros":
                idx = pad_coordinates(idx, size, padding, align_corners)
            out.append((idx, w))
    else:
        coord = pad_coordinates(coord, size, padding, align_corners)
        if mode == "nearest":
            out = [(np.rint(coord), np.ones_like(coord))]
        else:
            base = np.floor(coord)
            frac = coord - base
            out = [(base, 1 - frac), (base + 1, frac)]
    result = []
    for idx, w in out:
        idx = idx.astype(np.int64)
        valid = (idx >= 0) & (idx < size)
        result.append((np.clip(idx, 0, size - 1), w, valid))
    return result


def grid_sample(x, grid, mode="linear", padding="zeros", align_corners=False):
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    k = len(spatial)
    # grid's last axis lists coordinates innermost-dim first (x, y, z)
    per_dim = []
    for d in range(k):
        coord = unnormalize(grid[..., k - 1 - d].astype(np.float64), spatial[d], align_corners)
        per_dim.append(_taps(coord, spatial[d], mode, padding, align_corners))
    batch = np.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))
    out = np.zeros(grid.shape[:-1] + (c,), np.float64)
    for combo in itertools.product(*per_dim):
        weight = np.ones(grid.shape[:-1])
        valid = np.ones(grid.shape[:-1], bool)
        index = [batch, slice(None)]
        for idx, w, ok in combo:
            weight = weight * w
            valid &= ok
            index.append(idx)
        # x[batch, :, i, j] puts the channel axis last after advanced indexing
        values = np.moveaxis(x, 1, -1)[(batch,) + tuple(index[2:])]
        out += values * (weight * valid)[..., None]
    return np.moveaxis(out, -1, 1).astype(x.dtype)
