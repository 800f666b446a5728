"""Shared by the embedding-lookup tests (test_sparse_lengths*.py): float64 references
written from the op definitions, independent of kernels/cpu/recsys/sparse_lengths.py, and a
one-op runner."""
import numpy as np

from caffe2py import core, workspace


def run_op(op_type, inputs, **kwargs):
    """Run one op on blobs in0, in1, ... in a fresh workspace; return its "out" blob."""
    workspace.ResetWorkspace()
    names = ["in%d" % i for i in range(len(inputs))]
    for name, value in zip(names, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, names, ["out"], **kwargs))
    return workspace.FetchBlob("out")


def ref_lookup(rows, indices, lengths, weights=None, positional=False, mean=False):
    """rows: float64 [N, D] (already dequantised). One bag at a time, float64 sums;
    positional weights are indexed by position in the bag, others by index slot."""
    out = np.zeros((len(lengths), rows.shape[1]))
    start = 0
    with np.errstate(invalid="ignore", over="ignore"):
        for b, n in enumerate(lengths):
            if n:
                ids = indices[start:start + n]
                if weights is None:
                    w = np.ones(n)
                else:
                    w = np.asarray(weights[:n] if positional else weights[start:start + n], np.float64)
                out[b] = (w[:, None] * rows[ids]).sum(axis=0)
                if mean:
                    out[b] /= n
            start += n
    return out


def ref_dequant8(q):
    """Fused 8-bit rows: uint8 values, then float32 scale and bias."""
    d = q.shape[1] - 8
    sb = q[:, d:].copy().view("<f4").astype(np.float64)
    return q[:, :d].astype(np.float64) * sb[:, :1] + sb[:, 1:]


def unpack_bits(packed, bits):
    """(n, B) bytes -> (n, B * 8/bits) values, low bits first (shift-and-mask per field)."""
    k, mask = 8 // bits, (1 << bits) - 1
    fields = [(packed.astype(np.int64) >> (bits * j)) & mask for j in range(k)]
    return np.stack(fields, axis=-1).reshape(packed.shape[0], -1)


def ref_dequant_nbit(q, bits):
    """Fused 4/2-bit rows: packed values, then float16 scale and bias."""
    nb = q.shape[1] - 4
    sb = q[:, nb:].copy().view("<f2").astype(np.float64)
    return unpack_bits(q[:, :nb], bits) * sb[:, :1] + sb[:, 1:]
