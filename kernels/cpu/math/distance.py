"""Row-wise dot products and cosine similarity of (N, D) matrices, and their
gradients. einsum computes each row's dot product in one pass without a temporary.
Callers check shapes."""
import numpy as np

COS_EPS = 1e-12    # Caffe2's CosineSimilarity: squared norms are at least this


def row_dot(x2, y2):
    return np.einsum("ij,ij->i", x2, y2)


def cosine_similarity(x2, y2):
    xx = np.maximum(row_dot(x2, x2), x2.dtype.type(COS_EPS))
    yy = np.maximum(row_dot(y2, y2), y2.dtype.type(COS_EPS))
    return (row_dot(x2, y2) / np.sqrt(xx * yy)).astype(x2.dtype, copy=False)


def cosine_similarity_gradient(x2, y2, dcos):
    """(dX, dY) of cosine_similarity: dX = dcos * (y / (|x||y|) - x * (x.y) / (|x|^3 |y|)),
    and dY likewise, with the norms clamped as in the forward."""
    xn = np.sqrt(np.maximum(row_dot(x2, x2), x2.dtype.type(COS_EPS)))[:, None]
    yn = np.sqrt(np.maximum(row_dot(y2, y2), y2.dtype.type(COS_EPS)))[:, None]
    xy = row_dot(x2, y2)[:, None]
    d = dcos.reshape(-1, 1)
    dx = d * (y2 / (xn * yn) - x2 * (xy / (xn ** 3 * yn)))
    dy = d * (x2 / (xn * yn) - y2 * (xy / (yn ** 3 * xn)))
    return dx.astype(x2.dtype, copy=False), dy.astype(y2.dtype, copy=False)


def dot_with_padding(x2, y2, pad_value, replicate):
    """Row-wise dot products of rows of different lengths: the shorter row is padded
    with pad_value, or (replicate) repeated to the longer row's length (a multiple)."""
    dx, dy = x2.shape[1], y2.shape[1]
    long_, short = (x2, y2) if dx >= dy else (y2, x2)
    ds = short.shape[1]
    if replicate:
        if ds == 0:
            return np.zeros(x2.shape[0], x2.dtype)
        blocks = long_.reshape(long_.shape[0], -1, ds).sum(axis=1)
        return row_dot(blocks, short).astype(x2.dtype, copy=False)
    out = row_dot(long_[:, :ds], short)
    if long_.shape[1] > ds and pad_value != 0:
        out = out + x2.dtype.type(pad_value) * long_[:, ds:].sum(axis=1)
    return out.astype(x2.dtype, copy=False)


def dot_with_padding_gradient(x2, y2, ddot, pad_value, replicate):
    """(dX, dY) of dot_with_padding."""
    d = ddot.reshape(-1, 1)
    swap = x2.shape[1] < y2.shape[1]
    long_, short = (y2, x2) if swap else (x2, y2)
    ds = short.shape[1]
    if replicate:
        if ds == 0:
            dlong, dshort = np.zeros_like(long_), np.zeros_like(short)
        else:
            reps = long_.shape[1] // ds
            dlong = np.tile(d * short, (1, reps))
            dshort = d * long_.reshape(long_.shape[0], -1, ds).sum(axis=1)
    else:
        dlong = np.empty_like(long_)
        dlong[:, :ds] = d * short
        dlong[:, ds:] = d * long_.dtype.type(pad_value)
        dshort = d * long_[:, :ds]
    dlong, dshort = dlong.astype(long_.dtype, copy=False), dshort.astype(short.dtype, copy=False)
    return (dshort, dlong) if swap else (dlong, dshort)
