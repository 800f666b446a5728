"""Platt-scaled probabilities of a one-vs-one SVM (ai.onnx.ml SVMClassifier with
prob_a/prob_b, as libsvm computes them and onnxruntime reproduces).

Each class pair (i, j) with decision value d gets r_ij = 1 / (1 + exp(d * A + B)),
clipped to [1e-7, 1 - 1e-7], and r_ji = 1 - r_ij. The class probabilities p solve
Wu, Lin and Weng's second pairwise-coupling problem (JMLR 2004): minimise p'Qp with
sum(p) = 1, where Q_tt = sum_{j != t} r_jt^2 and Q_tj = -r_jt * r_tj. libsvm solves
it by cyclic coordinate updates until max_t |(Qp)_t - p'Qp| < 0.005 / k, at most
max(100, k) sweeps; the same iteration runs here on every row at once, each row
stopping at its own sweep, so the numbers match libsvm's row-by-row loop.
"""
import numpy as np

PAIR_CLIP = 1e-7


def pairwise_probabilities(decisions, prob_a, prob_b, k):
    """(N, k, k) r_ij from (N, k(k-1)/2) decision values in libsvm's pair order
    (0,1), (0,2), ..., (1,2), ...; the diagonal is 0."""
    n = decisions.shape[0]
    z = decisions * prob_a + prob_b
    # 1 / (1 + exp(z)) without overflow for large |z|
    r = np.where(z >= 0, np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))), 1.0 / (1.0 + np.exp(-np.abs(z))))
    r = np.clip(r, PAIR_CLIP, 1.0 - PAIR_CLIP)
    out = np.zeros((n, k, k))
    rows, cols = np.triu_indices(k, 1)            # the same order as the pairs
    out[:, rows, cols] = r
    out[:, cols, rows] = 1.0 - r
    return out


def couple(pairwise):
    """(N, k) class probabilities from (N, k, k) pairwise probabilities."""
    n, k, _ = pairwise.shape
    q = -np.transpose(pairwise, (0, 2, 1)) * pairwise           # Q_tj = -r_jt * r_tj
    diag = (pairwise * pairwise).sum(axis=1)                    # Q_tt = sum_j r_jt^2 (r_tt = 0)
    idx = np.arange(k)
    q[:, idx, idx] = diag
    p = np.full((n, k), 1.0 / k)
    eps = 0.005 / k
    active = np.arange(n)
    for _ in range(max(100, k)):
        if not active.size:
            break
        qa, pa = q[active], p[active]
        qp = np.einsum("nij,nj->ni", qa, pa)
        pqp = (pa * qp).sum(axis=1)
        going = np.abs(qp - pqp[:, None]).max(axis=1) >= eps
        active, qa, pa, qp, pqp = active[going], qa[going], pa[going], qp[going], pqp[going]
        for t in range(k):
            diff = (pqp - qp[:, t]) / qa[:, t, t]
            pa[:, t] += diff
            pqp = (pqp + diff * (diff * qa[:, t, t] + 2.0 * qp[:, t])) / (1.0 + diff) ** 2
            qp = (qp + diff[:, None] * qa[:, t, :]) / (1.0 + diff)[:, None]
            pa /= (1.0 + diff)[:, None]
        p[active] = pa
    return p
