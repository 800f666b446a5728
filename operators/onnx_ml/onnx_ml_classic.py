"""The classic ai.onnx.ml ops scikit-learn's converters emit besides the trees:
Scaler, Normalizer, Imputer, OneHotEncoder, CategoryMapper, FeatureVectorizer,
ZipMap, LinearRegressor, LinearClassifier, SVMRegressor, SVMClassifier. Semantics
follow onnx's specification; where the spec leaves room (binary linear classifiers)
they follow onnxruntime, the runtime these models are converted for."""
import numpy as np

from caffe2py.kernels.cpu.onnx_ml import svm_probability
from caffe2py.kernels.cpu.onnx_ml import trees as trees_k
from caffe2py.registry import Arg
from caffe2py.schema_rules import Range

from ..onnx_base import onnx_op

ML = "ai.onnx.ml"


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


def _labels(ctx, ints="classlabels_ints", strings="classlabels_strings"):
    if ctx.has(strings) and ctx.strings(strings):
        return np.array([_text(s) for s in ctx.strings(strings)], dtype=object)
    if ctx.has(ints) and ctx.ints(ints):
        return np.asarray(ctx.ints(ints), np.int64)
    return None


def _rows(ctx, x):
    """X as (N, F) float64 (a 1-D X is one row)."""
    if x.dtype.kind not in "fiu":
        raise ctx.input_error(0, "X must be numeric, got %s" % x.dtype)
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    if x2.ndim != 2:
        raise ctx.input_error(0, "X must have rank 1 or 2, got shape %s" % list(x.shape))
    return x2.astype(np.float64)


def _feature_rows(x):
    """Any X as (N, F) rows: 0-d is one value, 1-D one row, N-D N rows of the rest
    (F spelled out: reshape(0, -1) is ambiguous for an empty batch)."""
    if x.ndim < 2:
        return x.reshape(1, x.size)
    return x.reshape(x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64)))


def _transform(ctx):
    name = ctx.string("post_transform", "NONE")
    if name not in trees_k.POST_TRANSFORMS:
        raise ctx.error("post_transform must be one of %s, got '%s'" % (", ".join(trees_k.POST_TRANSFORMS), name))
    return name


def _per_feature(ctx, name, values, f, pos=0):
    """A per-feature vector of length 1 or F broadcast to F, or a named error."""
    if values.size not in (1, f):
        raise ctx.input_error(pos, "%s has %d values; X has %d features" % (name, values.size, f))
    return values


@onnx_op("Scaler", (1, None), domain=ML)
def scaler(ctx):
    offset = np.asarray(ctx.floats("offset", [0.0]), np.float64)
    scale = np.asarray(ctx.floats("scale", [1.0]), np.float64)

    def run(x):
        x2 = _rows(ctx, x)
        f = x2.shape[1]
        y = (x2 - _per_feature(ctx, "offset", offset, f)) * _per_feature(ctx, "scale", scale, f)
        return y.astype(np.float32).reshape(x.shape)
    return run


@onnx_op("Normalizer", (1, None), domain=ML)
def normalizer(ctx):
    norm = ctx.string("norm", "MAX")
    if norm not in ("MAX", "L1", "L2"):
        raise ctx.error("norm must be MAX, L1 or L2, got '%s'" % norm)

    def run(x):
        x2 = _rows(ctx, x)
        if norm == "MAX":
            d = x2.max(axis=1, keepdims=True) if x2.shape[1] else np.ones((x2.shape[0], 1))
        elif norm == "L1":
            d = np.abs(x2).sum(axis=1, keepdims=True)
        else:
            d = np.sqrt((x2 * x2).sum(axis=1, keepdims=True))
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(d == 0, x2, x2 / np.where(d == 0, 1.0, d))
        return y.astype(np.float32).reshape(x.shape)
    return run


@onnx_op("Imputer", (1, None), domain=ML)
def imputer(ctx):
    if ctx.has("imputed_value_floats") and ctx.floats("imputed_value_floats"):
        imputed = np.asarray(ctx.floats("imputed_value_floats"), np.float32)
        replaced = ctx.float("replaced_value_float", 0.0)
    elif ctx.has("imputed_value_int64s") and ctx.ints("imputed_value_int64s"):
        imputed = np.asarray(ctx.ints("imputed_value_int64s"), np.int64)
        replaced = ctx.int("replaced_value_int64", 0)
    else:
        raise ctx.error("needs imputed_value_floats or imputed_value_int64s")

    def run(x):
        if (imputed.dtype.kind == "f") != (x.dtype.kind == "f"):
            raise ctx.input_error(0, "X of type %s does not take %s imputed values" % (x.dtype, imputed.dtype))
        x2 = _feature_rows(x)
        fill = _per_feature(ctx, "imputed values", imputed, x2.shape[1]).astype(x.dtype)
        hit = np.isnan(x2) if isinstance(replaced, float) and replaced != replaced else x2 == replaced
        return np.where(hit, np.broadcast_to(fill, x2.shape), x2).reshape(x.shape)
    return run


