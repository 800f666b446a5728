"""Caffe2's experiments FunHash / SparseFunHash: a fully-connected layer over sparse
rows whose (num_outputs x features) weight matrix is never stored; every entry is
read from a short weight vector at a hashed position, with a hashed sign.

Caffe2 hashes with XXH64 over a 4-word array (key, output index, alpha index,
magic), but passes the array's element count (4) as the byte length, so only the
low 4 bytes of the key are hashed: one hash per key, the same for every output
and alpha index. That is what caffe2py computes, so trained weights carry over.

Public:
    xxh64_4bytes(words, seed) -> uint64 array: XXH64 of each value's low 4 bytes
        (little-endian), the one-stripe path of the XXH64 specification
    slots(keys, seed, num_weight, sparse) -> (index, sign): per key, the weight
        position and +-1 (FunHash: hash % n and the hash's parity; SparseFunHash:
        (hash >> 1) % n and the lowest bit)
    funhash(val, index, sign, seg, weight, alpha, num_segments, num_outputs) -> out
    funhash_grad(grad_out, val, index, sign, seg, weight, alpha) -> (dweight, dalpha)
    sparse_funhash_grad(grad_out, val, index, sign, seg, weight, alpha) -> (values, indices, dalpha)
alpha is None for the 4-input form (one term of coefficient 1).
"""
import numpy as np

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P5 = np.uint64(0x27D4EB2F165667C5)


def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxh64_4bytes(words, seed):
    low = np.asarray(words).astype(np.int64).view(np.uint64) & np.uint64(0xFFFFFFFF)
    with np.errstate(over="ignore"):
        h = np.full(low.shape, (int(seed) + int(_P5) + 4) & 0xFFFFFFFFFFFFFFFF, np.uint64)
        h ^= low * _P1
        h = _rotl(h, 23) * _P2 + _P3
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def slots(keys, seed, num_weight, sparse):
    h = xxh64_4bytes(keys, seed)
    one = np.uint64(1)
    if sparse:
        index = (h >> one) % np.uint64(num_weight)
        odd = (h & one).astype(bool)
    else:
        index = h % np.uint64(num_weight)
        odd = (h % np.uint64(2)).astype(bool)
    return index.astype(np.int64), np.where(odd, -1.0, 1.0).astype(np.float32)


def _coefficient(alpha):
    return np.float32(1.0) if alpha is None else alpha.sum(dtype=np.float32)


def funhash(val, index, sign, seg, weight, alpha, num_segments, num_outputs):
    # every output column of entry j gets val_j * sign_j * weight[index_j] * sum(alpha)
    per_entry = val * sign * weight[index] * _coefficient(alpha)
    column = np.zeros(num_segments, np.float32)
    np.add.at(column, seg, per_entry.astype(np.float32))
    return np.repeat(column[:, None], num_outputs, axis=1)


def _scaled_rows(grad_out, val, sign, seg):
    """sum over outputs of grad_out[seg_j] * val_j * sign_j, per entry j."""
    return grad_out[seg].sum(axis=1, dtype=np.float32) * val * sign


def funhash_grad(grad_out, val, index, sign, seg, weight, alpha):
    scaled = _scaled_rows(grad_out, val, sign, seg)
    dweight = np.zeros(weight.shape, np.float32)
    np.add.at(dweight, index, scaled * _coefficient(alpha))
    if alpha is None:
        return dweight, None
    dalpha = np.full(alpha.shape, np.dot(scaled, weight[index]), np.float32)
    return dweight, dalpha


def sparse_funhash_grad(grad_out, val, index, sign, seg, weight, alpha):
    """One (value, index) pair per entry, output and alpha index, in that order."""
    num_outputs = grad_out.shape[1]
    k = 1 if alpha is None else alpha.size
    scale = grad_out[seg] * (val * sign)[:, None]                       # [nnz, num_outputs]
    coefficients = np.ones(1, np.float32) if alpha is None else alpha.astype(np.float32)
    values = (scale[:, :, None] * coefficients[None, None, :]).astype(np.float32).reshape(-1)
    indices = np.repeat(index, num_outputs * k)
    if alpha is None:
        return values, indices, None
    dalpha = np.full(alpha.shape, np.dot(scale.sum(axis=1), weight[index]), np.float32)
    return values, indices, dalpha
