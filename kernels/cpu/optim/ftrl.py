"""FTRL-proximal (McMahan et al. 2013; Caffe2's Ftrl / SparseFtrl). The state n_z
holds (n, z) pairs interleaved, two values per weight:

    n' = n + g^2;  sigma = (sqrt(n') - sqrt(n)) / alpha;  z' = z + g - sigma * w
    w' = (lambda1 * sign(z') - z') / ((beta + sqrt(n')) / alpha + lambda2)  if |z'| > lambda1
         0 otherwise

float32 arithmetic. The sparse form walks the indices in order (a repeated row is
updated again from its new state, as Caffe2's loop does); callers check every index
first (the compiled loop has no bounds checks)."""
import numpy as np

from ..runtime.jit import compiled

F32 = np.float32


def ftrl_dense(w, nz, g, alpha_inv, beta, lambda1, lambda2):
    """New (w, n_z) for flat float32 w [N], nz [2N], g [N]."""
    n, z = nz[0::2], nz[1::2]
    new_n = n + g * g
    sigma = (np.sqrt(new_n) - np.sqrt(n)) * alpha_inv
    new_z = z + g - sigma * w
    denom = (beta + np.sqrt(new_n)) * alpha_inv + lambda2
    new_w = np.where(np.abs(new_z) > lambda1, (lambda1 * np.sign(new_z) - new_z) / denom, F32(0)).astype(F32)
    out_nz = np.empty_like(nz)
    out_nz[0::2], out_nz[1::2] = new_n, new_z
    return new_w, out_nz


def gftrl_dense(w, nz, g, alpha_inv, beta, lambda1, lambda2):
    """Group FTRL (Caffe2's GFtrl): w, g float32 [outputs, inputs], nz [outputs, 2 * inputs]
    ((n, z) interleaved per weight). Each input column is one group: its weights are zero
    unless the L2 norm of its new z over the outputs exceeds lambda1 * sqrt(outputs).
    Returns new (w, nz) of the same shapes."""
    outputs = g.shape[0]
    n, z = nz[:, 0::2], nz[:, 1::2]
    new_n = n + g * g
    sigma = (np.sqrt(new_n) - np.sqrt(n)) * alpha_inv
    new_z = z + g - sigma * w
    z_norm = np.sqrt((new_z * new_z).sum(axis=0, dtype=F32)).astype(F32)
    threshold = F32(lambda1 * np.sqrt(F32(outputs)))
    live = z_norm > threshold
    safe_norm = np.where(live, z_norm, F32(1))
    denom = (beta + np.sqrt(new_n)) * alpha_inv + lambda2
    new_w = np.where(live[None, :], new_z * (threshold / safe_norm - F32(1)) / denom, F32(0)).astype(F32)
    out_nz = np.empty_like(nz)
    out_nz[:, 0::2], out_nz[:, 1::2] = new_n, new_z
    return new_w, out_nz


@compiled(error_model="numpy")
def _sparse_ftrl(w, nz, indices, g, alpha_inv, beta, lambda1, lambda2):
    """w [rows, block], nz [rows, 2 * block], g [len(indices), block], in place."""
    block = w.shape[1]
    for i in range(indices.shape[0]):
        row = indices[i]
        wr = w[row]
        zr = nz[row]
        gr = g[i]
        for j in range(block):
            n = zr[2 * j]
            gj = gr[j]
            new_n = n + gj * gj
            sigma = (np.sqrt(new_n) - np.sqrt(n)) * alpha_inv
            new_z = zr[2 * j + 1] + gj - sigma * wr[j]
            zr[2 * j] = new_n
            zr[2 * j + 1] = new_z
            if abs(new_z) > lambda1:
                s = np.float32(1.0) if new_z > 0 else np.float32(-1.0)
                wr[j] = (lambda1 * s - new_z) / ((beta + np.sqrt(new_n)) * alpha_inv + lambda2)
            else:
                wr[j] = np.float32(0.0)


@_sparse_ftrl.numpy_twin
def _sparse_ftrl_numpy(w, nz, indices, g, alpha_inv, beta, lambda1, lambda2):
    for i, row in enumerate(indices):
        w[row], nz[row] = ftrl_dense(w[row], nz[row], g[i], alpha_inv, beta, lambda1, lambda2)


def sparse_ftrl(w, nz, indices, g, alpha_inv, beta, lambda1, lambda2):
    """Updates the rows of w [rows, block] and nz [rows, 2 * block] named by indices, in
    place (callers pass their own copies)."""
    _sparse_ftrl(w, nz, indices, g, F32(alpha_inv), F32(beta), F32(lambda1), F32(lambda2))
