"""Ranking losses and distances: LambdaRankNdcg, PairWiseLoss, MarginRankingCriterion,
CosineEmbeddingCriterion, BernoulliJSD, L1Distance, WeightedSigmoidCrossEntropyWithLogits
and SpatialSoftmaxWithLoss, each with its Caffe2 gradient op."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.loss import metrics as M
from caffe2py.kernels.cpu.loss import ranking as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

DT = caffe2_pb2.TensorProto
F32 = np.float32


def _float(ctx, index, a, what):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ctx.input_error(index, "%s must be a float32 tensor, got %s"
                              % (what, getattr(a, "dtype", type(a).__name__)))
    return a


def _ints(ctx, index, a, what, dtypes=(np.int32,)):
    if not isinstance(a, np.ndarray) or a.dtype not in dtypes:
        raise ctx.input_error(index, "%s must be an %s tensor, got %s"
                              % (what, " or ".join(np.dtype(d).name for d in dtypes),
                                 getattr(a, "dtype", type(a).__name__)))
    return a


def _same_size(ctx, index, a, n, what):
    if a.size != n:
        raise ctx.input_error(index, "%s must hold %d values, got %d" % (what, n, a.size))


def _lengths(ctx, index, lengths, total):
    _ints(ctx, index, lengths, "lengths")
    if lengths.ndim != 1:
        raise ctx.input_error(index, "lengths must be a vector")
    if (lengths < 0).any():
        raise ctx.input_error(index, "lengths must be non-negative")
    if int(lengths.sum()) != total:
        raise ctx.input_error(index, "lengths sum to %d, the input has %d rows" % (lengths.sum(), total))
    return lengths.astype(np.int64)


def _shape_of(i):
    return lambda ctx, ins: [ins[i]]


# ----------------------------------------------------------------- LambdaRankNdcg

_LAMBDA_ARGS = (Arg("use_ndcg_as_loss", "bool", False, doc="loss = IDCG - DCG instead of the lambda-weighted "
                                                           "pairwise logistic loss"),
                Arg("use_idcg_normalization", "bool", True, doc="divide loss and gradient by the ideal DCG"),
                Arg("use_exp_gain", "bool", True, doc="gain 2^rel (with use_ndcg_as_loss=1 and 0: gain rel)"))

def _lambda_infer(ctx, ins):
    if len(ins) == 2:                   # Caffe2's older form: one session, one loss
        return [TensorType((1,), DT.FLOAT), ins[0]]
    return [TensorType(ins[2].dims, DT.FLOAT) if ins[2].known else UNKNOWN, ins[0]]


register_schema(OpSchema(
    "LambdaRankNdcg", num_inputs=(2, 3), num_outputs=2, args=_LAMBDA_ARGS, inputs=("y_pred", "rel", "session_lengths"),
    outputs=("loss", "dy_pred"), inference=_lambda_infer,
    doc="LambdaRank (Wu et al. 2010) per session of consecutive rows (session_lengths, int32): scores y_pred "
        "[N], relevance rel [N]. Outputs the loss per session and its gradient with respect to y_pred "
        "(the gradient op scales it by the loss gradient). A session whose labels are all 0 adds nothing. "
        "Without session_lengths (Caffe2's first, two-input form) all rows are one session and that "
        "form's formula applies: loss [1] and dy_pred of the opposite sign (the lambda-weighted sum of "
        "log-sigmoids), no options."))

register_schema(OpSchema(
    "LambdaRankNdcgGradient", num_inputs=(3, 4), num_outputs=1, args=_LAMBDA_ARGS,
    inputs=("y", "session_lengths", "dy_cache", "dLoss"), outputs=("dy",),
    inference=lambda ctx, ins: [ins[-2]],
    doc="dy = dLoss[session] * dy_cache, per session. Caffe2's older three-input form (y, dy_cache, "
        "dLoss) has one session and a one-value dLoss."))


@register_kernel("LambdaRankNdcg")
def lambda_rank_ndcg(ctx):
    flags = ctx.bool("use_ndcg_as_loss"), ctx.bool("use_idcg_normalization"), ctx.bool("use_exp_gain")

    def run(y, r, *lengths):
        _float(ctx, 0, y, "y_pred")
        if y.ndim != 1:
            raise ctx.input_error(0, "y_pred must be 1-D, got shape %s" % list(y.shape))
        _float(ctx, 1, r, "rel")
        _same_size(ctx, 1, r, y.size, "rel")
        if not lengths:                 # Caffe2's first form: its own formula (see lambda_rank_ndcg_v1)
            return K.lambda_rank_ndcg_v1(y, r.reshape(-1))
        return K.lambda_rank_ndcg(y, r.reshape(-1), _lengths(ctx, 2, lengths[0], y.size), *flags)
    return run


@register_kernel("LambdaRankNdcgGradient")
def lambda_rank_ndcg_gradient(ctx):
    def run(y, *rest):
        lengths, (dy_cache, dloss) = (rest[0], rest[1:]) if len(rest) == 3 else (None, rest)
        at = len(rest) - 1              # position of dy_cache: 2, or 1 in the older form
        _float(ctx, at, dy_cache, "dy_cache")
        if dy_cache.ndim != 1 or dy_cache.size != y.size:
            raise ctx.input_error(at, "dy_cache must be 1-D like y (%d values)" % y.size)
        lens = _lengths(ctx, 1, lengths, y.size) if lengths is not None else np.array([y.size], np.int64)
        _float(ctx, at + 1, dloss, "dLoss")
        _same_size(ctx, at + 1, dloss, lens.size, "dLoss (one per session)")
        return K.scale_by_session(dy_cache, dloss.reshape(-1), lens)
    return run


@register_gradient("LambdaRankNdcg")
def _lambda_rank_grad(g):
    lengths = [g.I(2)] if len(g.def_.input) == 3 else []       # the older form has no session lengths
    return [g.op("LambdaRankNdcgGradient", [g.I(0)] + lengths + [g.O(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- PairWiseLoss

register_schema(OpSchema(
    "PairWiseLoss", num_inputs=(2, 3), num_outputs=1, inputs=("X", "label", "lengths"), outputs=("Y",),
    inference=lambda ctx, ins: [TensorType((ins[2].dims[0],) if len(ins) > 2 and ins[2].known else
                                           ((1,) if ins[0].known and ins[0].dims and ins[0].dims[0] else (0,)),
                                           DT.FLOAT)],
    doc="Mean over the pairs of rows with different labels in each session (lengths, int32; one session "
        "when absent) of log(1 + exp(sign * (x_j - x_i))), sign = +1 where label_i > label_j. X and label "
        "are [N] or [N, 1]; Y holds one loss per session ([0] for an empty X)."))

register_schema(OpSchema(
    "PairWiseLossGradient", num_inputs=(3, 4), num_outputs=1, inputs=("X", "label", "dY", "lengths"),
    outputs=("dX",), inference=_shape_of(0), doc="Gradient of PairWiseLoss with respect to X."))


def _pair_inputs(ctx, x, label):
    _float(ctx, 0, x, "X")
    n = x.shape[0] if x.ndim else 0
    if n and x.size != n:
        raise ctx.input_error(0, "X must be [N] or [N, 1] (one score per row), got %s" % list(x.shape))
    _float(ctx, 1, label, "label")
    if not (label.ndim == 1 or (label.ndim == 2 and label.shape[1] == 1)) or label.shape[0] != n:
        raise ctx.input_error(1, "label must be [%d] or [%d, 1], got %s" % (n, n, list(label.shape)))
    return n


@register_kernel("PairWiseLoss")
def pairwise_loss(ctx):
    def run(x, label, *rest):
        n = _pair_inputs(ctx, x, label)
        if n == 0:
            return np.zeros(0, F32)
        lens = _lengths(ctx, 2, rest[0], n) if rest else np.array([n], np.int64)
        return K.pairwise_loss(x.reshape(-1), label.reshape(-1), lens)
    return run


@register_kernel("PairWiseLossGradient")
def pairwise_loss_gradient(ctx):
    def run(x, label, dy, *rest):
        n = _pair_inputs(ctx, x, label)
        if n == 0:
            return np.zeros(x.shape, F32)
        lens = _lengths(ctx, 3, rest[0], n) if rest else np.array([n], np.int64)
        _float(ctx, 2, dy, "dY")
        if dy.ndim != 1 or dy.size != lens.size:
            raise ctx.input_error(2, "dY must be [%d] (one per session), got %s" % (lens.size, list(dy.shape)))
        return K.pairwise_loss_gradient(x.reshape(-1), label.reshape(-1), dy, lens).reshape(x.shape)
    return run


@register_gradient("PairWiseLoss")
def _pairwise_grad(g):
    ins = [g.I(0), g.I(1), g.GO(0)] + ([g.I(2)] if len(g.def_.input) == 3 else [])
    return [g.op("PairWiseLossGradient", ins, [g.GI(0)])]


# ----------------------------------------------------------------- MarginRankingCriterion

register_schema(OpSchema(
    "MarginRankingCriterion", num_inputs=3, num_outputs=1, args=(Arg("margin", "float", 1.0),),
    inputs=("X1", "X2", "Y"), outputs=("loss",), inference=_shape_of(0),
    doc="loss = max(0, -Y * (X1 - X2) + margin) elementwise; Y int32 labels +1 (X1 should rank higher) "
        "or -1."))

register_schema(OpSchema(
    "MarginRankingCriterionGradient", num_inputs=4, num_outputs=2, args=(Arg("margin", "float", 1.0),),
    inputs=("X1", "X2", "Y", "dLoss"), outputs=("dX1", "dX2"), inference=lambda ctx, ins: [ins[0], ins[1]],
    doc="dX1 = -Y * dLoss and dX2 = Y * dLoss where -Y * (X1 - X2) + margin >= 0, else 0."))


def _margin_inputs(ctx, x1, x2, y):
    _float(ctx, 0, x1, "X1")
    _float(ctx, 1, x2, "X2")
    _same_size(ctx, 1, x2, x1.size, "X2 (like X1)")
    _ints(ctx, 2, y, "Y")
    _same_size(ctx, 2, y, x1.size, "Y (like X1)")
    return x2.reshape(x1.shape), y.reshape(x1.shape).astype(F32)


@register_kernel("MarginRankingCriterion")
def margin_ranking(ctx):
    margin = ctx.float("margin")

    def run(x1, x2, y):
        x2, y = _margin_inputs(ctx, x1, x2, y)
        return K.margin_ranking(x1, x2, y, margin)
    return run


@register_kernel("MarginRankingCriterionGradient")
def margin_ranking_gradient(ctx):
    margin = ctx.float("margin")

    def run(x1, x2, y, dloss):
        x2r, y = _margin_inputs(ctx, x1, x2, y)
        _float(ctx, 3, dloss, "dLoss")
        _same_size(ctx, 3, dloss, x1.size, "dLoss")
        dx1, dx2 = K.margin_ranking_gradient(x1, x2r, y, dloss.reshape(x1.shape), margin)
        return dx1, dx2.reshape(x2.shape)
    return run


@register_gradient("MarginRankingCriterion")
def _margin_grad(g):
    return [g.op("MarginRankingCriterionGradient", [g.I(0), g.I(1), g.I(2), g.GO(0)], [g.GI(0), g.GI(1)])]


# ----------------------------------------------------------------- CosineEmbeddingCriterion

register_schema(OpSchema(
    "CosineEmbeddingCriterion", num_inputs=2, num_outputs=1, args=(Arg("margin", "float", 0.0),),
    inputs=("S", "Y"), outputs=("loss",), inference=_shape_of(0),
    doc="loss = 1 - S where Y == 1, else max(0, S - margin); S cosine similarities, Y int32 labels."))

register_schema(OpSchema(
    "CosineEmbeddingCriterionGradient", num_inputs=3, num_outputs=1, args=(Arg("margin", "float", 0.0),),
    inputs=("S", "Y", "dLoss"), outputs=("dS",), inference=_shape_of(0),
    doc="dS = -dLoss where Y == 1, else dLoss * (S >= margin)."))


def _cosine_inputs(ctx, s, y):
    _float(ctx, 0, s, "S")
    _ints(ctx, 1, y, "Y")
    if y.size != s.size:
        raise ctx.input_error(1, "The embedding and label should have the same size.")
    return y.reshape(s.shape)


@register_kernel("CosineEmbeddingCriterion")
def cosine_embedding(ctx):
    margin = ctx.float("margin")
    return lambda s, y: K.cosine_embedding(s, _cosine_inputs(ctx, s, y), margin)


@register_kernel("CosineEmbeddingCriterionGradient")
def cosine_embedding_gradient(ctx):
    margin = ctx.float("margin")

    def run(s, y, dloss):
        y = _cosine_inputs(ctx, s, y)
        _float(ctx, 2, dloss, "dLoss")
        _same_size(ctx, 2, dloss, s.size, "dLoss")
        return K.cosine_embedding_gradient(s, y, dloss.reshape(s.shape), margin)
    return run


@register_gradient("CosineEmbeddingCriterion")
def _cosine_grad(g):
    return [g.op("CosineEmbeddingCriterionGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- BernoulliJSD

register_schema(OpSchema(
    "BernoulliJSD", num_inputs=2, num_outputs=1, inputs=("X", "T"), outputs=("L",),
    inference=lambda ctx, ins: [TensorType((int(np.prod(ins[0].dims)),), DT.FLOAT) if ins[0].known else UNKNOWN],
    doc="Jensen-Shannon divergence between Bernoulli(X) and Bernoulli(T) elementwise: H((X + T) / 2) - "
        "(H(X) + H(T)) / 2, H the entropy (0 within 1e-20 of 0 or 1). L is 1-D with X's size."))

register_schema(OpSchema(
    "BernoulliJSDGradient", num_inputs=3, num_outputs=1, inputs=("go", "X", "T"), outputs=("gi",),
    inference=_shape_of(1), doc="gi = go * (logit(X) - logit((X + T) / 2)) / 2, shaped like X."))


@register_kernel("BernoulliJSD")
def bernoulli_jsd(ctx):
    def run(x, t):
        _float(ctx, 0, x, "X")
        _float(ctx, 1, t, "T")
        _same_size(ctx, 1, t, x.size, "T (like X)")
        return K.bernoulli_jsd(x.reshape(-1), t.reshape(-1))
    return run


@register_kernel("BernoulliJSDGradient")
def bernoulli_jsd_gradient(ctx):
    def run(go, x, t):
        _float(ctx, 1, x, "X")
        _float(ctx, 2, t, "T")
        _same_size(ctx, 2, t, x.size, "T (like X)")
        _float(ctx, 0, go, "go")
        _same_size(ctx, 0, go, x.size, "go (like X)")
        return K.bernoulli_jsd_gradient(go.reshape(-1), x.reshape(-1), t.reshape(-1)).reshape(x.shape)
    return run


@register_gradient("BernoulliJSD")
def _jsd_grad(g):
    return [g.op("BernoulliJSDGradient", [g.GO(0), g.I(0), g.I(1)], [g.GI(0)])]


# ----------------------------------------------------------------- L1Distance

register_schema(OpSchema(
    "L1Distance", num_inputs=2, num_outputs=1, inputs=("X", "Y"), outputs=("Z",),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0] if ins[0].dims else 1,), DT.FLOAT)
                                if ins[0].known else UNKNOWN],
    doc="Z[i] = sum |X[i] - Y[i]| over each row (dim 0 indexes rows; a 0-D input is one row)."))

register_schema(OpSchema(
    "L1DistanceGradient", num_inputs=3, num_outputs=2, inputs=("X", "Y", "dDistance"), outputs=("dX", "dY"),
    inference=lambda ctx, ins: [ins[0], ins[1]],
    doc="dX = sign(X - Y) * dDistance (0 within 1e-12), dY = -dX."))


def _l1_inputs(ctx, x, y):
    _float(ctx, 0, x, "X")
    _float(ctx, 1, y, "Y")
    if x.shape != y.shape:
        raise ctx.input_error(1, "X %s and Y %s must have the same shape" % (list(x.shape), list(y.shape)))
    n = x.shape[0] if x.ndim else 1
    return x.reshape(n, -1) if n else x.reshape(0, 0), y.reshape(n, -1) if n else y.reshape(0, 0)


@register_kernel("L1Distance")
def l1_distance(ctx):
    def run(x, y):
        x2, y2 = _l1_inputs(ctx, x, y)
        return K.l1_distance(x2, y2)
    return run


@register_kernel("L1DistanceGradient")
def l1_distance_gradient(ctx):
    def run(x, y, dz):
        x2, y2 = _l1_inputs(ctx, x, y)
        _float(ctx, 2, dz, "dDistance")
        _same_size(ctx, 2, dz, x2.shape[0], "dDistance (one per row)")
        dx, dy = K.l1_distance_gradient(x2, y2, dz.reshape(-1))
        return dx.reshape(x.shape), dy.reshape(y.shape)
    return run


@register_gradient("L1Distance")
def _l1_grad(g):
    return [g.op("L1DistanceGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0), g.GI(1)])]


# ----------------------------------------------------------------- WeightedSigmoidCrossEntropyWithLogits

register_schema(OpSchema(
    "WeightedSigmoidCrossEntropyWithLogits", num_inputs=3, num_outputs=1, inputs=("logits", "targets", "weights"),
    outputs=("xentropy",),
    inference=lambda ctx, ins: [TensorType(ins[0].dims[:-1], DT.FLOAT) if ins[0].known and ins[0].dims else UNKNOWN],
    doc="Per row (all dims but the last), -mean over the last dim of weights * (t log sigmoid(x) + (1 - t) "
        "log(1 - sigmoid(x))), computed without overflow; logits, targets and weights of one shape."))

register_schema(OpSchema(
    "WeightedSigmoidCrossEntropyWithLogitsGradient", num_inputs=4, num_outputs=1,
    inputs=("g", "logits", "targets", "weights"), outputs=("dlogits",), inference=_shape_of(1),
    doc="dlogits = -g / inner * weights * (t - sigmoid(x))."))


def _weighted_inputs(ctx, logits, targets, weights, offset=0):
    _float(ctx, offset, logits, "logits")
    if logits.ndim == 0:
        raise ctx.input_error(offset, "logits must be at least 1-D")
    for k, (a, what) in enumerate(((targets, "targets"), (weights, "weights")), start=1):
        _float(ctx, offset + k, a, what)
        if a.shape != logits.shape:
            raise ctx.input_error(offset + k, "%s %s must be shaped like logits %s"
                                  % (what, list(a.shape), list(logits.shape)))


@register_kernel("WeightedSigmoidCrossEntropyWithLogits")
def weighted_sigmoid_xent(ctx):
    def run(logits, targets, weights):
        _weighted_inputs(ctx, logits, targets, weights)
        return K.weighted_sigmoid_xent(logits, targets, weights)
    return run


@register_kernel("WeightedSigmoidCrossEntropyWithLogitsGradient")
def weighted_sigmoid_xent_gradient(ctx):
    def run(g, logits, targets, weights):
        _weighted_inputs(ctx, logits, targets, weights, offset=1)
        _float(ctx, 0, g, "g")
        _same_size(ctx, 0, g, int(np.prod(logits.shape[:-1], dtype=np.int64)), "g (one per row)")
        return K.weighted_sigmoid_xent_gradient(g, logits, targets, weights)
    return run


@register_gradient("WeightedSigmoidCrossEntropyWithLogits")
def _weighted_xent_grad(g):
    return [g.op("WeightedSigmoidCrossEntropyWithLogitsGradient", [g.GO(0), g.I(0), g.I(1), g.I(2)], [g.GI(0)])]


# ----------------------------------------------------------------- SpatialSoftmaxWithLoss

register_schema(OpSchema(
    "SpatialSoftmaxWithLoss", num_inputs=(2, 3), num_outputs=2, args=(Arg("scale", "float", 1.0,
                                                                          doc="gradient scale"),
                                                                      Arg("order", "string", "NCHW")),
    inputs=("logits", "labels", "weight_tensor"), outputs=("softmax", "loss"),
    inference=lambda ctx, ins: [ins[0], TensorType((), DT.FLOAT)],
    doc="Softmax over the channels of logits [N, D, H, W] at every pixel, and the weighted mean over "
        "pixels of -log(max(p[label], 1e-20)) for labels [N, H, W] (int32; -1 ignores the pixel), "
        "weights [N, H, W] optional. As in Caffe2, `scale` multiplies only the gradient."))

register_schema(OpSchema(
    "SpatialSoftmaxWithLossGradient", num_inputs=(4, 5), num_outputs=1, args=(Arg("scale", "float", 1.0),
                                                                              Arg("order", "string", "NCHW")),
    inputs=("logits", "labels", "weight_tensor", "softmax", "dloss"), outputs=("dlogits",),
    inference=_shape_of(0),
    doc="dlogits = (softmax - onehot(label)) * weight * scale / total weight * dloss, 0 at ignored pixels."))


def _spatial_inputs(ctx, x, labels, weights):
    _float(ctx, 0, x, "logits")
    if x.ndim != 4:
        raise ctx.input_error(0, "logits must be 4-D [N, D, H, W], got %s" % list(x.shape))
    _ints(ctx, 1, labels, "labels")
    n, d, h, w = x.shape
    if labels.shape != (n, h, w):
        raise ctx.input_error(1, "labels must be [%d, %d, %d], got %s" % (n, h, w, list(labels.shape)))
    bad = (labels != -1) & ((labels < 0) | (labels >= d))
    if bad.any():
        raise ctx.input_error(1, "Label seems incorrect: label %d is not -1 and not in [0, %d)"
                              % (labels[bad][0], d))
    if weights is not None:
        _float(ctx, 2, weights, "weight_tensor")
        if weights.size != labels.size:
            raise ctx.input_error(2, "weight_tensor must hold one weight per pixel (%d), got %d"
                                  % (labels.size, weights.size))
        weights = weights.reshape(labels.shape)
    return weights


@register_kernel("SpatialSoftmaxWithLoss")
def spatial_softmax_with_loss(ctx):
    if ctx.string("order") != "NCHW":
        raise ctx.error("SpatialSoftmaxWithLoss supports order NCHW only")

    def run(x, labels, *rest):
        weights = _spatial_inputs(ctx, x, labels, rest[0] if rest else None)
        return M.spatial_softmax_with_loss(x, labels, weights)
    return run


@register_kernel("SpatialSoftmaxWithLossGradient")
def spatial_softmax_with_loss_gradient(ctx):
    scale = ctx.float("scale")

    def run(x, labels, *rest):
        weights = rest[0] if len(rest) == 3 else None
        p, dloss = rest[-2], rest[-1]
        weights = _spatial_inputs(ctx, x, labels, weights)
        _float(ctx, ctx.n_inputs - 2, p, "softmax")
        if p.shape != x.shape:
            raise ctx.input_error(ctx.n_inputs - 2, "softmax must be shaped like logits")
        _float(ctx, ctx.n_inputs - 1, dloss, "dloss")
        _same_size(ctx, ctx.n_inputs - 1, dloss, 1, "dloss")
        return M.spatial_softmax_with_loss_gradient(p, labels, weights, dloss.reshape(-1)[0], scale)
    return run


@register_gradient("SpatialSoftmaxWithLoss")
def _spatial_softmax_grad(g):
    ins = [g.I(0), g.I(1)] + ([g.I(2)] if len(g.def_.input) == 3 else []) + [g.O(0), g.GO(1)]
    return [g.op("SpatialSoftmaxWithLossGradient", ins, [g.GI(0)])]