@onnx_op("OneHotEncoder", (1, None), domain=ML)
def one_hot_encoder(ctx):
    cats = _labels(ctx, "cats_int64s", "cats_strings")
    if cats is None:
        raise ctx.error("needs cats_int64s or cats_strings")
    index = {c: i for i, c in enumerate(cats.tolist())}
    zeros = ctx.int("zeros", 1)

    def run(x):
        if (cats.dtype.kind == "O") != (x.dtype.kind in "OSU"):
            raise ctx.input_error(0, "X of type %s does not match the %s categories" % (x.dtype, cats.dtype))
        flat = x.reshape(-1)
        if cats.dtype.kind != "O" and x.dtype.kind == "f" and not np.all(np.isfinite(flat) & (flat == np.round(flat))):
            raise ctx.input_error(0, "float X must hold whole numbers to match int64 categories")
        keys = [_text(v) for v in flat.tolist()] if cats.dtype.kind == "O" else flat.astype(np.int64).tolist()
        out = np.zeros((flat.size, cats.size), np.float32)
        for r, k in enumerate(keys):
            i = index.get(k)
            if i is None:
                if not zeros:
                    raise ctx.input_error(0, "category %r is not among cats (zeros=0)" % (k,))
                continue
            out[r, i] = 1.0
        return out.reshape(x.shape + (cats.size,))
    return run


@onnx_op("CategoryMapper", (1, None), domain=ML)
def category_mapper(ctx):
    ints, strings = ctx.ints("cats_int64s", []), [_text(s) for s in ctx.strings("cats_strings", [])]
    if len(ints) != len(strings):
        raise ctx.error("cats_int64s and cats_strings differ in length (%d, %d)" % (len(ints), len(strings)))
    to_int = dict(zip(strings, ints))
    to_str = dict(zip(ints, strings))
    default_int, default_str = ctx.int("default_int64", -1), ctx.string("default_string", "_Unused")

    def run(x):
        flat = x.reshape(-1).tolist()
        if x.dtype.kind in "OSU":
            return np.array([to_int.get(_text(v), default_int) for v in flat], np.int64).reshape(x.shape)
        if x.dtype.kind not in "iu":
            raise ctx.input_error(0, "X must be strings or int64, got %s" % x.dtype)
        return np.array([to_str.get(v, default_str) for v in flat], dtype=object).reshape(x.shape)
    return run


@onnx_op("FeatureVectorizer", (1, None), domain=ML)
def feature_vectorizer(ctx):
    dims = ctx.ints("inputdimensions", [])
    if any(d < 0 for d in dims):
        raise ctx.error("inputdimensions must not be negative, got %s" % list(dims))

    def run(*xs):
        if len(dims) != len(xs):
            raise ctx.error("inputdimensions has %d entries for %d inputs" % (len(dims), len(xs)))
        parts = []
        rows = None
        for pos, (x, d) in enumerate(zip(xs, dims)):
            x2 = _feature_rows(x)
            if rows is None:
                rows = x2.shape[0]
            elif x2.shape[0] != rows:
                raise ctx.input_error(pos, "has %d rows, input 0 has %d" % (x2.shape[0], rows))
            part = np.zeros((rows, d), np.float32)           # shorter inputs are padded with 0
            take = min(d, x2.shape[1])
            part[:, :take] = x2[:, :take]
            parts.append(part)
        return np.concatenate(parts, axis=1) if parts else np.zeros((0, 0), np.float32)
    return run


@onnx_op("ZipMap", (1, None), domain=ML)
def zip_map(ctx):
    labels = _labels(ctx, "classlabels_int64s", "classlabels_strings")
    if labels is None:
        raise ctx.error("needs classlabels_int64s or classlabels_strings")
    keys = labels.tolist()

    def run(x):
        x2 = x.reshape(1, -1) if x.ndim == 1 else x
        if x2.ndim != 2 or x2.shape[1] != len(keys):
            raise ctx.input_error(0, "X must be (N, %d) for %d labels, got shape %s"
                                  % (len(keys), len(keys), list(x.shape)))
        return [dict(zip(keys, row)) for row in x2.astype(np.float32).tolist()]
    return run


