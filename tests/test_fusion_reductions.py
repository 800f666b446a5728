"""Reductions at the end of a fused CPU chain (caffe2py/fusion.py, `reduce` rules in
operators/math/elementwise_fusion.py): ReduceSum / ReduceMean over the last axis
(keepdims 0 and 1) and ReduceBackSum / ReduceBackMean accumulate inside the generated
loop.

Tolerance: the fused loop adds each row in float64 (in an order LLVM may choose: the
add is vectorised) and rounds once;
the unfused op (np.sum / np.mean in the chain's dtype) adds pairwise, with an error
of at most about (log2(n) + 20) eps sum|v| (blocks of 128 summed by 8 accumulators of
16 terms, then halving). So |fused - unfused| <= (log2(n) + 20) eps sum|v| (divided
by n for a mean) plus one rounding of the result; the NumPy reference in float64 is
held to the same bound."""
import numpy as np
import pytest

from caffe2py import core, fusion, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.executor import compile_net
from caffe2py.proto import caffe2_pb2


@pytest.fixture(autouse=True)
def small_groups_fuse(monkeypatch):
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 0)
    monkeypatch.delenv("CAFFE2PY_FUSION", raising=False)
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def _net(ops, mode):
    net = caffe2_pb2.NetDef(name="reduce_chain")
    net.op.extend(ops)
    net.arg.add(name="fusion", i=mode)
    return net


def _run(ops, feeds, mode, keep=None):
    blobs = dict(feeds)
    plan = compile_net(_net(ops, mode), blobs.keys(), keep=keep)
    before = fusion.stats["fused_runs"]
    plan.run(blobs)
    return blobs, plan, fusion.stats["fused_runs"] - before


def _bound(values, axis_len, mean, dtype):
    eps = np.finfo(dtype).eps
    total = np.abs(values).sum(axis=-1) * (np.log2(max(axis_len, 2)) + 20) * eps
    return total / axis_len if mean else total


def _check(out, ref, values, mean, dtype):
    ref = ref.reshape(out.shape)
    bound = _bound(values, values.shape[-1], mean, dtype).reshape(out.shape)
    bound = bound + np.abs(ref) * np.finfo(dtype).eps
    assert np.all(np.abs(out.astype(np.float64) - ref) <= bound), np.max(np.abs(out - ref) - bound)


def _chain(reduce_op, **kwargs):
    """y = reduce(relu(x * w + b)) with w, b row vectors."""
    return [core.CreateOperator("Mul", ["x", "w"], ["m"]),
            core.CreateOperator("Add", ["m", "b"], ["a"]),
            core.CreateOperator("Relu", ["a"], ["r"]),
            core.CreateOperator(reduce_op, ["r"], ["y"], **kwargs)]


def _feeds(shape, dtype, seed=0):
    rng = np.random.RandomState(seed)
    return {"x": rng.randn(*shape).astype(dtype), "w": rng.randn(shape[-1]).astype(dtype),
            "b": rng.randn(shape[-1]).astype(dtype)}


