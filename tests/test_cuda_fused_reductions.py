"""CUDA sum reductions (operators/math/cuda_reduce.py, kernels/cuda/math/reduce.cu)
and fused CUDA chains that end in a last-axis ReduceSum / ReduceMean /
ReduceBackSum / ReduceBackMean (caffe2py/fusion_cuda.py, caffe2py/cuda/fused.py's
row kernel): the fused row sums are bitwise the unfused CUDA ops' (same summation
order and block size) and close to NumPy's float64 sums. Marked `cuda`: on a GPU, or
on the emulator."""
import numpy as np
import pytest

from caffe2py import workspace
from caffe2py.errors import Caffe2Error

from test_cuda_fusion import _fused_vs_unfused, _group_types, _op, _run

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def fresh_workspace(monkeypatch):
    monkeypatch.delenv("CAFFE2PY_FUSION", raising=False)
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def _tol(dtype):
    return 2e-5 if dtype == np.float32 else 2e-2


# ----------------------------------------------------------------- the unfused CUDA ops

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,kwargs,axes", [
    ((5, 67), {"axes": [-1], "keepdims": 0}, (1,)),
    ((3, 300), {"axes": [1]}, (1,)),                         # longer than a block (256 threads)
    ((3, 4, 5), {"axes": [0, 2]}, (0, 2)),                   # two reduced groups of dims
    ((3, 4, 5), {"axes": [0], "keepdims": 0}, (0,)),         # strided: reduced dim first
    ((2, 3, 4), {}, (0, 1, 2)),                              # no axes: everything
    ((4, 6), {"axes": []}, ()),                              # no axes reduced: a copy
    ((1, 1), {"axes": [-1]}, (1,)),
])
@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean"])
def test_reduce_ops_against_numpy(op_type, shape, kwargs, axes, dtype):
    rng = np.random.RandomState(len(shape))
    x = rng.randn(*shape).astype(dtype)
    y = _run([_op(op_type, ["x"], "y", **kwargs)], {"x": x}, 0, ["y"])[0]["y"]
    keep = kwargs.get("keepdims", 1)
    ref = getattr(np, "sum" if op_type == "ReduceSum" else "mean")(x.astype(np.float64), axis=axes,
                                                                    keepdims=bool(keep))
    assert y.dtype == dtype and y.shape == np.shape(ref)
    np.testing.assert_allclose(y, ref, rtol=_tol(dtype), atol=_tol(dtype))


@pytest.mark.parametrize("op_type,n,front", [("ReduceBackSum", 1, False), ("ReduceBackMean", 2, False),
                                             ("ReduceFrontSum", 2, True), ("ReduceFrontMean", 1, True)])
def test_front_back_ops_against_numpy(op_type, n, front):
    x = np.random.RandomState(7).randn(3, 5, 7).astype(np.float32)
    out, _, _ = _run([_op(op_type, ["x"], "y", num_reduce_dim=n)], {"x": x}, 0, ["y"])
    axes = tuple(range(n)) if front else tuple(range(3 - n, 3))
    ref = (np.mean if op_type.endswith("Mean") else np.sum)(x.astype(np.float64), axis=axes)
    np.testing.assert_allclose(out["y"], ref, rtol=2e-5, atol=2e-5)


def test_reduce_over_empty_axis_gives_zero():
    out, _, _ = _run([_op("ReduceSum", ["x"], "y", axes=[1])], {"x": np.zeros((3, 0), np.float32)}, 0, ["y"])
    np.testing.assert_array_equal(out["y"], np.zeros((3, 1), np.float32))


def test_bad_inputs_raise_the_ops_errors():
    with pytest.raises(Caffe2Error, match="ReduceSum.*axis 2 is out of range"):
        _run([_op("ReduceSum", ["x"], "y", axes=[2])], {"x": np.ones((3, 4), np.float32)}, 0, [])
    with pytest.raises(Caffe2Error, match="ReduceSum.*float32 or float16"):
        _run([_op("ReduceSum", ["x"], "y")], {"x": np.ones((3, 4), np.int32)}, 0, [])
    with pytest.raises(Caffe2Error, match="ReduceBackSum.*lengths.*not supported"):
        _run([_op("ReduceBackSum", ["x", "l"], "y")], {"x": np.ones((3, 4), np.float32),
                                                        "l": np.ones(3, np.int32)}, 0, [])


# ----------------------------------------------------------------- fused chains ending in a reduction

