"""Fusion of elementwise chains (caffe2py/fusion.py): fused plans give the unfused
plans' results bitwise (exact ops) or within an ulp or two (exp/log/tanh/sigmoid in
mode 2), keep every value someone can observe, report the same errors and leave the
workspace as it was on failure."""
import os

import numpy as np
import pytest

from caffe2py import brew, core, fusion, model_helper, workspace
from caffe2py.errors import OperatorError
from caffe2py.executor import compile_net
from caffe2py.proto import caffe2_pb2


@pytest.fixture(autouse=True)
def small_groups_fuse(monkeypatch):
    # the tests' arrays are small: fuse them anyway (the default skips small groups)
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 0)
    monkeypatch.delenv("CAFFE2PY_FUSION", raising=False)
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def _with_fusion(net_def, mode):
    net = caffe2_pb2.NetDef()
    net.CopyFrom(net_def)
    net.arg.add(name="fusion", i=mode)
    return net


def _run(net_def, feeds, mode, keep=None):
    blobs = dict(feeds)
    plan = compile_net(_with_fusion(net_def, mode), blobs.keys(), keep=keep)
    plan.run(blobs)
    return plan, blobs


def _fused_vs_unfused(net_def, feeds, mode=1, keep=None):
    before = fusion.stats["fused_runs"]
    plan, fused = _run(net_def, feeds, mode, keep)
    _, plain = _run(net_def, feeds, 0, keep)
    assert plan.fused_groups >= 1
    assert fusion.stats["fused_runs"] > before
    assert sorted(fused) == sorted(plain)
    return fused, plain


def _assert_bitwise(fused, plain):
    """Equal bit patterns, signed zeros included; NaN where NaN (IEEE leaves a NaN's
    sign and payload to the hardware: when both operands of an add are NaN, LLVM
    may swap them and x86 then returns the other one's)."""
    for name in plain:
        a, b = np.asarray(fused[name]), np.asarray(plain[name])
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if a.dtype.kind == "f":
            nan = np.isnan(b)
            np.testing.assert_array_equal(np.isnan(a), nan, err_msg=name)
            a, b = a[~nan], b[~nan]
        assert a.tobytes() == b.tobytes(), name


# ----------------------------------------------------------------- generated chains

_SPECIAL = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -3.5, 2.0], np.float32)


def _data(rs, shape, dtype=np.float32):
    x = (rs.standard_normal(shape) * 3).astype(dtype)
    flat = x.reshape(-1)
    flat[:len(_SPECIAL)] = _SPECIAL[:flat.size]        # NaN, infinities, signed zeros, subnormals
    return x


def _random_chain(rs, length, shape):
    """A Caffe2 net of `length` exact elementwise ops on x (+ operands), with NumPy
    broadcasting, the legacy broadcast=1 form and in-place writes mixed in."""
    net = core.Net("chain")
    feeds = {"x": _data(rs, shape)}
    cur = "x"
    for k in range(length):
        kind = rs.choice(["binary", "legacy", "unary", "unary", "inplace", "sum", "grad"])
        out = "t%d" % k
        if kind in ("binary", "legacy"):
            op = str(rs.choice(["Add", "Sub", "Mul", "Div"]))
            if kind == "legacy":
                axis = int(rs.randint(0, len(shape)))
                operand_shape = shape[axis:axis + int(rs.randint(1, len(shape) - axis + 1))]
                args = dict(broadcast=1, axis=axis)
            else:
                choices = [shape, shape[1:], (1,) * (len(shape) - 1) + shape[-1:], shape[:1] + (1,) * (len(shape) - 1)]
                operand_shape = choices[rs.randint(len(choices))]
                args = {}
            name = "w%d" % k
            feeds[name] = _data(rs, tuple(operand_shape))
            inputs = [cur, name] if rs.rand() < 0.7 or kind == "legacy" else [name, cur]
            getattr(net, op)(inputs, out, **args)
        elif kind == "unary":
            op = str(rs.choice(["Relu", "Abs", "Negative", "Scale", "LeakyRelu", "Sqrt"]))
            args = {"Scale": dict(scale=float(rs.uniform(-2, 2))), "LeakyRelu": dict(alpha=0.1)}.get(op, {})
            getattr(net, op)([cur], out, **args)
        elif kind == "inplace":
            getattr(net, str(rs.choice(["Relu", "Negative"])))([cur], cur)
            out = cur
        elif kind == "sum":
            name = "w%d" % k
            feeds[name] = _data(rs, shape)
            net.Sum([cur, name, cur], out)
        else:
            name = "w%d" % k
            feeds[name] = _data(rs, shape)
            getattr(net, str(rs.choice(["ReluGradient", "SigmoidGradient", "TanhGradient"])))([name, cur], out)
        cur = out
    return net.Proto(), feeds, cur


