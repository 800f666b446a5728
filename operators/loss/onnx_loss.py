"""ONNX losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
(reduction none/sum/mean, class weights, ignore_index)."""
import numpy as np

from caffe2py.kernels.cpu.cnn import onnx_nn as nn_k

from ..onnx_base import onnx_op


def _nll(ctx, logp, target, weight, reduction, ignore_index):
    if logp.ndim < 2:
        raise ctx.input_error(0, "input must be [N, C, ...], got shape %s" % list(logp.shape))
    c = logp.shape[1]
    want = logp.shape[:1] + logp.shape[2:]
    if target.shape != want:
        raise ctx.input_error(1, "target must have shape %s (the input's without C), got %s"
                              % (list(want), list(target.shape)))
    if weight is not None and weight.shape != (c,):
        raise ctx.input_error(2, "weight must have shape [%d], got %s" % (c, list(weight.shape)))
    tgt = target.astype(np.int64)
    ignored = (tgt == ignore_index) if ignore_index is not None else np.zeros(tgt.shape, bool)
    safe = np.where(ignored, 0, tgt)
    if safe.size and (safe.min() < 0 or safe.max() >= c):
        raise ctx.input_error(1, "target class out of range [0, %d)" % c)
    picked = np.take_along_axis(logp, safe[:, None], axis=1)[:, 0]
    w = np.ones(tgt.shape, logp.dtype) if weight is None else weight[safe].astype(logp.dtype)
    w = np.where(ignored, 0, w).astype(logp.dtype)
    loss = -picked * w
    if reduction == "none":
        return loss.astype(logp.dtype)
    if reduction == "sum":
        return np.array(loss.sum(), dtype=logp.dtype)
    denom = w.sum()
    return np.array(loss.sum() / denom if denom else 0.0, dtype=logp.dtype)


def _reduction(ctx):
    reduction = ctx.string("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.error("unknown reduction '%s'" % reduction)
    return reduction


@onnx_op("NegativeLogLikelihoodLoss", (12, None))
def nll_loss(ctx):
    reduction, ignore = _reduction(ctx), ctx.int("ignore_index", None)
    return lambda logp, target, weight=None: _nll(ctx, logp, target, weight, reduction, ignore)


@onnx_op("SoftmaxCrossEntropyLoss", (12, None))
def softmax_cross_entropy(ctx):
    reduction, ignore = _reduction(ctx), ctx.int("ignore_index", None)

    def run(scores, labels, weight=None):
        if scores.ndim < 2:
            raise ctx.input_error(0, "scores must be [N, C, ...], got shape %s" % list(scores.shape))
        logp = nn_k.softmax_axis(scores, 1, log=True).astype(scores.dtype)
        loss = _nll(ctx, logp, labels, weight, reduction, ignore)
        return (loss, logp) if ctx.n_outputs > 1 else loss
    return run
