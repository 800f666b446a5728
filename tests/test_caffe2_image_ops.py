"""Caffe2's convolution / pooling aliases, ConvTranspose, LpPool, image layout ops,
statistics and compressed-weight ops (operators/cnn/caffe2_conv_pool.py,
caffe2_conv_transpose.py, caffe2_layout.py, caffe2_stats.py, caffe2_compressed.py)
with hypothesis_test_util, against references written out here (loops from Caffe2's
definitions, and torch where it is installed), through the caffe2.python aliases."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import itertools

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import assume, given, settings

from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error
from caffe2py import registry

from _caffe2_op_helpers import floats_tensor, spread


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True

    def _raises(self, op, inputs, regexp):
        self.assertRunOpRaises(hu.cpu_do, op, inputs, exception=Caffe2Error, regexp=regexp)


def _rand(*shape, seed=0):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


# ----------------------------------------------------------------- ConvTranspose

def _conv_transpose_ref(X, W, b, stride, pads, adj, group):
    """Scatter loop: every input pixel adds its filter, weighted, into the output."""
    n, c, h, w = X.shape
    mg, kh, kw = W.shape[1:]
    cg = c // group
    pt, pl, pb, pr = pads
    ho = (h - 1) * stride + kh + adj - pt - pb
    wo = (w - 1) * stride + kw + adj - pl - pr
    full = np.zeros((n, mg * group, (h - 1) * stride + kh + adj, (w - 1) * stride + kw + adj))
    for b_, ci, i, j in itertools.product(range(n), range(c), range(h), range(w)):
        g = ci // cg
        full[b_, g * mg:(g + 1) * mg, i * stride:i * stride + kh, j * stride:j * stride + kw] += X[b_, ci, i, j] * W[ci]
    out = full[:, :, pt:pt + ho, pl:pl + wo]
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out.astype(np.float32)


class TestConvTranspose(OpTest):
    @given(n=st.integers(1, 2), cg=st.integers(1, 3), mg=st.integers(1, 3), group=st.integers(1, 2),
           size=st.integers(1, 5), kernel=st.integers(1, 3), stride=st.integers(1, 3), data=st.data(),
           bias=st.booleans(), nhwc=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_against_loop(self, n, cg, mg, group, size, kernel, stride, data, bias, nhwc, gc, dc):
        pads = data.draw(st.lists(st.integers(0, kernel - 1), min_size=4, max_size=4))
        adj = data.draw(st.integers(0, stride))
        # a non-empty output: X is size x (size + 1), pads are [top, left, bottom, right]
        assume((size - 1) * stride + kernel + adj - pads[0] - pads[2] >= 1)
        assume(size * stride + kernel + adj - pads[1] - pads[3] >= 1)
        c = cg * group
        X, W, b = _rand(n, c, size, size + 1, seed=1), _rand(c, mg, kernel, kernel, seed=2), _rand(mg * group, seed=3)
        want = _conv_transpose_ref(X, W, b if bias else None, stride, pads, adj, group)
        args = dict(kernel=kernel, stride=stride, pads=pads, adj=adj, group=group)
        inputs = [X, W] + ([b] if bias else [])
        if nhwc:
            args["order"] = "NHWC"
            inputs = [X.transpose(0, 2, 3, 1).copy(), W.transpose(0, 2, 3, 1).copy()] + inputs[2:]
            want = want.transpose(0, 2, 3, 1)
        op = core.CreateOperator("ConvTranspose", ["X", "W", "b"][:len(inputs)], ["Y"], **args)
        self.assertReferenceChecks(gc, op, inputs, lambda *a: (want,), threshold=1e-4, atol=1e-4)

    def test_matches_torch_and_its_gradient(self):
        torch = pytest.importorskip("torch")
        X, W, b = _rand(2, 4, 5, 6, seed=4), _rand(4, 3, 3, 2, seed=5), _rand(6, seed=6)
        xt, wt, bt = (torch.tensor(v, requires_grad=True) for v in (X, W, b))
        yt = torch.nn.functional.conv_transpose2d(xt, wt, bt, stride=2, padding=(1, 0), output_padding=1, groups=2)
        dY = _rand(*yt.shape, seed=7)
        yt.backward(torch.tensor(dY))
        op = core.CreateOperator("ConvTranspose", ["X", "W", "b"], ["Y"], kernel_h=3, kernel_w=2, stride=2,
                                 pad_t=1, pad_b=1, pad_l=0, pad_r=0, adj=1, group=2)
        self.assertReferenceChecks(hu.cpu_do, op, [X, W, b], lambda *a: (yt.detach().numpy(),), atol=1e-4)
        grad = core.CreateOperator("ConvTransposeGradient", ["X", "W", "dY"], ["dW", "db", "dX"], kernel_h=3,
                                   kernel_w=2, stride=2, pad_t=1, pad_b=1, pad_l=0, pad_r=0, adj=1, group=2)
        self.assertReferenceChecks(hu.cpu_do, grad, [X, W, dY], lambda *a: (
            wt.grad.numpy(), bt.grad.numpy(), xt.grad.numpy()), threshold=1e-3, atol=1e-3)
        no_bias = core.CreateOperator("ConvTransposeGradient", ["X", "W", "dY"], ["dW"], kernel_h=3, kernel_w=2,
                                      stride=2, pad_t=1, pad_b=1, pad_l=0, pad_r=0, adj=1, group=2, no_bias=1)
        self.assertReferenceChecks(hu.cpu_do, no_bias, [X, W, dY], lambda *a: (wt.grad.numpy(),),
                                   threshold=1e-3, atol=1e-3)

    def test_empty_batch_and_channels(self):
        W, b = np.ones((2, 1, 3, 3), np.float32), np.array([0.5], np.float32)
        op = core.CreateOperator("ConvTranspose", ["X", "W", "b"], ["Y"], kernel=3, stride=2)
        self.assertReferenceChecks(hu.cpu_do, op, [np.zeros((0, 2, 3, 3), np.float32), W, b],
                                   lambda *a: (np.zeros((0, 1, 7, 7), np.float32),))
        self.assertReferenceChecks(hu.cpu_do, op, [np.zeros((1, 0, 3, 3), np.float32), W[:0], b],
                                   lambda *a: (np.full((1, 1, 7, 7), 0.5, np.float32),))     # bias only

    def test_legacy_pad_and_1d(self):
        X, W = _rand(1, 2, 3, 3, seed=8), _rand(2, 1, 2, 2, seed=9)
        op = core.CreateOperator("ConvTranspose", ["X", "W"], ["Y"], kernel=2, stride=2, legacy_pad=2)
        self.assertReferenceChecks(hu.cpu_do, op, [X, W], lambda X, W: (
            _conv_transpose_ref(X, W, None, 2, [0, 0, 0, 0], 0, 1),))
        # a 1-D input: Caffe2 is 2-D only; here the same op with height 1
        X1, W1 = X[:, :, 0], W[:, :, 0]
        op1 = core.CreateOperator("ConvTranspose", ["X", "W"], ["Y"], kernels=[2], strides=[2], pads=[1, 0])
        self.assertReferenceChecks(hu.cpu_do, op1, [X1, W1], lambda X, W: (
            _conv_transpose_ref(X[:, :, None], W[:, :, None], None, 2, [0, 1, 0, 0], 0, 1)[:, :, 0],))

    def test_gradient_checks(self):
        X, W, b = _rand(1, 4, 3, 3, seed=10), _rand(4, 1, 3, 3, seed=11), _rand(2, seed=12)
        op = core.CreateOperator("ConvTranspose", ["X", "W", "b"], ["Y"], kernel=3, stride=2, pads=[1, 0, 0, 1],
                                 adj=1, group=2)
        for i in range(3):
            self.assertGradientChecks(hu.cpu_do, op, [X, W, b], i, [0])

    def test_errors(self):
        X, W = np.ones((1, 2, 3, 3), np.float32), np.ones((2, 1, 3, 3), np.float32)
        self._raises(core.CreateOperator("ConvTranspose", ["X", "W"], ["Y"], kernel=2), [X, W],
                     r"kernel \[2, 2\] differs from the filter's spatial shape \[3, 3\]")
        self._raises(core.CreateOperator("ConvTranspose", ["X", "W"], ["Y"], stride=2, adj=3), [X, W],
                     r"each adj in \[0, stride\]")
        self._raises(core.CreateOperator("ConvTranspose", ["X", "W"], ["Y"], legacy_pad=2, pad=1), [X, W],
                     "with legacy_pad VALID or SAME, give no explicit pads")
        self._raises(core.CreateOperator("ConvTranspose", ["X", "W"], ["Y"], dilation=2), [X, W],
                     "ConvTranspose has no dilation")
        self._raises(core.CreateOperator("ConvTranspose", ["X", "W"], ["Y"]), [X, np.ones((3, 1, 3, 3), np.float32)],
                     "filter's first dim 3 differs from the input's 2 channels")
        self._raises(core.CreateOperator("ConvTranspose", ["X", "W", "b"], ["Y"]), [X, W, np.ones(2, np.float32)],
                     "bias has 2 values; the output has 1 channels")
        self._raises(core.CreateOperator("ConvTranspose", ["X", "W"], ["Y"], pad=3), [X, W],
                     r"output spatial size \[-1, -1\] is not positive")


# ----------------------------------------------------------------- aliases and LpPool

class TestConvPoolAliases(OpTest):
    def test_aliases_share_the_kernels(self):
        for rank in (1, 2, 3):
            for alias, target in (("Conv%dD", "Conv"), ("MaxPool%dD", "MaxPool"), ("AveragePool%dD", "AveragePool")):
                name = alias % rank
                entries = registry._kernels[("", name, registry.CPU)][""]
                assert entries[0].factory is registry._kernels[("", target, registry.CPU)][""][0].factory
                assert registry.schema_for(name).inference is registry.schema_for(target).inference
        assert registry._kernels[("", "DepthConcat", registry.CPU)][""][0].factory is \
            registry._kernels[("", "Concat", registry.CPU)][""][0].factory

    @given(rank=st.integers(1, 3), kind=st.sampled_from(["Conv", "MaxPool", "AveragePool"]), **hu.gcs_cpu_only)
    @settings(max_examples=9)
    def test_alias_runs_as_its_op(self, rank, kind, gc, dc):
        X = _rand(*([2, 3] + [5] * rank), seed=rank)
        inputs = [X, _rand(*([4, 3] + [2] * rank), seed=12)] if kind == "Conv" else [X]
        args = dict(kernels=[2] * rank, strides=[1] * rank) if kind != "Conv" else dict(pads=[1] * (2 * rank))
        names = ["X", "W"][:len(inputs)]
        workspace.FeedBlob("X", X)
        for name, value in zip(names, inputs):
            workspace.FeedBlob(name, value)
        workspace.RunOperatorOnce(core.CreateOperator(kind, names, ["Y"], **args))
        want = workspace.FetchBlob("Y")
        op = core.CreateOperator("%s%dD" % (kind, rank), names, ["Z"], **args)
        self.assertReferenceChecks(gc, op, inputs, lambda *a: (want,))

    def test_alias_gradients(self):
        from caffe2py import gradients
        ops, _ = gradients.get_gradient_for_op(core.CreateOperator("Conv2D", ["X", "W", "b"], ["Y"]), ["Y_grad"])
        assert [(o.type, list(o.input), list(o.output)) for o in ops] == [
            ("Conv2DGradient", ["X", "W", "Y_grad"], ["W_grad", "b_grad", "X_grad"])]     # Caffe2's names
        ops, _ = gradients.get_gradient_for_op(core.CreateOperator("MaxPool1D", ["X"], ["Y"], kernel=2), ["Y_grad"])
        assert [o.type for o in ops] == ["MaxPool1DGradient"]
        X = spread(1, 2, 4, 5, seed=16)
        for op in (core.CreateOperator("Conv2D", ["X", "W"], ["Y"], pad=1),
                   core.CreateOperator("MaxPool2D", ["X"], ["Y"], kernel=2),
                   core.CreateOperator("AveragePool2D", ["X"], ["Y"], kernel=3, pad=1)):
            inputs = [X, _rand(3, 2, 3, 3, seed=17)] if op.type == "Conv2D" else [X]
            self.assertGradientChecks(hu.cpu_do, op, inputs, 0, [0])

    @given(X=floats_tensor(min_dim=4, max_dim=4), p=st.sampled_from([1.0, 2.0, 3.0]), data=st.data(),
           nhwc=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_lp_pool(self, X, p, data, nhwc, gc, dc):
        h, w = X.shape[2:]
        kernel = data.draw(st.integers(1, min(h, w)))
        stride = data.draw(st.integers(1, 2))
        pad = data.draw(st.integers(0, kernel - 1))
        args = dict(kernel=kernel, stride=stride, pad=pad, p=p)

        def ref(X):
            ho, wo = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
            Y = np.zeros(X.shape[:2] + (ho, wo), np.float64)
            for i, j in itertools.product(range(ho), range(wo)):
                r0, c0 = i * stride - pad, j * stride - pad
                win = X[:, :, max(r0, 0):r0 + kernel, max(c0, 0):c0 + kernel].astype(np.float64)
                Y[:, :, i, j] = (np.abs(win) ** p).sum(axis=(2, 3)) ** (1 / p)
            return Y.astype(np.float32)
        if nhwc:
            op = core.CreateOperator("LpPool", ["X"], ["Y"], order="NHWC", **args)
            self.assertReferenceChecks(gc, op, [X.transpose(0, 2, 3, 1).copy()],
                                       lambda Xh: (ref(Xh.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1),),
                                       threshold=1e-3)
        else:
            op = core.CreateOperator("LpPool", ["X"], ["Y"], **args)
            self.assertReferenceChecks(gc, op, [X], lambda X: (ref(X),), threshold=1e-3)

    def test_lp_pool_gradient_matches_torch(self):
        torch = pytest.importorskip("torch")
        X = np.abs(_rand(2, 3, 6, 5, seed=13)) + 0.1          # torch's lp_pool raises x, not |x|, to p
        xt = torch.tensor(X.astype(np.float64), requires_grad=True)
        yt = torch.nn.functional.lp_pool2d(xt, 3.0, 2, 2)
        dY = _rand(*yt.shape, seed=14)
        yt.backward(torch.tensor(dY.astype(np.float64)))
        Y = yt.detach().numpy().astype(np.float32)
        op = core.CreateOperator("LpPoolGradient", ["X", "Y", "dY"], ["dX"], kernel=2, stride=2, p=3.0)
        self.assertReferenceChecks(hu.cpu_do, op, [X, Y, dY], lambda *a: (xt.grad.numpy().astype(np.float32),),
                                   threshold=1e-3, atol=1e-4)

    def test_errors(self):
        X = np.ones((1, 1, 4, 4), np.float32)
        self._raises(core.CreateOperator("LpPool", ["X"], ["Y"], kernel=2, p=0.0), [X], "p must be > 0")
        self._raises(core.CreateOperator("LpPool", ["X"], ["Y"], kernel=2, dilation=2), [X], "LpPool has no dilation")
        self._raises(core.CreateOperator("LpPool", ["X"], ["Y"], kernel=5), [X], "the windows do not fit")
        self._raises(core.CreateOperator("LpPool", ["X"], ["Y"], kernel=2), [np.ones((4, 4), np.float32)],
                     r"pooling needs \(N, C, spatial...\) input")


# ----------------------------------------------------------------- layout

class TestLayout(OpTest):
    @given(X=hu.tensor(min_dim=3, max_dim=5), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_order_switch(self, X, gc, dc):
        self.assertReferenceChecks(gc, core.CreateOperator("NCHW2NHWC", ["X"], ["Y"]), [X],
                                   lambda X: (np.transpose(X, [0] + list(range(2, X.ndim)) + [1]),))
        self.assertReferenceChecks(gc, core.CreateOperator("NHWC2NCHW", ["X"], ["Y"]), [X],
                                   lambda X: (np.transpose(X, [0, X.ndim - 1] + list(range(1, X.ndim - 1))),))

    @given(n=st.integers(1, 2), c=st.integers(1, 2), hb=st.integers(1, 3), wb=st.integers(1, 3),
           block=st.integers(1, 3), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_space_to_batch_and_back(self, n, c, hb, wb, block, data, gc, dc):
        pads = data.draw(st.lists(st.integers(0, 2), min_size=4, max_size=4))
        pt, pl, pb, pr = pads
        h, w = hb * block + (block - (pt + pb) % block) % block, wb * block + (block - (pl + pr) % block) % block
        if h <= 0 or w <= 0:
            return
        X = np.arange(n * c * h * w, dtype=np.float32).reshape(n, c, h, w)
        args = dict(pad_t=pt, pad_l=pl, pad_b=pb, pad_r=pr, block_size=block)

        def ref(X):      # Caffe2's spaceToBatch loop
            H, W = (h + pt + pb) // block, (w + pl + pr) // block
            Y = np.zeros((n * block * block, c, H, W), np.float32)
            for ob, d, oh, ow in itertools.product(range(n * block * block), range(c), range(H), range(W)):
                b, off_w, off_h = ob % n, (ob // n) % block, (ob // n) // block
                ih, iw = oh * block + off_h - pt, ow * block + off_w - pl
                if 0 <= ih < h and 0 <= iw < w:
                    Y[ob, d, oh, ow] = X[b, d, ih, iw]
            return (Y,)
        self.assertReferenceChecks(gc, core.CreateOperator("SpaceToBatch", ["X"], ["Y"], **args), [X], ref)
        Y = ref(X)[0]
        self.assertReferenceChecks(gc, core.CreateOperator("BatchToSpace", ["Y"], ["Z"], **args), [Y],
                                   lambda Y: (X,))

    @given(X=hu.tensor(min_dim=4, max_dim=4, min_value=2, max_value=4), mode=st.sampled_from(["constant", "reflect",
                                                                                               "edge"]),
           data=st.data(), nhwc=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_pad_image(self, X, mode, data, nhwc, gc, dc):
        h, w = X.shape[2:]
        top = 0 if mode != "reflect" else 1
        pads = [data.draw(st.integers(0, (h if i % 2 == 0 else w) - top)) for i in range(4)]
        pt, pl, pb, pr = pads
        args = dict(pad_t=pt, pad_l=pl, pad_b=pb, pad_r=pr, mode=mode, value=2.5)

        def source(i, size):
            if 0 <= i < size:
                return i
            if mode == "constant":
                return None
            if mode == "edge":
                return min(max(i, 0), size - 1)
            i = abs(i)
            return min(i, 2 * size - i - 2)

        def ref(X):
            Y = np.full(X.shape[:2] + (h + pt + pb, w + pl + pr), 2.5, np.float32)
            for i, j in itertools.product(range(Y.shape[2]), range(Y.shape[3])):
                si, sj = source(i - pt, h), source(j - pl, w)
                if si is not None and sj is not None:
                    Y[:, :, i, j] = X[:, :, si, sj]
            return Y

        dY = np.arange(int(np.prod(ref(X).shape)), dtype=np.float32).reshape(ref(X).shape)

        def grad_ref(dY):
            dX = np.zeros(X.shape, np.float32)
            for i, j in itertools.product(range(dY.shape[2]), range(dY.shape[3])):
                si, sj = source(i - pt, h), source(j - pl, w)
                if si is not None and sj is not None:
                    dX[:, :, si, sj] += dY[:, :, i, j]
            return dX
        if nhwc:
            to, back = (0, 2, 3, 1), (0, 3, 1, 2)
            self.assertReferenceChecks(gc, core.CreateOperator("PadImage", ["X"], ["Y"], order="NHWC", **args),
                                       [X.transpose(to).copy()], lambda Xh: (ref(Xh.transpose(back)).transpose(to),))
            self.assertReferenceChecks(gc, core.CreateOperator("PadImageGradient", ["dY"], ["dX"], order="NHWC",
                                                               **args),
                                       [dY.transpose(to).copy()], lambda d: (grad_ref(d.transpose(back)).transpose(to),))
        else:
            self.assertReferenceChecks(gc, core.CreateOperator("PadImage", ["X"], ["Y"], **args), [X],
                                       lambda X: (ref(X),))
            self.assertReferenceChecks(gc, core.CreateOperator("PadImageGradient", ["dY"], ["dX"], **args), [dY],
                                       lambda dY: (grad_ref(dY),))

    def test_depth_concat_and_split(self):
        a, b = _rand(2, 3, 4, seed=15), _rand(2, 2, 4, seed=16)
        op = core.CreateOperator("DepthConcat", ["a", "b"], ["y", "info"], axis=1)
        self.assertReferenceChecks(hu.cpu_do, op, [a, b], lambda a, b: (np.concatenate([a, b], axis=1),
                                                                       np.array([3, 2], np.int32)))
        split = core.CreateOperator("DepthSplit", ["y"], ["p", "q"], axis=1, split=[3, 2])
        self.assertReferenceChecks(hu.cpu_do, split, [np.concatenate([a, b], axis=1)], lambda y: (a, b))

    def test_gradient_checks(self):
        X = spread(2, 2, 3, 4, seed=13)
        for op in (core.CreateOperator("PadImage", ["X"], ["Y"], pads=[1, 2, 0, 1], mode="reflect"),
                   core.CreateOperator("PadImage", ["X"], ["Y"], pad=2, mode="edge"),
                   core.CreateOperator("NCHW2NHWC", ["X"], ["Y"]),
                   core.CreateOperator("NHWC2NCHW", ["X"], ["Y"]),
                   core.CreateOperator("SpaceToBatch", ["X"], ["Y"], block_size=2, pad_t=1, pad_l=0, pad_b=0,
                                       pad_r=0),
                   core.CreateOperator("BatchToSpace", ["X"], ["Y"], block_size=1, pad=0),
                   core.CreateOperator("LpPool", ["X"], ["Y"], kernel=2, stride=1, pad=1, p=3.0)):
            self.assertGradientChecks(hu.cpu_do, op, [X], 0, [0])
        op = core.CreateOperator("DepthSplit", ["X"], ["Y", "Z"], axis=3, split=[1, 3])
        self.assertGradientChecks(hu.cpu_do, op, [X], 0, [0, 1])
        op = core.CreateOperator("DepthConcat", ["X", "X2"], ["Y", "info"], axis=1)
        self.assertGradientChecks(hu.cpu_do, op, [X, spread(2, 1, 3, 4, seed=14)], 1, [0])
        codebook, codes = spread(5, seed=15), np.array([[0, 4, 4], [1, 2, 0]], np.uint8)
        op = core.CreateOperator("QuantDecode", ["cb", "c"], ["d"])
        self.assertGradientChecks(hu.cpu_do, op, [codebook, codes], 0, [0])

    def test_errors(self):
        X = np.ones((1, 1, 3, 3), np.float32)
        self._raises(core.CreateOperator("SpaceToBatch", ["X"], ["Y"], block_size=2), [X],
                     "padded height 3 and width 3 must be multiples of block_size 2")
        self._raises(core.CreateOperator("BatchToSpace", ["X"], ["Y"], block_size=2), [X],
                     r"batch 1 is not a multiple of block_size\^2 = 4")
        self._raises(core.CreateOperator("SpaceToBatch", ["X"], ["Y"], order="NHWC"), [X], "only order NCHW")
        # Caffe2's reflect formula stays inside a dim of 3 up to a bottom/right pad of 2; 3 reads outside
        self._raises(core.CreateOperator("PadImage", ["X"], ["Y"], pad=3, mode="reflect"), [X],
                     "reflect padding .* reads outside the input's dim 2 of size 3")
        self._raises(core.CreateOperator("PadImage", ["X"], ["Y"], pad=1, mode="edge"),
                     [np.ones((1, 1, 0, 2), np.float32)], "edge padding .* reads outside the input's dim 2 of size 0")
        self._raises(core.CreateOperator("PadImage", ["X"], ["Y"], pad=1, mode="wrap"), [X],
                     "mode must be one of constant, reflect, edge")
        self._raises(core.CreateOperator("PadImage", ["X"], ["Y"], pad=1, stride=2), [X],
                     "PadImage only pads: argument stride must be 1")
        self._raises(core.CreateOperator("NCHW2NHWC", ["X"], ["Y"]), [np.ones((2, 2), np.float32)],
                     "needs at least 3 dims")


# ----------------------------------------------------------------- statistics

class TestStats(OpTest):
    @given(X=floats_tensor(min_dim=2, max_dim=4), nhwc=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_channel_stats(self, X, nhwc, gc, dc):
        axis = X.ndim - 1 if nhwc else 1
        others = tuple(i for i in range(X.ndim) if i != axis)
        op = core.CreateOperator("ChannelStats", ["X"], ["s", "ss"], order="NHWC" if nhwc else "NCHW")
        self.assertReferenceChecks(gc, op, [X], lambda X: (X.astype(np.float64).sum(axis=others).astype(np.float32),
                                                           (X.astype(np.float64) ** 2).sum(axis=others)
                                                           .astype(np.float32)))

    @given(X=floats_tensor(min_dim=3, max_dim=5), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_channel_backprop_stats(self, X, gc, dc):
        c = X.shape[1]
        mean, inv_std = np.linspace(-1, 1, c).astype(np.float32), np.linspace(0.5, 2, c).astype(np.float32)
        dY = _rand(*X.shape, seed=17)
        shape = (1, c) + (1,) * (X.ndim - 2)
        others = (0,) + tuple(range(2, X.ndim))
        op = core.CreateOperator("ChannelBackpropStats", ["X", "m", "s", "dY"], ["ds", "db"])
        self.assertReferenceChecks(gc, op, [X, mean, inv_std, dY], lambda X, m, s, dY: (
            (dY * (X - m.reshape(shape)) * s.reshape(shape)).astype(np.float64).sum(axis=others).astype(np.float32),
            dY.astype(np.float64).sum(axis=others).astype(np.float32)), threshold=1e-3, atol=1e-3)

    def test_accumulate_histogram(self):
        X1 = np.array([-1.0, 0.0, 0.1, 0.5, 0.99, 1.0, np.nan], np.float32)
        X2 = np.array([0.3, 2.0], np.float32)
        net = core.Net("hist")
        net.AccumulateHistogram(["X"], ["cur", "acc"], lower_bound=0.0, upper_bound=1.0, num_buckets=2)
        workspace.FeedBlob("X", X1)
        workspace.CreateNet(net)
        workspace.RunNet(net.Name())
        # [below 0 | [0, .5) | [.5, 1) | >= 1], NaN not counted
        np.testing.assert_array_equal(workspace.FetchBlob("cur"), [1, 2, 2, 1])
        workspace.FeedBlob("X", X2)
        workspace.RunNet(net.Name())
        np.testing.assert_array_equal(workspace.FetchBlob("cur"), [0, 1, 0, 1])
        np.testing.assert_array_equal(workspace.FetchBlob("acc"), [1, 3, 2, 2])
        assert workspace.FetchBlob("acc").dtype == np.int64

    def test_errors(self):
        self._raises(core.CreateOperator("AccumulateHistogram", ["X"], ["c", "a"], num_buckets=0),
                     [np.ones(2, np.float32)], "num_buckets must be > 0")
        self._raises(core.CreateOperator("AccumulateHistogram", ["X"], ["c", "a"], lower_bound=1.0),
                     [np.ones(2, np.float32)], "upper_bound .* must be greater than lower_bound")
        self._raises(core.CreateOperator("ChannelBackpropStats", ["X", "m", "s", "dY"], ["a", "b"]),
                     [np.ones((1, 2, 3), np.float32), np.ones(3, np.float32), np.ones(2, np.float32),
                      np.ones((1, 2, 3), np.float32)], "blob 'm': has 3 values; X has 2 channels")


# ----------------------------------------------------------------- QuantDecode / TT

class TestCompressed(OpTest):
    @given(size=st.integers(1, 8), code_type=st.sampled_from([np.uint8, np.uint16, np.int32]), n=st.integers(1, 3),
           data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_quant_decode(self, size, code_type, n, data, gc, dc):
        codebook = _rand(size, seed=size)
        codes = [np.array(data.draw(st.lists(st.integers(0, size - 1), min_size=0, max_size=6)), code_type)
                 for _ in range(n)]
        op = core.CreateOperator("QuantDecode", ["cb"] + ["c%d" % i for i in range(n)], ["d%d" % i for i in range(n)])
        self.assertReferenceChecks(gc, op, [codebook] + codes,
                                   lambda cb, *cs: tuple(np.array([cb[v] for v in c], np.float32).reshape(c.shape)
                                                         for c in cs))
        grads = [_rand(*c.shape, seed=i) for i, c in enumerate(codes)]

        def grad_ref(cb, *rest):
            g = np.zeros(size, np.float32)
            for c, d in zip(rest[:n], rest[n:]):
                for v, x in zip(c, d):
                    g[v] += x
            return (g,)
        op_grad = core.CreateOperator("QuantDecodeGradient", ["cb"] + ["c%d" % i for i in range(n)] +
                                      ["g%d" % i for i in range(n)], ["dcb"])
        self.assertReferenceChecks(gc, op_grad, [codebook] + codes + grads, grad_ref, threshold=1e-5)

    @given(d=st.integers(1, 3), batch=st.integers(1, 3), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_tt(self, d, batch, data, gc, dc):
        inp = data.draw(st.lists(st.integers(1, 3), min_size=d, max_size=d))
        out = data.draw(st.lists(st.integers(1, 3), min_size=d, max_size=d))
        ranks = [1] + data.draw(st.lists(st.integers(1, 3), min_size=d - 1, max_size=d - 1)) + [1]
        cores = [_rand(ranks[k], inp[k], out[k], ranks[k + 1], seed=k) for k in range(d)]
        # the op's layout (caffe2.python.tt_core.matrix_to_tt): last core first, each as (n, r_next, r, m)
        packed = np.concatenate([cores[k].transpose(1, 3, 0, 2).reshape(-1) for k in reversed(range(d))])
        X, b = _rand(batch, int(np.prod(inp)), seed=20), _rand(int(np.prod(out)), seed=21)

        def ref(X, b, packed):
            W = np.zeros((int(np.prod(inp)), int(np.prod(out))))
            for rows in itertools.product(*[range(v) for v in inp]):
                for cols in itertools.product(*[range(v) for v in out]):
                    prod = np.eye(1)
                    for k in range(d):
                        prod = prod @ cores[k][:, rows[k], cols[k], :]
                    W[np.ravel_multi_index(rows, inp), np.ravel_multi_index(cols, out)] = prod[0, 0]
            return ((X.astype(np.float64) @ W + b).astype(np.float32),)
        op = core.CreateOperator("TT", ["X", "b", "cores"], ["Y"], inp_sizes=inp, out_sizes=out, tt_ranks=ranks)
        self.assertReferenceChecks(gc, op, [X, b, packed], ref, threshold=1e-4, atol=1e-4)

    def test_tt_empty_batch(self):
        op = core.CreateOperator("TT", ["X", "b", "c"], ["Y"], inp_sizes=[2], out_sizes=[3], tt_ranks=[1, 1])
        self.assertReferenceChecks(hu.cpu_do, op, [np.ones((0, 2), np.float32), np.ones(3, np.float32),
                                                    np.ones(6, np.float32)], lambda *a: (np.zeros((0, 3), np.float32),))

    def test_errors(self):
        self._raises(core.CreateOperator("QuantDecode", ["cb", "c"], ["d"]),
                     [np.ones(3, np.float32), np.array([0, 3], np.uint8)],
                     r"blob 'c': code 3 at position 1 is out of range \[0, 3\)")
        self._raises(core.CreateOperator("QuantDecode", ["cb", "c"], ["d"]),
                     [np.ones(3, np.float32), np.array([0], np.int64)], "QuantDecode does not support dtype int64")
        self._raises(core.CreateOperator("QuantDecode", ["cb", "c"], ["d", "e"]),
                     [np.ones(3, np.float32), np.array([0], np.uint8)],
                     "2 inputs with 2 outputs is not a valid combination")
        tt = dict(inp_sizes=[2, 2], out_sizes=[2, 2], tt_ranks=[1, 2, 1])
        X, b, cores = np.ones((3, 4), np.float32), np.ones(4, np.float32), np.ones(16, np.float32)
        self._raises(core.CreateOperator("TT", ["X", "b", "c"], ["Y"], **tt), [X, b, np.ones(15, np.float32)],
                     r"blob 'c': must be 1-D with 16 values")
        self._raises(core.CreateOperator("TT", ["X", "b", "c"], ["Y"], **tt), [np.ones((3, 5), np.float32), b, cores],
                     r"blob 'X': must be \(batch, 4\)")
        self._raises(core.CreateOperator("TT", ["X", "b", "c"], ["Y"], inp_sizes=[2, 2], out_sizes=[2, 2],
                                         tt_ranks=[2, 2, 1]), [X, b, cores], "the first and last 1")
