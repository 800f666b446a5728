"""ShuffleNet's channel shuffle folded into the depthwise convolution that reads it
(caffe2py.optimize.fold_shuffle_into_depthwise, Conv's shuffle_group, the depthwise
kernel's channel map), against the unfolded plan (bit for bit) and NumPy references
written here."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.executor import compile_net
from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.optimize import fold_shuffle_into_depthwise, optimize
from caffe2py.proto import caffe2_pb2

RNG = np.random.default_rng(38)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def shuffled(x, group):
    """ChannelShuffle by its definition: channel k * group + g takes channel g * K + k."""
    k = x.shape[1] // group
    y = np.empty_like(x)
    for g in range(group):
        for kk in range(k):
            y[:, kk * group + g] = x[:, g * k + kk]
    return y


def depthwise_ref(x, w, b, stride, pad):
    """Direct depthwise convolution in float64 (w (C * mult, 1, kh, kw))."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for o in range(m):
        plane = xp[:, o // (m // c)]
        for ky in range(kh):
            for kx in range(kw):
                y[:, o] += w[o, 0, ky, kx] * plane[:, ky:ky + (oh - 1) * stride + 1:stride,
                                                   kx:kx + (ow - 1) * stride + 1:stride]
    return y + b.astype(np.float64)[None, :, None, None]


# ----------------------------------------------------------------- the kernel's channel map

@pytest.mark.parametrize("mult,stride,kernel", [(1, 1, 3), (1, 2, 3), (2, 1, 3), (1, 2, 5)])
def test_depthwise_conv_reads_its_planes_through_a_channel_map(mult, stride, kernel):
    c = 12
    x, w, b = rand(2, c, 9, 7), rand(c * mult, 1, kernel, kernel), rand(c * mult)
    cmap = RNG.permutation(c)
    pad = kernel // 2
    args = (b, (stride, stride), (pad,) * 4, (1, 1), c)
    got = conv_k.conv_nchw(x, w, *args, activation="relu", channel_map=cmap)
    # bit for bit what the conv of the gathered input gives, and the definition
    np.testing.assert_array_equal(got, conv_k.conv_nchw(np.ascontiguousarray(x[:, cmap]), w, *args,
                                                        activation="relu"))
    want = np.maximum(depthwise_ref(x[:, cmap], w, b, stride, pad), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_other_convolutions_gather_through_the_map_and_bad_maps_are_refused():
    x, w = rand(1, 6, 5, 5), rand(4, 6, 3, 3)
    cmap = np.array([5, 4, 3, 2, 1, 0])
    np.testing.assert_array_equal(conv_k.conv_nchw(x, w, None, (1, 1), (1,) * 4, (1, 1), 1, channel_map=cmap),
                                  conv_k.conv_nchw(x[:, ::-1].copy(), w, None, (1, 1), (1,) * 4, (1, 1), 1))
    dw = rand(6, 1, 3, 3)
    for bad, why in ((np.arange(5), "6 integers"), (np.array([0, 1, 2, 3, 4, 6]), r"\[0, 6\)"),
                     (np.array([0, 1, 2, 3, 4, -1]), r"\[0, 6\)"), (np.arange(6.0), "6 integers")):
        with pytest.raises(ValueError, match=why):
            conv_k.conv_nchw(x, dw, None, (1, 1), (1,) * 4, (1, 1), 6, channel_map=bad)


def test_a_writeable_map_is_checked_on_every_call_a_read_only_one_once():
    """The depthwise path remembers a read-only map it has checked (the op's shuffle
    maps are made read-only), per map: a writeable map edited between calls is
    checked again, and an edit that leaves the range is refused, never read."""
    x, dw = rand(1, 6, 5, 5), rand(6, 1, 3, 3)
    args = (None, (1, 1), (1,) * 4, (1, 1), 6)
    live = np.array([5, 4, 3, 2, 1, 0])
    fixed = np.array([1, 0, 3, 2, 5, 4])
    fixed.flags.writeable = False
    for _ in range(2):          # the second time through, `fixed` comes from the remembered check
        for cmap in (live, fixed):
            np.testing.assert_array_equal(conv_k.conv_nchw(x, dw, *args, channel_map=cmap),
                                          conv_k.conv_nchw(np.ascontiguousarray(x[:, cmap]), dw, *args))
    live[0] = 6
    with pytest.raises(ValueError, match=r"\[0, 6\)"):
        conv_k.conv_nchw(x, dw, *args, channel_map=live)


# ----------------------------------------------------------------- the op's shuffle_group

def _run_op(op_type, inputs, **kwargs):
    workspace.ResetWorkspace()
    names = ["in%d" % i for i in range(len(inputs))]
    for name, value in zip(names, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, names, ["out"], **kwargs))
    return workspace.FetchBlob("out")


def test_conv_with_shuffle_group_convolves_the_shuffled_input():
    x, w, b, s = rand(2, 12, 6, 6), rand(12, 1, 3, 3), rand(12), rand(2, 12, 6, 6)
    want = depthwise_ref(shuffled(x, 3), w, b, 1, 1)
    got = _run_op("ConvRelu", [x, w, b], group=12, pad=1, shuffle_group=3)
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-5, atol=1e-5)
    got = _run_op("ConvSum", [x, w, b, s], group=12, pad=1, shuffle_group=4)
    np.testing.assert_allclose(got, depthwise_ref(shuffled(x, 4), w, b, 1, 1) + s, rtol=1e-5, atol=1e-5)
    with pytest.raises(Caffe2Error, match=r"Conv.*'in0'.*12 channels.*5 shuffle groups"):
        _run_op("Conv", [x, w, b], group=12, pad=1, shuffle_group=5)
    with pytest.raises(Caffe2Error, match="shuffle_group must be positive on an NCHW conv"):
        _run_op("Conv", [np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy(), b], group=12, pad=1,
                shuffle_group=3, order="NHWC")


