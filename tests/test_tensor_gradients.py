"""Caffe2's gradients of the shape, layout and normalisation ops (issue 31): ChannelShuffle,
ExpandDims / Squeeze, PrependDim, Slice, Tile, InstanceNorm, LRN, LpNorm, Clip, Mean,
FloatToHalf / HalfToFloat, Alias and the device copies.

Each op: finite differences (assertGradientChecks) on hypothesis-drawn shapes, torch
autograd on the same inputs (torch's functions, or the forward written with torch ops
where torch's function differs from Caffe2's), and the gradient ops the maker emits
(type, inputs, outputs, arguments), as Caffe2's makers write them in
caffe2/operators/{channel_shuffle_op, expand_squeeze_dims_op, prepend_dim_op, slice_op,
tile_op, instance_norm_gradient_op, local_response_normalization_op, lpnorm_op, clip_op,
mean_op, half_float_ops, utility_ops}.cc."""
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2py import core, hypothesis_test_util as hu, workspace
from caffe2py.args import ArgumentHelper
from caffe2py.errors import Caffe2Error
from caffe2py.gradients import GradientSlice, get_gradient_for_op, gradient_status

from _grad_util import compare_with_torch, run_gradient, torch, torch_gradients

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
FEW = settings(max_examples=6, deadline=None)


