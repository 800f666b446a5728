"""Ranking losses and distances: LambdaRank NDCG, pairwise logistic loss, margin
ranking, cosine embedding, Bernoulli Jensen-Shannon divergence, L1 distance and the
weighted sigmoid cross-entropy (Caffe2's listwise_l2r_op, rank_loss_op,
margin_ranking_criterion_op, cosine_embedding_criterion_op, jsd_op, distance_op,
cross_entropy_op). Sessions are consecutive runs of `lengths` rows; the pairwise
work of one session is one (n, n) matrix. Callers check shapes and lengths."""
import numpy as np

F32 = np.float32
_EPS32 = float(np.finfo(np.float32).eps)
_MIN_LOG_DIFF = float(np.log(np.finfo(np.float32).eps))


def _sessions(lengths):
    ends = np.cumsum(lengths)
    return zip(ends - lengths, ends)


# ----------------------------------------------------------------- LambdaRank NDCG

def _descending(values):
    return np.argsort(-values, kind="stable")


def lambda_rank_session(y, r, use_ndcg_as_loss, use_idcg_normalization, use_exp_gain):
    """(loss, dy) of one session: y predicted scores, r relevance labels."""
    n = y.size
    dy = np.zeros(n, np.float64)
    if n == 0 or np.abs(r).sum() < 1e-6:
        return 0.0, dy
    y64, r64 = y.astype(np.float64), r.astype(np.float64)
    gain = r64 if (use_ndcg_as_loss and not use_exp_gain) else np.exp(r64 * np.log(2.0))
    inv_log = np.log(2.0) / np.log(np.arange(2, n + 2, dtype=np.float64))      # discount of rank k
    ideal = np.empty(n)
    ideal[_descending(r64)] = inv_log
    discount = np.empty(n)
    discount[_descending(y64)] = inv_log
    idcg = float((gain * ideal).sum())
    dcg = float((gain * discount).sum())
    lam = np.abs((discount[:, None] - discount[None, :]) * (gain[:, None] - gain[None, :]))
    sign = np.where(r64[:, None] - r64[None, :] > 0, 1.0, -1.0)
    ydiff = y64[:, None] - y64[None, :]
    dy = -(lam * sign / (1.0 + np.exp(sign * ydiff))).sum(axis=1)
    if use_ndcg_as_loss:
        loss = idcg - dcg
    else:
        z = sign * ydiff
        with np.errstate(over="ignore"):
            log_sig = np.where(z > 100, 0.0, np.where(z < -100, z, -np.log1p(np.exp(-z))))
        loss = -(lam * log_sig).sum()
    if use_idcg_normalization:
        dy /= max(idcg, 1e-5)
        loss /= max(idcg, 1e-5)
    return loss, dy


def lambda_rank_ndcg(y, r, lengths, use_ndcg_as_loss, use_idcg_normalization, use_exp_gain):
    """(loss per session [S], dy [N])."""
    loss = np.zeros(len(lengths), F32)
    dy = np.zeros(y.size, F32)
    for s, (lo, hi) in enumerate(_sessions(lengths)):
        loss[s], dy[lo:hi] = lambda_rank_session(y[lo:hi], r[lo:hi], use_ndcg_as_loss,
                                                 use_idcg_normalization, use_exp_gain)
    return loss, dy


def lambda_rank_ndcg_v1(y, r):
    """Caffe2's first LambdaRankNdcg (inputs y, rel; no session lengths, no options):
    one session, exp gains, normalised by the ideal DCG, with the opposite sign to
    the later op's loss and gradient (its loss is the lambda-weighted sum of
    log-sigmoids, not its negation). An empty input gives loss NaN (0 / 0)."""
    if y.size == 0:
        return np.full(1, np.nan, F32), np.zeros(0, F32)
    loss, dy = lambda_rank_ndcg(y, r, np.array([y.size]), False, True, True)
    return -loss, -dy


def scale_by_session(dy_cache, dloss, lengths):
    return (dy_cache * np.repeat(dloss.astype(F32), lengths)).astype(F32)


# ----------------------------------------------------------------- PairWiseLoss

def _pair_terms(x, label):
    """sign[i, j] (+1 / -1 where label i > / < label j, 0 for equal labels or j >= i),
    and the margins x_j - x_i, over the lower triangle j < i."""
    n = x.size
    lower = np.tril(np.ones((n, n), bool), -1)
    ld = label[:, None].astype(np.float64) - label[None, :]
    differ = lower & (np.abs(ld) >= _EPS32)
    sign = np.where(differ, np.where(ld > 0, 1.0, -1.0), 0.0)
    return sign, x[None, :].astype(np.float64) - x[:, None]


def _log_logit(z):
    """log(1 + exp(z)) with Caffe2's cut-offs at log(float epsilon)."""
    with np.errstate(over="ignore"):
        mid = np.log(np.exp(z) + 1.0)
    return np.where(z < _MIN_LOG_DIFF, 0.0, np.where(z > -_MIN_LOG_DIFF, z, mid))


