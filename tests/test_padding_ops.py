"""Packing and padding against NumPy references written here: PackSegments,
UnpackSegments, AddPadding, RemovePadding, GatherPadding, PadEmptySamples,
VariableLengthSequencePadding."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from caffe2py import core
from caffe2py.errors import Caffe2Error

from _reference import SETTINGS, ReferenceTestCase, run

lengths_st = st.lists(st.integers(0, 4), min_size=0, max_size=6).map(lambda v: np.array(v, np.int32))
dtype_st = st.sampled_from([np.float32, np.int64, np.int32, np.float64])


def _data(lengths, seed, dtype, inner=(2,)):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((int(lengths.sum()),) + inner) * 10).astype(dtype)


def _split(data, lengths):
    starts = np.concatenate(([0], np.cumsum(lengths)))
    return [data[starts[i]:starts[i + 1]] for i in range(len(lengths))]


class TestPaddingOps(ReferenceTestCase):
    @SETTINGS
    @given(lengths_st, st.integers(0, 2 ** 31 - 1), dtype_st, st.booleans(), st.sampled_from([-1, 2, 5]))
    def test_pack_and_unpack_segments(self, lengths, seed, dtype, pad_minf, max_length):
        data = _data(lengths, seed, dtype)
        t = int(lengths.max(initial=0)) if max_length < 0 else max_length
        pad = -np.inf if pad_minf and dtype == np.float32 else 0

        def pack(lens, d):
            out = np.full((len(lens), t) + d.shape[1:], pad, d.dtype)
            mask = np.zeros((len(lens), t), bool)
            for i, seg in enumerate(_split(d, lens)):
                out[i, :min(len(seg), t)] = seg[:t]
                mask[i, :min(len(seg), t)] = True
            return out, mask
        op = core.CreateOperator("PackSegments", ["L", "D"], ["P", "M"], return_presence_mask=1,
                                 pad_minf=int(pad_minf), max_length=max_length)
        packed, _ = self.check(op, [lengths, data], pack)
        assert packed.dtype == dtype

        def unpack(lens, p):
            parts = [p[i, :min(n, t)] for i, n in enumerate(lens)]
            return np.concatenate(parts, axis=0) if parts else np.zeros((0,) + p.shape[2:], p.dtype)
        unpack_op = core.CreateOperator("UnpackSegments", ["L", "P"], ["U"], max_length=max_length)
        self.check(unpack_op, [lengths, packed], unpack)

    def test_pack_segments_strings_and_errors(self):
        (out,) = run(core.CreateOperator("PackSegments", ["L", "D"], ["P"]),
                     [np.array([1, 2], np.int32), np.array(["a", "b", "c"], dtype=object)])
        assert out.tolist() == [["a", ""], ["b", "c"]]
        with pytest.raises(Caffe2Error, match="PackSegments requires that the sum of the lengths 3 is equal to the "
                                              "first data dimension 2"):
            run(core.CreateOperator("PackSegments", ["L", "D"], ["P"]), [np.array([1, 2], np.int32), np.zeros((2, 1))])
        with pytest.raises(Caffe2Error, match="max_length should be equal to the second dimension"):
            run(core.CreateOperator("UnpackSegments", ["L", "D"], ["U"], max_length=3),
                [np.array([1, 2], np.int32), np.zeros((2, 2, 1))])

    @SETTINGS
    @given(lengths_st, st.integers(0, 2 ** 31 - 1), dtype_st, st.integers(0, 2), st.integers(-1, 2),
           st.sampled_from(["none", "start", "both"]), st.booleans())
    def test_add_remove_gather_padding(self, lengths, seed, dtype, width, end_width, pads, with_lengths):
        data = _data(lengths, seed, dtype)
        end = width if end_width < 0 else end_width
        rng = np.random.default_rng(seed + 1)
        start_pad = (rng.standard_normal(2) * 10).astype(dtype)
        end_pad = (rng.standard_normal(2) * 10).astype(dtype)
        lens = lengths if with_lengths else np.array([data.shape[0]], np.int32)

        def add(d, *rest):
            sp = rest[1] if pads != "none" else np.zeros(2, dtype)
            ep = rest[2] if pads == "both" else sp
            parts = [d[:0]]
            for seg in _split(d, lens):
                parts += [np.tile(sp, (width, 1)), seg, np.tile(ep, (end, 1))]
            out = np.concatenate(parts, axis=0).astype(dtype)
            return out, (lens + width + end).astype(np.int32)
        inputs = [data, lengths] + {"none": [], "start": [start_pad], "both": [start_pad, end_pad]}[pads]
        names = ["D", "L", "SP", "EP"][:len(inputs)]
        if not with_lengths:
            if pads != "none":
                return                       # the padding inputs come after lengths
            inputs, names = [data], ["D"]
        op = core.CreateOperator("AddPadding", names, ["P", "PL"], padding_width=width, end_padding_width=end_width)
        padded, padded_lengths = self.check(op, inputs, lambda *a: add(*a))

        rm_inputs, rm_names = ([padded, padded_lengths], ["P", "PL"]) if with_lengths else ([padded], ["P"])
        rm = core.CreateOperator("RemovePadding", rm_names, ["D2", "L2"], padding_width=width,
                                 end_padding_width=end_width)
        self.check(rm, rm_inputs, lambda *a: (data, lens))

        if dtype in (np.float32, np.float64) and with_lengths:
            def gather(p, pl):
                starts, ends = np.zeros(2), np.zeros(2)      # sums over no rows are zero
                for seg in _split(p.astype(np.float64), pl):
                    starts += seg[:width].sum(axis=0)
                    ends += seg[seg.shape[0] - end:].sum(axis=0)
                return starts, ends
            g = core.CreateOperator("GatherPadding", ["P", "PL"], ["S", "E"], padding_width=width,
                                    end_padding_width=end_width)
            self.check(g, [padded, padded_lengths], gather, threshold=1e-3)
            g1 = core.CreateOperator("GatherPadding", ["P", "PL"], ["S"], padding_width=width,
                                     end_padding_width=end_width)
            self.check(g1, [padded, padded_lengths], lambda p, pl: sum(gather(p, pl)), threshold=1e-3)

    def test_padding_errors(self):
        with pytest.raises(Caffe2Error, match="LENGTHS sum to 2, but DATA has 3 rows"):
            run(core.CreateOperator("AddPadding", ["D", "L"], ["P"]), [np.zeros((3, 2)), np.array([2], np.int32)])
        with pytest.raises(Caffe2Error, match="shorter than its padding"):
            run(core.CreateOperator("RemovePadding", ["D", "L"], ["P"]), [np.zeros((3, 2)), np.array([1, 2], np.int32)])
        with pytest.raises(Caffe2Error, match="padding has 3 values, a row of data_in has 2"):
            run(core.CreateOperator("AddPadding", ["D", "L", "S"], ["P"]),
                [np.zeros((3, 2)), np.array([3], np.int32), np.zeros(3)])
        with pytest.raises(Caffe2Error, match="should not be executed on an input of type bool"):
            run(core.CreateOperator("GatherPadding", ["D", "L"], ["P"]),
                [np.zeros((3, 2), bool), np.array([3], np.int32)])

    @SETTINGS
    @given(lengths_st, st.integers(0, 2 ** 31 - 1))
    def test_pad_empty_samples(self, lengths, seed):
        ids = _data(lengths, seed, np.int64, inner=())
        vals = _data(lengths, seed + 1, np.float32, inner=(3,))

        def ref(lens, *features):
            outs = [np.maximum(lens, 1).astype(np.int32)]
            for f in features:
                parts = [seg if len(seg) else np.zeros((1,) + f.shape[1:], f.dtype) for seg in _split(f, lens)]
                outs.append(np.concatenate(parts, axis=0) if parts else f[:0])
            return outs
        op = core.CreateOperator("PadEmptySamples", ["L", "A", "B"], ["OL", "OA", "OB"])
        self.check(op, [lengths, ids, vals], ref)

    @SETTINGS
    @given(st.integers(0, 4), st.integers(0, 3), st.integers(0, 2 ** 31 - 1))
    def test_variable_length_sequence_padding(self, steps, batch, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((steps, batch, 3)).astype(np.float32)
        lens = rng.integers(0, steps + 2, size=batch).astype(np.int32)

        def ref(a, sl):
            out = a.copy()
            for b in range(batch):
                out[sl[b]:, b, :] = 0
            return out
        self.check(core.CreateOperator("VariableLengthSequencePadding", ["X", "L"], ["Y"]), [x, lens], ref)
        self.check(core.CreateOperator("VariableLengthSequencePadding", ["X", "L"], ["X"]), [x, lens], ref)
