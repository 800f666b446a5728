"""Feature processing against NumPy references written here: BatchBoxCox, BatchOneHot,
BatchBucketOneHot, OneHot, SegmentOneHot, Percentile, PiecewiseLinearTransform,
NGramFromCategorical, MergeIdLists, KeySplit."""
import bisect
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from caffe2py import core
from caffe2py.errors import Caffe2Error

from _reference import SETTINGS, ReferenceTestCase, run

seed_st = st.integers(0, 2 ** 31 - 1)


def _piecewise_ref(x, bounds, slopes, intercepts, pieces):
    out = np.empty(x.shape)
    for j in range(x.shape[1]):
        b = bounds[j * (pieces + 1):(j + 1) * (pieces + 1)]
        s, c = slopes[j * pieces:(j + 1) * pieces], intercepts[j * pieces:(j + 1) * pieces]
        for i in range(x.shape[0]):
            v = float(x[i, j])
            if v <= b[0]:
                out[i, j] = s[0] * b[0] + c[0]
            elif v >= b[-1]:
                out[i, j] = s[-1] * b[-1] + c[-1]
            else:
                k = next(k for k in range(pieces) if b[k] < v <= b[k + 1])      # (low, high]
                out[i, j] = s[k] * v + c[k]
    return out


class TestFeatureOps(ReferenceTestCase):
    @SETTINGS
    @given(seed_st, st.sampled_from([np.float32, np.float64]), st.integers(0, 5), st.integers(1, 4))
    def test_batch_box_cox(self, seed, dtype, n, d):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1, 5, size=(n, d)).astype(dtype)
        l1 = rng.choice([0.0, 0.5, -1.0, 2.0], size=d).astype(dtype)
        l2 = rng.uniform(0, 2, size=d).astype(dtype)

        def ref(data, a, b):
            out = np.empty(data.shape)
            for i in range(n):
                for j in range(d):
                    t = max(float(data[i, j]) + float(b[j]), 1e-6)
                    out[i, j] = math.log(t) if a[j] == 0 else (t ** float(a[j]) - 1) / float(a[j])
            return out
        self.check(core.CreateOperator("BatchBoxCox", ["X", "A", "B"], ["Y"]), [x, l1, l2], ref,
                   threshold=1e-3 if dtype == np.float32 else 1e-9)

    @SETTINGS
    @given(seed_st, st.sampled_from([np.float32, np.int64]))
    def test_batch_one_hot(self, seed, dtype):
        rng = np.random.default_rng(seed)
        n, d = int(rng.integers(0, 5)), int(rng.integers(1, 4))
        x = rng.integers(0, 4, size=(n, d)).astype(dtype)
        lens = rng.integers(0, 4, size=d).astype(np.int32)
        vals = rng.integers(0, 4, size=int(lens.sum())).astype(dtype)

        def ref(data, ln, v):
            cols = [(j, v[p]) for j in range(d) for p in range(sum(ln[:j]), sum(ln[:j + 1]))]
            return np.array([[float(row[j] == val) for j, val in cols] for row in data]).reshape(n, len(cols))
        out = self.check(core.CreateOperator("BatchOneHot", ["X", "L", "V"], ["Y"]), [x, lens, vals], ref)
        assert out[0].dtype == dtype

    @SETTINGS
    @given(seed_st)
    def test_batch_bucket_one_hot(self, seed):
        rng = np.random.default_rng(seed)
        n, d = int(rng.integers(0, 5)), int(rng.integers(1, 4))
        x = rng.integers(-1, 6, size=(n, d)).astype(np.float32)
        lens = rng.integers(1, 4, size=d).astype(np.int32)
        bounds = np.concatenate([np.sort(rng.integers(0, 5, size=k)) for k in lens]).astype(np.float32)

        def ref(data, ln, b):
            rows = []
            for row in data:
                out, start = [], 0
                for j, k in enumerate(ln):
                    hot = [0.0] * (k + 1)
                    edges = list(b[start:start + k])
                    # right-inclusive buckets; on a repeated boundary, the middle of its run (Caffe2)
                    hot[(bisect.bisect_left(edges, row[j]) + bisect.bisect_right(edges, row[j])) // 2] = 1.0
                    out += hot
                    start += k
                rows.append(out)
            return np.array(rows).reshape(n, int(ln.sum()) + d)
        self.check(core.CreateOperator("BatchBucketOneHot", ["X", "L", "B"], ["Y"]), [x, lens, bounds], ref)

    def test_one_hot_family_doc_examples_and_errors(self):
        x = np.array([[2, 3], [4, 1], [2, 5]], np.float32)
        (out,) = run(core.CreateOperator("BatchBucketOneHot", ["X", "L", "B"], ["Y"]),
                     [x, np.array([2, 3], np.int32), np.array([0.1, 2.5, 1, 3.1, 4.5], np.float32)])
        np.testing.assert_array_equal(out, [[0, 1, 0, 0, 1, 0, 0], [0, 0, 1, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0, 1]])
        (out,) = run(core.CreateOperator("BatchOneHot", ["X", "L", "V"], ["Y"]),
                     [x, np.array([2, 3], np.int32), np.array([2, 4, 1, 3, 5], np.float32)])
        np.testing.assert_array_equal(out, [[1, 0, 0, 1, 0], [0, 1, 1, 0, 0], [1, 0, 0, 0, 1]])
        with pytest.raises(Caffe2Error, match="The sum of length should be equal to the length of boundaries"):
            run(core.CreateOperator("BatchBucketOneHot", ["X", "L", "B"], ["Y"]),
                [x, np.array([2, 2], np.int32), np.zeros(5, np.float32)])
        with pytest.raises(Caffe2Error, match="index 4 is out of range \\[0, 4\\)"):
            run(core.CreateOperator("OneHot", ["I", "S"], ["Y"]), [np.array([1, 4]), np.array([4])])

    @SETTINGS
    @given(seed_st)
    def test_one_hot_and_segment_one_hot(self, seed):
        rng = np.random.default_rng(seed)
        size = int(rng.integers(1, 6))
        idx = rng.integers(0, size, size=rng.integers(0, 7)).astype(np.int64)
        self.check(core.CreateOperator("OneHot", ["I", "S"], ["Y"]), [idx, np.array([size])],
                   lambda i, s: np.eye(size)[i].reshape(len(i), size))
        lengths = np.array([2, 0, idx.size - 2], np.int32) if idx.size >= 2 else np.array([idx.size], np.int32)

        def seg_ref(ln, i, s):
            out = np.zeros((len(ln), size))
            pos = 0
            for r, n in enumerate(ln):
                out[r, i[pos:pos + n]] = 1
                pos += n
            return out
        self.check(core.CreateOperator("SegmentOneHot", ["L", "I", "S"], ["Y"]),
                   [lengths, idx, np.array([size], np.int64)], seg_ref)

    @SETTINGS
    @given(seed_st)
    def test_percentile(self, seed):
        rng = np.random.default_rng(seed)
        n, f = int(rng.integers(0, 5)), int(rng.integers(1, 4))
        lens = rng.integers(1, 5, size=f).astype(np.int32)
        samples = [np.sort(rng.choice(np.arange(10.0), size=k, replace=False)) for k in lens]
        pcts = [np.sort(rng.uniform(0, 1, size=k)) for k in lens]
        table = np.stack([np.concatenate(samples), np.concatenate(pcts)], axis=1).astype(np.float32)
        x = rng.integers(-1, 11, size=(n, f)).astype(np.float32) + rng.choice([0, 0.5], size=(n, f)).astype(np.float32)

        def ref(values, _, __):
            out = np.zeros(values.shape)
            for j in range(f):
                s, p = table[sum(lens[:j]):sum(lens[:j + 1]), 0], table[sum(lens[:j]):sum(lens[:j + 1]), 1]
                for i in range(n):
                    v = values[i, j]
                    if v > s[-1]:
                        out[i, j] = 1.0
                    elif v < s[0]:
                        out[i, j] = 0.0
                    elif v in s:
                        out[i, j] = p[list(s).index(v)]
                    else:
                        out[i, j] = np.interp(v, s, p)
            return out
        self.check(core.CreateOperator("Percentile", ["X", "VP", "L"], ["Y"]), [x, table, lens], ref,
                   threshold=1e-5)

    def test_percentile_doc_example(self):
        (out,) = run(core.CreateOperator("Percentile", ["X", "VP", "L"], ["Y"]),
                     [np.array([[3, 5, 3], [5, 1, 6]], np.float32),
                      np.array([[3, 0.2], [5, 0.5], [1, 0.3], [3, 0.6]], np.float32), np.array([2, 1, 1], np.int32)])
        np.testing.assert_allclose(out, [[0.2, 1.0, 0.6], [0.5, 0.3, 1.0]])

    @SETTINGS
    @given(seed_st, st.booleans())
    def test_piecewise_linear_transform(self, seed, as_inputs):
        rng = np.random.default_rng(seed)
        n, m, pieces = int(rng.integers(0, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
        bounds = np.concatenate([np.sort(rng.choice(np.arange(-4.0, 5.0), pieces + 1, replace=False))
                                 for _ in range(m)]).astype(np.float32)
        slopes = rng.standard_normal(m * pieces).astype(np.float32)
        intercepts = rng.standard_normal(m * pieces).astype(np.float32)
        x = (rng.integers(-10, 11, size=(n, m)) / 2).astype(np.float32)       # hits bounds exactly too

        def ref(data, *_):
            return _piecewise_ref(data, bounds, slopes, intercepts, pieces)
        if as_inputs:
            op = core.CreateOperator("PiecewiseLinearTransform", ["X", "B", "S", "C"], ["Y"])
            self.check(op, [x, bounds, slopes, intercepts], ref, threshold=1e-5)
        else:
            op = core.CreateOperator("PiecewiseLinearTransform", ["X"], ["Y"], bounds=bounds.tolist(),
                                     slopes=slopes.tolist(), intercepts=intercepts.tolist())
            self.check(op, [x], ref, threshold=1e-5)

    def test_piecewise_linear_binary_and_errors(self):
        op = core.CreateOperator("PiecewiseLinearTransform", ["X"], ["Y"], bounds=[0, 0.5, 1], slopes=[1, 2],
                                 intercepts=[0, -0.5], binary=1)
        x = np.array([[0.9, 0.1], [0.5, 0.5]], np.float32)
        (out,) = run(op, [x])
        pos = _piecewise_ref(x[:, 1:], [0, 0.5, 1], [1, 2], [0, -0.5], 2)[:, 0]
        np.testing.assert_allclose(out, np.stack([1 - pos, pos], axis=1), rtol=1e-6)
        (out,) = run(op, [x[:, 1].copy()])
        np.testing.assert_allclose(out, pos, rtol=1e-6)
        with pytest.raises(Caffe2Error, match="bounds must be sorted for each group"):
            run(core.CreateOperator("PiecewiseLinearTransform", ["X"], ["Y"], bounds=[1, 0], slopes=[1],
                                    intercepts=[0]), [x])
        with pytest.raises(Caffe2Error, match="all set or all not set"):
            run(core.CreateOperator("PiecewiseLinearTransform", ["X"], ["Y"], bounds=[0, 1]), [x])

    @SETTINGS
    @given(seed_st)
    def test_ngram_from_categorical(self, seed):
        rng = np.random.default_rng(seed)
        n, width = int(rng.integers(0, 5)), 4
        col_ids = [int(c) for c in rng.choice(width, size=int(rng.integers(1, 4)), replace=False)]
        limits = [int(v) for v in rng.integers(1, 4, size=len(col_ids))]
        vals = [int(v) for v in rng.integers(0, 5, size=sum(limits))]
        x = (rng.integers(0, 6, size=(n, width)) + rng.choice([0.0, 0.3, -0.3], size=(n, width))).astype(np.float32)

        def ref(floats):
            out = []
            for row in floats:
                total, base, start = 0, 1, 0
                for c, lim in zip(col_ids, limits):
                    v = int(math.floor(float(row[c]) + 0.5))
                    block = vals[start:start + lim]
                    pos = (len(block) - 1 - block[::-1].index(v)) if v in block else 0    # last occurrence
                    total += pos * base
                    base *= lim
                    start += lim
                out.append(total)
            return np.array(out, np.int64)
        op = core.CreateOperator("NGramFromCategorical", ["X"], ["Y"], col_ids=col_ids, categorical_limits=limits,
                                 vals=vals)
        self.check(op, [x], ref)

    @SETTINGS
    @given(seed_st, st.integers(1, 3))
    def test_merge_id_lists(self, seed, lists):
        rng = np.random.default_rng(seed)
        batch = int(rng.integers(0, 4))
        ins = []
        for _ in range(lists):
            lens = rng.integers(0, 4, size=batch).astype(np.int32)
            ins += [lens, rng.integers(0, 6, size=int(lens.sum())).astype(np.int64)]

        def ref(*pairs):
            out_l, out_v, offsets = [], [], [0] * lists
            for b in range(batch):
                merged = set()
                for k in range(lists):
                    n = pairs[2 * k][b]
                    merged.update(pairs[2 * k + 1][offsets[k]:offsets[k] + n].tolist())
                    offsets[k] += n
                out_l.append(len(merged))
                out_v += sorted(merged)
            return np.array(out_l, np.int32), np.array(out_v, np.int64)
        names = ["%s%d" % (t, k) for k in range(lists) for t in ("L", "V")]
        self.check(core.CreateOperator("MergeIdLists", names, ["OL", "OV"]), ins, ref)

    @SETTINGS
    @given(seed_st, st.integers(1, 4))
    def test_key_split(self, seed, limit):
        keys = np.random.default_rng(seed).integers(0, limit, size=8).astype(np.int64)
        op = core.CreateOperator("KeySplit", ["K"], ["O%d" % j for j in range(limit)], categorical_limit=limit)
        self.check(op, [keys], lambda k: [np.flatnonzero(k == j).astype(np.int32) for j in range(limit)])
        with pytest.raises(Caffe2Error, match="key %d is out of range" % limit):
            run(op, [np.array([limit])])
