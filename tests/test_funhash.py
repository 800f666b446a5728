"""FunHash / SparseFunHash (Caffe2's experiments ops) and their gradients against
NumPy written here: XXH64 from the `xxhash` package over the 4 low bytes of each key
(Caffe2 passes the hash array's element count as its byte length), a dense weight
matrix built from the hashed positions and signs, and finite differences."""
import struct

import numpy as np
import pytest

from caffe2py import core, gradients, workspace
from caffe2py.errors import Caffe2Error

xxhash = pytest.importorskip("xxhash")

RNG = np.random.default_rng(8)
N_OUT, N_WEIGHT, SEED = 4, 7, 5


def _hash(key):
    return xxhash.xxh64(struct.pack("<q", int(key))[:4], seed=SEED).intdigest()


def _dense_weights(keys, weight, alpha, sparse):
    """{key: the effective weight of every output column} from the hashes."""
    coefficient = 1.0 if alpha is None else float(alpha.sum())
    table = {}
    for key in set(keys.tolist()):
        h = _hash(key)
        index, negative = ((h >> 1) % len(weight), h & 1) if sparse else (h % len(weight), h % 2)
        table[key] = (-1.0 if negative else 1.0) * weight[index] * coefficient
    return table


def _reference(val, keys, seg, weight, alpha, sparse, rows):
    table = _dense_weights(keys, weight, alpha, sparse)
    out = np.zeros((rows, N_OUT))
    for v, k, s in zip(val, keys, seg):
        out[s] += v * table[k]
    return out


def _inputs(with_alpha):
    val = RNG.random(9).astype(np.float32)
    keys = RNG.integers(-3, 2 ** 40, 9).astype(np.int64)
    seg = np.array([0, 0, 1, 1, 1, 3, 3, 3, 3], np.int32)
    weight = RNG.standard_normal(N_WEIGHT).astype(np.float32)
    alpha = RNG.random(3).astype(np.float32) if with_alpha else None
    return val, keys, seg, weight, alpha


def _run(op_type, val, keys, seg, weight, alpha, **args):
    names = ["val", "key", "seg", "w"] + (["alpha"] if alpha is not None else [])
    for name, value in zip(names, (val, keys, seg, weight, alpha)):
        workspace.FeedBlob(name, value)
    op = core.CreateOperator(op_type, names, ["out"], num_outputs=N_OUT, seed=SEED, **args)
    workspace.RunOperatorOnce(op)
    return op, workspace.FetchBlob("out")


@pytest.mark.parametrize("op_type", ["FunHash", "SparseFunHash"])
@pytest.mark.parametrize("with_alpha", [False, True])
def test_forward_matches_the_hashed_dense_layer(op_type, with_alpha):
    val, keys, seg, weight, alpha = _inputs(with_alpha)
    _, out = _run(op_type, val, keys, seg, weight, alpha)
    expected = _reference(val, keys, seg, weight, alpha, op_type == "SparseFunHash", 4)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    _, out = _run(op_type, val, keys, seg, weight, alpha, num_segments=6)
    assert out.shape == (6, N_OUT) and not out[4:].any()


def _numeric_grad(op_type, inputs, position, grad_out, eps=1e-2):
    inputs = list(inputs)
    base = inputs[position].astype(np.float64)
    grad = np.zeros_like(base)
    for i in range(base.size):
        for sign in (1, -1):
            shifted = base.copy()
            shifted.flat[i] += sign * eps
            inputs[position] = shifted.astype(np.float32)
            _, out = _run(op_type, *inputs)
            grad.flat[i] += sign * (out * grad_out).sum() / (2 * eps)
    return grad


@pytest.mark.parametrize("op_type", ["FunHash", "SparseFunHash"])
@pytest.mark.parametrize("with_alpha", [False, True])
def test_gradients_match_finite_differences(op_type, with_alpha):
    inputs = _inputs(with_alpha)
    op, out = _run(op_type, *inputs)
    grad_out = RNG.standard_normal(out.shape).astype(np.float32)
    grad_ops, g_input = gradients.get_gradient_for_op(op, ["dout"])
    workspace.FeedBlob("dout", grad_out)
    for g in grad_ops:
        workspace.RunOperatorOnce(g)
    expected_w = _numeric_grad(op_type, inputs, 3, grad_out)
    if op_type == "SparseFunHash":
        indices, values = (workspace.FetchBlob(n) for n in g_input[3])
        assert [g.type for g in grad_ops] == ["SparseFunHashGradient"]
        dense = np.zeros(N_WEIGHT)
        np.add.at(dense, indices, values)
        assert len(values) == 9 * N_OUT * (3 if with_alpha else 1)
    else:
        assert [g.type for g in grad_ops] == ["FunHashGradient"]
        dense = workspace.FetchBlob(g_input[3])
    np.testing.assert_allclose(dense, expected_w, rtol=1e-3, atol=1e-3)
    if with_alpha:
        np.testing.assert_allclose(workspace.FetchBlob(g_input[4]), _numeric_grad(op_type, inputs, 4, grad_out),
                                   rtol=1e-3, atol=1e-3)


def test_bad_segments_are_named_errors():
    val, keys, seg, weight, _ = _inputs(False)
    with pytest.raises(Caffe2Error, match="out of range for num_segments=2"):
        _run("FunHash", val, keys, seg, weight, None, num_segments=2)
    with pytest.raises(Caffe2Error, match="one entry each"):
        _run("FunHash", val[:3], keys, seg, weight, None)
    with pytest.raises(Caffe2Error, match="at least one weight"):
        _run("SparseFunHash", val, keys, seg, np.zeros(0, np.float32), None)


def test_num_outputs_is_needed_to_run_but_not_to_build_the_gradient():
    """Caffe2 reads num_outputs when the op is built: a net may carry SparseFunHash
    without it, and AddGradientOperators still builds its (indices, values) gradient."""
    net = core.Net("no_num_outputs")
    net.SparseFunHash(["x1", "x2", "x3", "x4"], "x8")
    net.SparseFunHash(["x5", "x6", "x7", "x4"], "x9")
    net.DotProduct(["x8", "x9"], "x10")
    grads = net.AddGradientOperators(["x10"])
    assert isinstance(grads["x4"], core.GradientSlice)
    val, keys, seg, weight, _ = _inputs(False)
    for name, value in zip(["val", "key", "seg", "w"], (val, keys, seg, weight)):
        workspace.FeedBlob(name, value)
    with pytest.raises(Caffe2Error, match="argument 'num_outputs' .* is required"):
        workspace.RunOperatorOnce(core.CreateOperator("FunHash", ["val", "key", "seg", "w"], ["out"]))