# ----------------------------------------------------------------- the optimize pass

def _net(ops, inputs, outputs):
    net = caffe2_pb2.NetDef(name="shuffle")
    net.op.extend(ops)
    net.external_input.extend(inputs)
    net.external_output.extend(outputs)
    return net


def _run(net, consts, feeds):
    blobs = dict(consts)
    blobs.update(feeds)
    compile_net(net, known_blobs=blobs.keys()).run(blobs)
    return [blobs[o] for o in net.external_output]


def _shuffle_unit(groups=4, channels=12, relu=True, outputs=("y",), extra_reader=False):
    """ShuffleNet's unit as caffe2py.optimize leaves it before the fold: grouped 1x1
    ConvRelu -> ChannelShuffle -> depthwise 3x3 Conv -> grouped 1x1 ConvSum(Relu) with
    the unit's input."""
    consts = {"w1": rand(channels, 12 // groups, 1, 1), "b1": rand(channels), "dw": rand(channels, 1, 3, 3),
              "bd": rand(channels), "w2": rand(12, channels // groups, 1, 1), "b2": rand(12)}
    ops = [core.CreateOperator("ConvRelu", ["x", "w1", "b1"], ["a"], kernel=1, group=groups),
           core.CreateOperator("ChannelShuffle", ["a"], ["s"], group=groups),
           core.CreateOperator("Conv", ["s", "dw", "bd"], ["d"], kernel=3, pad=1, group=channels),
           core.CreateOperator("ConvSumRelu" if relu else "ConvSum", ["d", "w2", "b2", "x"], ["y"], kernel=1,
                               group=groups)]
    if extra_reader:
        ops.append(core.CreateOperator("Relu", ["s"], ["z"]))
    return _net(ops, ["x"] + list(consts), list(outputs)), consts


def test_fold_removes_the_shuffle_and_gives_the_unfolded_plans_bits():
    net, consts = _shuffle_unit()
    before = net.SerializeToString()
    opt = optimize(net, dict(consts))
    assert net.SerializeToString() == before
    assert [op.type for op in opt.op] == ["ConvRelu", "Conv", "ConvSumRelu"]
    dwconv = opt.op[1]
    assert dwconv.input[0] == "a" and [a.i for a in dwconv.arg if a.name == "shuffle_group"] == [4]
    unfolded = _net(net.op, net.external_input, net.external_output)
    feeds = {"x": rand(2, 12, 10, 9)}
    got, = _run(opt, consts, feeds)
    np.testing.assert_array_equal(got, _run(unfolded, consts, feeds)[0])
    # and the unit by its definition
    x = feeds["x"].astype(np.float64)
    a = np.maximum(np.einsum("gmc,ngchw->ngmhw", consts["w1"][:, :, 0, 0].reshape(4, 3, 3),
                             x.reshape(2, 4, 3, 10, 9)).reshape(2, 12, 10, 9)
                   + consts["b1"][None, :, None, None], 0)
    d = depthwise_ref(shuffled(a, 4), consts["dw"], consts["bd"], 1, 1)
    y = np.einsum("gmc,ngchw->ngmhw", consts["w2"][:, :, 0, 0].reshape(4, 3, 3),
                  d.reshape(2, 4, 3, 10, 9)).reshape(2, 12, 10, 9) + consts["b2"][None, :, None, None] + x
    np.testing.assert_allclose(got, np.maximum(y, 0), rtol=1e-4, atol=1e-4)


def test_fold_keeps_a_shuffle_with_another_reader_or_uneven_groups():
    # a second reader of the shuffled tensor: it must still be made
    net, consts = _shuffle_unit(extra_reader=True, outputs=("y", "z"))
    assert fold_shuffle_into_depthwise(_net(net.op, net.external_input, net.external_output), dict(consts)) == 0
    # the shuffled tensor is a net output
    net, consts = _shuffle_unit(outputs=("y", "s"))
    opt = optimize(net, dict(consts))
    assert "ChannelShuffle" in [op.type for op in opt.op]
    feeds = {"x": rand(1, 12, 5, 5)}
    for got, want in zip(_run(opt, consts, feeds), _run(net, consts, feeds)):
        np.testing.assert_array_equal(got, want)
    # 12 channels in 5 shuffle groups: the shuffle stays, and so does its error
    net, consts = _shuffle_unit()
    net.op[1].arg[0].i = 5
    opt = optimize(net, dict(consts))
    assert "ChannelShuffle" in [op.type for op in opt.op]
    with pytest.raises(Caffe2Error, match="12 channels.*do not split into 5 groups"):
        _run(opt, consts, feeds)
    # a consumer that is not depthwise (one group): the shuffle stays
    net, consts = _shuffle_unit()
    consts["dw"] = rand(12, 12, 3, 3)
    net.op[2].arg[-1].i = 1
    assert [a.name for a in net.op[2].arg][-1] == "group"
    opt = optimize(net, dict(consts))
    assert "ChannelShuffle" in [op.type for op in opt.op]
    np.testing.assert_array_equal(_run(opt, consts, feeds)[0], _run(net, consts, feeds)[0])


def test_onnx_shuffle_spelling_folds_into_the_depthwise_conv_relu():
    """ONNX's Reshape -> Transpose -> Reshape shuffle read by Conv -> Relu: one Reshape
    (a view) and a ConvRelu with shuffle_group are left."""
    def onnx_op(op_type, inputs, outputs, **args):
        op = core.CreateOperator(op_type, inputs, outputs, **args)
        op.domain, op.op_version = "ai.onnx", 13
        return op
    consts = {"w": rand(12, 3, 1, 1), "s5": np.array([2, 3, 4, 3, 4], np.int64),
              "s4": np.array([2, 12, 3, 4], np.int64), "dw": rand(12, 1, 3, 3)}
    ops = [onnx_op("Conv", ["x", "w"], ["c"], group=4),
           onnx_op("Reshape", ["c", "s5"], ["r5"]),
           onnx_op("Transpose", ["r5"], ["t"], perm=[0, 2, 1, 3, 4]),
           onnx_op("Reshape", ["t", "s4"], ["r4"]),
           onnx_op("Conv", ["r4", "dw"], ["d"], group=12, pads=[1, 1, 1, 1]),
           onnx_op("Relu", ["d"], ["y"])]
    net = _net(ops, ["x"] + list(consts), ["y"])
    blobs = dict(consts)
    opt = optimize(net, blobs)
    assert [op.type for op in opt.op] == ["Conv", "Reshape", "ConvRelu"]
    x = rand(2, 12, 3, 4)
    got, = _run(opt, blobs, {"x": x})
    c = np.einsum("gmc,ngchw->ngmhw", consts["w"][:, :, 0, 0].reshape(4, 3, 3),
                  x.astype(np.float64).reshape(2, 4, 3, 3, 4)).reshape(2, 12, 3, 4)
    want = np.maximum(depthwise_ref(shuffled(c, 3), consts["dw"], np.zeros(12, np.float32), 1, 1), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- Concat of a conv and a pool

def _downsampling_unit(relu=True, pool_first=False, outputs=("out",)):
    """ShuffleNet's stride-2 unit: a conv branch (depthwise 3x3 s2, 1x1) and a 3x3 s2
    AveragePool of the same input, concatenated along channels [-> Relu] -> 1x1 conv."""
    consts = {"w0": rand(8, 3, 3, 3), "b0": rand(8), "wd": rand(8, 1, 3, 3), "bd": rand(8),
              "w1": rand(6, 8, 1, 1), "b1": rand(6), "wn": rand(5, 14, 1, 1), "bn": rand(5)}
    ops = [core.CreateOperator("ConvRelu", ["x", "w0", "b0"], ["a"], kernel=3, pad=1),
           core.CreateOperator("Conv", ["a", "wd", "bd"], ["d"], kernel=3, stride=2, pad=1, group=8),
           core.CreateOperator("Conv", ["d", "w1", "b1"], ["c"], kernel=1),
           core.CreateOperator("AveragePool", ["a"], ["p"], kernel=3, stride=2, pad=1),
           core.CreateOperator("Concat", ["p", "c"] if pool_first else ["c", "p"], ["cat", "cat_info"], axis=1)]
    last = "cat"
    if relu:
        ops.append(core.CreateOperator("Relu", ["cat"], ["y"]))
        last = "y"
    ops.append(core.CreateOperator("Conv", [last, "wn", "bn"], ["out"], kernel=1))
    return _net(ops, ["x"] + list(consts), list(outputs)), consts


def _onnx_concat(net):
    """The Concat as ONNX's (one output): what the backend hands caffe2py.optimize."""
    for op in net.op:
        if op.type == "Concat":
            del op.output[1:]
            op.domain, op.op_version = "ai.onnx", 13
    return net


@pytest.mark.parametrize("pool_first", [False, True])
def test_concat_of_conv_and_pool_is_written_in_place_with_its_relu(pool_first):
    net, consts = _downsampling_unit(pool_first=pool_first, outputs=("out", "y"))
    net = _onnx_concat(net)
    opt = optimize(net, dict(consts))
    types = [op.type for op in opt.op]
    assert types == ["ConvRelu", "Conv", "ConvRelu", "AveragePool", "ChannelWrite", "Conv"]
    placed, write = opt.op[2], opt.op[4]
    assert list(placed.output) == ["y"] and list(write.input) == ["p", "y"] and list(write.output) == ["y"]
    want_offsets = ([14, 8], 0) if pool_first else ([14, 0], 6)
    assert [list(a.ints) for a in placed.arg if a.name == "concat_channels"] == [want_offsets[0]]
    assert {a.name: a.i for a in write.arg} == {"offset": want_offsets[1], "relu": 1}
    feeds = {"x": rand(2, 3, 9, 8)}
    got = _run(opt, consts, feeds)
    for g, w in zip(got, _run(net, consts, feeds)):
        np.testing.assert_array_equal(g, w)
    # the unit by its definition: the concat of the branch and the pool, ReLU'd
    a = _run(_net(net.op[:1], net.external_input, ["a"]), consts, feeds)[0].astype(np.float64)
    d = depthwise_ref(a, consts["wd"], consts["bd"], 2, 1)
    c = np.einsum("mc,nchw->nmhw", consts["w1"][:, :, 0, 0], d) + consts["b1"][None, :, None, None]
    ap = np.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)])
    counts = np.pad(np.ones(a.shape[2:]), 1)
    p = np.zeros_like(c[:, :1].repeat(8, 1))
    for i in range(p.shape[2]):
        for j in range(p.shape[3]):
            win = ap[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            p[:, :, i, j] = win.sum((2, 3)) / counts[2 * i:2 * i + 3, 2 * j:2 * j + 3].sum()
    y = np.maximum(np.concatenate([p, c] if pool_first else [c, p], 1), 0)
    np.testing.assert_allclose(got[1], y, rtol=1e-4, atol=1e-4)


def test_concat_without_a_sole_relu_or_with_unknown_channels():
    # the Concat's output has a second reader: no ReLU folded, ChannelWrite copies
    net, consts = _downsampling_unit(relu=False, outputs=("out", "cat"))
    net = _onnx_concat(net)
    opt = optimize(net, dict(consts))
    assert [op.type for op in opt.op] == ["ConvRelu", "Conv", "Conv", "AveragePool", "ChannelWrite", "Conv"]
    assert {a.name: a.i for a in opt.op[4].arg} == {"offset": 6}
    feeds = {"x": rand(1, 3, 7, 7)}
    for g, w in zip(_run(opt, consts, feeds), _run(net, consts, feeds)):
        np.testing.assert_array_equal(g, w)
    # a pool of a net input: its channel count is not known, the Concat stays
    net, consts = _downsampling_unit()
    net = _onnx_concat(net)
    net.op[3].input[0] = "z"
    net.external_input.append("z")
    assert "Concat" in [op.type for op in optimize(net, dict(consts)).op]


def test_channel_write_checks_its_buffer():
    x, buf = rand(2, 3, 4, 5), np.zeros((2, 7, 4, 5), np.float32)
    got = _run_op("ChannelWrite", [x, buf], offset=4, relu=1)
    np.testing.assert_array_equal(got[:, 4:], np.maximum(x, 0))
    np.testing.assert_array_equal(got[:, :4], 0)
    with pytest.raises(Caffe2Error, match=r"channels 5..8 do not fit"):
        _run_op("ChannelWrite", [x, buf], offset=5)
    with pytest.raises(Caffe2Error, match="does not fit the concat buffer"):
        _run_op("ChannelWrite", [x[:, :, :3], buf], offset=0)
    with pytest.raises(Caffe2Error, match="does not fit the concat buffer"):
        _run_op("ChannelWrite", [x.astype(np.float64), buf], offset=0)


# ----------------------------------------------------------------- the shuffle's Reshape

def test_onnx_reshape_of_a_contiguous_tensor_is_a_view_on_every_run(monkeypatch):
    """The view's target is resolved once per (input shape, shape values); new shape
    values or a new input shape are resolved (and checked) again."""
    from caffe2py.kernels.cpu.tensor import onnx_tensor as tk
    resolved = []
    resolve = tk.reshape_target
    monkeypatch.setattr(tk, "reshape_target", lambda *a: resolved.append(a[0]) or resolve(*a))
    def onnx_reshape():
        op = core.CreateOperator("Reshape", ["x", "s"], ["y"])
        op.domain, op.op_version = "ai.onnx", 13
        return op
    net = _net([onnx_reshape()], ["x", "s"], ["y"])
    blobs = {"x": rand(2, 12, 3, 4), "s": np.array([2, -1, 0, 6], np.int64)}
    plan = compile_net(net, known_blobs=blobs.keys())
    for _ in range(2):
        plan.run(blobs)
        assert blobs["y"].shape == (2, 8, 3, 6) and np.shares_memory(blobs["y"], blobs["x"])
    assert resolved == [(2, 12, 3, 4)]
    blobs["s"] = np.array([0, 12, 12], np.int64)
    plan.run(blobs)
    assert blobs["y"].shape == (2, 12, 12) and np.shares_memory(blobs["y"], blobs["x"])
    blobs["x"] = rand(1, 12, 3, 4)
    plan.run(blobs)
    assert blobs["y"].shape == (1, 12, 12) and len(resolved) == 3
    blobs["x"] = rand(1, 5, 3, 4)
    with pytest.raises(Caffe2Error, match=r"cannot reshape \[1, 5, 3, 4\]"):
        plan.run(blobs)
    blobs["x"] = rand(1, 12, 3, 4)
    plan.run(blobs)
    np.testing.assert_array_equal(blobs["y"], blobs["x"].reshape(1, 12, 12))


def test_a_conv_with_shuffle_group_has_no_gradient_and_no_export():
    """Inference-only, as the concat buffer convs: a gradient or an ONNX export would
    silently drop the shuffle."""
    from caffe2py.gradients import get_gradient_for_op
    op = core.CreateOperator("Conv", ["x", "w", "b"], ["y"], kernel=3, pad=1, group=4, shuffle_group=2)
    with pytest.raises(Caffe2Error, match="channel shuffle.*has no gradient"):
        get_gradient_for_op(op, ["y_grad"])
    plain = core.CreateOperator("Conv", ["x", "w", "b"], ["y"], kernel=3, pad=1, group=4)
    assert get_gradient_for_op(plain, ["y_grad"])[0]
    pytest.importorskip("onnx")
    from caffe2py.onnx import frontend
    net = _net([op], ["x", "w", "b"], ["y"])
    value_info = {"x": (1, [1, 4, 5, 5]), "w": (1, [4, 1, 3, 3]), "b": (1, [4])}
    with pytest.raises(Caffe2Error, match="shuffle_group.*not exported"):
        frontend.caffe2_net_to_onnx_model(net, None, value_info)
