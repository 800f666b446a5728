"""SoftmaxWithLoss and SoftmaxWithLossGradient (Caffe2's CPU semantics).

Inputs logits, labels (int32/int64 class ids, N of them, or with label_prob=1
float probabilities shaped like the logits' 2-D coercion), optional per-row
weights; outputs the softmax and the loss, a scalar: the weighted mean of the rows'
cross-entropies times `scale`. Logits are coerced to 2-D at `axis`. The gradient
maker feeds the softmax output and the loss's gradient (a scalar) to the gradient
op, inserting the weights when given."""
import math

import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.loss import softmax_loss as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

FLOAT = caffe2_pb2.TensorProto.FLOAT
_ARGS = (Arg("label_prob", "int", 0, doc="1: labels are probability distributions"),
         Arg("axis", "int", 1, doc="logits are coerced to 2-D at this axis"),
         Arg("scale", "float", 1.0, doc="the loss (and its gradient) is multiplied by it"),
         Arg("order", "string", "NCHW", doc="only NCHW"))


def _infer(ctx, ins):
    x = ins[0]
    return [TensorType(x.dims, x.dtype) if x.known else UNKNOWN, TensorType((), FLOAT)]


register_schema(OpSchema(
    "SoftmaxWithLoss", num_inputs=(2, 3), num_outputs=2, args=_ARGS, inference=_infer,
    inputs=("logits", "labels", "weight_tensor"), outputs=("softmax", "loss"),
    doc="Softmax of the logits and the cross-entropy loss against the labels, averaged over "
        "the rows (weighted by weight_tensor when given) and multiplied by scale."))
register_schema(OpSchema(
    "SoftmaxWithLossGradient", num_inputs=(4, 5), num_outputs=1, args=_ARGS,
    inference=lambda ctx, ins: [ins[0]],
    inputs=("logits", "labels", "weight_tensor", "softmax", "loss_grad"), outputs=("logits_grad",),
    doc="Gradient of SoftmaxWithLoss: inputs logits, labels, [weights], softmax, d loss."))


def _coerce(ctx, x):
    axis = ctx.int("axis")
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ctx.input_error(0, "axis %d is out of range for logits of shape %s" % (axis, list(x.shape)))
    axis %= x.ndim
    n, d = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    if x.dtype.kind != "f":
        raise ctx.input_error(0, "logits must be float, got %s" % x.dtype)
    return x.reshape(n, d), axis


def _check_labels(ctx, labels, n, d, axis, label_prob):
    """Caffe2's label shape rules; returns the labels as (N,) ids or (N, D) floats."""
    if label_prob:
        if labels.ndim < 2 or math.prod(labels.shape[:axis]) != n or math.prod(labels.shape[axis:]) != d:
            raise ctx.input_error(1, "with label_prob=1 the labels must be probabilities shaped like the "
                                     "logits (%d x %d), got shape %s" % (n, d, list(labels.shape)))
        if labels.dtype.kind != "f":
            raise ctx.input_error(1, "with label_prob=1 the labels must be float, got %s" % labels.dtype)
        probs = labels.reshape(n, d).astype(np.float64)
        if probs.size and probs.min() < 0:
            raise ctx.input_error(1, "label probabilities must be non-negative, got %g" % probs.min())
        totals = probs.sum(axis=1)
        bad = np.flatnonzero(np.abs(totals - 1.0) >= 1e-5)
        if bad.size:
            raise ctx.input_error(1, "the label probabilities of row %d sum to %g, not 1"
                                  % (bad[0], totals[bad[0]]))
        return probs
    if labels.dtype.kind not in "iu":
        raise ctx.input_error(1, "labels must be int32 class ids (or pass label_prob=1 for "
                                 "probabilities), got %s" % labels.dtype)
    ok = (labels.size == n) if labels.ndim == axis else (
        math.prod(labels.shape[:axis]) == n and math.prod(labels.shape[axis:]) == 1)
    if not ok:
        raise ctx.input_error(1, "labels of shape %s do not match %d rows of logits" % (list(labels.shape), n))
    ids = labels.reshape(-1).astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= d):
        bad = int(np.flatnonzero((ids < 0) | (ids >= d))[0])
        raise ctx.input_error(1, "label %d at row %d is out of range [0, %d)" % (ids[bad], bad, d))
    return ids


def _check_weights(ctx, weights, n, index):
    if weights is None:
        return None
    if weights.size != n:
        raise ctx.input_error(index, "weights must hold one value per row (%d), got shape %s"
                              % (n, list(weights.shape)))
    return weights.reshape(-1)


def _settings(ctx):
    if ctx.string("order", "NCHW") != "NCHW":
        raise ctx.error("only order NCHW is supported")
    scale = ctx.float("scale")
    if scale < 0:
        raise ctx.error("scale must be >= 0, got %g" % scale)
    return bool(ctx.int("label_prob")), scale


@register_kernel("SoftmaxWithLoss")
def softmax_with_loss(ctx):
    label_prob, scale = _settings(ctx)

    def run(x, labels, weights=None):
        x2, axis = _coerce(ctx, x)
        lab = _check_labels(ctx, labels, x2.shape[0], x2.shape[1], axis, label_prob)
        w = _check_weights(ctx, weights, x2.shape[0], 2)
        p, loss = K.softmax_with_loss(x2, lab, w, label_prob, scale)
        return p.reshape(x.shape), loss
    return run


@register_kernel("SoftmaxWithLossGradient")
def softmax_with_loss_gradient(ctx):
    label_prob, scale = _settings(ctx)
    weighted = ctx.n_inputs == 5

    def run(x, labels, *rest):
        weights, p, dloss = rest if weighted else (None,) + rest
        x2, axis = _coerce(ctx, x)
        lab = _check_labels(ctx, labels, x2.shape[0], x2.shape[1], axis, label_prob)
        w = _check_weights(ctx, weights, x2.shape[0], 2)
        if p.shape != x.shape:
            raise ctx.input_error(ctx.n_inputs - 2, "softmax of shape %s does not match the logits' %s"
                                  % (list(p.shape), list(x.shape)))
        if np.size(dloss) != 1:
            raise ctx.input_error(ctx.n_inputs - 1, "the loss is a scalar, so its gradient must be one "
                                  "value, got shape %s" % list(np.shape(dloss)))
        dx = K.softmax_with_loss_grad(p.reshape(x2.shape), lab, w, label_prob, scale,
                                      np.asarray(dloss).reshape(-1)[0])
        return dx.reshape(x.shape)
    return run


@register_gradient("SoftmaxWithLoss")
def _softmax_with_loss_maker(g):
    ins = [g.I(0), g.I(1), g.O(0), g.GO(1)]
    if len(g.def_.input) == 3:
        ins.insert(2, g.I(2))
    return [g.op("SoftmaxWithLossGradient", ins, [g.GI(0)])]
