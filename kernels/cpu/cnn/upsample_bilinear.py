"""Caffe2's UpsampleBilinear (corner-aligned: source = i * (in - 1) / (out - 1)) as one
interpolation matrix per spatial axis, so forward and backward are two matmuls each."""
import numpy as np


def output_size(in_len, scale):
    """Caffe2 truncates in_len * scale computed in float32."""
    return int(np.float32(in_len) * np.float32(scale))


def weight_matrix(out_len, in_len):
    """(out_len, in_len) matrix whose row i holds the two linear weights of output i."""
    ratio = np.float32((in_len - 1) / (out_len - 1)) if out_len > 1 else np.float32(0)
    src = np.arange(out_len, dtype=np.float32) * ratio
    lo = np.minimum(src.astype(np.int64), in_len - 1)
    step = (lo < in_len - 1).astype(np.int64)
    frac = (src - lo).astype(np.float64)
    w = np.zeros((out_len, in_len))
    rows = np.arange(out_len)
    np.add.at(w, (rows, lo), 1.0 - frac)
    np.add.at(w, (rows, lo + step), frac)
    return w


def upsample(x, out_h, out_w):
    """x (N, C, H, W) -> (N, C, out_h, out_w)."""
    wh = weight_matrix(out_h, x.shape[2])
    ww = weight_matrix(out_w, x.shape[3])
    return (wh @ x.astype(np.float64) @ ww.T).astype(x.dtype)


def upsample_gradient(dy, in_h, in_w):
    """dY (N, C, out_h, out_w) -> dX (N, C, in_h, in_w): the transposed interpolation."""
    wh = weight_matrix(dy.shape[2], in_h)
    ww = weight_matrix(dy.shape[3], in_w)
    return (wh.T @ dy.astype(np.float64) @ ww).astype(dy.dtype)
