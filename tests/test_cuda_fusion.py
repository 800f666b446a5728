"""Fused elementwise chains on a CUDA device (caffe2py/fusion_cuda.py, caffe2py/cuda/fused.py):
a chain of CUDA ops runs as one generated kernel whose results are bitwise the unfused
CUDA ops' (each op's CUDA form is its kernel's own float expression, results rounded to
the storage type after every op; the emulator runs both with the same libm, and on a
GPU both are nvcc's code for the same expressions without fast-math), checked against
NumPy references too; groups that cannot run fused fall back to the member ops and
their errors. Marked `cuda`: on a GPU, or on the emulator."""
import numpy as np
import pytest

from caffe2py import core, fusion, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.executor import compile_net
from caffe2py.proto import caffe2_pb2

pytestmark = pytest.mark.cuda

GPU = core.DeviceOption(caffe2_pb2.CUDA, 0)


@pytest.fixture(autouse=True)
def fresh_workspace(monkeypatch):
    monkeypatch.delenv("CAFFE2PY_FUSION", raising=False)
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def _op(op_type, inputs, output, **kwargs):
    return core.CreateOperator(op_type, inputs, [output], device_option=GPU, **kwargs)


def _device(value):
    from caffe2py.cuda import adapter, allocator
    value = np.ascontiguousarray(value)
    array = adapter.tag(allocator.empty(value.shape, value.dtype, 0), 0)
    array.set(value)
    return array


def _plan(ops, feeds, mode):
    """(plan, blobs): the net compiled with fusion `mode` over device copies of feeds."""
    net = caffe2_pb2.NetDef(name="chain")
    net.op.extend(ops)
    net.arg.add(name="fusion", i=mode)
    blobs = {name: _device(value) for name, value in feeds.items()}
    return compile_net(net, blobs.keys(), blob_values=blobs), blobs


def _run(ops, feeds, mode, fetch):
    """The fetched blobs (copied to the host), the plan and how many groups ran fused."""
    plan, blobs = _plan(ops, feeds, mode)
    before = fusion.stats["cuda_fused_runs"]
    plan.run(blobs)
    ran = fusion.stats["cuda_fused_runs"] - before
    return {b: blobs[b].get() for b in fetch}, plan, ran


def _group_types(plan):
    return [[m.op_def.type for m in s.members] for s in plan.steps if getattr(s, "members", None)]


def _fused_vs_unfused(ops, feeds, fetch, groups=1, ends_with=None):
    """ends_with: the op type the (first) fused group must end with (a reduction)."""
    fused, plan, ran = _run(ops, feeds, 1, fetch)
    plain, plain_plan, ran_plain = _run(ops, feeds, 0, fetch)
    assert plan.fused_groups == ran == groups and plain_plan.fused_groups == ran_plain == 0
    if ends_with is not None:
        assert _group_types(plan)[0][-1] == ends_with, _group_types(plan)
    for name in fetch:
        assert fused[name].dtype == plain[name].dtype and fused[name].shape == plain[name].shape, name
        np.testing.assert_array_equal(fused[name], plain[name], err_msg=name)
    return fused


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# 8 ops: every op with a CUDA kernel, the binary ones with both operand orders
_EIGHT = [("Mul", ["x", "w"]), ("Add", None), ("Relu", None), ("Sub", ["w", None]),
          ("Tanh", None), ("Div", [None, "d"]), ("Sigmoid", None), ("Mul", [None, None])]
_NUMPY = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Div": np.divide,
          "Relu": lambda v: np.maximum(v, 0), "Tanh": np.tanh, "Sigmoid": _sigmoid}


def _chain(length):
    """The first `length` ops of _EIGHT as a net over x, w, d (None: the previous value)."""
    ops, prev = [], "x"
    for k, (op_type, args) in enumerate(_EIGHT[:length]):
        out = "t%d" % k
        if args is None:
            args = [prev] if op_type in ("Relu", "Tanh", "Sigmoid") else [prev, "x"]
        ops.append(_op(op_type, [prev if a is None else a for a in args], out))
        prev = out
    return ops


