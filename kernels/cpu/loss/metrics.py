"""Evaluation metrics: average precision over a moving buffer (APMeter), per-class
accuracy (MultiClassAccuracy), perplexity, and spatial softmax with loss."""
import numpy as np

F32 = np.float32


class APBuffer:
    """Caffe2's APMeter state: per class, up to `size` (score, label) pairs.

    Caffe2 sorts each class's buffer by score (stable, falling) every run and makes
    room for new pairs by dropping the buffer's first entries; after the first run
    those are the highest-scoring pairs, not the oldest. That behaviour is kept."""

    def __init__(self, size):
        self.size = size
        self.scores = None          # [D, size]
        self.labels = None
        self.used = 0

    def add(self, scores, labels):
        n, d = scores.shape
        if self.scores is None or self.scores.shape[0] != d:
            self.scores = np.zeros((d, self.size), F32)
            self.labels = np.zeros((d, self.size), np.int64)
            self.used = 0
        if n > self.size:
            scores, labels, n = scores[n - self.size:], labels[n - self.size:], self.size
        reclaim = self.used + n - self.size
        if reclaim > 0:
            self.scores = np.roll(self.scores, -reclaim, axis=1)
            self.labels = np.roll(self.labels, -reclaim, axis=1)
            self.used -= reclaim
        self.scores[:, self.used:self.used + n] = scores.T
        self.labels[:, self.used:self.used + n] = labels.T
        self.used += n

    def average_precision(self):
        d = self.scores.shape[0]
        out = np.zeros(d, F32)
        u = self.used
        for i in range(d):
            order = np.argsort(-self.scores[i, :u], kind="stable")
            self.scores[i, :u] = self.scores[i, order]
            self.labels[i, :u] = self.labels[i, order]
            lab = self.labels[i, :u]
            tp = np.cumsum(lab, dtype=np.float64)
            hits = lab == 1
            precision = (tp / np.arange(1, u + 1))[hits]
            out[i] = precision.sum() / max(1, int(hits.sum()))
        return out


def multi_class_accuracy(pred, labels):
    """(accuracy per class, samples per class): a row is right when its first maximum
    is its label."""
    d = pred.shape[1]
    right = np.argmax(pred, axis=1) == labels
    amounts = np.bincount(labels, minlength=d)
    hits = np.bincount(labels[right], minlength=d)
    acc = np.where(amounts > 0, hits / np.maximum(amounts, 1), 0.0)
    return acc.astype(F32), amounts.astype(np.int32)


def perplexity(p):
    """prod(p_i ** (-1 / N)): the geometric mean of 1 / p."""
    if p.size == 0:
        return np.array(1.0, F32)
    return np.array(np.exp(-np.log(p.astype(np.float64)).mean()), F32)


def spatial_softmax_with_loss(x, labels, weights):
    """(P softmax over dim 1 of x [N, D, H, W], mean of -log(max(P[label], 1e-20)) * w over
    the (n, h, w) whose label is not -1, divided by the total weight (0 if none))."""
    shifted = x.astype(np.float64) - np.maximum(x.max(axis=1, keepdims=True), -1e20)
    e = np.exp(shifted)
    p = (e / e.sum(axis=1, keepdims=True)).astype(F32)
    valid = labels != -1
    w = np.ones(labels.shape) if weights is None else weights.astype(np.float64)
    safe = np.where(valid, labels, 0)
    picked = np.take_along_axis(p, safe[:, None], axis=1)[:, 0]
    total = w[valid].sum()
    loss = (-np.log(np.maximum(picked, F32(1e-20))) * w)[valid].sum() / total if total != 0 else 0.0
    return p, np.array(loss, F32)


def spatial_softmax_with_loss_gradient(p, labels, weights, dloss, scale):
    d = p.astype(np.float64).copy()
    valid = labels != -1
    safe = np.where(valid, labels, 0)
    onehot = np.zeros_like(d)
    np.put_along_axis(onehot, safe[:, None], 1.0, axis=1)
    d -= onehot
    w = np.ones(labels.shape) if weights is None else weights.astype(np.float64)
    d *= np.where(valid, w, 0.0)[:, None]
    total = w[valid].sum()
    if total > 0:
        d *= scale / total
    return (d * float(dloss)).astype(F32)