_SHAPES = [(1, 1), (6, 1), (1, 67), (5, 67), (3, 300), (2, 3, 513), (400, 5)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("reduce_op,kwargs,mean,keep", [
    ("ReduceSum", {"axes": [-1], "keepdims": 0}, False, False),
    ("ReduceMean", {"axes": [-1]}, True, True),
    ("ReduceBackSum", {}, False, False),
    ("ReduceBackMean", {"num_reduce_dim": 1}, True, False),
])
def test_chain_ending_in_a_reduction(reduce_op, kwargs, mean, keep, shape, dtype):
    rng = np.random.RandomState(sum(shape))
    x, w = rng.randn(*shape).astype(dtype), rng.randn(shape[-1]).astype(dtype)
    ops = [_op("Mul", ["x", "w"], "m"), _op("Tanh", ["m"], "t"), _op(reduce_op, ["t"], "s", **kwargs)]
    fused = _fused_vs_unfused(ops, {"x": x, "w": w}, ["m", "t", "s"], ends_with=reduce_op)
    t = np.tanh(x.astype(np.float64) * w)
    ref = t.mean(-1, keepdims=keep) if mean else t.sum(-1, keepdims=keep)
    assert fused["s"].shape == ref.shape
    scale = 1 if mean else shape[-1] ** 0.5
    np.testing.assert_allclose(fused["s"], ref, rtol=_tol(dtype), atol=_tol(dtype) * scale)


def test_intermediates_read_later_are_kept_and_an_input_can_be_reduced():
    """Relu's value is read after the group and the reduction reads a column-broadcast
    sum: both per-element outputs and row sums come back from one launch."""
    rng = np.random.RandomState(3)
    x, c = rng.randn(9, 33).astype(np.float32), rng.randn(9, 1).astype(np.float32)
    ops = [_op("Add", ["x", "c"], "a"), _op("Relu", ["a"], "r"), _op("ReduceSum", ["r"], "s", axes=[-1]),
           _op("Sigmoid", ["s"], "y"), _op("Mul", ["r", "x"], "z")]
    fused = _fused_vs_unfused(ops, {"x": x, "c": c}, ["r", "s", "y", "z"], ends_with="ReduceSum")
    r = np.maximum(x + c, 0)
    np.testing.assert_allclose(fused["s"], r.sum(-1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fused["z"], r * x, rtol=1e-6)


def test_a_reduction_over_another_axis_is_not_fused():
    """axes [0] is no row sum: the chain fuses without it and the op runs on its own."""
    rng = np.random.RandomState(4)
    x = rng.randn(4, 7).astype(np.float32)
    ops = [_op("Relu", ["x"], "r"), _op("Exp", ["r"], "e"), _op("ReduceSum", ["e"], "s", axes=[0])]
    _, plan, _ = _run(ops, {"x": x}, 1, [])
    assert _group_types(plan) == [["Relu", "Exp"]]
    fused = _fused_vs_unfused(ops, {"x": x}, ["s"])
    np.testing.assert_allclose(fused["s"], np.exp(np.maximum(x, 0)).sum(0, keepdims=True), rtol=1e-5)


def test_one_reduction_kernel_serves_every_shape():
    from caffe2py.cuda import compiler
    ops = [_op("Relu", ["x"], "r"), _op("ReduceSum", ["r"], "s", axes=[-1])]
    _fused_vs_unfused(ops, {"x": np.random.RandomState(5).randn(3, 9).astype(np.float32)}, ["s"],
                      ends_with="ReduceSum")
    generated = {k for k in compiler._modules if k[0].startswith("generated:")}
    _fused_vs_unfused(ops, {"x": np.random.RandomState(6).randn(2, 4, 40).astype(np.float32)}, ["s"])
    assert {k for k in compiler._modules if k[0].startswith("generated:")} == generated


def test_the_row_kernel_source_sums_in_the_unfused_order():
    """Generated text: a block per row with threads striding the columns, and the
    launch's block size from launch.reduction, as reduce.cu's ops use."""
    from caffe2py.cuda import launch
    from caffe2py.cuda.fused import CudaFusedProgram
    program = CudaFusedProgram("float32", 1, ["t0 = fmaxf(x0, 0.0f);", "t0 = c2f_round(t0);"], [], ["t0"],
                               reduced="t0")
    assert "col += blockDim.x" in program.source and "acc += t0;" in program.source
    assert program.arg_format == "PP" + "qq" + "q" * 13 + "if"
    assert launch.reduction(10, 300).block == (256, 1, 1) and launch.reduction(10, 5).block == (32, 1, 1)