@pytest.mark.parametrize("seed", range(8))
def test_generated_chains_are_bitwise_the_unfused_results(seed):
    rs = np.random.RandomState(seed)
    shape = [(3, 4, 5, 6), (2, 7, 33), (1000,), (4, 1, 9, 2)][seed % 4]
    net_def, feeds, last = _random_chain(rs, int(rs.randint(2, 9)), shape)
    with np.errstate(all="ignore"):
        # a workspace net commits every blob: each intermediate is kept and must match
        fused, plain = _fused_vs_unfused(net_def, feeds)
        _assert_bitwise(fused, plain)
        # an ONNX-backend-style plan commits only the last value
        fused, plain = _fused_vs_unfused(net_def, feeds, keep=[last])
        _assert_bitwise(fused, plain)


def test_strided_and_broadcast_inputs():
    rs = np.random.RandomState(1)
    base = _data(rs, (6, 40, 30))
    feeds = {"x": base[:, ::2, 1::3], "s": _data(rs, (1, 20, 1)), "b": _data(rs, (40,))[::4]}
    net = core.Net("strided")
    net.Mul(["x", "s"], "a")
    net.Add(["a", "b"], "a")
    net.Relu(["a"], "y")
    assert not feeds["x"].flags.c_contiguous and not feeds["b"].flags.c_contiguous
    fused, plain = _fused_vs_unfused(net.Proto(), feeds)
    _assert_bitwise(fused, plain)
    np.testing.assert_array_equal(plain["y"], np.maximum(feeds["x"] * feeds["s"] + feeds["b"], 0))


def test_large_chain_runs_on_the_team():
    rs = np.random.RandomState(2)
    feeds = {"x": _data(rs, (600, 1000)), "c": _data(rs, (1000,))}
    net = core.Net("big")
    net.Mul(["x", "c"], "x")
    net.Scale(["x"], "x", scale=0.25)
    net.Relu(["x"], "x")
    net.Sub(["x", "c"], "y")
    fused, plain = _fused_vs_unfused(net.Proto(), feeds, keep=["y"])
    _assert_bitwise(fused, plain)


def test_float64_chains_fuse_too():
    rs = np.random.RandomState(3)
    feeds = {"x": _data(rs, (50, 50), np.float64), "w": _data(rs, (50,), np.float64)}
    net = core.Net("f64")
    net.Div(["x", "w"], "a")
    net.Relu(["a"], "y")
    fused, plain = _fused_vs_unfused(net.Proto(), feeds, keep=["y"])
    _assert_bitwise(fused, plain)
    assert fused["y"].dtype == np.float64


