"""LC / LC1D / LC2D / LC3D against a loop over output positions written here, and their
gradients against finite differences."""
import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error


def lc_reference(x, w, b, kernel, stride, pad, nhwc):
    """Y[n, m, p] = sum over c and kernel offsets of X at p * stride - pad + offset
    times the filter of position p (zero outside the image)."""
    if nhwc:
        x = np.moveaxis(x, -1, 1)
        w = np.moveaxis(w, -1, 3)
    n, c = x.shape[:2]
    rank = x.ndim - 2
    out = w.shape[:rank]
    m = w.shape[rank]
    y = np.zeros((n, m) + out)
    for p in itertools.product(*(range(o) for o in out)):
        acc = np.zeros((n, m)) + (b[p] if b is not None else 0.0)
        for k in itertools.product(*(range(kk) for kk in kernel)):
            src = tuple(p[i] * stride - pad + k[i] for i in range(rank))
            if all(0 <= src[i] < x.shape[2 + i] for i in range(rank)):
                patch = x[(slice(None), slice(None)) + src].astype(np.float64)          # [n, c]
                acc += patch @ w[p + (slice(None), slice(None)) + k].T.astype(np.float64)
        y[(slice(None), slice(None)) + p] = acc
    return np.moveaxis(y, 1, -1) if nhwc else y


class TestLocallyConnected(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(op_type=st.sampled_from(["LC", "LC1D", "LC2D", "LC3D"]), n=st.integers(1, 2), c=st.integers(1, 3),
           m=st.integers(1, 3), size=st.integers(2, 5), kernel=st.integers(1, 2), stride=st.integers(1, 2),
           pad=st.integers(0, 1), bias=st.booleans(), nhwc=st.booleans(), seed=st.integers(0, 99))
    @settings(max_examples=20, deadline=None, derandomize=True)
    def test_forward_and_gradients(self, op_type, n, c, m, size, kernel, stride, pad, bias, nhwc, seed):
        rank = {"LC": 2, "LC1D": 1, "LC2D": 2, "LC3D": 3}[op_type]
        nhwc = nhwc and rank == 2
        rng = np.random.default_rng(seed)
        spatial = (size,) * rank
        out = tuple((s + 2 * pad - kernel) // stride + 1 for s in spatial)
        x = rng.standard_normal((n,) + spatial + (c,) if nhwc else (n, c) + spatial).astype(np.float32)
        w_shape = out + (m,) + ((kernel,) * rank + (c,) if nhwc else (c,) + (kernel,) * rank)
        w = rng.standard_normal(w_shape).astype(np.float32)
        b = rng.standard_normal(out + (m,)).astype(np.float32)
        ins = ["X", "W"] + (["b"] if bias else [])
        op = core.CreateOperator(op_type, ins, ["Y"], kernel=kernel, stride=stride, pad=pad,
                                 order="NHWC" if nhwc else "NCHW")
        inputs = [x, w] + ([b] if bias else [])
        self.assertReferenceChecks(
            hu.cpu_do, op, inputs,
            lambda x, w, *rest: [lc_reference(x, w, rest[0] if rest else None, (kernel,) * rank, stride, pad, nhwc)],
            atol=1e-4)
        for i in range(len(inputs)):
            self.assertGradientChecks(hu.cpu_do, op, inputs, i, [0], stepsize=1e-2, threshold=2e-2)

    def test_shape_checks(self):
        x = np.zeros((1, 2, 4, 4), np.float32)
        op = core.CreateOperator("LC", ["X", "W"], ["Y"], kernel=3)
        self.assertRunOpRaises(hu.cpu_do, op, [x, np.zeros((3, 3, 1, 2, 3, 3), np.float32)], exception=Caffe2Error,
                               regexp="filter must be")
        grouped = core.CreateOperator("LC", ["X", "W"], ["Y"], kernel=3, group=2)
        self.assertRunOpRaises(hu.cpu_do, grouped, [x, np.zeros((2, 2, 2, 1, 3, 3), np.float32)],
                               exception=Caffe2Error, regexp="group 2 is not supported")
