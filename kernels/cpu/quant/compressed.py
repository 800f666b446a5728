"""Layers stored in compressed form: codebook lookups (Caffe2's QuantDecode) and the
tensor-train linear layer (Caffe2's TT). Callers check shapes and code ranges."""
import numpy as np


def codebook_decode(codebook, codes):
    """codebook.reshape(-1)[codes], codes' shape."""
    return np.take(codebook.reshape(-1), codes.astype(np.intp, copy=False))


def codebook_gradient(codebook_shape, codes_list, grads_list, dtype):
    """Gradient of the codebook: each output gradient added at its code."""
    flat = np.zeros(int(np.prod(codebook_shape)), dtype)
    for codes, grad in zip(codes_list, grads_list):
        np.add.at(flat, codes.reshape(-1).astype(np.intp, copy=False), grad.reshape(-1))
    return flat.reshape(codebook_shape)


def tt_linear(x2, bias, cores, inp_sizes, out_sizes, ranks):
    """x2 (B, prod(inp_sizes)) times the tensor-train matrix W plus bias, where
    W[(i_0..i_{d-1}), (j_0..j_{d-1})] = G_0[:, i_0, j_0, :] @ ... @ G_{d-1}[:, i_{d-1}, j_{d-1}, :]
    and `cores` holds G_{d-1} first, G_0 last, each core stored as (n_k, r_{k+1}, r_k, m_k)
    (the layout of caffe2.python.tt_core.matrix_to_tt). Contracts one core at a time,
    as Caffe2's kernel does: the work is sum over k of B * (prod n) * r * m * ..., far
    below the dense B x N x M product for large layers."""
    d = len(inp_sizes)
    batch = x2.shape[0]
    if batch == 0:
        return np.zeros((0, int(np.prod(out_sizes))), x2.dtype)
    buf = x2
    at = 0
    for k in range(d - 1, -1, -1):
        rows, cols = inp_sizes[k] * ranks[k + 1], ranks[k] * out_sizes[k]
        core = cores[at:at + rows * cols].reshape(rows, cols)
        at += rows * cols
        y = buf.reshape(-1, rows) @ core                     # (rest, r_k * m_k)
        # move m_k to the front: the next core contracts the trailing (n_{k-1}, r_k)
        buf = np.ascontiguousarray(y.reshape(-1, out_sizes[k]).T)
    # buf is (m_0, ..., m_{d-1}, batch): one column per input row
    out = np.ascontiguousarray(buf.reshape(-1, batch).T)
    return (out + bias.reshape(1, -1)).astype(x2.dtype, copy=False)
