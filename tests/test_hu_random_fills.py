"""RangeFill against NumPy, and the random ops (UniformIntFill, UniqueUniformFill,
WeightedSample, WeightedMultiSampling, SortAndShuffle) by the properties Caffe2
guarantees, under @given with hypothesis_test_util: shape, dtype, range, distinctness,
avoided values, zero-weight entries never drawn, permutations, chunk boundaries."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2.proto import caffe2_pb2

from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=10, deadline=None)
shapes = st.lists(st.integers(0, 4), min_size=1, max_size=3)


class TestFills(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(shape=shapes, from_input=st.booleans(), extra=st.lists(st.integers(1, 3), max_size=1), **hu.gcs_cpu_only)
    @SETTINGS
    def test_range_fill(self, shape, from_input, extra, gc, dc):
        if from_input:
            op = core.CreateOperator("RangeFill", ["X"], ["Y"], extra_shape=extra)
            want = shape + extra
            self.assertReferenceChecks(gc, op, [np.zeros(shape, np.float32)],
                                       lambda X: (np.arange(int(np.prod(want)), dtype=np.float32).reshape(want),))
        else:
            op = core.CreateOperator("RangeFill", [], ["Y"], shape=shape)
            self.assertReferenceChecks(gc, op, [],
                                       lambda: (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape),))

    @given(shape=shapes, lo=st.integers(-5, 5), span=st.integers(1, 6), **hu.gcs_cpu_only)
    @SETTINGS
    def test_uniform_int_fill(self, shape, lo, span, gc, dc):
        hi = lo + span
        op = core.CreateOperator("UniformIntFill", [], ["Y"], shape=shape, min=lo, max=hi)

        def check(Y):
            self.assertEqual(Y.dtype, np.int32)
            self.assertEqual(list(Y.shape), shape)
            self.assertTrue(np.all((Y >= lo) & (Y <= hi)), "values outside [%d, %d]" % (lo, hi))
        self.assertValidationChecks(gc, op, [], check)

    def test_uniform_int_fill_reaches_both_ends_and_takes_bounds_as_inputs(self):
        def check(S, LO, HI, Y):
            self.assertEqual(Y.shape, (300,))
            self.assertEqual(set(np.unique(Y).tolist()), {-1, 0, 1})     # both ends are included
        op = core.CreateOperator("UniformIntFill", ["S", "LO", "HI"], ["Y"], input_as_shape=1)
        self.assertValidationChecks(hu.cpu_do, op, [np.array([300], np.int64), np.array([-1], np.int32),
                                                    np.array([1], np.int32)], check)

    def test_uniform_int_fill_bad_range_is_named(self):
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("UniformIntFill", [], ["Y"], shape=[2], min=3, max=3),
                               [], exception=Caffe2Error, regexp="UniformIntFill")

    @given(shape=shapes, lo=st.integers(-5, 5), avoid=st.lists(st.integers(-8, 20), max_size=5),
           dtype=st.sampled_from([np.int32, np.int64]), **hu.gcs_cpu_only)
    @SETTINGS
    def test_unique_uniform_fill(self, shape, lo, avoid, dtype, gc, dc):
        hi = lo + 15
        count = int(np.prod(shape))
        avoid = np.array(avoid, dtype)
        free = len(set(range(lo, hi + 1)) - set(avoid.tolist()))
        if count > free:
            shape, count = [free], free
        code = caffe2_pb2.TensorProto.INT32 if dtype == np.int32 else caffe2_pb2.TensorProto.INT64
        op = core.CreateOperator("UniqueUniformFill", ["S", "avoid"], ["Y"], min=lo, max=hi, dtype=code)

        def check(S, avoid, Y):
            self.assertEqual(Y.dtype, dtype)
            self.assertEqual(list(Y.shape), shape)
            flat = Y.reshape(-1).tolist()
            self.assertEqual(len(set(flat)), len(flat), "values repeat")
            self.assertTrue(all(lo <= v <= hi for v in flat))
            self.assertFalse(set(flat) & set(avoid.tolist()), "an avoided value was drawn")
        self.assertValidationChecks(gc, op, [np.zeros(shape, np.float32), avoid], check)


class TestSampling(hu.HypothesisTestCase):
    @given(batch=st.integers(0, 5), d=st.integers(1, 5), with_values=st.booleans(), data=st.data(),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_weighted_sample(self, batch, d, with_values, data, gc, dc):
        # rows with zero weights besides at least one positive
        W = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.0, 0.5, 2.0]), min_size=batch * d,
                                        max_size=batch * d)), np.float32).reshape(batch, d)
        W[:, data.draw(st.integers(0, d - 1))] += 1.0
        V = (np.arange(batch * d, dtype=np.float32) * 10).reshape(batch, d)
        op = core.CreateOperator("WeightedSample", ["W", "V"] if with_values else ["W"],
                                 ["I", "P"] if with_values else ["I"])

        def check(W, I, V=None, P=None):
            self.assertEqual(I.dtype, np.int32)
            self.assertEqual(I.shape, (batch,))
            self.assertTrue(np.all((I >= 0) & (I < d)))
            self.assertTrue(np.all(W[np.arange(batch), I] > 0), "a zero-weight entry was drawn")
            if with_values:
                np.testing.assert_array_equal(P, V[np.arange(batch), I])
        inputs = [W, V] if with_values else [W]
        self.assertValidationChecks(gc, op, inputs, check)

    def test_weighted_sample_frequencies(self):
        W = np.tile(np.array([[1.0, 0.0, 3.0]], np.float32), (4000, 1))

        def check(W, I):
            freq = np.bincount(I, minlength=3) / len(I)
            np.testing.assert_allclose(freq, [0.25, 0.0, 0.75], atol=0.03)
        self.assertValidationChecks(hu.cpu_do, core.CreateOperator("WeightedSample", ["W"], ["I"]), [W], check)

    @given(weights=st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=1, max_size=6), samples=st.integers(0, 8),
           shaped=st.booleans(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_weighted_multi_sampling(self, weights, samples, shaped, gc, dc):
        weights[-1] += 1.0                                 # a positive total
        cdf = np.cumsum(weights).astype(np.float32)
        if shaped:
            shape = (samples // 2, 2)
            op = core.CreateOperator("WeightedMultiSampling", ["cdf", "S"], ["I"])
            inputs = [cdf, np.zeros(shape, np.float32)]
        else:
            shape = (samples,)
            op = core.CreateOperator("WeightedMultiSampling", ["cdf"], ["I"], num_samples=samples)
            inputs = [cdf]

        def check(cdf, I, S=None):
            self.assertEqual(I.dtype, np.int32)
            self.assertEqual(I.shape, shape)
            self.assertTrue(np.all((I >= 0) & (I < len(cdf))))
            self.assertTrue(np.all(np.asarray(weights)[I.reshape(-1)] > 0), "a zero-probability index was drawn")
        self.assertValidationChecks(gc, op, inputs, check)

    @given(n=st.integers(0, 14), batch=st.integers(1, 3), shuffle=st.integers(1, 3), sort=st.booleans(),
           seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_sort_and_shuffle(self, n, batch, shuffle, sort, seed, gc, dc):
        keys = np.random.default_rng(seed).permutation(n).astype(np.int32)
        with hu.temp_workspace(b"sort_and_shuffle"):
            workspace.RunOperatorOnce(core.CreateOperator("CreateTreeCursor", [], ["cursor"],
                                                          fields=["key", "v:lengths", "v:values"]))
            workspace.FeedBlob("key", keys)
            workspace.FeedBlob("v:lengths", np.ones(n, np.int32))
            workspace.FeedBlob("v:values", np.zeros(n, np.float32))
            op = core.CreateOperator("SortAndShuffle", ["cursor", "key", "v:lengths", "v:values"], ["order"],
                                     sort_by_field_idx=0 if sort else -1, batch_size=batch, shuffle_size=shuffle,
                                     device_option=gc)
            workspace.RunOperatorOnce(op)
            order = workspace.FetchBlob("order")
        self.assertEqual(order.dtype, np.int64)
        np.testing.assert_array_equal(np.sort(order), np.arange(n))          # every record exactly once
        records = np.argsort(keys, kind="stable") if sort else np.arange(n)
        chunk = batch * shuffle
        full = (n // chunk) * chunk
        chunk_of = {int(r): i // chunk for i, r in enumerate(records[:full])}
        for b in range(n // batch):
            members = order[b * batch:(b + 1) * batch]
            if all(int(r) in chunk_of for r in members):
                # a batch never mixes records of two shuffle chunks of the sorted order
                self.assertEqual(len({chunk_of[int(r)] for r in members}), 1)