@onnx_op("LinearRegressor", (1, None), domain=ML)
def linear_regressor(ctx):
    targets = ctx.int("targets", 1)
    coef = np.asarray(ctx.floats("coefficients", []), np.float64)
    intercepts = np.asarray(ctx.floats("intercepts", []), np.float64)
    if targets < 1 or coef.size % targets or coef.size < targets:
        raise ctx.error("coefficients (%d values) must hold `targets` (%d) rows" % (coef.size, targets))
    if intercepts.size not in (0, targets):
        raise ctx.error("intercepts has %d values for %d targets" % (intercepts.size, targets))
    w = coef.reshape(targets, -1)
    transform = _transform(ctx)

    def run(x):
        x2 = _rows(ctx, x)
        if x2.shape[1] != w.shape[1]:
            raise ctx.input_error(0, "X has %d features, the coefficients %d" % (x2.shape[1], w.shape[1]))
        y = x2 @ w.T
        if intercepts.size:
            y += intercepts
        return trees_k.post_transform(y, transform).astype(np.float32)
    return run


def _binary_scores(s, transform):
    """Two columns from one decision value s, as onnxruntime writes them: [1 - s, s]
    (NONE), [1 - l(s), l(s)] (LOGISTIC), else the transform of [-s, s]."""
    both = np.stack([-s, s], axis=1)
    if transform == "NONE":
        return np.stack([1.0 - s, s], axis=1)
    if transform == "LOGISTIC":
        p = 1.0 / (1.0 + np.exp(-s))
        return np.stack([1.0 - p, p], axis=1)
    return trees_k.post_transform(both, transform)


@onnx_op("LinearClassifier", (1, None), domain=ML)
def linear_classifier(ctx):
    labels = _labels(ctx)
    if labels is None:
        raise ctx.error("needs classlabels_ints or classlabels_strings")
    coef = np.asarray(ctx.floats("coefficients", []), np.float64)
    intercepts = np.asarray(ctx.floats("intercepts", []), np.float64)
    rows = intercepts.size if intercepts.size else labels.size
    if rows < 1 or coef.size % rows:
        raise ctx.error("coefficients (%d values) do not split into %d class rows" % (coef.size, rows))
    w = coef.reshape(rows, -1)
    binary = rows == 1 and labels.size == 2
    if not binary and rows != labels.size:
        raise ctx.error("%d coefficient rows for %d class labels" % (rows, labels.size))
    transform = _transform(ctx)

    def run(x):
        x2 = _rows(ctx, x)
        if x2.shape[1] != w.shape[1]:
            raise ctx.input_error(0, "X has %d features, the coefficients %d" % (x2.shape[1], w.shape[1]))
        s = x2 @ w.T
        if intercepts.size:
            s += intercepts
        if binary:
            d = s[:, 0]
            return labels[(d > 0).astype(np.int64)], _binary_scores(d, transform).astype(np.float32)
        scores = trees_k.post_transform(s, transform)
        picked = np.argmax(s, axis=1) if s.shape[0] else np.zeros(0, np.int64)
        return labels[picked], scores.astype(np.float32)
    return run


# ----------------------------------------------------------------- SVMs

_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _svm_kernel(ctx):
    kind = ctx.string("kernel_type", "LINEAR")
    if kind not in _KERNELS:
        raise ctx.error("kernel_type must be one of %s, got '%s'" % (", ".join(_KERNELS), kind))
    params = list(ctx.floats("kernel_params", [])) + [0.0, 0.0, 0.0]
    gamma, coef0, degree = params[0], params[1], params[2]

    def apply(x, sv):
        """(N, S) kernel values between rows of x and support vectors sv."""
        if kind == "RBF":
            d = (x * x).sum(1)[:, None] + (sv * sv).sum(1)[None, :] - 2.0 * (x @ sv.T)
            return np.exp(-gamma * np.maximum(d, 0.0))
        dot = x @ sv.T
        if kind == "LINEAR":
            return dot
        if kind == "POLY":
            return (gamma * dot + coef0) ** degree
        return np.tanh(gamma * dot + coef0)
    return apply


def _support_vectors(ctx, n_supports):
    """The (n_supports, features) support vectors; none when n_supports is 0, which
    makes the SVM linear and its support_vectors unused (as onnxruntime reads it)."""
    if not n_supports:
        return np.zeros((0, 0), np.float64)
    sv = np.asarray(ctx.floats("support_vectors", []), np.float64)
    if sv.size < n_supports or sv.size % n_supports:
        raise ctx.error("support_vectors (%d values) do not split into %d vectors" % (sv.size, n_supports))
    return sv.reshape(n_supports, -1)


