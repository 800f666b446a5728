"""Row-wise 8-bit quantisation and the lookups over it, and the feature-transform ops
(BatchBoxCox, BatchOneHot, BatchBucketOneHot, NGramFromCategorical, Percentile,
PiecewiseLinearTransform, Find, FindDuplicateElements, KeySplit, MergeIdLists, Unique,
RowWiseArgMax, APMeter) with hypothesis_test_util, against NumPy written here from
Caffe2's definitions. Draws include empty batches, zero lengths, repeated and unsorted ids."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import warnings

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from caffe2.python import core, workspace  # noqa: F401
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=10, deadline=None)


def _rng(seed):
    return np.random.default_rng(seed)


def quantize_table(table):
    """A uint8 table and its [N, 2] (scale, bias), made here (not by the op under test)."""
    lo, hi = table.min(axis=1), table.max(axis=1)
    scale = ((hi - lo) / 255.0).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0)
    codes = np.clip(np.rint((table - lo[:, None]) / safe[:, None]), 0, 255).astype(np.uint8)
    return codes, np.stack([scale, lo], axis=1).astype(np.float32)


def lengths_reduce(rows, lengths, mean, weights=None):
    out = np.zeros((len(lengths), rows.shape[1]), np.float64)
    start = 0
    for i, n in enumerate(lengths):
        seg = rows[start:start + n].astype(np.float64)
        if weights is not None:
            seg = seg * weights[start:start + n, None]
        if n:
            out[i] = seg.sum(0) / (n if mean else 1)
        start += n
    return out.astype(np.float32)


class TestRowwise8Bit(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(rows=st.integers(0, 5), cols=st.integers(1, 6), const_row=st.booleans(), seed=st.integers(0, 999),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_quantize_then_dequantize(self, rows, cols, const_row, seed, gc, dc):
        X = _rng(seed).uniform(-3, 3, (rows, cols)).astype(np.float32)
        if const_row and rows:
            X[0] = 1.25                       # max == min: Caffe2 writes scale 1, bias min, codes 0
        op = core.CreateOperator("FloatToRowwiseQuantized8Bits", ["X"], ["Q", "SB"])

        def check(X, Q, SB):
            self.assertEqual(Q.dtype, np.uint8)
            lo, hi = X.min(axis=1), X.max(axis=1)
            flat = (hi - lo) < 1e-10
            np.testing.assert_allclose(SB[:, 0], np.where(flat, 1.0, (hi - lo) / 255.0), rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(SB[:, 1], lo, rtol=1e-6)
            self.assertTrue(np.all(Q[flat] == 0))
            step = np.where(flat, 1.0, (hi - lo) / 255.0)[:, None]
            # the nearest code: within half a step (plus float slack) of (x - min) / scale
            self.assertTrue(np.all(np.abs(Q - (X - lo[:, None]) / step) <= 0.5 + 1e-3))
        self.assertValidationChecks(gc, op, [X], check)

    @given(rows=st.integers(0, 5), cols=st.integers(1, 6), seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_rowwise_8bit_to_float(self, rows, cols, seed, gc, dc):
        rng = _rng(seed)
        Q = rng.integers(0, 256, (rows, cols)).astype(np.uint8)
        SB = np.stack([rng.uniform(0, 0.1, rows), rng.uniform(-2, 2, rows)], axis=1).astype(np.float32)
        op = core.CreateOperator("Rowwise8BitQuantizedToFloat", ["Q", "SB"], ["Y"])
        self.assertReferenceChecks(gc, op, [Q, SB], lambda Q, SB: (Q * SB[:, :1] + SB[:, 1:],), threshold=1e-5)

    @given(lengths=st.lists(st.integers(0, 3), min_size=0, max_size=5), rows=st.integers(1, 6),
           kind=st.sampled_from(["Sum", "Mean", "WeightedSum", "WeightedMean"]),
           idx_dtype=st.sampled_from([np.int32, np.int64]), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_sparse_lengths_8bits_rowwise(self, lengths, rows, kind, idx_dtype, data, gc, dc):
        L = np.array(lengths, np.int32)
        n = int(L.sum())
        rng = _rng(n * 7 + rows)
        codes, sb = quantize_table(rng.uniform(-2, 2, (rows, 4)).astype(np.float32))
        idx = np.array(data.draw(st.lists(st.integers(0, rows - 1), min_size=n, max_size=n)), idx_dtype)
        w = rng.uniform(-1, 1, n).astype(np.float32)
        weighted = kind.startswith("Weighted")
        mean = kind.endswith("Mean")
        names = ["DATA", "WEIGHTS", "INDICES", "LENGTHS", "SB"] if weighted else ["DATA", "INDICES", "LENGTHS", "SB"]
        inputs = [codes, w, idx, L, sb] if weighted else [codes, idx, L, sb]
        op = core.CreateOperator("SparseLengths%s8BitsRowwise" % kind, names, ["OUT"])

        def ref(codes, *rest):
            table = codes * sb[:, :1] + sb[:, 1:]
            return [lengths_reduce(table[idx], L, mean, w if weighted else None)]
        self.assertReferenceChecks(gc, op, inputs, ref, threshold=1e-4)

    def test_lookup_names(self):
        codes, sb = quantize_table(np.arange(12, dtype=np.float32).reshape(3, 4))
        table = codes * sb[:, :1] + sb[:, 1:]
        idx, L, w = np.array([2, 0, 2], np.int32), np.array([2, 0, 1], np.int32), np.array([1, 2, 3], np.float32)
        for op_type in ("SparseLengthsSum8BitsRowwise", "SparseLengthsMean8BitsRowwise",
                        "SparseLengthsWeightedSum8BitsRowwise", "SparseLengthsWeightedMean8BitsRowwise"):
            weighted = "Weighted" in op_type
            names = ["D", "W", "I", "L", "S"] if weighted else ["D", "I", "L", "S"]
            inputs = [codes, w, idx, L, sb] if weighted else [codes, idx, L, sb]
            want = lengths_reduce(table[idx], L, "Mean" in op_type, w if weighted else None)
            self.assertReferenceChecks(hu.cpu_do, core.CreateOperator(op_type, names, ["O"]), inputs,
                                       lambda *a, want=want: (want,))

    def test_lookup_errors_are_named(self):
        codes, sb = quantize_table(np.ones((3, 4), np.float32))
        op = core.CreateOperator("SparseLengthsSum8BitsRowwise", ["D", "I", "L", "S"], ["O"])
        for idx, L in ((np.array([3], np.int32), np.array([1], np.int32)),
                       (np.array([0], np.int32), np.array([2], np.int32)),
                       (np.array([-1], np.int32), np.array([1], np.int32))):
            self.assertRunOpRaises(hu.cpu_do, op, [codes, idx, L, sb], exception=Caffe2Error,
                                   regexp="SparseLengthsSum8BitsRowwise")

    @given(rows=st.integers(1, 5), cols=st.integers(1, 5), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_gather_fused_8bit_rowwise(self, rows, cols, data, gc, dc):
        rng = _rng(rows * 10 + cols)
        codes = rng.integers(0, 256, (rows, cols)).astype(np.uint8)
        scale = rng.uniform(0.01, 0.1, rows).astype(np.float32)
        bias = rng.uniform(-1, 1, rows).astype(np.float32)
        fused = np.concatenate([codes, scale.view(np.uint8).reshape(rows, 4), bias.view(np.uint8).reshape(rows, 4)],
                               axis=1)
        idx = np.array(data.draw(st.lists(st.integers(0, rows - 1), max_size=6)), np.int64)
        op = core.CreateOperator("GatherFused8BitRowwise", ["DATA", "INDICES"], ["OUT"])
        self.assertReferenceChecks(
            gc, op, [fused, idx],
            lambda f, i: ((codes[i] * scale[i, None] + bias[i, None]).astype(np.float32).reshape(len(i), cols),),
            threshold=1e-5)


class TestFeatureTransforms(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(0, 4), d=st.integers(1, 4), dtype=st.sampled_from([np.float32, np.float64]),
           seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_batch_box_cox(self, n, d, dtype, seed, gc, dc):
        rng = _rng(seed)
        X = rng.uniform(-1, 3, (n, d)).astype(dtype)                  # negatives: the 1e-6 clamp matters
        l1 = np.where(rng.random(d) < 0.4, 0.0, rng.uniform(-1, 2, d)).astype(dtype)
        l2 = rng.uniform(0, 1, d).astype(dtype)
        op = core.CreateOperator("BatchBoxCox", ["data", "lambda1", "lambda2"], ["out"])

        def ref(X, l1, l2):
            base = np.maximum(X.astype(np.float64) + l2, 1e-6)
            safe = np.where(l1 == 0, 1.0, l1)
            return [np.where(l1 == 0, np.log(base), (base ** safe - 1) / safe).astype(dtype)]
        self.assertReferenceChecks(gc, op, [X, l1, l2], ref, threshold=1e-4)

    @given(n=st.integers(0, 4), lens=st.lists(st.integers(0, 3), min_size=1, max_size=3), data=st.data(),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_batch_one_hot(self, n, lens, data, gc, dc):
        d = len(lens)
        L = np.array(lens, np.int32)
        values = np.array(data.draw(st.lists(st.integers(-2, 3), min_size=int(L.sum()), max_size=int(L.sum()))),
                          np.int64)
        X = np.array(data.draw(st.lists(st.integers(-2, 3), min_size=n * d, max_size=n * d)), np.int64).reshape(n, d)
        op = core.CreateOperator("BatchOneHot", ["data", "lengths", "values"], ["out"])

        def ref(X, L, values):
            offsets = np.cumsum(L) - L
            cols = [(X[:, j:j + 1] == values[None, offsets[j]:offsets[j] + L[j]]) for j in range(d)]
            return [np.concatenate(cols, axis=1).astype(X.dtype).reshape(n, int(L.sum()))]
        self.assertReferenceChecks(gc, op, [X, L, values], ref)

    @given(n=st.integers(0, 4), lens=st.lists(st.integers(1, 3), min_size=1, max_size=3), data=st.data(),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_batch_bucket_one_hot(self, n, lens, data, gc, dc):
        d = len(lens)
        L = np.array(lens, np.int32)
        # boundaries drawn from a small grid so repeats happen, and values land on them
        bounds = np.concatenate([np.sort(data.draw(st.lists(st.integers(-2, 2), min_size=l, max_size=l)))
                                 for l in lens]).astype(np.float32) * 0.5
        X = (np.array(data.draw(st.lists(st.integers(-6, 6), min_size=n * d, max_size=n * d)), np.float32)
             * 0.25).reshape(n, d)
        op = core.CreateOperator("BatchBucketOneHot", ["data", "lengths", "boundaries"], ["out"])

        def ref(X, L, b):
            out = np.zeros((n, int(L.sum()) + d), np.float32)
            off_b, off_o = 0, 0
            for j in range(d):
                col_b = b[off_b:off_b + L[j]]
                for i in range(n):
                    lo = np.searchsorted(col_b, X[i, j], side="left")
                    hi = np.searchsorted(col_b, X[i, j], side="right")
                    out[i, off_o + (lo + hi) // 2] = 1.0
                off_b += L[j]
                off_o += L[j] + 1
            return [out]
        self.assertReferenceChecks(gc, op, [X, L, bounds], ref)

    @given(n=st.integers(0, 4), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_ngram_from_categorical(self, n, data, gc, dc):
        d = 4
        col_ids = data.draw(st.lists(st.integers(0, d - 1), min_size=1, max_size=3))
        limits = [data.draw(st.integers(1, 3)) for _ in col_ids]
        vals = [data.draw(st.integers(-2, 3)) for _ in range(sum(limits))]
        # halves included: Caffe2 rounds half away from zero
        X = (np.array(data.draw(st.lists(st.integers(-6, 8), min_size=n * d, max_size=n * d)), np.float32)
             * 0.5).reshape(n, d)
        op = core.CreateOperator("NGramFromCategorical", ["X"], ["Y"], col_ids=col_ids, categorical_limits=limits,
                                 vals=vals)

        def ref(X):
            out = np.zeros(n, np.int64)
            base, start = 1, 0
            for k, col in enumerate(col_ids):
                table = {}
                for m in range(limits[k]):
                    table[vals[start + m]] = m * base           # a repeated value: the later position wins
                for i in range(n):
                    v = int(np.sign(X[i, col]) * np.floor(abs(X[i, col]) + 0.5))
                    out[i] += table.get(v, 0)
                base *= limits[k]
                start += limits[k]
            return [out]
        self.assertReferenceChecks(gc, op, [X], ref)

    def test_ngram_from_categorical_non_finite_and_huge_values_are_absent(self):
        X = np.array([[np.nan, 1.0], [1e20, -np.inf], [-1e20, np.inf], [2.0, 1.0]], np.float32)
        op = core.CreateOperator("NGramFromCategorical", ["X"], ["Y"], col_ids=[0, 1], categorical_limits=[2, 2],
                                 vals=[5, 2, 7, 1])
        with warnings.catch_warnings():
            warnings.simplefilter("error")               # no invalid-cast warning either
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (np.array([2, 0, 0, 3], np.int64),))

    @given(n=st.integers(0, 4), lens=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data(),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_percentile(self, n, lens, data, gc, dc):
        f = len(lens)
        L = np.array(lens, np.int32)
        table = []
        for l in lens:
            values = np.sort(np.array(data.draw(st.lists(st.integers(-4, 4), min_size=l, max_size=l, unique=True)),
                                      np.float32))
            table.append(np.stack([values, np.linspace(0.1, 0.9, l)], axis=1))
        table = np.concatenate(table).astype(np.float32)
        X = (np.array(data.draw(st.lists(st.integers(-12, 12), min_size=n * f, max_size=n * f)), np.float32)
             * 0.5).reshape(n, f)
        op = core.CreateOperator("Percentile", ["original_values", "value_to_pct", "lengths"], ["pct"])

        def ref(X, table, L):
            out = np.zeros((n, f), np.float32)
            start = 0
            for j in range(f):
                vals, pcts = table[start:start + L[j], 0], table[start:start + L[j], 1]
                for i in range(n):
                    x = X[i, j]
                    if x < vals[0]:
                        out[i, j] = 0.0
                    elif x > vals[-1]:
                        out[i, j] = 1.0
                    else:
                        out[i, j] = np.interp(x, vals, pcts)        # exact hits give their percentile
                start += L[j]
            return [out]
        self.assertReferenceChecks(gc, op, [X, table, L], ref, threshold=1e-5)

    @given(n=st.integers(0, 4), m=st.integers(1, 3), pieces=st.integers(1, 3), as_inputs=st.booleans(),
           seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_piecewise_linear_transform(self, n, m, pieces, as_inputs, seed, gc, dc):
        rng = _rng(seed)
        bounds = np.sort(np.stack([rng.permutation(np.arange(-4, 5) * 0.5)[:pieces + 1] for _ in range(m)]), axis=1)
        slopes = rng.uniform(-2, 2, (m, pieces)).astype(np.float32)
        intercepts = rng.uniform(-1, 1, (m, pieces)).astype(np.float32)
        # predictions on the bounds too: pieces are (b_i, b_i+1], so a bound belongs to the piece below it
        X = (rng.integers(-6, 7, (n, m)) * 0.5).astype(np.float32)
        args = {} if as_inputs else dict(bounds=bounds.ravel().tolist(), slopes=slopes.ravel().tolist(),
                                         intercepts=intercepts.ravel().tolist())
        names = ["X", "B", "S", "I"] if as_inputs else ["X"]
        inputs = [X, bounds.astype(np.float32), slopes, intercepts] if as_inputs else [X]
        op = core.CreateOperator("PiecewiseLinearTransform", names, ["Y"], **args)

        def ref(X, *unused):
            out = np.zeros((n, m), np.float32)
            for j in range(m):
                b = bounds[j]
                for i in range(n):
                    x = X[i, j]
                    if x <= b[0]:
                        out[i, j] = slopes[j, 0] * b[0] + intercepts[j, 0]
                    elif x >= b[-1]:
                        out[i, j] = slopes[j, -1] * b[-1] + intercepts[j, -1]
                    else:
                        k = np.searchsorted(b, x, side="left") - 1
                        out[i, j] = slopes[j, k] * x + intercepts[j, k]
            return [out]
        self.assertReferenceChecks(gc, op, inputs, ref, threshold=1e-5)

    def test_piecewise_linear_binary(self):
        X = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]], np.float32)
        b, s, c = [0.0, 0.5, 1.0], [2.0, 0.5], [0.0, 0.1]

        def f(x):
            return np.where(x <= 0.5, s[0] * x + c[0], s[1] * x + c[1]).astype(np.float32)
        op = core.CreateOperator("PiecewiseLinearTransform", ["X"], ["Y"], bounds=b, slopes=s, intercepts=c, binary=1)
        pos = f(X[:, 1])
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (np.stack([1 - pos, pos], axis=1),))


class TestIdOps(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(index=st.lists(st.integers(-3, 5), max_size=8), queries=st.lists(st.integers(-4, 6), max_size=6),
           missing=st.integers(-5, -1), dtype=st.sampled_from([np.int32, np.int64]), **hu.gcs_cpu_only)
    @SETTINGS
    def test_find(self, index, queries, missing, dtype, gc, dc):
        op = core.CreateOperator("Find", ["index", "query"], ["out"], missing_value=missing)

        def ref(index, queries):
            last = {int(v): i for i, v in enumerate(index)}          # repeats: the last position
            return [np.array([last.get(int(q), missing) for q in queries], dtype)]
        self.assertReferenceChecks(gc, op, [np.array(index, dtype), np.array(queries, dtype)], ref)

    @given(values=st.lists(st.integers(-3, 3), max_size=10), dtype=st.sampled_from([np.int32, np.int64, np.float32]),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_find_duplicate_elements(self, values, dtype, gc, dc):
        op = core.CreateOperator("FindDuplicateElements", ["data"], ["indices"])
        self.assertReferenceChecks(
            gc, op, [np.array(values, dtype)],
            lambda v: (np.array([i for i in range(len(v)) if v[i] in v[:i]], np.int64),))

    @given(keys=st.lists(st.integers(0, 3), max_size=10), limit=st.integers(1, 4), **hu.gcs_cpu_only)
    @SETTINGS
    def test_key_split(self, keys, limit, gc, dc):
        keys = [k % limit for k in keys]
        op = core.CreateOperator("KeySplit", ["keys"], ["out%d" % k for k in range(limit)], categorical_limit=limit)
        self.assertReferenceChecks(
            gc, op, [np.array(keys, np.int64)],
            lambda K: [np.flatnonzero(K == k).astype(np.int32) for k in range(limit)])

    @given(lists=st.lists(st.lists(st.lists(st.integers(0, 6), max_size=3), min_size=0, max_size=4),
                          min_size=1, max_size=3).filter(lambda ls: len({len(x) for x in ls}) == 1),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_merge_id_lists(self, lists, gc, dc):
        batch = len(lists[0])
        inputs, names = [], []
        for k, samples in enumerate(lists):
            inputs += [np.array([len(s) for s in samples], np.int32),
                       np.array([v for s in samples for v in s], np.int64)]
            names += ["lengths%d" % k, "values%d" % k]
        op = core.CreateOperator("MergeIdLists", names, ["out_lengths", "out_values"])

        def ref(*a):
            merged = [sorted({v for samples in lists for v in samples[i]}) for i in range(batch)]
            return [np.array([len(m) for m in merged], np.int32), np.array([v for m in merged for v in m], np.int64)]
        self.assertReferenceChecks(gc, op, inputs, ref)

    @given(values=st.lists(st.integers(-5, 5), max_size=10), dtype=st.sampled_from([np.int32, np.int64]),
           remap=st.booleans(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_unique(self, values, dtype, remap, gc, dc):
        op = core.CreateOperator("Unique", ["X"], ["U", "R"] if remap else ["U"])

        def ref(X):
            uniq, inverse = np.unique(X, return_inverse=True)
            return [uniq.astype(dtype), inverse.reshape(-1).astype(np.int32)][:2 if remap else 1]
        self.assertReferenceChecks(gc, op, [np.array(values, dtype)], ref)

    @given(n=st.integers(0, 4), d=st.integers(1, 5), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_row_wise_arg_max(self, n, d, data, gc, dc):
        # a small value grid: ties are common, the first maximum wins
        X = np.array(data.draw(st.lists(st.integers(-2, 2), min_size=n * d, max_size=n * d)), np.float32).reshape(n, d)
        op = core.CreateOperator("RowWiseArgMax", ["X"], ["Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.argmax(X, axis=1).reshape(n, 1),))

    @given(n=st.integers(1, 6), d=st.integers(1, 3), seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_ap_meter(self, n, d, seed, gc, dc):
        rng = _rng(seed)
        scores = rng.permutation(n * d).astype(np.float32).reshape(n, d) / (n * d)     # distinct: no ties
        labels = rng.integers(0, 2, (n, d)).astype(np.int32)
        op = core.CreateOperator("APMeter", ["predictions", "labels"], ["AP"], buffer_size=10)

        def ref(scores, labels):
            ap = np.zeros(d, np.float32)
            for k in range(d):
                order = np.argsort(-scores[:, k], kind="stable")
                hits = labels[order, k]
                tp = np.cumsum(hits)
                precision_at_hits = (tp / np.arange(1, n + 1))[hits == 1]
                ap[k] = precision_at_hits.sum() / max(1, hits.sum())
            return [ap]
        self.assertReferenceChecks(gc, op, [scores, labels], ref, threshold=1e-5)

    @given(batches=st.lists(st.integers(0, 5), min_size=1, max_size=4), buffer_size=st.integers(1, 6),
           seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_ap_meter_buffer_across_runs(self, batches, buffer_size, seed, gc, dc):
        d = 2
        rng = _rng(seed)
        total = sum(batches)
        all_scores = (rng.permutation(max(total, 1) * d)[:total * d] / (total * d + 1.0)).astype(np.float32)
        all_scores = all_scores.reshape(total, d)
        all_labels = rng.integers(0, 2, (total, d)).astype(np.int32)
        # Caffe2's buffer, written out: a batch larger than the buffer keeps its last rows;
        # room is made by dropping the buffer's first entries, and the buffer is left
        # sorted by score (highest first) after every run, so those are the best scores
        buffers = [[] for _ in range(d)]
        wants, start = [], 0
        for n in batches:
            s, l = all_scores[start:start + n], all_labels[start:start + n]
            start += n
            s, l = s[max(0, n - buffer_size):], l[max(0, n - buffer_size):]
            want = np.zeros(d, np.float32)
            for k in range(d):
                buf = buffers[k]
                drop = len(buf) + len(s) - buffer_size
                if drop > 0:
                    del buf[:drop]
                buf.extend(zip(s[:, k].tolist(), l[:, k].tolist()))
                buf.sort(key=lambda pair: -pair[0])
                hits = np.array([lab for _, lab in buf], np.int64)
                tp = np.cumsum(hits)
                precision = (tp / np.arange(1, len(hits) + 1))[hits == 1] if len(hits) else np.zeros(0)
                want[k] = precision.sum() / max(1, int(hits.sum()))
            wants.append(want)
        net = core.Net("ap_meter")
        net.Proto().op.extend([core.CreateOperator("APMeter", ["predictions", "labels"], ["AP"],
                                                   buffer_size=buffer_size, device_option=gc)])
        with hu.temp_workspace(b"ap_meter_runs"):
            workspace.FeedBlob("predictions", all_scores[:0])
            workspace.FeedBlob("labels", all_labels[:0])
            workspace.CreateNet(net)
            start = 0
            for n, want in zip(batches, wants):
                workspace.FeedBlob("predictions", all_scores[start:start + n])
                workspace.FeedBlob("labels", all_labels[start:start + n])
                start += n
                workspace.RunNet(net.Proto().name)
                np.testing.assert_allclose(workspace.FetchBlob("AP"), want, rtol=1e-5, atol=1e-6)