CASES = [
    ("ReduceSum", {"axes": [-1], "keepdims": 0}, False, lambda s: s[:-1]),
    ("ReduceSum", {"axes": [-1], "keepdims": 1}, False, lambda s: s[:-1] + (1,)),
    ("ReduceMean", {"axes": [-1], "keepdims": 1}, True, lambda s: s[:-1] + (1,)),
    ("ReduceMean", {"axes": [-1], "keepdims": 0}, True, lambda s: s[:-1]),
    ("ReduceBackSum", {}, False, lambda s: s[:-1]),
    ("ReduceBackMean", {"num_reduce_dim": 1}, True, lambda s: s[:-1]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op_type,kwargs,mean,out_shape", CASES)
def test_chain_ending_in_a_reduction_fuses(op_type, kwargs, mean, out_shape, dtype):
    feeds = _feeds((3, 5, 300), dtype)
    ops = _chain(op_type, **kwargs)
    fused, plan, ran = _run(ops, feeds, 1, keep=["y"])
    plain, plain_plan, _ = _run(ops, feeds, 0, keep=["y"])
    assert plan.fused_groups == 1 and ran == 1 and plain_plan.fused_groups == 0
    (group,) = plan.steps
    assert [m.op_def.type for m in group.members] == ["Mul", "Add", "Relu", op_type]
    # intermediates are neither kept nor written: only the reduction comes out
    assert group.outputs == ("y",) and sorted(fused) == sorted(plain) == ["b", "w", "x", "y"]
    y = fused["y"]
    assert y.dtype == dtype and y.shape == out_shape((3, 5, 300)) == plain["y"].shape
    r = np.maximum(feeds["x"].astype(np.float64) * feeds["w"] + feeds["b"], 0)
    # the unfused ops round every value to dtype; the reference does the same
    r_dtype = np.maximum(feeds["x"] * feeds["w"] + feeds["b"], 0).astype(np.float64)
    ref = r_dtype.mean(axis=-1) if mean else r_dtype.sum(axis=-1)
    _check(y, ref, r_dtype, mean, dtype)
    _check(plain["y"], ref, r_dtype, mean, dtype)
    assert np.allclose(y, (r.mean(axis=-1) if mean else r.sum(axis=-1)).reshape(y.shape), rtol=1e-4, atol=1e-4)


def test_kept_intermediates_are_written_and_the_sum_matches():
    """Without `keep` every blob the net writes is committed (Caffe2's semantics): the
    group writes the chain's values too, and still reduces in the same pass."""
    feeds = _feeds((4, 1000), np.float32, seed=1)
    ops = _chain("ReduceSum", axes=[-1], keepdims=0)
    fused, plan, ran = _run(ops, feeds, 1)
    plain, _, _ = _run(ops, feeds, 0)
    assert ran == 1 and set(plan.steps[0].outputs) == {"m", "a", "r", "y"}
    for name in ("m", "a", "r"):
        np.testing.assert_array_equal(fused[name], plain[name])
    _check(fused["y"], plain["r"].astype(np.float64).sum(-1), plain["r"].astype(np.float64), False, np.float32)


def test_large_reduction_runs_rows_in_parallel():
    """Above the loop's parallel threshold rows are split over the team's threads
    (never a row: its sum is one accumulator)."""
    feeds = _feeds((300, 1000), np.float32, seed=2)
    ops = _chain("ReduceMean", axes=[-1], keepdims=0)
    fused, _, ran = _run(ops, feeds, 1, keep=["y"])
    plain, _, _ = _run(ops, feeds, 0, keep=["y"])
    assert ran == 1
    r = plain_r = np.maximum(feeds["x"] * feeds["w"] + feeds["b"], 0).astype(np.float64)
    _check(fused["y"], r.mean(-1), plain_r, True, np.float32)


def test_reductions_over_other_axes_are_not_fused_into_the_chain():
    feeds = _feeds((3, 5, 7), np.float32)
    # axes [2] is the last axis here, but the plan cannot know the rank without types
    for kwargs in ({"axes": [0], "keepdims": 0}, {"axes": [1, 2], "keepdims": 0}, {}, {"axes": [2]}):
        ops = _chain("ReduceSum", **kwargs)
        fused, plan, ran = _run(ops, feeds, 1, keep=["y"])
        plain, _, _ = _run(ops, feeds, 0, keep=["y"])
        np.testing.assert_array_equal(fused["y"], plain["y"])
        # the Mul/Add/Relu group ran fused; the reduction ran as its own op
        assert ran == 1 and plan.steps[-1].op_def.type == "ReduceSum"


def test_a_reduction_ends_its_group():
    """ReduceSum then Add: the reduction closes the first group; the Add after it is
    not part of it (it reads a row-shaped value)."""
    feeds = _feeds((4, 50), np.float32)
    feeds["c"] = np.float32(2) * np.ones((4,), np.float32)
    ops = _chain("ReduceSum", axes=[-1], keepdims=0) + [core.CreateOperator("Add", ["y", "c"], ["z"])]
    fused, plan, ran = _run(ops, feeds, 1, keep=["z"])
    plain, _, _ = _run(ops, feeds, 0, keep=["z"])
    assert ran == 1 and plan.steps[-1].op_def.type == "Add"
    r = np.maximum(feeds["x"] * feeds["w"] + feeds["b"], 0).astype(np.float64)
    _check(fused["z"] - np.float32(2), r.sum(-1), r, False, np.float32)
    np.testing.assert_allclose(fused["z"], plain["z"], rtol=1e-5)


def test_an_empty_row_falls_back_to_the_op():
    feeds = _feeds((3, 0), np.float32)
    for op_type, want in (("ReduceSum", np.zeros(3, np.float32)), ("ReduceMean", np.full(3, np.nan, np.float32))):
        ops = _chain(op_type, axes=[-1], keepdims=0)
        fused, plan, ran = _run(ops, feeds, 1, keep=["y"])
        assert plan.fused_groups == 1 and ran == 0
        np.testing.assert_array_equal(fused["y"], want)


def test_a_known_rank_lets_a_non_negative_last_axis_fuse():
    feeds = _feeds((3, 5, 40), np.float32)
    ops = _chain("ReduceMean", axes=[2], keepdims=0)
    net = _net(ops, 1)
    from caffe2py.registry import TensorType
    types = {name: TensorType(value.shape) for name, value in feeds.items()}
    types.update({name: TensorType((3, 5, 40)) for name in ("m", "a", "r")})
    plan = compile_net(net, feeds.keys(), input_types=types, keep=["y"])
    assert [m.op_def.type for m in plan.steps[0].members][-1] == "ReduceMean"
    blobs = dict(feeds)
    plan.run(blobs)
    r = np.maximum(feeds["x"] * feeds["w"] + feeds["b"], 0).astype(np.float64)
    _check(blobs["y"], r.mean(-1), r, True, np.float32)


def test_a_0d_chain_raises_the_reduction_ops_own_error():
    """ReduceBackSum of a 0-D value: the fused group declines at run time and the
    member ops run, the reduction raising its own error."""
    feeds = {k: np.asarray(v.reshape(-1)[0]) for k, v in _feeds((1, 1), np.float32).items()}
    ops = _chain("ReduceBackSum")
    texts = []
    for mode in (1, 0):
        before = fusion.stats["fallback_runs"]
        with pytest.raises(Caffe2Error) as info:
            _run(ops, feeds, mode, keep=["y"])
        assert fusion.stats["fallback_runs"] == before + (mode == 1)
        texts.append(str(info.value))
    assert texts[0] == texts[1] and "ReduceBackSum" in texts[0] and "out of range" in texts[0]


def test_lengths_input_is_not_fused():
    feeds = _feeds((3, 6), np.float32)
    feeds["len"] = np.array([6, 2, 0], np.int32)
    ops = _chain("ReduceBackSum")
    ops[-1].input.append("len")
    fused, plan, ran = _run(ops, feeds, 1, keep=["y"])
    plain, _, _ = _run(ops, feeds, 0, keep=["y"])
    assert plan.steps[-1].op_def.type == "ReduceBackSum"
    np.testing.assert_array_equal(fused["y"], plain["y"])


def test_onnx_model_chain_ending_in_reduce_mean(monkeypatch):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from caffe2py.onnx import backend
    nodes = [helper.make_node("Mul", ["x", "w"], ["a"]),
             helper.make_node("Relu", ["a"], ["s"]),
             helper.make_node("Sub", ["s", "w"], ["d"]),
             helper.make_node("ReduceMean", ["d"], ["y"], axes=[-1], keepdims=1)]
    graph = helper.make_graph(
        nodes, "reduce_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 500]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [500])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rs = np.random.RandomState(8)
    x, w = rs.randn(6, 500).astype(np.float32), rs.randn(500).astype(np.float32)
    results = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("CAFFE2PY_FUSION", mode)
        rep = backend.prepare(model)
        before = fusion.stats["fused_runs"]
        (results[mode],) = rep.run([x, w])
        if mode == "1":
            assert [m.op_def.type for m in rep.plan.steps[0].members] == ["Mul", "Relu", "Sub", "ReduceMean"]
            assert fusion.stats["fused_runs"] == before + 1
    d = (np.maximum(x * w, 0) - w).astype(np.float64)
    for y in results.values():
        assert y.shape == (6, 1) and y.dtype == np.float32
        _check(y, d.mean(-1), d, True, np.float32)