def randn(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def emitted(op, g_output=None):
    """(gradient OperatorDefs, input gradients) of op for dense '<output>_grad' blobs."""
    return get_gradient_for_op(op, g_output if g_output is not None else [o + "_grad" for o in op.output])


def args_of(op_def):
    helper = ArgumentHelper(op_def)
    return {a.name: helper.get(a.name) for a in op_def.arg}


def only_op(op, g_output=None):
    ops, g_input = emitted(op, g_output)
    assert len(ops) == 1, ops
    return ops[0], g_input


class TestGradients(hu.HypothesisTestCase):

    def _raises(self, op, inputs, words):
        workspace.ResetWorkspace()
        for name, value in zip(op.input, inputs):
            workspace.FeedBlob(name, value)
        with pytest.raises(Caffe2Error, match=words):
            workspace.RunOperatorOnce(op)

    # ------------------------------------------------------------- ChannelShuffle

    @FEW
    @given(group=st.integers(1, 3), per=st.integers(1, 3), n=st.integers(1, 2), hw=st.integers(1, 3),
           nhwc=st.booleans(), seed=st.integers(0, 99))
    def test_channel_shuffle(self, group, per, n, hw, nhwc, seed):
        c = group * per
        shape = (n, hw, 2, c) if nhwc else (n, c, hw, 2)
        x = randn(seed, *shape)
        op = core.CreateOperator("ChannelShuffle", ["X"], ["Y"], group=group, order="NHWC" if nhwc else "NCHW")
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0])
        if torch is not None:
            def shuffle(t):
                if nhwc:
                    t = t.permute(0, 3, 1, 2)
                y = t.reshape(n, group, per, *t.shape[2:]).transpose(1, 2).reshape(t.shape)
                return [y.permute(0, 2, 3, 1) if nhwc else y]
            compare_with_torch(op, [x], [0], shuffle)

    def test_channel_shuffle_gradient_op_inverts_the_shuffle(self):
        x = np.arange(2 * 6 * 2, dtype=np.float32).reshape(2, 6, 2)
        op = core.CreateOperator("ChannelShuffle", ["X"], ["Y"], group=2)
        grads, _ = run_gradient(op, [x], {0: x[:, [0, 3, 1, 4, 2, 5]]})    # dY = the shuffled X
        np.testing.assert_array_equal(grads[0], x)

    def test_channel_shuffle_maker(self):
        op = core.CreateOperator("ChannelShuffle", ["X"], ["Y"], group=3, order="NHWC")
        grad, g_input = only_op(op)
        assert (grad.type, list(grad.input), list(grad.output)) == ("ChannelShuffleGradient", ["Y_grad"], ["X_grad"])
        assert args_of(grad) == {"group": 3, "order": "NHWC"}
        assert g_input == ["X_grad"]

    def test_channel_shuffle_gradient_errors(self):
        op = core.CreateOperator("ChannelShuffleGradient", ["dY"], ["dX"], group=4)
        self._raises(op, [np.ones((1, 6, 2), np.float32)], "6 channels .* do not split into 4 groups")

    # ------------------------------------------------------------- ExpandDims / Squeeze

    @FEW
    @given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), k=st.integers(1, 2), data=st.data(),
           seed=st.integers(0, 99))
    def test_expand_dims_and_squeeze(self, shape, k, data, seed):
        dims = sorted(data.draw(st.sets(st.integers(0, len(shape) + k - 1), min_size=k, max_size=k)))
        x = randn(seed, *shape)
        expand = core.CreateOperator("ExpandDims", ["X"], ["Y"], dims=dims)
        self.assertGradientChecks(hu.cpu_do, expand, [x], 0, [0])
        expanded = np.expand_dims(x, tuple(dims))
        squeeze = core.CreateOperator("Squeeze", ["X"], ["Y"], dims=dims)
        self.assertGradientChecks(hu.cpu_do, squeeze, [expanded], 0, [0])
        if torch is not None:
            def unsqueeze(t):
                for d in dims:
                    t = t.unsqueeze(d)
                return [t]
            compare_with_torch(expand, [x], [0], unsqueeze)
            compare_with_torch(squeeze, [expanded], [0], lambda t: [t.reshape(x.shape)])

    def test_expand_dims_and_squeeze_makers(self):
        grad, _ = only_op(core.CreateOperator("ExpandDims", ["X"], ["Y"], dims=[0, 2]))
        assert (grad.type, list(grad.input), list(grad.output), args_of(grad)) == (
            "Squeeze", ["Y_grad"], ["X_grad"], {"dims": [0, 2]})
        grad, _ = only_op(core.CreateOperator("Squeeze", ["X"], ["Y"], dims=[1]))
        assert (grad.type, list(grad.input), list(grad.output), args_of(grad)) == (
            "ExpandDims", ["Y_grad"], ["X_grad"], {"dims": [1]})

    # ------------------------------------------------------------- PrependDim

    @FEW
    @given(size=st.integers(1, 3), rows=st.integers(1, 3), rest=st.lists(st.integers(1, 3), max_size=2),
           seed=st.integers(0, 99))
    def test_prepend_dim(self, size, rows, rest, seed):
        x = randn(seed, size * rows, *rest)
        op = core.CreateOperator("PrependDim", ["X"], ["Y"], dim_size=size)
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0])
        if torch is not None:
            compare_with_torch(op, [x], [0], lambda t: [t.reshape(size, rows, *rest)])

    def test_prepend_dim_maker_copies_no_arguments(self):
        grad, _ = only_op(core.CreateOperator("PrependDim", ["X"], ["Y"], dim_size=2))
        assert (grad.type, list(grad.input), list(grad.output), list(grad.arg)) == (
            "MergeDim", ["Y_grad"], ["X_grad"], [])
        assert gradient_status("MergeDim") is None     # Caffe2 registers none for MergeDim

    # ------------------------------------------------------------- Slice

    @FEW
    @given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), as_inputs=st.booleans(),
           data=st.data(), seed=st.integers(0, 99))
    def test_slice(self, shape, as_inputs, data, seed):
        starts, ends = [], []
        for d in shape[:data.draw(st.integers(1, len(shape)))]:
            s = data.draw(st.integers(0, d - 1))
            e = data.draw(st.integers(s + 1, d))
            # Caffe2's negative ends count from the end: -1 is the dim's end
            ends.append(e - d - 1 if data.draw(st.booleans()) else e)
            starts.append(s)
        x = randn(seed, *shape)
        if as_inputs:
            op = core.CreateOperator("Slice", ["X", "starts", "ends"], ["Y"])
            inputs = [x, np.array(starts, np.int32), np.array(ends, np.int64)]
        else:
            op = core.CreateOperator("Slice", ["X"], ["Y"], starts=starts, ends=ends)
            inputs = [x]
        self.assertGradientChecks(hu.cpu_do, op, inputs, 0, [0])
        if torch is not None:
            window = tuple(slice(s, e if e >= 0 else d + 1 + e) for s, e, d in zip(starts, ends, shape))
            compare_with_torch(op, inputs, [0], lambda t, *_: [t[window]])

    def test_slice_gradient_values(self):
        x = np.zeros((3, 4), np.float32)
        op = core.CreateOperator("Slice", ["X"], ["Y"], starts=[1, 0], ends=[-1, 2])
        dy = np.arange(4, dtype=np.float32).reshape(2, 2) + 1
        grads, _ = run_gradient(op, [x], {0: dy})
        np.testing.assert_array_equal(grads[0], [[0, 0, 0, 0], [1, 2, 0, 0], [3, 4, 0, 0]])

    def test_slice_maker(self):
        grad, g_input = only_op(core.CreateOperator("Slice", ["X"], ["Y"], starts=[0, 1], ends=[-1, 2]))
        assert (grad.type, list(grad.input), list(grad.output)) == ("SliceGradient", ["X", "Y_grad"], ["X_grad"])
        assert args_of(grad) == {"starts": [0, 1], "ends": [-1, 2]}
        grad, g_input = only_op(core.CreateOperator("Slice", ["X", "s", "e"], ["Y"]))
        assert (grad.type, list(grad.input), list(grad.output)) == (
            "SliceGradient", ["X", "s", "e", "Y_grad"], ["X_grad"])
        assert g_input == ["X_grad", None, None]

    def test_slice_gradient_errors(self):
        x = np.zeros((3, 4), np.float32)
        op = core.CreateOperator("SliceGradient", ["X", "dY"], ["dX"], starts=[0, 0], ends=[2, 2])
        self._raises(op, [x, np.ones((2, 3), np.float32)], r"has shape \[2, 3\]; the slice of X \[3, 4\] is \[2, 2\]")
        op = core.CreateOperator("SliceGradient", ["X", "s", "e", "dY"], ["dX"])
        self._raises(op, [x, np.array([0.0]), np.array([1]), np.ones((1, 4), np.float32)], "does not support dtype")

    # ------------------------------------------------------------- Tile

    @FEW
    @given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), tiles=st.integers(1, 3),
           as_inputs=st.sampled_from([0, 1, 2]), data=st.data(), seed=st.integers(0, 99))
    def test_tile(self, shape, tiles, as_inputs, data, seed):
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        x = randn(seed, *shape)
        names, inputs, args = ["X"], [x], {"tiles": tiles, "axis": axis}
        if as_inputs >= 1:
            names.append("tiles")
            inputs.append(np.array([tiles], np.int32))
            args["tiles"] = 7                       # the input wins over the argument
        if as_inputs == 2:
            names.append("axis")
            inputs.append(np.array([axis], np.int32))
            args.pop("axis")
        op = core.CreateOperator("Tile", names, ["Y"], **args)
        self.assertGradientChecks(hu.cpu_do, op, inputs, 0, [0])
        if torch is not None:
            reps = [1] * len(shape)
            reps[axis] = tiles
            compare_with_torch(op, inputs, [0], lambda t, *_: [t.repeat(*reps)])

    def test_tile_gradient_sums_the_copies(self):
        dy = np.arange(12, dtype=np.float32).reshape(2, 6)
        op = core.CreateOperator("TileGradient", ["dY"], ["dX"], tiles=3, axis=1)
        workspace.ResetWorkspace()
        workspace.FeedBlob("dY", dy)
        workspace.RunOperatorOnce(op)
        np.testing.assert_array_equal(workspace.FetchBlob("dX"), [[0 + 2 + 4, 1 + 3 + 5], [6 + 8 + 10, 7 + 9 + 11]])

    def test_tile_maker(self):
        grad, _ = only_op(core.CreateOperator("Tile", ["X"], ["Y"], tiles=2, axis=1))
        assert (grad.type, list(grad.input), list(grad.output), args_of(grad)) == (
            "TileGradient", ["Y_grad"], ["X_grad"], {"tiles": 2, "axis": 1})
        grad, g_input = only_op(core.CreateOperator("Tile", ["X", "t"], ["Y"], axis=1))
        assert list(grad.input) == ["Y_grad", "t"]
        grad, g_input = only_op(core.CreateOperator("Tile", ["X", "t", "a"], ["Y"]))
        assert list(grad.input) == ["Y_grad", "t", "a"] and g_input == ["X_grad", None, None]

    def test_tile_gradient_errors(self):
        dy = np.ones((2, 5), np.float32)
        self._raises(core.CreateOperator("TileGradient", ["dY"], ["dX"], tiles=2, axis=1), [dy],
                     r"dim 1 of dY \[2, 5\] is not 2 tiles")
        self._raises(core.CreateOperator("TileGradient", ["dY"], ["dX"], tiles=0, axis=1), [dy],
                     "tiles must be > 0")
        self._raises(core.CreateOperator("TileGradient", ["dY"], ["dX"], tiles=1, axis=2), [dy],
                     "axis 2 is out of range")

    # ------------------------------------------------------------- InstanceNorm

    @FEW
    @given(n=st.integers(1, 2), c=st.integers(1, 3), spatial=st.sampled_from([(3,), (2, 2), (2, 1, 2)]),
           nhwc=st.booleans(), outputs=st.sampled_from([1, 3]), eps=st.sampled_from([1e-5, 1e-2]),
           seed=st.integers(0, 99))
    def test_instance_norm(self, n, c, spatial, nhwc, outputs, eps, seed):
        shape = (n,) + spatial + (c,) if nhwc else (n, c) + spatial
        x = randn(seed, *shape) * 2 + 0.5
        scale, bias = randn(seed + 1, c), randn(seed + 2, c)
        op = core.CreateOperator("InstanceNorm", ["X", "s", "b"], ["Y", "mean", "inv_std"][:outputs],
                                 epsilon=eps, order="NHWC" if nhwc else "NCHW")
        for i in range(3):
            self.assertGradientChecks(hu.cpu_do, op, [x, scale, bias], i, [0], stepsize=1e-2, threshold=2e-2)
        if torch is not None:
            # torch gets NCHW copies: its CPU instance_norm backward is wrong for N = 1 when the
            # output gradient has channels-last strides (what movedim would hand it; torch 2.13)
            nchw = (lambda a: np.ascontiguousarray(np.moveaxis(a, -1, 1))) if nhwc else (lambda a: a)
            dy = randn(seed + 3, *shape)
            ours, _ = run_gradient(op, [x, scale, bias], {0: dy})
            theirs = torch_gradients(lambda t, s, b: [torch.nn.functional.instance_norm(t, weight=s, bias=b, eps=eps)],
                                     [nchw(x), scale, bias], [0, 1, 2], [nchw(dy)])
            for i, ours_i in ((0, nchw(ours[0])), (1, ours[1]), (2, ours[2])):
                np.testing.assert_allclose(ours_i, theirs[i], rtol=1e-3, atol=1e-4, err_msg="input %d" % i)

    def test_instance_norm_gradient_reads_the_given_stats(self):
        # with mean / inv_stdev inputs the gradient uses them (Caffe2 recomputes only when absent)
        x, scale, bias, dy = randn(0, 1, 2, 4), randn(1, 2), randn(2, 2), randn(3, 1, 2, 4)
        op = core.CreateOperator("InstanceNormGradient", ["X", "s", "b", "dY", "m", "r"], ["dX", "ds", "db"])
        mean, rstd = np.zeros((1, 2), np.float32), np.ones((1, 2), np.float32)
        workspace.ResetWorkspace()
        for name, v in zip(op.input, [x, scale, bias, dy, mean, rstd]):
            workspace.FeedBlob(name, v)
        workspace.RunOperatorOnce(op)
        x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
        inner = -x64 * (x64 * dy64).mean(axis=2, keepdims=True) + dy64      # t * xc + rstd * dy with rstd = 1
        want = (inner - inner.mean(axis=2, keepdims=True)) * scale.reshape(1, 2, 1)
        np.testing.assert_allclose(workspace.FetchBlob("dX"), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(workspace.FetchBlob("ds"), (x64 * dy64).sum(axis=(0, 2)), rtol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob("db"), dy64.sum(axis=(0, 2)), rtol=1e-5)

    def test_instance_norm_maker(self):
        grad, g_input = only_op(core.CreateOperator("InstanceNorm", ["X", "s", "b"], ["Y"], epsilon=0.1))
        assert (grad.type, list(grad.input), list(grad.output)) == (
            "InstanceNormGradient", ["X", "s", "b", "Y_grad"], ["X_grad", "s_grad", "b_grad"])
        assert args_of(grad) == {"epsilon": pytest.approx(0.1)}
        op = core.CreateOperator("InstanceNorm", ["X", "s", "b"], ["Y", "mean", "rstd"], order="NHWC")
        grad, g_input = emitted(op, ["Y_grad", None, None])
        assert list(grad[0].input) == ["X", "s", "b", "Y_grad", "mean", "rstd"]
        assert g_input == ["X_grad", "s_grad", "b_grad"]

    def test_instance_norm_gradient_errors(self):
        x, c = np.ones((2, 3, 4), np.float32), np.ones(3, np.float32)
        op = core.CreateOperator("InstanceNormGradient", ["X", "s", "b", "dY", "m"], ["dX", "ds", "db"])
        self._raises(op, [x, c, c, x, np.ones((3, 2), np.float32)], r"must have shape \[N, C\] = \[2, 3\]")
        self._raises(op, [x, c, c, x[:1], np.ones((2, 3), np.float32)], r"has shape \[1, 3, 4\] but X has")
        self._raises(op, [x, c[:2], c, x, np.ones((2, 3), np.float32)], "has 2 elements, expected 3 channels")

    # ------------------------------------------------------------- LRN

    @staticmethod
    def _caffe2_lrn_torch(size, alpha, beta, bias, nhwc):
        """Caffe2's LRN written with torch ops: the window of channel c is
        [c - (size - 1) // 2, c + size // 2] (torch's own local_response_norm centres
        even windows the other way)."""
        def lrn(t):
            t = t.movedim(-1, 1) if nhwc else t
            sq = torch.nn.functional.pad((t * t).movedim(1, -1), ((size - 1) // 2, size // 2)).movedim(-1, 1)
            window = sum(sq[:, k:k + t.shape[1]] for k in range(size))
            y = t * (bias + alpha / size * window) ** -beta
            return [y.movedim(1, -1) if nhwc else y]
        return lrn

    @FEW
    @given(n=st.integers(1, 2), c=st.integers(1, 6), size=st.integers(1, 5), nhwc=st.booleans(),
           alpha=st.sampled_from([1e-3, 0.5, 2.0]), beta=st.sampled_from([0.5, 0.75, 1.0]),
           bias=st.sampled_from([1.0, 2.0]), seed=st.integers(0, 99))
    def test_lrn(self, n, c, size, nhwc, alpha, beta, bias, seed):
        x = randn(seed, *((n, 2, 3, c) if nhwc else (n, c, 2, 3)))
        op = core.CreateOperator("LRN", ["X"], ["Y", "scale"], size=size, alpha=alpha, beta=beta, bias=bias,
                                 order="NHWC" if nhwc else "NCHW")
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0], stepsize=1e-2, threshold=1e-2)
        if torch is not None:
            compare_with_torch(op, [x], [0], self._caffe2_lrn_torch(size, alpha, beta, bias, nhwc),
                               rtol=1e-4, atol=1e-5)

    @needs_torch
    def test_lrn_matches_torch_local_response_norm(self):
        x = randn(7, 2, 7, 3, 3)
        for size in (1, 3, 5):                     # odd windows: Caffe2's and torch's are the same
            op = core.CreateOperator("LRN", ["X"], ["Y"], size=size, alpha=0.3, beta=0.75, bias=1.5)
            compare_with_torch(op, [x], [0], lambda t: [torch.nn.functional.local_response_norm(
                t, size, alpha=0.3, beta=0.75, k=1.5)], rtol=1e-4, atol=1e-5)

    @needs_torch
    def test_lrn_even_windows_both_orders(self):
        # even sizes: the window reaches one channel further after c than before it
        for size in (2, 4):
            for nhwc in (False, True):
                x = randn(size, *((2, 3, 2, 5) if nhwc else (2, 5, 3, 2)))
                op = core.CreateOperator("LRN", ["X"], ["Y"], size=size, alpha=0.8, beta=0.75, bias=1.0,
                                         order="NHWC" if nhwc else "NCHW")
                compare_with_torch(op, [x], [0], self._caffe2_lrn_torch(size, 0.8, 0.75, 1.0, nhwc),
                                   rtol=1e-4, atol=1e-5)

    def test_lrn_maker(self):
        op = core.CreateOperator("LRN", ["X"], ["Y", "Y_scale"], size=5, alpha=1e-4, beta=0.75, bias=2.0)
        grad, g_input = only_op(op, ["Y_grad", None])
        assert (grad.type, list(grad.input), list(grad.output)) == ("LRNGradient", ["X", "Y", "Y_grad"], ["X_grad"])
        assert args_of(grad) == {"size": 5, "alpha": pytest.approx(1e-4), "beta": 0.75, "bias": 2.0}

    def test_lrn_gradient_errors(self):
        x = np.ones((1, 3, 2), np.float32)
        op = core.CreateOperator("LRNGradient", ["X", "Y", "dY"], ["dX"], size=3)
        self._raises(op, [x, x[:, :2], x], r"has shape \[1, 2, 2\] but X has \[1, 3, 2\]")
        self._raises(core.CreateOperator("LRNGradient", ["X", "Y", "dY"], ["dX"], size=0), [x, x, x],
                     "size must be positive")

    # ------------------------------------------------------------- LpNorm

    @FEW
    @given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), p=st.sampled_from([1, 2]),
           average=st.booleans(), seed=st.integers(0, 99))
    def test_lp_norm(self, shape, p, average, seed):
        x = randn(seed, *shape)
        x = np.where(np.abs(x) < 0.1, 0.3, x).astype(np.float32)     # |x| has a kink at 0
        op = core.CreateOperator("LpNorm", ["X"], ["Y"], p=p, average=average)
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0], stepsize=1e-2, threshold=1e-2)
        if torch is not None:
            def lp(t):
                v = t.abs().sum() if p == 1 else (t * t).sum()
                return [(v / t.numel() if average else v).reshape(1)]
            compare_with_torch(op, [x], [0], lp)

    def test_lp_norm_gradient_of_zeros_is_zero(self):
        grads, _ = run_gradient(core.CreateOperator("LpNorm", ["X"], ["Y"], p=1),
                                [np.array([0.0, 1e-13, -2.0], np.float32)], {0: np.array([3.0], np.float32)})
        np.testing.assert_array_equal(grads[0], [0, 0, -3])

    def test_lp_norm_maker_and_errors(self):
        grad, _ = only_op(core.CreateOperator("LpNorm", ["X"], ["Y"], p=1, average=1))
        assert (grad.type, list(grad.input), list(grad.output), args_of(grad)) == (
            "LpNormGradient", ["X", "Y_grad"], ["X_grad"], {"p": 1, "average": 1})
        op = core.CreateOperator("LpNormGradient", ["X", "dY"], ["dX"])
        self._raises(op, [np.ones(3, np.float32), np.ones((1, 1), np.float32)], "must be a 1-D tensor of one value")

    # ------------------------------------------------------------- Clip

    @FEW
    @given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
           bounds=st.sampled_from([(-0.5, 0.5), (None, 0.2), (-0.2, None), (None, None)]), seed=st.integers(0, 99))
    def test_clip(self, shape, bounds, seed):
        x = randn(seed, *shape)
        # no value within a step of a bound, where the clip has a kink
        for b in bounds:
            if b is not None:
                x = np.where(np.abs(x - b) < 0.05, b + 0.1, x).astype(np.float32)
        args = {k: v for k, v in zip(("min", "max"), bounds) if v is not None}
        op = core.CreateOperator("Clip", ["X"], ["Y"], **args)
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0], stepsize=1e-2)
        if torch is not None:
            compare_with_torch(op, [x], [0], lambda t: [torch.clamp(t, *bounds) if bounds != (None, None) else t * 1])

    def test_clip_gradient_is_zero_at_the_bounds(self):
        op = core.CreateOperator("ClipGradient", ["Y", "dY"], ["dX"], min=-1.0, max=1.0)
        workspace.ResetWorkspace()
        workspace.FeedBlob("Y", np.array([-1.0, -0.5, 1.0, 0.9], np.float32))
        workspace.FeedBlob("dY", np.array([2.0, 3.0, 4.0, 5.0], np.float32))
        workspace.RunOperatorOnce(op)
        np.testing.assert_array_equal(workspace.FetchBlob("dX"), [0, 3, 0, 5])

    def test_clip_maker(self):
        grad, _ = only_op(core.CreateOperator("Clip", ["X"], ["Y"], min=0.0))
        assert (grad.type, list(grad.input), list(grad.output), args_of(grad)) == (
            "ClipGradient", ["Y", "Y_grad"], ["X_grad"], {"min": 0.0})

    # ------------------------------------------------------------- Mean

    @FEW
    @given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), k=st.integers(1, 3), seed=st.integers(0, 99))
    def test_mean(self, shape, k, seed):
        inputs = [randn(seed + i, *shape) for i in range(k)]
        op = core.CreateOperator("Mean", ["X%d" % i for i in range(k)], ["Y"])
        for i in range(k):
            self.assertGradientChecks(hu.cpu_do, op, inputs, i, [0])
        if torch is not None:
            compare_with_torch(op, inputs, list(range(k)), lambda *ts: [torch.stack(ts).mean(dim=0)])

    @FEW
    @given(seed=st.integers(0, 99), in_place=st.booleans())
    def test_mean_broadcast(self, seed, in_place):
        # late Caffe2's Mean broadcasts its inputs; the gradient sums over the broadcast axes
        inputs = [randn(seed, 2, 3, 4), randn(seed + 1, 1, 3, 1), randn(seed + 2, 4)]
        op = core.CreateOperator("Mean", ["X", "Y", "Z"], ["X" if in_place else "M"])
        for i in range(3):
            self.assertGradientChecks(hu.cpu_do, op, inputs, i, [0])
        if torch is not None:
            compare_with_torch(op, inputs, [0, 1, 2], lambda x, y, z: [(x + y + z) / 3])

    def test_mean_broadcast_errors(self):
        x, w = np.ones((2, 3), np.float32), np.ones((1, 4), np.float32)
        self._raises(core.CreateOperator("Mean", ["X", "W"], ["M"]), [x, w], r"input shapes \[\[2, 3\], \[1, 4\]\] do not broadcast")
        self._raises(core.CreateOperator("Mean", ["W", "X"], ["W"]), [np.ones((1, 3), np.float32), x],
                     r"is also the output, but the inputs broadcast to \[2, 3\]")
        op = core.CreateOperator("MeanGradient", ["dY", "A"], ["dA"])
        self._raises(op, [np.ones((2, 3), np.float32), np.ones((4, 3), np.float32)], "does not broadcast to dY")

    def test_mean_maker(self):
        # late Caffe2 (broadcasting Mean): dY and the inputs, for their shapes
        grad, g_input = only_op(core.CreateOperator("Mean", ["A", "B", "C"], ["Y"]))
        assert (grad.type, list(grad.input), list(grad.output)) == (
            "MeanGradient", ["Y_grad", "A", "B", "C"], ["A_grad", "B_grad", "C_grad"])
        # the older form, MeanGradient(dY) alone, still runs (saved nets)
        op = core.CreateOperator("MeanGradient", ["dY"], ["dA", "dB"])
        workspace.ResetWorkspace()
        workspace.FeedBlob("dY", np.array([2.0, 4.0], np.float32))
        workspace.RunOperatorOnce(op)
        for name in ("dA", "dB"):
            np.testing.assert_array_equal(workspace.FetchBlob(name), [1.0, 2.0])

    # ------------------------------------------------------------- the gradient checker itself

    def test_gradient_check_of_a_transposed_input(self):
        # a transposed (not C-contiguous) input, as Caffe2's NHWC tests build them: the
        # checker's steps must reach the op (they were lost and every estimate was 0)
        x = np.transpose(np.random.default_rng(0).random((2, 2, 2, 2)).astype(np.float32), (0, 2, 3, 1))
        scale, bias = randn(1, 2), randn(2, 2)
        op = core.CreateOperator("InstanceNorm", ["X", "s", "b"], ["Y"], order="NHWC", epsilon=1e-4)
        self.assertGradientChecks(hu.cpu_do, op, [x, scale, bias], 0, [0])

    def test_gradient_check_of_an_in_place_op(self):
        # Mean(X, Y) -> X: each perturbed run must read X again, not the last run's mean
        x, y = randn(0, 3, 2), randn(1, 3, 2)
        op = core.CreateOperator("Mean", ["X", "Y"], ["X"])
        self.assertGradientChecks(hu.cpu_do, op, [x, y], 1, [0])

    # ------------------------------------------------------------- casts, Alias, device copies

    def test_half_float_casts(self):
        grad, _ = only_op(core.CreateOperator("FloatToHalf", ["X"], ["Y"]))
        assert (grad.type, list(grad.input), list(grad.output)) == ("HalfToFloat", ["Y_grad"], ["X_grad"])
        grad, _ = only_op(core.CreateOperator("HalfToFloat", ["X"], ["Y"]))
        assert (grad.type, list(grad.input), list(grad.output)) == ("FloatToHalf", ["Y_grad"], ["X_grad"])
        dy = np.array([0.5, -2.25, 3.0], np.float16)
        grads, _ = run_gradient(core.CreateOperator("FloatToHalf", ["X"], ["Y"]), [dy.astype(np.float32)], {0: dy})
        assert grads[0].dtype == np.float32
        np.testing.assert_array_equal(grads[0], dy.astype(np.float32))

    def test_alias_passes_the_gradient_through(self):
        ops, g_input = emitted(core.CreateOperator("Alias", ["X"], ["Y"]))
        assert ops == [] and g_input == ["Y_grad"]

    def test_device_copies(self):
        grad, g_input = only_op(core.CreateOperator("CopyGPUToCPU", ["X"], ["Y"]))
        assert (grad.type, list(grad.input), list(grad.output)) == ("CopyCPUToGPU", ["Y_grad"], ["X_grad"])
        ops, g_input = emitted(core.CreateOperator("CopyCPUToGPU", ["X"], ["Y"]), [GradientSlice("gi", "gv")])
        assert [(o.type, list(o.input), list(o.output)) for o in ops] == [
            ("CopyGPUToCPU", ["gi"], ["X_grad_indices"]), ("CopyGPUToCPU", ["gv"], ["X_grad_values"])]
        assert g_input == [GradientSlice("X_grad_indices", "X_grad_values")]

    # ------------------------------------------------------------- ops Caffe2 gives no gradient

    def test_no_gradient_marks(self):
        for op_type in ("ResizeLike", "HasElements", "IsEmpty", "UnsafeCoalesce", "ScatterAssign", "Append",
                        "ClipTensorByScaling"):
            assert gradient_status(op_type) == "should not do gradient", op_type
        for op_type in ("Size", "Range", "DiagonalFill", "EnsureCPUOutput", "Float16ConstantFill"):
            assert gradient_status(op_type) == "no gradient", op_type
        ops, g_input = emitted(core.CreateOperator("Size", ["X"], ["n"]))
        assert ops == [] and g_input == [None]
        with pytest.raises(Caffe2Error, match="one should not ask for the gradient of operator type 'ResizeLike'"):
            emitted(core.CreateOperator("ResizeLike", ["X", "L"], ["Y"]))

    # ------------------------------------------------------------- a backward pass through several

    def test_backward_pass_through_a_net(self):
        net = core.Net("n")
        net.Slice(["X"], ["S"], starts=[0, 1], ends=[-1, 3])
        net.ExpandDims(["S"], ["E"], dims=[0])
        net.Tile(["E"], ["T"], tiles=2, axis=0)
        net.LRN(["T"], ["L"], size=3, alpha=0.5, beta=0.75, bias=1.0)
        net.AveragedLoss(["L"], ["loss"])
        net.AddGradientOperators(["loss"])
        types = [op.type for op in net.Proto().op]
        assert types[-4:] == ["LRNGradient", "TileGradient", "Squeeze", "SliceGradient"]
        x = randn(3, 2, 4)
        workspace.ResetWorkspace()
        workspace.FeedBlob("X", x)
        workspace.RunNetOnce(net)
        if torch is not None:
            t = torch.tensor(x.astype(np.float64), requires_grad=True)
            lrn = self._caffe2_lrn_torch(3, 0.5, 0.75, 1.0, False)
            lrn(t[:, 1:3].unsqueeze(0).repeat(2, 1, 1))[0].mean().backward()
            np.testing.assert_allclose(workspace.FetchBlob("X_grad"), t.grad.numpy(), rtol=1e-4, atol=1e-6)
