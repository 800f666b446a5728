"""caffe2.python.cnn.CNNModelHelper: the MNIST tutorial's LeNet built with the old class
gives the brew version's outputs (same parameters), its ops carry what Caffe2's wrapper
passes (order, the cuDNN engine), and it trains like a ModelHelper."""
import numpy as np
import pytest

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)
from caffe2.python import brew, cnn, model_helper, optimizer, workspace
from caffe2py.errors import Caffe2Error


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def lenet_cnn(model, data):
    """The first MNIST tutorial's AddLeNetModel, written against CNNModelHelper."""
    conv1 = model.Conv(data, "conv1", dim_in=1, dim_out=20, kernel=5)
    pool1 = model.MaxPool(conv1, "pool1", kernel=2, stride=2)
    conv2 = model.Conv(pool1, "conv2", dim_in=20, dim_out=50, kernel=5)
    pool2 = model.MaxPool(conv2, "pool2", kernel=2, stride=2)
    fc3 = model.FC(pool2, "fc3", dim_in=50 * 4 * 4, dim_out=500)
    fc3 = model.Relu(fc3, fc3)
    pred = model.FC(fc3, "pred", 500, 10)
    return model.Softmax(pred, "softmax")


def lenet_brew(model, data):
    conv1 = brew.conv(model, data, "conv1", dim_in=1, dim_out=20, kernel=5)
    pool1 = brew.max_pool(model, conv1, "pool1", kernel=2, stride=2)
    conv2 = brew.conv(model, pool1, "conv2", dim_in=20, dim_out=50, kernel=5)
    pool2 = brew.max_pool(model, conv2, "pool2", kernel=2, stride=2)
    fc3 = brew.fc(model, pool2, "fc3", dim_in=50 * 4 * 4, dim_out=500)
    fc3 = brew.relu(model, fc3, fc3)
    pred = brew.fc(model, fc3, "pred", 500, 10)
    return brew.softmax(model, pred, "softmax")


PARAMS = ["conv1_w", "conv1_b", "conv2_w", "conv2_b", "fc3_w", "fc3_b", "pred_w", "pred_b"]


def test_lenet_outputs_equal_the_brew_version_with_the_same_parameters():
    data = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    old = cnn.CNNModelHelper(order="NCHW", name="mnist_train")
    lenet_cnn(old, "data")
    assert [str(p) for p in old.params] == PARAMS
    assert [str(w) for w in old.GetWeights()] == ["conv1_w", "conv2_w", "fc3_w", "pred_w"]
    workspace.RunNetOnce(old.param_init_net)
    params = {name: np.array(workspace.FetchBlob(name)) for name in PARAMS}
    assert params["conv1_w"].shape == (20, 1, 5, 5) and params["fc3_w"].shape == (500, 800)
    workspace.FeedBlob("data", data)
    workspace.RunNetOnce(old.net)
    old_out = np.array(workspace.FetchBlob("softmax"))

    workspace.ResetWorkspace()
    new = model_helper.ModelHelper(name="mnist_brew")
    lenet_brew(new, "data")
    for name, value in params.items():
        workspace.FeedBlob(name, value)
    workspace.FeedBlob("data", data)
    workspace.RunNetOnce(new.net)
    np.testing.assert_allclose(old_out, np.array(workspace.FetchBlob("softmax")), rtol=1e-5, atol=1e-6)
    # and both are LeNet: the softmax of a NumPy forward pass
    np.testing.assert_allclose(old_out, _lenet_numpy(data, params), rtol=1e-4, atol=1e-6)


def _conv_valid(x, w, b):
    n, c, h, wd = x.shape
    k = w.shape[2]
    cols = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))  # n c oh ow k k
    return np.einsum("ncijkl,ockl->noij", cols, w, optimize=True) + b[None, :, None, None]


