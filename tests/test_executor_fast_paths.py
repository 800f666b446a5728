"""The compiled plan's cheap per-op path: a kernel's fast form (registry.fast_form,
the ufunc behind Add/Sub/Mul/Div) called in place of the kernel, and inlined schema
checks that a value has already passed left out. Results and errors must be the
full kernel's, case by case."""
import traceback

import numpy as np
import pytest

from caffe2py import core
from caffe2py.kernels.cpu.math import elementwise as elementwise_kernels
from caffe2py.errors import OperatorError
from caffe2py.executor import compile_net
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import OpSchema, fast_form, register_kernel, register_schema
from caffe2py.schema_rules import DTypes



def _c_divide(a, b):
    """Caffe2's Div: C's integer division (toward zero, integer dtype kept) for two
    integer operands, true division otherwise."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(a.astype(np.float64) / b).astype(np.result_type(a, b))
    return a / b


_REFERENCE = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b,
              "Mul": lambda a, b: a * b, "Div": _c_divide}


def _net(*ops, name="fast"):
    net = caffe2_pb2.NetDef(name=name)
    for op in ops:
        net.op.add().CopyFrom(op)
    return net


def _run(net, blobs):
    plan = compile_net(net, blobs.keys())
    plan.run(blobs)
    return plan


def _op_step(plan, index):
    return next(s for s in plan.op_steps() if s.index == index)


CASES = [
    (np.float32, np.float32, (3, 4), (3, 4)),
    (np.float64, np.float64, (5,), (5,)),
    (np.int32, np.int32, (2, 3), (2, 3)),
    (np.int64, np.int64, (4,), (4,)),
    (np.float32, np.float64, (3,), (3,)),      # mixed dtypes: NumPy's promotion, as the kernel
    (np.int32, np.float32, (2, 2), (2, 2)),
    (np.float32, np.float32, (2, 3), (3,)),    # NumPy broadcasting
    (np.float32, np.float32, (), ()),          # 0-d: a NumPy scalar comes back, as from the kernel
]


@pytest.mark.parametrize("op_type", sorted(_REFERENCE))
@pytest.mark.parametrize("dtype_a, dtype_b, shape_a, shape_b", CASES)
def test_binary_ops_run_their_ufunc_and_give_the_kernels_results(op_type, dtype_a, dtype_b, shape_a, shape_b):
    rng = np.random.default_rng(0)
    a = (rng.integers(1, 9, shape_a)).astype(dtype_a)
    b = (rng.integers(1, 9, shape_b)).astype(dtype_b)
    blobs = {"a": a, "b": b}
    plan = _run(_net(core.CreateOperator(op_type, ["a", "b"], ["c"])), blobs)
    step = _op_step(plan, 0)
    assert step.kernel.fast_form is {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                                     "Div": elementwise_kernels.divide}[op_type]
    assert "u0(" in plan.source
    expected = _REFERENCE[op_type](a, b)
    full = step.kernel(a, b)
    for got in (blobs["c"], full):
        assert type(got) is type(expected) and got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


def test_bool_add_and_mul_take_the_fast_path_and_bool_sub_is_refused_by_name():
    t = np.array([True, False, True])
    f = np.array([False, False, True])
    blobs = {"t": t, "f": f}
    _run(_net(core.CreateOperator("Add", ["t", "f"], ["s"]), core.CreateOperator("Mul", ["t", "f"], ["p"])), blobs)
    np.testing.assert_array_equal(blobs["s"], t | f)
    np.testing.assert_array_equal(blobs["p"], t & f)
    # Sub's rule (numbers only) is a different check from Add's (numbers or bool): the
    # check Add passed on 't' must not stand in for Sub's
    blobs = {"t": t, "f": f}
    net = _net(core.CreateOperator("Add", ["t", "f"], ["s"]), core.CreateOperator("Sub", ["t", "f"], ["d"]))
    with pytest.raises(OperatorError, match=r"Sub #1.*'t'.*input 0 must be a tensor of .*got bool"):
        _run(net, blobs)
    assert set(blobs) == {"t", "f"}


def test_legacy_broadcast_keeps_the_full_kernel():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(3, dtype=np.float32)
    blobs = {"a": a, "b": b}
    plan = _run(_net(core.CreateOperator("Add", ["a", "b"], ["c"], broadcast=1, axis=1)), blobs)
    assert getattr(_op_step(plan, 0).kernel, "fast_form", None) is None
    assert "u0(" not in plan.source
    np.testing.assert_array_equal(blobs["c"], a + b[None, :, None])


def test_shapes_that_do_not_broadcast_get_the_kernels_error_and_change_nothing():
    blobs = {"a": np.ones(2, np.float32), "b": np.ones(3, np.float32), "one": np.ones(2, np.float32)}
    net = _net(core.CreateOperator("Add", ["a", "one"], ["x"]),
               core.CreateOperator("Mul", ["x", "b"], ["y"]))
    with pytest.raises(OperatorError) as info:
        _run(net, blobs)
    assert str(info.value).startswith("Mul #1")
    assert "shapes [2] of 'x' and [3] of 'b' do not broadcast" in str(info.value)
    assert set(blobs) == {"a", "b", "one"}
    # the ufunc's own ValueError, which made the plan call the kernel, is not in the chain
    printed = "".join(traceback.format_exception(info.value))
    assert "operands could not be broadcast" not in printed


def test_in_place_chain_on_the_fast_path():
    x = np.arange(4, dtype=np.float32)
    y = np.full(4, 0.5, np.float32)
    blobs = {"x": x.copy(), "y": y}
    _run(_net(*[core.CreateOperator("Add", ["x", "y"], ["x"]) for _ in range(5)],
              core.CreateOperator("Mul", ["y", "x"], ["x"])), blobs)
    np.testing.assert_array_equal(blobs["x"], (x + 5 * y) * y)


# ----------------------------------------------------------------- a fast form's contract

_CALLS = {"fast": 0, "kernel": 0}

register_schema(OpSchema("_TestFastForm", num_inputs=1, num_outputs=1, checks=(DTypes(0, "float"),)))


@register_kernel("_TestFastForm")
def _fast_form_kernel(ctx):
    def run(x):
        _CALLS["kernel"] += 1
        if np.any(x < 0):
            raise ctx.input_error(0, "wants no negative values")
        return x * 2

    def fast(x):
        _CALLS["fast"] += 1
        if np.any(x < 0):
            raise ArithmeticError("fast form declines")
        return x * 2
    return fast_form(run, fast)


def test_the_plan_calls_the_fast_form_and_the_kernel_only_when_it_raises():
    _CALLS.update(fast=0, kernel=0)
    blobs = {"x": np.ones(3, np.float32)}
    net = _net(core.CreateOperator("_TestFastForm", ["x"], ["y"]), core.CreateOperator("_TestFastForm", ["y"], ["z"]))
    plan = _run(net, blobs)
    assert _CALLS == {"fast": 2, "kernel": 0}
    np.testing.assert_array_equal(blobs["z"], np.full(3, 4, np.float32))
    blobs["x"] = np.array([1, -1], np.float32)
    before = {k: v.copy() for k, v in blobs.items()}
    with pytest.raises(OperatorError, match=r"_TestFastForm #0.*'x'.*wants no negative values") as info:
        plan.run(blobs)
    assert _CALLS == {"fast": 3, "kernel": 1}
    assert "fast form declines" not in "".join(traceback.format_exception(info.value))
    for k, v in before.items():
        np.testing.assert_array_equal(blobs[k], v)
    # the observed (op by op) path runs the kernel itself
    from caffe2py.executor import TimeObserver
    blobs["x"] = np.ones(2, np.float32)
    plan.run_observed(blobs, [TimeObserver()])
    assert _CALLS == {"fast": 3, "kernel": 3}


# ----------------------------------------------------------------- checks passed once

def _local_of(plan, blob):
    """The local the plan reads `blob` into."""
    line = next(l for l in plan.source.splitlines() if l.strip().endswith("= B[%r]" % blob))
    return line.split("=")[0].strip()


def _guard_lines(plan):
    return [l for l in plan.source.splitlines() if l.strip().startswith("if not (")]


def test_a_value_read_by_every_op_is_checked_once():
    blobs = {"x0": np.ones(1, np.float32), "one": np.ones(1, np.float32)}
    net = _net(*[core.CreateOperator("Add", ["x%d" % i, "one"], ["x%d" % (i + 1)]) for i in range(6)])
    plan = _run(net, blobs)
    one = _local_of(plan, "one")
    guards = _guard_lines(plan)
    # the first Add checks x0 and 'one'; the ufunc's outputs from numbers are numbers
    # (registry.fast_form keeps_dtypes), so the other Adds have nothing left to check
    assert len(guards) == 1
    assert ("type(%s)" % one) in guards[0]
    np.testing.assert_array_equal(blobs["x6"], np.full(1, 7, np.float32))
    # the one check still names the first op that reads the value
    blobs = {"x0": np.ones(1, np.float32), "one": np.array(["1"])}
    with pytest.raises(OperatorError, match=r"Add #0.*'one'.*got <U1"):
        _run(net, blobs)


def test_checks_passed_inside_a_fused_groups_fallback_are_checked_again_after_it():
    # Add + Relu fuse; Softmax does not; the Add after it reads 'one' again: the check
    # 'one' passed inside the group's fallback block did not run when the group's
    # loop ran, so it must be in the line after the block
    blobs = {"x": np.ones((1, 4), np.float32), "one": np.ones((1, 4), np.float32)}
    net = _net(core.CreateOperator("Add", ["x", "one"], ["a"]),
               core.CreateOperator("Relu", ["a"], ["b"]),
               core.CreateOperator("Softmax", ["b"], ["c"]),
               core.CreateOperator("Add", ["c", "one"], ["d"]))
    plan = _run(net, blobs)
    assert plan.fused_groups == 1
    one = _local_of(plan, "one")
    inside = [l for l in _guard_lines(plan) if l.startswith(" " * 12)]
    after = [l for l in _guard_lines(plan) if not l.startswith(" " * 12)]
    assert any(("type(%s)" % one) in l for l in inside)
    assert any(("type(%s)" % one) in l for l in after)
    e = np.exp(np.full((1, 4), 2.0, np.float32))
    np.testing.assert_allclose(blobs["d"], e / e.sum() + 1, rtol=1e-6)


@pytest.mark.parametrize("consumer, a, message", [
    ("Relu", np.array([True, False]), r"Relu #1.*'s'.*input 0 must be a tensor of .*got bool"),
    ("Sigmoid", np.array([1, 2], np.int32), r"Sigmoid #1.*'s'.*input 0 must be a tensor of .*got int32"),
])
def test_an_output_is_checked_by_an_op_whose_rule_is_another(consumer, a, message):
    # Add's rule (numbers or bool) says nothing of Relu's (numbers) or Sigmoid's (floats)
    blobs = {"a": a, "b": a.copy()}
    net = _net(core.CreateOperator("Add", ["a", "b"], ["s"]), core.CreateOperator(consumer, ["s"], ["y"]))
    with pytest.raises(OperatorError, match=message):
        _run(net, blobs)
    assert set(blobs) == {"a", "b"}


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_div_truncates_toward_zero_and_refuses_a_zero_divisor_by_name(dtype):
    a = np.array([7, -7, 7, -7, 6, 0], dtype)
    b = np.array([2, 2, -2, -2, 3, 5], dtype)
    blobs = {"a": a, "b": b}
    _run(_net(core.CreateOperator("Div", ["a", "b"], ["c"])), blobs)
    assert blobs["c"].dtype == dtype
    np.testing.assert_array_equal(blobs["c"], np.array([3, -3, -3, 3, 2, 0], dtype))   # C: 7 / -2 == -3
    blobs = {"a": a, "b": np.array([1, 1, 0, 1, 1, 1], dtype)}
    with pytest.raises(OperatorError, match=r"Div.*'b'.*integer division by zero"):
        _run(_net(core.CreateOperator("Div", ["a", "b"], ["c"])), blobs)
    assert "c" not in blobs
