"""Caffe2's caffe2.python.tt_core: the cores of tensor-train (TT) layers.

A TT layer (the TT op) stands for a prod(inp_sizes) x prod(out_sizes) weight
matrix W given as d cores: core k has shape (r_k, n_k, m_k, r_{k+1}) with
n = inp_sizes, m = out_sizes, r = tt_ranks (r_0 = r_d = 1), and

    W[(i_0..i_{d-1}), (j_0..j_{d-1})] = G_0[:, i_0, j_0, :] @ ... @ G_{d-1}[:, i_{d-1}, j_{d-1}, :].

The op reads all cores from one 1-D array, the last core first, each stored as
(n_k, r_{k+1}, r_k, m_k).

matrix_to_tt(W, inp_sizes, out_sizes, tt_ranks): the cores of an FC layer's
weight W (so that the TT op computes X W^T + b like FC), by TT-SVD (successive
truncated SVDs: exact when the ranks are large enough, the best the ranks allow
otherwise). init_tt_cores: random orthogonalized cores for training from
scratch. tt_svd: the decomposition itself, on a tensor of the given mode sizes.
"""
import numpy as np


def _check_lengths(inp_sizes, out_sizes, tt_ranks):
    assert len(inp_sizes) == len(out_sizes), (
        "The number of input dimensions (%d) must be equal to the number of output dimensions (%d)."
        % (len(inp_sizes), len(out_sizes)))
    assert len(tt_ranks) == len(inp_sizes) + 1, (
        "The number of tt-ranks (%d) must be one more than the number of input and output dims (%d)."
        % (len(tt_ranks), len(out_sizes)))


def init_tt_cores(inp_sizes, out_sizes, tt_ranks, seed=1234):
    """Random cores (normal, then orthogonalized core by core with QR), scaled by
    0.1 / (prod(inp_sizes) * prod(tt_ranks)) ** (1 / d): a float32 1-D array laid
    out as the TT op reads it."""
    np.random.seed(seed)
    _check_lengths(inp_sizes, out_sizes, tt_ranks)
    inp, out, ranks = np.array(inp_sizes), np.array(out_sizes), np.array(tt_ranks)
    cores = np.zeros(int(np.sum(inp * out * ranks[1:] * ranks[:-1])))
    at = 0
    carry = 1
    for k in range(inp.shape[0]):
        shape = [ranks[k], inp[k], out[k], ranks[k + 1]]
        core = np.dot(carry, np.random.normal(0, 1, size=(shape[0], int(np.prod(shape[1:])))))
        core = core.reshape(int(np.prod(shape[:3])), shape[3])
        if k < inp.shape[0] - 1:
            core, carry = np.linalg.qr(core)
        cores[at:at + core.size] = core.flatten()
        at += core.size
    scale = (np.prod(inp) * np.prod(ranks)) ** (1.0 / inp.shape[0])
    return ((0.1 / scale) * cores).astype(np.float32)


def matrix_to_tt(W, inp_sizes, out_sizes, tt_ranks):
    """The TT cores of W (prod(inp_sizes) x prod(out_sizes)) for the TT op."""
    _check_lengths(inp_sizes, out_sizes, tt_ranks)
    assert W.shape[0] == np.prod(inp_sizes), (
        "The product of the input sizes (%d) must be equal to first dimension of W (%d)."
        % (np.prod(inp_sizes), W.shape[0]))
    assert W.shape[1] == np.prod(out_sizes), (
        "The product of the output sizes (%d) must be equal to second dimension of W (%d)."
        % (np.prod(out_sizes), W.shape[1]))
    inp, out, ranks = np.array(inp_sizes), np.array(out_sizes), np.array(tt_ranks)
    d = inp.size
    # FC computes X W^T: decompose W^T, its modes interleaved (i_0, j_0, i_1, j_1, ...)
    # so that mode k of the tensor is the pair (i_k, j_k)
    tensor = np.reshape(W.transpose().copy(), np.concatenate((inp, out)))
    order = np.repeat(np.arange(d), 2) + np.tile([0, d], d)
    tensor = np.reshape(np.transpose(tensor, axes=order), inp * out)
    cores = tt_svd(tensor, inp * out, ranks)
    # each core (r_k, n_k, m_k, r_{k+1}) -> (n_k, r_{k+1}, r_k, m_k), the last core first
    laid_out = np.zeros(cores.shape, dtype=np.float32)
    at = 0
    for k in range(d):
        shape = (ranks[k], inp[k], out[k], ranks[k + 1])
        size = int(np.prod(shape))
        core = cores[at:at + size].reshape(shape).transpose((1, 3, 0, 2))
        laid_out[laid_out.shape[0] - at - size:laid_out.shape[0] - at] = core.flatten()
        at += size
    return laid_out


def tt_svd(W, sizes, tt_ranks):
    """TT-SVD of the tensor W with mode sizes `sizes`: core k (r_k, sizes[k],
    r_{k+1}) is the left factor of a reduced SVD truncated to r_{k+1}; the cores
    are returned one after the other in a float32 1-D array."""
    sizes, tt_ranks = np.asarray(sizes), np.asarray(tt_ranks)
    assert len(tt_ranks) == len(sizes) + 1, "one more rank than sizes"
    rest = W.copy()
    d = sizes.size
    cores = np.zeros(int(np.sum(tt_ranks[:-1] * sizes * tt_ranks[1:])), dtype="float32")
    at = 0
    for k in range(d - 1):
        rest = np.reshape(rest, [tt_ranks[k] * sizes[k], -1])
        u, s, v = np.linalg.svd(rest, full_matrices=False)
        rank = tt_ranks[k + 1]
        u, s, v = u[:, :rank], s[:rank], v[:rank, :]
        size = tt_ranks[k] * sizes[k] * rank
        cores[at:at + size] = u.ravel()
        at += size
        rest = np.dot(np.diag(s), v)
    cores[at:at + tt_ranks[d - 1] * sizes[d - 1] * tt_ranks[d]] = rest.ravel()
    return cores


def fc_net_to_tt_net(net):
    """Declared by Caffe2 without a body (it does nothing and returns None); the same here."""
    return None
