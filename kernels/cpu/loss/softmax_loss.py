"""Softmax with cross-entropy loss (Caffe2's SoftmaxWithLoss) and its gradient.

Public:
    softmax_with_loss(x2, labels, weights, label_prob, scale) -> (probabilities, loss)
        x2 (N, D) logits; labels: int (N,) class ids, or float (N, D) probabilities
        with label_prob; weights: (N,) per-row weights or None. The loss is the
        weighted mean of the rows' cross-entropies times `scale` (0 when the weights
        sum to 0); with class ids it uses log-softmax, with probabilities
        log(max(p, 1e-20)), as Caffe2 does.
    softmax_with_loss_grad(p2, labels, weights, label_prob, scale, dloss) -> dx2
        (p - onehot(label) or p - label_probabilities), per-row weights, times
        scale * dloss / total weight.
"""
import numpy as np


def _log_softmax(x2):
    shifted = x2.astype(np.float64) - x2.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def softmax_with_loss(x2, labels, weights, label_prob, scale):
    logp = _log_softmax(x2)
    n = x2.shape[0]
    w = np.ones(n) if weights is None else weights.astype(np.float64).reshape(-1)
    p = np.exp(logp)
    if label_prob:
        rows = -(np.log(np.maximum(p.astype(np.float32), np.float32(1e-20))) * labels).sum(axis=1)
    else:
        rows = -logp[np.arange(n), labels]
    total = w.sum()
    loss = (rows * w).sum() * scale / total if total != 0 else 0.0
    return p.astype(x2.dtype), np.array(loss, dtype=np.float32)


def softmax_with_loss_grad(p2, labels, weights, label_prob, scale, dloss):
    n = p2.shape[0]
    dx = p2.astype(np.float64)
    if label_prob:
        dx -= labels
    else:
        dx[np.arange(n), labels] -= 1.0
    if weights is None:
        total = float(n)
    else:
        w = weights.astype(np.float64).reshape(-1)
        dx *= w[:, None]
        total = w.sum()
    if total > 0:
        dx *= scale / total * float(dloss)
    return dx.astype(p2.dtype)
