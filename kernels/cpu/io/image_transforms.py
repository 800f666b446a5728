"""Caffe2 ImageInput's image transforms on HWC uint8 images (BGR, OpenCV's order which
Caffe2 decoded with, or RGB turned into BGR by the crop): OpenCV's INTER_AREA resize, the short-side scaling rule,
Inception-style random-sized cropping, crop + mirror, colour jitter, PCA lighting
and per-channel mean / std normalisation.

The resize is OpenCV's INTER_AREA: when both sides shrink, every output pixel is the
average of the source pixels its footprint covers, weighted by the covered fraction;
otherwise OpenCV's area-mode linear blend (`_area_linear_taps`). Both are separable
tables of (source index, weight) per output row and column, applied by one compiled
loop; results round to the nearest integer (OpenCV rounds in fixed point, so a value
may differ from it by one level at a .5 boundary).

Random choices draw from the numpy Generator passed in, in Caffe2's order.
"""
import functools
import math

import numpy as np

from ..runtime.jit import compiled

F32 = np.float32

# AlexNet's PCA of ImageNet's RGB pixels, as Caffe2 hard-codes them (rows: R, G, B)
LIGHTING_EIGVECS = np.array([[-144.7125, 183.396, 102.2295],
                             [-148.104, -1.1475, -207.57],
                             [-148.818, -177.174, 107.1765]], np.float64)
LIGHTING_EIGVALS = np.array([0.2175, 0.0188, 0.0045], np.float64)
# BGR -> gray weights (B, G, R), Caffe2's jitter constants
GRAY_BGR = np.array([0.114, 0.587, 0.299], F32)


# ----------------------------------------------------------------- INTER_AREA resize

@functools.lru_cache(maxsize=256)
def _area_taps(src, dst):
    """(index [dst, K], weight [dst, K]) of area averaging when shrinking src -> dst."""
    scale = src / dst
    taps = []
    for d in range(dst):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, src - f1)
        s1, s2 = math.ceil(f1), math.floor(f2)
        s2 = min(s2, src - 1)
        s1 = min(s1, s2)
        row = []
        if s1 - f1 > 1e-3:
            row.append((s1 - 1, (s1 - f1) / cell))
        row.extend((s, 1.0 / cell) for s in range(s1, s2))
        if f2 - s2 > 1e-3:
            row.append((s2, min(min(f2 - s2, 1.0), cell) / cell))
        taps.append(row)
    return _table(taps)


@functools.lru_cache(maxsize=256)
def _area_linear_taps(src, dst):
    """OpenCV's INTER_AREA when an axis grows (or the other one does): a two-tap blend
    whose weight is the fraction of the output pixel past the source pixel's edge."""
    scale, inv = src / dst, dst / src
    taps = []
    for d in range(dst):
        s = math.floor(d * scale)
        f = (d + 1) - (s + 1) * inv
        f = 0.0 if f <= 0 else f - math.floor(f)
        if s >= src - 1:
            s, f = src - 1, 0.0
        taps.append([(s, 1.0 - f), (min(s + 1, src - 1), f)])
    return _table(taps)


def _table(taps):
    """Dense (index, weight) tables, rows padded with weight 0 (cached: never written)."""
    width = max(len(row) for row in taps)
    index = np.zeros((len(taps), width), np.int64)
    weight = np.zeros((len(taps), width), F32)
    for d, row in enumerate(taps):
        for k, (s, w) in enumerate(row):
            index[d, k], weight[d, k] = s, w
    return index, weight


@compiled
def _resize(img, xi, xw, yi, yw, out):
    """out[y, x, c] = round(sum_j yw[y, j] sum_k xw[x, k] img[yi[y, j], xi[x, k], c]);
    every index in xi / yi lies inside img (the tables are built from its size).
    Rows are flattened to W * C so the inner loops run over plain slices."""
    H, W, C = img.shape
    OH, OW = out.shape[0], out.shape[1]
    KX, KY = xi.shape[1], yi.shape[1]
    flat = img.reshape(H, W * C)
    rows = np.zeros((H, OW * C), np.float32)
    for h in range(H):
        src = flat[h]
        dst = rows[h]
        for x in range(OW):
            for k in range(KX):
                w = xw[x, k]
                base = xi[x, k] * C
                for c in range(C):
                    dst[x * C + c] += w * np.float32(src[base + c])
    n = OW * C
    acc = np.zeros(n, np.float32)
    oflat = out.reshape(OH, n)
    for y in range(OH):
        acc[:] = 0
        for j in range(KY):
            w = yw[y, j]
            r = rows[yi[y, j]]
            for i in range(n):
                acc[i] += w * r[i]
        o = oflat[y]
        for i in range(n):
            o[i] = np.uint8(min(max(np.rint(acc[i]), 0.0), 255.0))