def test_transcendental_ops_fuse_in_mode_2_within_an_ulp_or_two():
    rs = np.random.RandomState(4)
    feeds = {"x": (rs.standard_normal((64, 300)) * 4).astype(np.float32)}
    net = core.Net("close")
    net.Sigmoid(["x"], "a")
    net.Tanh(["x"], "b")
    net.Add(["a", "b"], "c")
    net.Exp(["c"], "d")
    net.Log(["d"], "y")
    # mode 1 fuses only ops bitwise equal to NumPy's: here that leaves the Add alone
    assert compile_net(_with_fusion(net.Proto(), 1), ["x"], keep=["y"]).fused_groups == 0
    fused, plain = _fused_vs_unfused(net.Proto(), feeds, mode=2, keep=["y"])
    # an ulp of exp's result becomes up to ~1e-7 absolute after log, near log's zero
    np.testing.assert_allclose(fused["y"], plain["y"], rtol=1e-6, atol=5e-7)
    # each function alone: within a few ulp (NumPy's SIMD float32 tanh is not correctly rounded)
    x = feeds["x"]
    for op, ref in (("Sigmoid", None), ("Tanh", np.tanh), ("Exp", np.exp)):
        net1 = core.Net("one_" + op)
        getattr(net1, op)(["x"], "u")
        net1.Relu(["u"], "v")
        got, want = _fused_vs_unfused(net1.Proto(), feeds, mode=2, keep=["v"])
        np.testing.assert_array_max_ulp(got["v"], want["v"], maxulp=4)
    np.testing.assert_allclose(plain["y"], np.log(np.exp(1 / (1 + np.exp(-feeds["x"])) + np.tanh(feeds["x"]))),
                               rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------- what is kept

def _chain_net():
    net = core.Net("keep")
    net.Mul(["x", "w"], "a")
    net.Add(["a", "w"], "b")
    net.Relu(["b"], "y")
    return net


def _feeds():
    rs = np.random.RandomState(5)
    return {"x": _data(rs, (8, 16)), "w": _data(rs, (16,))}


def _fused_step(plan):
    (step,) = [s for s in plan.steps if getattr(s, "members", None)]
    return step


def test_intermediates_of_a_keep_plan_live_in_registers_only():
    plan, blobs = _run(_chain_net().Proto(), _feeds(), 1, keep=["y"])
    assert plan.fused_groups == 1 and _fused_step(plan).outputs == ("y",)
    assert "a" not in blobs and "b" not in blobs


def test_fetchable_intermediates_of_a_workspace_net_are_written():
    # Caffe2 commits every blob a net writes: each can be fetched afterwards
    feeds = _feeds()
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    net = _with_fusion(_chain_net().Proto(), 1)
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("a"), feeds["x"] * feeds["w"])
    np.testing.assert_array_equal(workspace.FetchBlob("b"), feeds["x"] * feeds["w"] + feeds["w"])
    plan = compile_net(net, feeds.keys())
    assert plan.fused_groups == 1 and _fused_step(plan).outputs == ("a", "b", "y")


def test_external_output_and_later_readers_keep_their_values():
    net = _chain_net()
    net.Copy(["x"], "xc")                  # not fusable: the Scale below is outside the group
    net.Scale(["b"], "z", scale=2.0)       # reads b after the group
    net.Proto().external_output.append("a")
    plan, blobs = _run(net.Proto(), _feeds(), 1, keep=["z"])
    assert _fused_step(plan).outputs == ("a", "b")
    f = _feeds()
    np.testing.assert_array_equal(blobs["z"], (f["x"] * f["w"] + f["w"]) * np.float32(2))
    assert sorted(blobs) == ["w", "x", "z"]


def test_overwritten_values_are_not_written():
    net = core.Net("inplace")
    net.Mul(["x", "w"], "t")
    net.Relu(["t"], "t")
    net.Add(["t", "w"], "t")
    plan, blobs = _run(net.Proto(), _feeds(), 1)
    assert _fused_step(plan).outputs == ("t",)
    f = _feeds()
    np.testing.assert_array_equal(blobs["t"], np.maximum(f["x"] * f["w"], 0) + f["w"])


def test_switches_turn_fusion_off(monkeypatch):
    net = _chain_net().Proto()
    assert compile_net(net, ["x", "w"]).fused_groups == 1
    assert compile_net(_with_fusion(net, 0), ["x", "w"]).fused_groups == 0
    monkeypatch.setenv("CAFFE2PY_FUSION", "0")
    assert compile_net(net, ["x", "w"]).fused_groups == 0
    monkeypatch.setenv("CAFFE2PY_FUSION", "all")
    assert compile_net(net, ["x", "w"]).fused_groups == 1


def test_small_groups_run_unfused_by_default(monkeypatch):
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 1 << 14)
    before = dict(fusion.stats)
    plan, blobs = _run(_chain_net().Proto(), _feeds(), 1)
    assert plan.fused_groups == 1
    assert fusion.stats["fused_runs"] == before["fused_runs"]
    assert fusion.stats["fallback_runs"] == before["fallback_runs"] + 1