def _pool2(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _lenet_numpy(x, p):
    x = x.astype(np.float64)
    h = _pool2(_conv_valid(x, p["conv1_w"], p["conv1_b"]))
    h = _pool2(_conv_valid(h, p["conv2_w"], p["conv2_b"]))
    h = np.maximum(h.reshape(len(x), -1) @ p["fc3_w"].T + p["fc3_b"], 0)
    logits = h @ p["pred_w"].T + p["pred_b"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_ops_carry_what_caffe2s_wrapper_passes():
    model = cnn.CNNModelHelper(order="NHWC", use_cudnn=True, cudnn_exhaustive_search=True,
                               ws_nbytes_limit=1 << 20)
    model.Conv("data", "conv", 3, 4, kernel=3)
    model.Relu("conv", "relu")
    model.MaxPool("relu", "pool", kernel=2)
    ops = {op.type: op for op in model.net.Proto().op}
    args = {a.name: a for a in ops["Conv"].arg}
    assert ops["Conv"].engine == "CUDNN" and args["order"].s == b"NHWC"
    assert args["exhaustive_search"].i == 1 and args["ws_nbytes_limit"].i == 1 << 20
    assert ops["MaxPool"].engine == "CUDNN"
    assert {a.name: a for a in ops["MaxPool"].arg}["order"].s == b"NHWC"
    assert list(model.param_init_net.Proto().op[0].arg[0].ints) == [4, 3, 3, 3]   # NHWC weight: [out, k, k, in]
    plain = cnn.CNNModelHelper(use_cudnn=False)
    plain.Conv("data", "conv", 3, 4, kernel=3)
    assert plain.net.Proto().op[0].engine == ""
    assert model.XavierInit == ("XavierFill", {}) and model.ConstantInit(0.5) == ("ConstantFill", {"value": 0.5})


def test_other_layers_run():
    model = cnn.CNNModelHelper(name="layers")
    x = np.random.default_rng(2).standard_normal((2, 4, 6, 6)).astype(np.float32)
    a = model.SpatialBN("x", "bn", 4, is_test=True)
    b = model.LRN(a, "lrn", size=3, alpha=1e-4, beta=0.75, bias=1.0)
    c = model.AveragePool(b, "avg", kernel=2, stride=2)
    d = model.DepthConcat([c, c], "cat")
    e = model.Sum([d, d], "sum")
    f = model.Transpose(e, "tr", axes=[0, 2, 3, 1])
    model.PadImage("x", "padded", pad=1)
    model.Dropout(f, "drop", ratio=0.5, is_test=True)
    workspace.RunNetOnce(model.param_init_net)
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(model.net)
    avg = x / np.sqrt(1 + 1e-5)                      # bn with scale 1, bias 0, mean 0, var 1
    sq = np.pad(avg ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    lrn = avg / (1.0 + 1e-4 / 3 * (sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:])) ** 0.75
    pooled = lrn.reshape(2, 4, 3, 2, 3, 2).mean(axis=(3, 5))
    expected = 2 * np.concatenate([pooled, pooled], axis=1).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(workspace.FetchBlob("drop"), expected, rtol=1e-5, atol=1e-6)
    assert np.array(workspace.FetchBlob("padded")).shape == (2, 4, 8, 8)


def test_trains_with_the_optimizer_like_a_model_helper():
    model = cnn.CNNModelHelper(name="train")
    pred = model.FC("x", "pred", 3, 2)
    _, loss = model.net.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    model.AddWeightDecay(0.0)
    optimizer.build_sgd(model, base_learning_rate=0.5)
    workspace.RunNetOnce(model.param_init_net)
    workspace.FeedBlob("x", np.eye(3, dtype=np.float32)[[0, 1, 2, 0]])
    workspace.FeedBlob("label", np.array([0, 1, 1, 0], np.int32))
    workspace.CreateNet(model.net)
    first = None
    for _ in range(20):
        workspace.RunNet(model.net.Proto().name)
        first = float(np.asarray(workspace.FetchBlob("loss"))) if first is None else first
    assert float(np.asarray(workspace.FetchBlob("loss"))) < first


def test_bad_order_is_named_and_image_input_goes_through_brew():
    with pytest.raises(Caffe2Error, match="storage order"):
        cnn.CNNModelHelper(order="CHWN")
    model = cnn.CNNModelHelper()
    data, label = model.ImageInput("reader", ["data", "label"], batch_size=2, scale=8, crop=8, is_test=1)
    ops = model.net.Proto().op
    assert [op.type for op in ops] == ["ImageInput", "NHWC2NCHW"]
    assert list(ops[0].output) == ["data_nhwc", "label"] and str(data) == "data" and str(label) == "label"


def _run(model, feeds):
    workspace.RunNetOnce(model.param_init_net)
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(model.net)


def test_group_conv_conv_transpose_and_prelu_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    model = cnn.CNNModelHelper(name="more", use_cudnn=False)
    model.GroupConv("x", "gconv", 4, 6, kernel=3, group=2, bias_init=("GaussianFill", {"std": 1.0}))
    model.ConvTranspose("x", "deconv", 4, 3, kernel=2, stride=2, bias_init=("GaussianFill", {"std": 1.0}))
    model.PRelu("x", "prelu", num_channels=4)
    _run(model, {"x": x})
    fetch = lambda name: torch.from_numpy(np.array(workspace.FetchBlob(name)).astype(np.float64))  # noqa: E731
    xt = torch.from_numpy(x.astype(np.float64))
    assert tuple(fetch("gconv_w").shape) == (6, 2, 3, 3) and tuple(fetch("deconv_w").shape) == (4, 3, 2, 2)
    np.testing.assert_allclose(workspace.FetchBlob("gconv"), torch.nn.functional.conv2d(
        xt, fetch("gconv_w"), fetch("gconv_b"), groups=2).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("deconv"), torch.nn.functional.conv_transpose2d(
        xt, fetch("deconv_w"), fetch("deconv_b"), stride=2).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fetch("prelu_slope").numpy(), np.full(4, 0.25))
    np.testing.assert_allclose(workspace.FetchBlob("prelu"), np.where(x > 0, x, 0.25 * x), rtol=1e-6)


def test_lstm_is_rnn_cells_lstm():
    from caffe2.python import rnn_cell
    rng = np.random.default_rng(4)
    feeds = {"seq": rng.standard_normal((3, 2, 4)).astype(np.float32),
             "lengths": np.array([3, 2], np.int32),
             "h0": np.zeros((1, 2, 5), np.float32), "c0": np.zeros((1, 2, 5), np.float32)}
    old = cnn.CNNModelHelper(name="lstm_old")
    out_old = old.LSTM("seq", "lengths", ("h0", "c0"), dim_in=4, dim_out=5, scope="lstm")
    _run(old, feeds)
    params = {str(p): np.array(workspace.FetchBlob(str(p))) for p in old.params}
    assert params, "LSTM created no parameters"
    result_old = np.array(workspace.FetchBlob(str(out_old[0])))
    workspace.ResetWorkspace()
    new = model_helper.ModelHelper(name="lstm_new")
    out_new = rnn_cell.LSTM(new, "seq", "lengths", ("h0", "c0"), dim_in=4, dim_out=5, scope="lstm")
    for name, value in {**feeds, **params}.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(new.net)
    np.testing.assert_array_equal(result_old, np.array(workspace.FetchBlob(str(out_new[0]))))
    assert result_old.shape == (3, 2, 5)