def pairwise_loss(x, label, lengths):
    out = np.zeros(len(lengths), F32)
    for s, (lo, hi) in enumerate(_sessions(lengths)):
        sign, diff = _pair_terms(x[lo:hi], label[lo:hi])
        pairs = int(np.count_nonzero(sign))
        if pairs:
            out[s] = (_log_logit(sign * diff) * (sign != 0)).sum() / pairs
    return out


def pairwise_loss_gradient(x, label, dy, lengths):
    dx = np.zeros(x.size, np.float64)
    for s, (lo, hi) in enumerate(_sessions(lengths)):
        sign, diff = _pair_terms(x[lo:hi], label[lo:hi])
        pairs = int(np.count_nonzero(sign))
        if not pairs:
            continue
        grad = np.where(sign != 0, sign * float(dy[s]) / (1.0 + np.exp(-sign * diff)), 0.0)
        dx[lo:hi] = (-grad.sum(axis=1) + grad.sum(axis=0)) / pairs
    return dx.astype(F32)


# ----------------------------------------------------------------- criteria

def margin_ranking(x1, x2, y, margin):
    return np.maximum(-y * (x1 - x2) + F32(margin), F32(0)).astype(F32)


def margin_ranking_gradient(x1, x2, y, dloss, margin):
    active = (-y * (x1 - x2) + F32(margin)) >= 0
    dx1 = np.where(active, -y * dloss, 0).astype(F32)
    return dx1, np.where(active, y * dloss, 0).astype(F32)


def cosine_embedding(s, y, margin):
    return np.where(y == 1, F32(1) - s, np.maximum(F32(0), s - F32(margin))).astype(F32)


def cosine_embedding_gradient(s, y, dloss, margin):
    return (dloss * np.where(y == 1, F32(-1), (s >= F32(margin)).astype(F32))).astype(F32)


_JSD_THRESHOLD = 1e-20


def _entropy(p):
    p = p.astype(np.float64)
    q = 1 - p
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -p * np.log(p) - q * np.log(q)
    return np.where((p < _JSD_THRESHOLD) | (q < _JSD_THRESHOLD), 0.0, h)


def _logit(p):
    x = np.clip(p.astype(np.float64), _JSD_THRESHOLD, 1 - _JSD_THRESHOLD)
    return -np.log(1.0 / x - 1.0)


def bernoulli_jsd(p, t):
    """JSD of Bernoulli(p) and Bernoulli(t): H((p + t) / 2) - (H(p) + H(t)) / 2."""
    avg = (p.astype(np.float64) + t) / 2.0
    return (_entropy(avg) - (_entropy(p) + _entropy(t)) / 2.0).astype(F32)


def bernoulli_jsd_gradient(g, p, t):
    avg = (p.astype(np.float64) + t) / 2.0
    return (g * (_logit(p) - _logit(avg)) / 2.0).astype(F32)


def l1_distance(x2, y2):
    return np.abs(x2.astype(np.float64) - y2).sum(axis=1).astype(F32)


def l1_distance_gradient(x2, y2, dz):
    diff = x2.astype(np.float64) - y2
    sign = np.where(diff > 1e-12, 1.0, np.where(diff < -1e-12, -1.0, 0.0))
    dx = sign * dz.astype(np.float64)[:, None]
    return dx.astype(F32), (-dx).astype(F32)


def _xent_terms(x):
    x = x.astype(np.float64)
    return x, (x >= 0).astype(np.float64), np.log1p(np.exp(-np.abs(x)))


def weighted_sigmoid_xent(logits, targets, weights):
    """Per row (all dims but the last): -mean over the last dim of w * (t log sig(x) +
    (1 - t) log(1 - sig(x)))."""
    x, pos, soft = _xent_terms(logits)
    value = weights * (x * (targets - pos) - soft)
    inner = logits.shape[-1]
    rows = int(np.prod(logits.shape[:-1], dtype=np.int64))     # explicit: -1 is ambiguous when inner is 0
    with np.errstate(invalid="ignore", divide="ignore"):      # an empty last dim: 0 / 0, as Caffe2 computes
        mean = -value.reshape(rows, inner).sum(axis=1) / inner
    return mean.reshape(logits.shape[:-1]).astype(F32)


def weighted_sigmoid_xent_gradient(dy, logits, targets, weights):
    x = logits.astype(np.float64)
    sig = 0.5 * (1.0 + np.tanh(0.5 * x))
    inner = logits.shape[-1]
    rows = int(np.prod(logits.shape[:-1], dtype=np.int64))
    factor = -np.asarray(dy, np.float64).reshape(rows, 1) / max(inner, 1)
    back = (weights * (targets - sig)).reshape(rows, inner)
    return (back * factor).reshape(logits.shape).astype(F32)