# ----------------------------------------------------------------- errors

def _error_text(net_def, feeds, mode):
    blobs = dict(feeds)
    snapshot = {k: v.copy() for k, v in blobs.items()}
    plan = compile_net(_with_fusion(net_def, mode), blobs.keys())
    with pytest.raises(OperatorError) as info:
        plan.run(blobs)
    assert sorted(blobs) == sorted(snapshot)            # nothing half-written
    for k, v in snapshot.items():
        np.testing.assert_array_equal(blobs[k], v)
    return str(info.value), plan


@pytest.mark.parametrize("bad", ["shape", "legacy", "gradient"])
def test_bad_input_errors_read_as_unfused(bad):
    f = _feeds()
    net = core.Net("bad")
    net.Mul(["x", "w"], "a")
    if bad == "legacy":
        net.Add(["a", "w"], "b", broadcast=1, axis=0)        # w (16) does not match dim 0 (8)
    elif bad == "gradient":
        net.ReluGradient(["a", "w"], "b")                     # dY's shape differs from Y's
    else:
        net.Add(["a", "w"], "b")
    net.Relu(["b"], "y")
    if bad == "shape":
        f["w"] = f["w"][:5]
    fused_text, plan = _error_text(net.Proto(), f, 1)
    plain_text, _ = _error_text(net.Proto(), f, 0)
    assert plan.fused_groups == 1
    assert fused_text == plain_text


def test_mixed_dtypes_run_unfused_with_numpys_promotion():
    f = _feeds()
    f["w"] = f["w"].astype(np.float64)
    f["x"] = (f["x"] * 0).astype(np.int32)
    before = dict(fusion.stats)
    plan, fused = _run(_chain_net().Proto(), f, 1)
    _, plain = _run(_chain_net().Proto(), f, 0)
    assert plan.fused_groups == 1
    assert fusion.stats["fused_runs"] == before["fused_runs"]
    assert fusion.stats["fallback_runs"] == before["fallback_runs"] + 1
    assert fused["y"].dtype == plain["y"].dtype == np.float64
    _assert_bitwise(fused, plain)


# ----------------------------------------------------------------- ONNX models

def _onnx_run(model, feeds, monkeypatch, mode):
    from caffe2py.onnx import backend
    monkeypatch.setenv("CAFFE2PY_FUSION", mode)
    rep = backend.prepare(model)
    groups = rep.plan.fused_groups if rep.plan is not None else 0
    return rep.run(feeds), groups


def test_onnx_graph_with_where_clip_and_comparisons(monkeypatch):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Mul", ["x", "s"], ["a"]),
             helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Greater", ["c", "b"], ["m"]),
             helper.make_node("Clip", ["c"], ["d"], min=-1.0, max=2.5),
             helper.make_node("Neg", ["d"], ["e"]),
             helper.make_node("Where", ["m", "d", "e"], ["f"]),
             helper.make_node("Max", ["f", "a", "b"], ["g"]),
             helper.make_node("Reciprocal", ["g"], ["h"]),
             helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [3, 1, 1]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    rs = np.random.RandomState(6)
    feeds = [_data(rs, (2, 3, 8, 8)), _data(rs, (3, 1, 1)), _data(rs, (8,))]
    with np.errstate(all="ignore"):
        (fused,), groups = _onnx_run(model, feeds, monkeypatch, "1")
        (plain,), none = _onnx_run(model, feeds, monkeypatch, "0")
    assert groups >= 1 and none == 0
    _assert_bitwise({"y": fused}, {"y": plain})
    x, s, b = feeds
    a = x * s
    c = a + b
    d = np.clip(c, -1, 2.5)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(plain, 1 / np.maximum(np.maximum(np.where(c > b, d, -d), a), b))


def _light_model(name):
    onnx = pytest.importorskip("onnx")
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_%s.onnx" % name)
    if not os.path.exists(path):
        pytest.skip("onnx's light models are not installed")
    return onnx.load(path)


