"""Range, padding and sequence ops (GatherRanges, GatherRangesToDense, GatherPadding,
PadEmptySamples, VariableLengthSequencePadding, RemoveDataBlocks, Append, ExtendTensor,
GRUUnit) with hypothesis_test_util, against NumPy written here from Caffe2's
definitions. Draws include empty batches, empty ranges and samples, repeated indices."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from caffe2.python import core, workspace  # noqa: F401
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=10, deadline=None)


@st.composite
def ranges_into(draw, size, batch, features, max_len=3):
    """RANGES [batch, features, 2] of (start, length) inside a 1-D DATA of `size` values."""
    out = np.zeros((batch, features, 2), np.int32)
    for n in range(batch):
        for f in range(features):
            length = draw(st.integers(0, min(max_len, size)))
            out[n, f] = (draw(st.integers(0, size - length)), length)
    return out


def _split(values, lengths):
    offsets = np.cumsum(lengths) - lengths
    return [values[o:o + l] for o, l in zip(offsets, lengths)]


class TestRanges(hu.HypothesisTestCase):
    # GatherRanges' OUTPUT length depends on RANGES' values; like Caffe2 its inference
    # gives DATA's size, so inferred and computed shapes legitimately differ here
    assert_shape_inference = False

    @given(size=st.integers(0, 8), batch=st.integers(0, 3), features=st.integers(1, 3),
           dtype=st.sampled_from([np.float32, np.int64]), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_gather_ranges(self, size, batch, features, dtype, data, gc, dc):
        values = np.arange(size).astype(dtype) * 3 - 5
        ranges = data.draw(ranges_into(size, batch, features))
        op = core.CreateOperator("GatherRanges", ["DATA", "RANGES"], ["OUTPUT", "LENGTHS"])

        def ref(values, ranges):
            pieces = [values[s:s + l] for s, l in ranges.reshape(-1, 2)]
            return [np.concatenate(pieces + [values[:0]]), ranges[:, :, 1].sum(axis=1).astype(np.int32)]
        self.assertReferenceChecks(gc, op, [values, ranges], ref)

    def test_gather_ranges_out_of_bounds_is_named(self):
        op = core.CreateOperator("GatherRanges", ["DATA", "RANGES"], ["OUTPUT", "LENGTHS"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.arange(4, dtype=np.float32), np.array([[[2, 3]]], np.int32)],
                               exception=Caffe2Error, regexp="GatherRanges")

    @given(size=st.integers(1, 10), batch=st.integers(0, 3), widths=st.lists(st.integers(1, 3), min_size=1, max_size=3),
           with_key=st.booleans(), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_gather_ranges_to_dense(self, size, batch, widths, with_key, data, gc, dc):
        values = (np.arange(size, dtype=np.float32) + 1) * 0.5
        ranges = data.draw(ranges_into(size, batch, len(widths)))
        # keys distinct inside every range: a permutation of 0..size-1
        key = np.random.default_rng(size + batch).permutation(size).astype(np.int64)
        names = ["out%d" % j for j in range(len(widths))]
        op = core.CreateOperator("GatherRangesToDense", ["DATA", "RANGES", "KEY"] if with_key else ["DATA", "RANGES"],
                                 names, lengths=widths)

        def ref(values, ranges, *maybe_key):
            outs = []
            for j, w in enumerate(widths):
                out = np.zeros((batch, w), np.float32)
                for n in range(batch):
                    s, l = ranges[n, j]
                    if l == w:                      # another length (or empty) stays zeros
                        picked = values[s:s + l]
                        if with_key:
                            picked = picked[np.argsort(key[s:s + l])]
                        out[n] = picked
                outs.append(out)
            return outs
        self.assertReferenceChecks(gc, op, [values, ranges] + ([key] if with_key else []), ref)


class TestPadding(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(lengths=st.lists(st.integers(0, 5), max_size=4), width=st.integers(0, 2), end_width=st.integers(-1, 2),
           two_outputs=st.booleans(), seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_gather_padding(self, lengths, width, end_width, two_outputs, seed, gc, dc):
        end = width if end_width == -1 else end_width
        L = np.maximum(np.array(lengths, np.int32), width + end)          # every range holds its paddings
        X = np.random.default_rng(seed).standard_normal((int(L.sum()), 2)).astype(np.float32)
        op = core.CreateOperator("GatherPadding", ["data_in", "lengths"], ["start", "end"][:1 + two_outputs],
                                 padding_width=width, end_padding_width=end_width)

        def ref(X, L):
            starts, ends = np.zeros(2), np.zeros(2)
            for seg in _split(X.astype(np.float64), L):
                starts += seg[:width].sum(axis=0)
                ends += seg[seg.shape[0] - end:].sum(axis=0)
            return [starts, ends] if two_outputs else [starts + ends]
        self.assertReferenceChecks(gc, op, [X, L], ref, threshold=1e-4)

    @given(lengths=st.lists(st.integers(0, 3), max_size=5), seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_pad_empty_samples(self, lengths, seed, gc, dc):
        L = np.array(lengths, np.int32)
        rng = np.random.default_rng(seed)
        ids = rng.integers(1, 9, int(L.sum())).astype(np.int64)
        vals = rng.standard_normal((int(L.sum()), 2)).astype(np.float32)
        op = core.CreateOperator("PadEmptySamples", ["lengths", "ids", "vals"], ["out_lengths", "out_ids", "out_vals"])

        def ref(L, ids, vals):
            outs = [np.where(L == 0, 1, L).astype(np.int32)]
            for f in (ids, vals):
                rows = []
                for seg in _split(f, L):
                    rows.append(seg if len(seg) else np.zeros((1,) + f.shape[1:], f.dtype))
                outs.append(np.concatenate(rows + [f[:0]]))
            return outs
        self.assertReferenceChecks(gc, op, [L, ids, vals], ref)

    @given(steps=st.integers(0, 4), batch=st.integers(0, 3), seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_variable_length_sequence_padding(self, steps, batch, seed, gc, dc):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((steps, batch, 2)).astype(np.float32)
        seq = rng.integers(0, steps + 1, batch).astype(np.int32)
        op = core.CreateOperator("VariableLengthSequencePadding", ["INPUT", "SEQ_LENGTHS"], ["OUTPUT"])

        def ref(X, seq):
            t = np.arange(steps)[:, None, None]
            return [np.where(t < seq[None, :, None], X, 0).astype(np.float32)]
        self.assertReferenceChecks(gc, op, [X, seq], ref)


class TestTensorEditing(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(rows=st.integers(0, 5), blocks=st.lists(st.integers(0, 4), max_size=6), seed=st.integers(0, 999),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_remove_data_blocks(self, rows, blocks, seed, gc, dc):
        X = np.random.default_rng(seed).standard_normal((rows, 2, 2)).astype(np.float32)
        drop = np.array([b for b in blocks if b < rows], np.int64)          # repeats and any order
        op = core.CreateOperator("RemoveDataBlocks", ["data", "indices"], ["out"])
        self.assertReferenceChecks(gc, op, [X, drop], lambda X, d: (np.delete(X, np.unique(d), axis=0),))

    def test_remove_data_blocks_bad_index_is_named(self):
        op = core.CreateOperator("RemoveDataBlocks", ["data", "indices"], ["out"])
        for bad in (np.array([3], np.int64), np.array([-1], np.int64)):
            self.assertRunOpRaises(hu.cpu_do, op, [np.ones((3, 2), np.float32), bad], exception=Caffe2Error,
                                   regexp="RemoveDataBlocks")



class TestInPlaceEditing(hu.HypothesisTestCase):
    # Append and ExtendTensor write their input blob; their output shape depends on the
    # values (Caffe2 infers none), so the harness sees the input's pre-run shape
    assert_shape_inference = False

    @given(rows_a=st.integers(0, 3), rows_b=st.integers(0, 3), inner=st.lists(st.integers(1, 3), max_size=2),
           seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_append(self, rows_a, rows_b, inner, seed, gc, dc):
        rng = np.random.default_rng(seed)
        A = rng.standard_normal([rows_a] + inner).astype(np.float32)
        B = rng.standard_normal([rows_b] + inner).astype(np.float32)
        op = core.CreateOperator("Append", ["A", "B"], ["A"])
        self.assertReferenceChecks(gc, op, [A, B], lambda A, B: (np.concatenate([A, B]),))

    def test_append_mismatched_rows_is_named(self):
        op = core.CreateOperator("Append", ["A", "B"], ["A"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.ones((2, 3), np.float32), np.ones((1, 2), np.float32)],
                               exception=Caffe2Error, regexp="Append")

    @given(rows=st.integers(0, 4), new=st.lists(st.integers(0, 7), max_size=4), seed=st.integers(0, 999),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_extend_tensor(self, rows, new, seed, gc, dc):
        T = np.random.default_rng(seed).integers(1, 9, rows).astype(np.int32)    # same rank as new_indices
        idx = np.array(new, np.int32)
        op = core.CreateOperator("ExtendTensor", ["tensor", "new_indices"], ["tensor"])

        def ref(T, idx):
            target = max(rows, int(idx.max()) + 1 if len(idx) else 0)
            return [np.concatenate([T, np.zeros(target - rows, np.int32)])]
        self.assertReferenceChecks(gc, op, [T, idx], ref)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class TestGRUUnit(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(1, 4), d=st.integers(1, 3), t=st.integers(0, 3), drop=st.booleans(),
           use_lengths=st.booleans(), seed=st.integers(0, 999), **hu.gcs_cpu_only)
    @SETTINGS
    def test_gru_unit(self, n, d, t, drop, use_lengths, seed, gc, dc):
        rng = np.random.default_rng(seed)
        h_prev = rng.standard_normal((1, n, d)).astype(np.float32)
        gates = rng.standard_normal((1, n, 3 * d)).astype(np.float32)
        seq = rng.integers(0, 4, n).astype(np.int32)                   # some rows already finished at t
        step = np.array([t], np.int32)
        if use_lengths:
            op = core.CreateOperator("GRUUnit", ["h_prev", "gates", "seq_lengths", "t"], ["h"], drop_states=int(drop))
            inputs = [h_prev, gates, seq, step]
        else:
            op = core.CreateOperator("GRUUnit", ["h_prev", "gates", "t"], ["h"], drop_states=int(drop),
                                     sequence_lengths=0)
            inputs = [h_prev, gates, step]

        def ref(h_prev, gates, *rest):
            u = _sigmoid(gates[0, :, d:2 * d].astype(np.float64))
            h = h_prev[0] * u + np.tanh(gates[0, :, 2 * d:]) * (1 - u)
            valid = (t < seq)[:, None] if use_lengths else np.ones((n, 1), bool)
            return [np.where(valid, h, 0.0 if drop else h_prev[0])[None].astype(np.float32)]
        self.assertReferenceChecks(gc, op, inputs, ref, threshold=1e-5)

    def test_gru_unit_gradient(self):
        rng = np.random.default_rng(5)
        h_prev = rng.standard_normal((1, 3, 2)).astype(np.float32)
        gates = rng.standard_normal((1, 3, 6)).astype(np.float32)
        op = core.CreateOperator("GRUUnit", ["h_prev", "gates", "seq_lengths", "t"], ["h"])
        inputs = [h_prev, gates, np.array([3, 1, 2], np.int32), np.array([1], np.int32)]
        for i in (0, 1):
            self.assertGradientChecks(hu.cpu_do, op, inputs, i, [0])
