"""The real Caffe2 MNIST files (made by Caffe2 itself) load and run, and match a
NumPy reference of the same LeNet written out here."""
import os

import numpy as np
import pytest

from caffe2py import workspace
from caffe2py.models import read_net

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models")
INIT = os.path.join(MODELS, "caffe2_mnist_init_net.pb")
PREDICT = os.path.join(MODELS, "caffe2_mnist_predict_net.pb")
pytestmark = pytest.mark.skipif(not os.path.exists(PREDICT), reason="../shared/models is not present")


def _weights_from_init_net(init_net):
    """Decode GivenTensorFill ops directly from the protobuf fields."""
    weights = {}
    for op in init_net.op:
        args = {a.name: a for a in op.arg}
        weights[op.output[0]] = np.array(args["values"].floats, dtype=np.float64).reshape(list(args["shape"].ints))
    return weights


def _conv_valid(x, w, b):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    out = np.zeros((n, m, h - kh + 1, wd - kw + 1))
    for a in range(kh):
        for bb in range(kw):
            patch = x[:, :, a:a + out.shape[2], bb:bb + out.shape[3]]
            out += np.einsum("nchw,mc->nmhw", patch, w[:, :, a, bb])
    return out + b.reshape(1, m, 1, 1)


def _maxpool2(x):
    n, c, h, w = x.shape
    return x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _reference(weights, image):
    h = np.maximum(_maxpool2(_conv_valid(image, weights["2"], weights["3"])), 0)
    h = np.maximum(_maxpool2(_conv_valid(h, weights["4"], weights["5"])), 0)
    h = h.reshape(-1, 800)
    h = h @ weights["6"].T + weights["7"]
    return h @ weights["8"].T + weights["9"]


def test_mnist_runs_and_matches_reference():
    init_net, predict_net = read_net(INIT), read_net(PREDICT)
    assert [op.type for op in predict_net.op][:3] == ["Conv", "Add", "MaxPool"]
    workspace.ResetWorkspace()
    workspace.RunNetOnce(init_net)
    rng = np.random.default_rng(7)
    for _ in range(2):  # the compiled net is re-run with fresh inputs
        image = rng.random((1, 1, 28, 28), dtype=np.float32)
        workspace.FeedBlob("1", image)
        if not workspace.HasBlob("26"):
            workspace.CreateNet(predict_net)
        workspace.RunNet(predict_net.name)
        got = workspace.FetchBlob(predict_net.external_output[0])
        want = _reference(_weights_from_init_net(init_net), image.astype(np.float64))
        assert got.shape == (1, 10)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