@onnx_op("SVMRegressor", (1, None), domain=ML, args=(Arg("n_supports", "int", 0, check=Range(0)),))
def svm_regressor(ctx):
    n_supports = ctx.int("n_supports", 0)
    sv = _support_vectors(ctx, n_supports)
    coef = np.asarray(ctx.floats("coefficients", []), np.float64)
    rho = np.asarray(ctx.floats("rho", [0.0]), np.float64)
    kernel, one_class, transform = _svm_kernel(ctx), ctx.int("one_class", 0), _transform(ctx)
    if n_supports and coef.size != n_supports:
        raise ctx.error("coefficients has %d values for %d support vectors" % (coef.size, n_supports))

    def run(x):
        x2 = _rows(ctx, x)
        if n_supports:
            if x2.shape[1] != sv.shape[1]:
                raise ctx.input_error(0, "X has %d features, the support vectors %d" % (x2.shape[1], sv.shape[1]))
            y = kernel(x2, sv) @ coef + rho[0]
        else:                       # a linear SVM: coefficients are the weights
            if x2.shape[1] != coef.size:
                raise ctx.input_error(0, "X has %d features, the coefficients %d" % (x2.shape[1], coef.size))
            y = kernel(x2, coef.reshape(1, -1))[:, 0] + rho[0]
        if one_class:
            y = np.where(y > 0, 1.0, -1.0)
        return trees_k.post_transform(y[:, None], transform).astype(np.float32)
    return run


@onnx_op("SVMClassifier", (1, None), domain=ML)
def svm_classifier(ctx):
    labels = _labels(ctx)
    if labels is None:
        raise ctx.error("needs classlabels_ints or classlabels_strings")
    n_classes = labels.size
    counts = np.asarray(ctx.ints("vectors_per_class", []), np.int64)
    if counts.size and counts.min() < 0:
        raise ctx.error("vectors_per_class must not be negative, got %s" % counts.tolist())
    n_supports = int(counts.sum())
    sv = _support_vectors(ctx, n_supports)
    coef = np.asarray(ctx.floats("coefficients", []), np.float64)
    rho = np.asarray(ctx.floats("rho", []), np.float64)
    prob_a = np.asarray(ctx.floats("prob_a", []), np.float64)
    prob_b = np.asarray(ctx.floats("prob_b", []), np.float64)
    kernel, transform = _svm_kernel(ctx), _transform(ctx)
    if n_supports:
        if counts.size != n_classes:
            raise ctx.error("vectors_per_class has %d entries for %d classes" % (counts.size, n_classes))
        if coef.size != (n_classes - 1) * n_supports:
            raise ctx.error("coefficients has %d values; %d classes and %d support vectors need %d"
                            % (coef.size, n_classes, n_supports, (n_classes - 1) * n_supports))
        pairs = n_classes * (n_classes - 1) // 2
        if rho.size != pairs:
            raise ctx.error("rho has %d values for %d class pairs" % (rho.size, pairs))
        if prob_a.size or prob_b.size:
            if prob_a.size != pairs or prob_b.size != pairs:
                raise ctx.error("prob_a and prob_b need one value per class pair (%d), got %d and %d"
                                % (pairs, prob_a.size, prob_b.size))
            if not (np.isfinite(prob_a).all() and np.isfinite(prob_b).all()):
                raise ctx.error("prob_a and prob_b must be finite")
    else:
        raise ctx.error("SVMClassifier without support vectors (linear form) is not supported")
    starts = np.concatenate([[0], np.cumsum(counts)])
    dual = coef.reshape(n_classes - 1, n_supports)

    def run(x):
        x2 = _rows(ctx, x)
        if x2.shape[1] != sv.shape[1]:
            raise ctx.input_error(0, "X has %d features, the support vectors %d" % (x2.shape[1], sv.shape[1]))
        k = kernel(x2, sv)
        n = x2.shape[0]
        votes = np.zeros((n, n_classes), np.int64)
        decisions = []
        p = 0
        # libsvm's one-vs-one: pair (i, j) uses class i's vectors with dual row j-1 and
        # class j's vectors with dual row i
        for i in range(n_classes):
            for j in range(i + 1, n_classes):
                si, sj = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
                d = k[:, si] @ dual[j - 1, si] + k[:, sj] @ dual[i, sj] + rho[p]
                decisions.append(d)
                votes[:, i] += d > 0
                votes[:, j] += d <= 0
                p += 1
        dec = np.stack(decisions, axis=1) if decisions else np.zeros((n, 0))
        if prob_a.size:
            # Platt-scaled pair probabilities coupled into class probabilities; the
            # label stays the vote winner, as in onnxruntime
            probs = svm_probability.couple(svm_probability.pairwise_probabilities(dec, prob_a, prob_b, n_classes))
            picked = np.argmax(votes, axis=1) if n else np.zeros(0, np.int64)
            return labels[picked], trees_k.post_transform(probs, transform).astype(np.float32)
        if n_classes == 2:
            picked = (dec[:, 0] <= 0).astype(np.int64)       # d > 0 votes for the first class
            # onnxruntime scores the pair [-d, d]
            both = np.stack([-dec[:, 0], dec[:, 0]], axis=1)
            return labels[picked], trees_k.post_transform(both, transform).astype(np.float32)
        picked = np.argmax(votes, axis=1) if n else np.zeros(0, np.int64)
        return labels[picked], trees_k.post_transform(dec, transform).astype(np.float32)
    return run