@pytest.mark.parametrize("name", ["shufflenet", "resnet50"])
def test_light_models_fused_and_unfused_agree(name, monkeypatch):
    # the backend's graph optimizer folds these models' elementwise tails into
    # Conv epilogues (nothing left to fuse); without it their Add + Relu pairs remain
    monkeypatch.setenv("CAFFE2PY_ONNX_OPTIMIZE", "0")
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 1 << 14)     # the default
    model = _light_model(name)
    rs = np.random.RandomState(7)
    inits = {i.name for i in model.graph.initializer}
    inp = next(i for i in model.graph.input if i.name not in inits)
    dims = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    x = rs.standard_normal(dims).astype(np.float32)
    before = fusion.stats["fused_runs"]
    fused, groups = _onnx_run(model, [x], monkeypatch, "1")
    assert groups >= 10 and fusion.stats["fused_runs"] - before >= 10
    plain, none = _onnx_run(model, [x], monkeypatch, "0")
    assert none == 0
    _assert_bitwise(dict(enumerate(fused)), dict(enumerate(plain)))


def test_light_shufflenet_folds_its_shuffles_and_matches_onnxruntime(monkeypatch):
    """Every channel shuffle of ShuffleNet feeds a depthwise conv alone: caffe2py.optimize
    folds each into that conv (shuffle_group), and the downsampling units' Concat (conv
    branch, AveragePool) + Relu become the conv writing into the concat's buffer and a
    ChannelWrite: bit for bit what the plan with the ChannelShuffle, Concat and Relu ops
    computes; the logits (a second graph output) and the softmax agree with onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper
    from caffe2py import optimize
    from caffe2py.onnx import backend
    model = _light_model("shufflenet")
    model.graph.output.append(helper.make_empty_tensor_value_info("r201"))     # the Gemm's logits
    rs = np.random.RandomState(11)
    x = rs.standard_normal((1, 3, 224, 224)).astype(np.float32)
    rep = backend.prepare(model)
    types = [s.op_def.type for s in rep.plan.op_steps()]
    folded = [s.op_def for s in rep.plan.op_steps() if any(a.name == "shuffle_group" for a in s.op_def.arg)]
    assert "ChannelShuffle" not in types and len(folded) == 16
    assert "Concat" not in types and "Relu" not in types and types.count("ChannelWrite") == 3
    got = rep.run([x])
    monkeypatch.setattr(optimize, "fold_shuffle_into_depthwise", lambda net, blobs: 0)
    monkeypatch.setattr(optimize, "write_concat_in_place", lambda net, blobs: 0)
    unfolded = backend.prepare(model)
    types = [s.op_def.type for s in unfolded.plan.op_steps()]
    assert types.count("ChannelShuffle") == 16 and types.count("Concat") == 3 and types.count("Relu") == 3
    _assert_bitwise(dict(enumerate(got)), dict(enumerate(unfolded.run([x]))))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for ours, theirs in zip(got, sess.run(None, {model.graph.input[0].name: x})):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------- training

def _mlp_workspace(mode):
    workspace.ResetWorkspace()
    model = model_helper.ModelHelper(name="mlp")
    rs = np.random.RandomState(8)
    workspace.FeedBlob("data", rs.standard_normal((64, 32)).astype(np.float32))
    workspace.FeedBlob("label", rs.randint(0, 10, size=64).astype(np.int32))
    h = brew.fc(model, "data", "fc1", 32, 48)
    h = brew.relu(model, h, "relu1")
    g = model.net.Sigmoid(h, "sig")
    t = model.net.Tanh(h, "th")
    h = model.net.Mul([g, t], "gated")
    h = model.net.Scale(h, "scaled", scale=0.5)
    h = brew.fc(model, h, "fc2", 48, 10)
    pred = model.net.Softmax(h, "pred")
    xent = model.net.LabelCrossEntropy([pred, "label"], "xent")
    loss = model.net.AveragedLoss(xent, "loss")
    model.AddGradientOperators([loss])
    for param in model.params:
        grad = model.param_to_grad[param]
        model.net.WeightedSum([param, "one", grad, "lr"], param)
    model.param_init_net.ConstantFill([], "one", shape=[1], value=1.0)
    model.param_init_net.ConstantFill([], "lr", shape=[1], value=-0.1)
    workspace.RunNetOnce(model.param_init_net)
    for param in model.params:      # the fillers are random: the same start for both runs
        shape = workspace.FetchBlob(param).shape
        workspace.FeedBlob(param, (rs.standard_normal(shape) * 0.3).astype(np.float32))
    train = _with_fusion(model.net.Proto(), mode)
    workspace.CreateNet(train)
    for _ in range(3):
        workspace.RunNet(train.name)
    return {b: np.array(workspace.FetchBlob(b)) for b in workspace.Blobs()}, train


def test_training_net_fused_and_unfused_agree():
    fused, train = _mlp_workspace(2)
    plain, _ = _mlp_workspace(0)
    plan = compile_net(train, list(fused))
    assert plan.fused_groups >= 1
    types = {m.op_def.type for s in plan.steps for m in getattr(s, "members", ())}
    assert types & {"ReluGradient", "SigmoidGradient", "TanhGradient", "Mul", "Scale"}
    assert sorted(fused) == sorted(plain)
    for name in plain:
        # Sigmoid/Tanh run in numba in mode 2: their outputs may differ by an ulp
        np.testing.assert_allclose(fused[name], plain[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_training_net_exact_mode_is_bitwise():
    fused, train = _mlp_workspace(1)
    plain, _ = _mlp_workspace(0)
    assert compile_net(train, list(fused)).fused_groups >= 1
    _assert_bitwise(fused, plain)


def test_observers_and_per_op_benchmarks_still_see_every_op():
    feeds = _feeds()
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    net = _with_fusion(_chain_net().Proto(), 1)
    net.name = "observed"
    workspace.CreateNet(net)
    plan = compile_net(net, feeds.keys())
    assert plan.fused_groups == 1 and len(plan.steps) == 1 and len(plan.op_steps()) == 3
    result = workspace.BenchmarkNet("observed", 1, 2, True)
    assert len(result) == 1 + len(net.op)
    f = feeds
    np.testing.assert_array_equal(workspace.FetchBlob("y"), np.maximum(f["x"] * f["w"] + f["w"], 0))


# ----------------------------------------------------------------- output buffer pool

def test_warm_runs_reuse_the_buffers_of_dropped_intermediates():
    net = _chain_net()
    net.FC(["y", "W", "B"], "out")              # the group's output feeds an op, then is dropped
    rs = np.random.RandomState(9)
    feeds = dict(_feeds(), W=_data(rs, (4, 16)), B=np.zeros(4, np.float32))
    plan = compile_net(net.Proto(), feeds.keys(), keep=["out"])
    assert plan.fused_groups == 1
    results = []
    for run in range(4):
        before = dict(fusion.stats)
        blobs = dict(feeds)
        plan.run(blobs)
        results.append(blobs["out"])
        allocated = fusion.stats["allocations"] - before["allocations"]
        assert allocated == (1 if run == 0 else 0)
        assert fusion.stats["reuses"] - before["reuses"] == (0 if run == 0 else 1)
    # a new shape gets a new buffer, and the right values
    blobs = dict(feeds, x=_data(rs, (3, 16)))
    before = fusion.stats["allocations"]
    plan.run(blobs)
    assert fusion.stats["allocations"] == before + 1
    f = blobs
    np.testing.assert_allclose(blobs["out"], np.maximum(f["x"] * f["w"] + f["w"], 0) @ f["W"].T, rtol=1e-5)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_values_a_caller_holds_are_never_overwritten_by_later_runs():
    plan = compile_net(_chain_net().Proto(), ["x", "w"], keep=["y"])
    f = _feeds()
    first = dict(f)
    plan.run(first)
    kept = first["y"].copy()
    view = first["y"][1:]                      # a view keeps its base alive too
    second = dict(f, x=f["x"] * 2)
    plan.run(second)
    assert second["y"] is not first["y"]
    np.testing.assert_array_equal(first["y"], kept)
    del first
    third = dict(f, x=f["x"] * 3)
    plan.run(third)
    np.testing.assert_array_equal(view, kept[1:])