@_resize.numpy_twin
def _resize_numpy(img, xi, xw, yi, yw, out):
    rows = np.einsum("hxkc,xk->hxc", img[:, xi].astype(F32), xw)
    cols = np.einsum("yjxc,yj->yxc", rows[yi], yw)
    out[...] = np.clip(np.rint(cols), 0, 255).astype(np.uint8)


def resize_area(img, height, width):
    """img (H, W, C) uint8 resized to (height, width) as OpenCV's INTER_AREA does."""
    H, W = img.shape[:2]
    if (H, W) == (height, width):
        return img
    shrink = H >= height and W >= width
    xi, xw = (_area_taps if shrink else _area_linear_taps)(W, width)
    yi, yw = (_area_taps if shrink else _area_linear_taps)(H, height)
    out = np.empty((height, width, img.shape[2]), np.uint8)
    _resize(np.ascontiguousarray(img), xi, xw, yi, yw, out)
    return out


# ----------------------------------------------------------------- scaling and cropping

def scaled_size(rows, cols, target, warp):
    """Caffe2's target size: target x target when warping, else the shorter side to
    target and the longer one in proportion (truncated, computed in float32)."""
    if warp:
        return target, target
    if rows > cols:
        return int(F32(rows) * F32(target) / F32(cols)), target
    return target, int(F32(cols) * F32(target) / F32(rows))


def random_sized_crop(img, crop, rng):
    """Inception-style scale jitter: a region of 8%-100% of the area and aspect ratio in
    [3/4, 4/3], resized to crop x crop; None when ten draws find no region that fits."""
    rows, cols = img.shape[:2]
    area = rows * cols
    for _ in range(10):
        target = int(math.ceil(rng.uniform(0.08, 1.0) * area))
        aspect = rng.uniform(3.0 / 4.0, 4.0 / 3.0)
        nh = int(math.floor(math.sqrt(target / aspect)))
        nw = int(math.floor(math.sqrt(target * aspect)))
        if 1 <= nh <= rows and 1 <= nw <= cols:
            y0 = int(rng.integers(0, rows - nh + 1))
            x0 = int(rng.integers(0, cols - nw + 1))
            return resize_area(img[y0:y0 + nh, x0:x0 + nw], crop, crop)
    return None


def crop_and_mirror(img, crop, is_test, mirror, rng, reverse_channels=False):
    """float32 crop x crop x C: the centre crop when is_test, else a random one (width
    offset drawn first), mirrored left-right with probability 1/2 when mirror;
    reverse_channels turns RGB into BGR on the way (the crop is the small copy)."""
    rows, cols = img.shape[:2]
    if is_test:
        x0, y0 = (cols - crop) // 2, (rows - crop) // 2
    else:
        x0 = int(rng.integers(0, cols - crop + 1))
        y0 = int(rng.integers(0, rows - crop + 1))
    out = img[y0:y0 + crop, x0:x0 + crop]
    if not is_test and mirror and rng.random() < 0.5:
        out = out[:, ::-1]
    if reverse_channels:
        out = out[:, :, ::-1]
    return out.astype(F32)


# ----------------------------------------------------------------- colour

def _blend(img, alpha, other):
    return img * F32(alpha) + other * F32(1.0 - alpha)


def color_jitter(img, saturation, brightness, contrast, rng):
    """Saturation, brightness and contrast jitter (each factor 1 + U(-a, a)) in a random
    order, on a float32 BGR image, in place."""
    for which in rng.permutation(3):
        if which == 0:
            alpha = 1.0 + rng.uniform(-saturation, saturation)
            gray = (img @ GRAY_BGR)[:, :, None]
            img[...] = _blend(img, alpha, gray)
        elif which == 1:
            img *= F32(1.0 + rng.uniform(-brightness, brightness))
        else:
            gray_mean = F32((img @ GRAY_BGR).mean(dtype=np.float64))
            alpha = 1.0 + rng.uniform(-contrast, contrast)
            img[...] = _blend(img, alpha, gray_mean)
    return img


def color_lighting(img, std, rng):
    """AlexNet's PCA lighting noise: alphas ~ N(0, std); the RGB shift
    eigvecs @ (eigvals * alphas) added to the BGR image, in place."""
    alphas = rng.normal(0.0, std, 3)
    delta_rgb = LIGHTING_EIGVECS @ (LIGHTING_EIGVALS * alphas)
    img += delta_rgb[::-1].astype(F32)
    return img


def normalize(img, mean, inv_std):
    """(img - mean[c]) * inv_std[c] per channel c."""
    c = img.shape[2]
    img -= mean[:c]
    img *= inv_std[:c]
    return img
