"""Bernoulli and training-mode Dropout: the node suite's 10 cases for them compare
with one draw of onnx's generator, so they are excluded there
(tests/test_onnx_backend_suite.py RANDOM_CASES) and their contract is tested here:
shape, dtype, the value set, mask consistency, the mean within a binomial bound
(6 standard deviations: a false alarm about once in 10^9 runs) and seeding."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import caffe2py.onnx.backend as c2_backend

N = 20000


def _model(node, inputs, outputs, opset):
    graph = helper.make_graph([node], "g", inputs, outputs)
    return c2_backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _bernoulli(dtype=None, seed=None):
    attrs = {}
    if dtype is not None:
        attrs["dtype"] = dtype
    if seed is not None:
        attrs["seed"] = seed
    node = helper.make_node("Bernoulli", ["p"], ["y"], **attrs)
    return _model(node, [helper.make_tensor_value_info("p", TensorProto.DOUBLE, [None])],
                  [helper.make_tensor_value_info("y", dtype or TensorProto.DOUBLE, None)], 15)


def _within_binomial(count, n, p):
    return abs(count - n * p) <= 6 * np.sqrt(n * p * (1 - p)) + 1


@pytest.mark.parametrize("dtype,np_dtype", [(None, np.float64), (TensorProto.FLOAT, np.float32),
                                            (TensorProto.INT32, np.int32), (TensorProto.BOOL, np.bool_)])
def test_bernoulli_shape_dtype_values_and_mean(dtype, np_dtype):
    p = np.full(N, 0.3)
    (y,) = _bernoulli(dtype).run([p])
    assert y.shape == p.shape and y.dtype == np_dtype
    assert set(np.unique(y.astype(np.float64))) <= {0.0, 1.0}
    assert _within_binomial(int(y.astype(np.int64).sum()), N, 0.3)


def test_bernoulli_follows_each_probability():
    p = np.concatenate([np.zeros(1000), np.ones(1000), np.full(N, 0.8)])
    (y,) = _bernoulli().run([p])
    assert not y[:1000].any() and y[1000:2000].all()
    assert _within_binomial(int(y[2000:].sum()), N, 0.8)


def test_bernoulli_same_seed_same_output():
    p = np.full(1000, 0.5)
    a = _bernoulli(seed=5.0).run([p])[0]
    b = _bernoulli(seed=5.0).run([p])[0]
    c = _bernoulli(seed=6.0).run([p])[0]
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


def _dropout(seed=None, with_mask=True, ratio=True):
    names = ["x", "r", "t"] if ratio else ["x", "", "t"]
    attrs = {} if seed is None else {"seed": seed}
    node = helper.make_node("Dropout", names, ["y", "m"] if with_mask else ["y"], **attrs)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None]),
           helper.make_tensor_value_info("t", TensorProto.BOOL, [])]
    if ratio:
        ins.insert(1, helper.make_tensor_value_info("r", TensorProto.FLOAT, []))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if with_mask:
        outs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, None))
    return _model(node, ins, outs, 13)


def _x():
    return np.random.default_rng(1).uniform(0.5, 2.0, (200, 100)).astype(np.float32)


@pytest.mark.parametrize("ratio", [0.5, 0.1, 0.75])
def test_training_dropout_scales_kept_values_and_mask_matches(ratio):
    x = _x()
    y, mask = _dropout().run([x, np.array(ratio, np.float32), np.array(True)])
    assert y.shape == x.shape and y.dtype == np.float32
    assert mask.shape == x.shape and mask.dtype == np.bool_
    np.testing.assert_allclose(y[mask], x[mask] / (1 - ratio), rtol=1e-6)
    assert not y[~mask].any()
    assert _within_binomial(int(mask.sum()), x.size, 1 - ratio)


def test_training_dropout_default_ratio_is_half():
    x = _x()
    (y,) = _dropout(with_mask=False, ratio=False).run([x, np.array(True)])
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] * 2, rtol=1e-6)
    assert _within_binomial(int(kept.sum()), x.size, 0.5)


def test_dropout_not_training_is_identity():
    x = _x()
    y, mask = _dropout().run([x, np.array(0.5, np.float32), np.array(False)])
    np.testing.assert_array_equal(y, x)
    assert mask.all()


def test_training_dropout_same_seed_same_output():
    x = _x()
    feed = [x, np.array(0.5, np.float32), np.array(True)]
    a, ma = _dropout(seed=3).run(feed)
    b, mb = _dropout(seed=3).run(feed)
    c, mc = _dropout(seed=4).run(feed)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ma, mb)
    assert (ma != mc).any()