def _reference(length, feeds):
    env = {k: v.astype(np.float64) for k, v in feeds.items()}
    prev = "x"
    for k, (op_type, args) in enumerate(_EIGHT[:length]):
        if args is None:
            args = [prev] if op_type in ("Relu", "Tanh", "Sigmoid") else [prev, "x"]
        env["t%d" % k] = _NUMPY[op_type](*[env[prev if a is None else a] for a in args])
        prev = "t%d" % k
    return env


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("length", [2, 4, 8])
def test_chains_of_2_4_8_ops_equal_the_unfused_ops(length, dtype):
    rng = np.random.RandomState(length)
    feeds = {"x": rng.randn(5, 67).astype(dtype), "w": rng.randn(5, 67).astype(dtype),
             "d": (rng.rand(5, 67) + 0.5).astype(dtype)}
    fetch = ["t%d" % k for k in range(length)]
    fused = _fused_vs_unfused(_chain(length), feeds, fetch)
    ref = _reference(length, feeds)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    for name in fetch:
        np.testing.assert_allclose(fused[name], ref[name], rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("shape,kwargs", [
    ((67,), {}),                                # row vector, NumPy broadcasting
    ((5, 1), {}),                               # column vector
    ((), {}),                                   # scalar
    ((5,), {"broadcast": 1, "axis": 0}),        # Caffe2's legacy broadcast of a column
    ((1,), {"broadcast": 1}),                   # legacy scalar
])
def test_broadcast_inputs(shape, kwargs):
    rng = np.random.RandomState(1)
    x = rng.randn(5, 67).astype(np.float32)
    b = np.asarray(rng.randn(*shape), np.float32)
    ops = [_op("Mul", ["x", "b"], "m", **kwargs), _op("Add", ["m", "b"], "a", **kwargs),
           _op("Relu", ["a"], "y")]
    fused = _fused_vs_unfused(ops, {"x": x, "b": b}, ["m", "a", "y"])
    view = b.reshape((5, 1) if kwargs.get("axis") == 0 else b.shape)
    np.testing.assert_allclose(fused["y"], np.maximum(x * view + view, 0), rtol=1e-6)


def test_both_inputs_broadcast_to_a_larger_output():
    rng = np.random.RandomState(2)
    feeds = {"r": rng.randn(1, 3, 7).astype(np.float32), "c": rng.randn(4, 3, 1).astype(np.float32)}
    ops = [_op("Sub", ["r", "c"], "s"), _op("Tanh", ["s"], "y")]
    fused = _fused_vs_unfused(ops, feeds, ["s", "y"])
    np.testing.assert_allclose(fused["y"], np.tanh(feeds["r"] - feeds["c"]), rtol=1e-6, atol=1e-6)


def test_a_non_fusable_op_in_the_middle_splits_the_chain():
    rng = np.random.RandomState(3)
    feeds = {"x": rng.randn(6, 40).astype(np.float32), "w": rng.randn(40).astype(np.float32)}
    ops = [_op("Mul", ["x", "w"], "m"), _op("Relu", ["m"], "r"),
           _op("Softmax", ["r"], "s"),                       # not elementwise: runs on its own
           _op("Add", ["s", "w"], "a"), _op("Sigmoid", ["a"], "y")]
    fused = _fused_vs_unfused(ops, feeds, ["m", "r", "s", "a", "y"], groups=2)
    r = np.maximum(feeds["x"] * feeds["w"], 0)
    e = np.exp(r - r.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(fused["y"], _sigmoid(s + feeds["w"]), rtol=1e-5)


def test_one_generated_kernel_serves_every_shape():
    """The source depends on the chain, never on shapes: two nets of one chain over
    different shapes load one generated module."""
    from caffe2py.cuda import compiler
    ops = [_op("Add", ["x", "w"], "a"), _op("Relu", ["a"], "y")]
    rng = np.random.RandomState(4)
    _fused_vs_unfused(ops, {"x": rng.randn(3, 9).astype(np.float32), "w": rng.randn(9).astype(np.float32)}, ["y"])
    generated = {k for k in compiler._modules if k[0].startswith("generated:")}
    _fused_vs_unfused(ops, {"x": rng.randn(2, 5, 11).astype(np.float32),
                            "w": rng.randn(5, 1).astype(np.float32)}, ["y"])
    assert {k for k in compiler._modules if k[0].startswith("generated:")} == generated


def _error_text(ops, feeds, mode):
    with pytest.raises(Caffe2Error) as info:
        _run(ops, feeds, mode, [])
    return str(info.value)


def test_shape_mismatch_raises_the_member_ops_error():
    feeds = {"x": np.ones((4, 6), np.float32), "w": np.ones((5,), np.float32)}
    ops = [_op("Relu", ["x"], "r"), _op("Add", ["r", "w"], "a"), _op("Tanh", ["a"], "y")]
    before = fusion.stats["fallback_runs"]
    fused = _error_text(ops, feeds, 1)
    assert fusion.stats["fallback_runs"] == before + 1
    assert fused == _error_text(ops, feeds, 0)
    assert "Add" in fused and "do not broadcast" in fused


def test_mixed_dtypes_fall_back_to_the_member_ops_error():
    feeds = {"x": np.ones((4, 6), np.float32), "w": np.ones((4, 6), np.float16)}
    ops = [_op("Mul", ["x", "w"], "m"), _op("Relu", ["m"], "y")]
    fused = _error_text(ops, feeds, 1)
    assert fused == _error_text(ops, feeds, 0)
    assert "float32" in fused


def test_non_contiguous_inputs_fall_back():
    """PyCUDA arrays can be strided views (the emulator's never are): the group then
    declines (its kernel indexes contiguous buffers), and the member op raises its own
    error."""
    import types
    ops = [_op("Relu", ["x"], "r"), _op("Tanh", ["r"], "y")]
    plan, blobs = _plan(ops, {"x": np.ones((4, 6), np.float32)}, 1)
    (group,) = plan.steps
    assert group.kernel.try_fused(blobs["x"]) is not None
    blobs["x"].flags = types.SimpleNamespace(c_contiguous=False)
    assert group.kernel.try_fused(blobs["x"]) is None
    with pytest.raises(Caffe2Error, match="Relu.*contiguous"):
        plan.run(blobs)


def test_a_float16_chain_rounds_after_every_op():
    """1 + x then - 1 in float16 loses x's low bits where each op rounds; a chain that
    kept float values between ops would return x itself."""
    x = np.full((3, 5), 1e-3, np.float16)
    one = np.ones((1,), np.float16)
    ops = [_op("Add", ["x", "one"], "a"), _op("Sub", ["a", "one"], "y")]
    fused = _fused_vs_unfused(ops, {"x": x, "one": one}, ["y"])
    expected = (np.float16(1) + np.float16(1e-3)) - np.float16(1)
    assert expected != np.float16(1e-3)
    np.testing.assert_array_equal(fused["y"], np.full((3, 5), expected, np.float16))


def test_groups_never_mix_devices(monkeypatch):
    """A CPU chain, a copy to the GPU, a CUDA chain: two groups, one per device."""
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 0)
    rng = np.random.RandomState(5)
    x, w = rng.randn(4, 30).astype(np.float32), rng.randn(30).astype(np.float32)
    ops = [core.CreateOperator("Mul", ["x", "w"], ["m"]), core.CreateOperator("Relu", ["m"], ["r"]),
           _op("CopyCPUToGPU", ["r"], "g"), _op("Add", ["g", "gw"], "a"), _op("Tanh", ["a"], "y")]
    results = {}
    for mode in (1, 0):
        net = caffe2_pb2.NetDef(name="mixed")
        net.op.extend(ops)
        net.arg.add(name="fusion", i=mode)
        blobs = {"x": x, "w": w, "gw": _device(w)}
        plan = compile_net(net, blobs.keys(), blob_values=blobs)
        before = dict(fusion.stats)
        plan.run(blobs)
        results[mode] = blobs["y"].get()
        groups = [s for s in plan.steps if getattr(s, "members", None)]
        if mode:
            assert [[m.op_def.type for m in g.members] for g in groups] == [["Mul", "Relu"], ["Add", "Tanh"]]
            assert fusion.stats["fused_runs"] - before["fused_runs"] == 2
            assert fusion.stats["cuda_fused_runs"] - before["cuda_fused_runs"] == 1
        else:
            assert not groups
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_allclose(results[1], np.tanh(np.maximum(x * w, 0) + w), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_exp_log_sqrt_abs_negative_fuse(dtype):
    rng = np.random.RandomState(6)
    feeds = {"x": rng.randn(3, 41).astype(dtype), "c": np.full((1,), 0.5, dtype)}
    ops = [_op("Abs", ["x"], "a"), _op("Add", ["a", "c"], "p"), _op("Log", ["p"], "l"),
           _op("Exp", ["l"], "e"), _op("Sqrt", ["e"], "s"), _op("Negative", ["s"], "y")]
    fused = _fused_vs_unfused(ops, feeds, ["a", "p", "l", "e", "s", "y"])
    x = feeds["x"].astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(fused["y"], -np.sqrt(np.abs(x) + 0.5), rtol=tol)
