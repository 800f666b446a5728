"""The declarative rules OpSchema carries (caffe2py/schema_rules.py): each rule on
its own, their plan-time / per-call split, and the executor applying them to any op."""
import numpy as np
import pytest

from caffe2py import core, registry
from caffe2py.errors import Caffe2Error
from caffe2py.executor import compile_net
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import (Ascending, Axes, Axis, Broadcast, DTypes, Finite, Length, OneOf, Permutation,
                                   Range, Rank, SameDType, Scalar, broadcast_problem, dtype_family, runtime_guard)

CALLS = []


def _register(name, args=(), checks=()):
    register_schema(OpSchema(name, num_inputs=(0, 4), num_outputs=1, args=args, checks=checks))

    @register_kernel(name)
    def factory(ctx):
        def run(*xs):
            CALLS.append(name)
            return np.zeros(1, np.float32)
        return run


_register("_RulesArgs", args=(Arg("k", "int", 1, check=Range(1, 8)), Arg("mode", "string", "a", check=OneOf("a", "b")),
                              Arg("b", "floats", check=(Finite(), Ascending(strict=True))),
                              Arg("pair", "ints", check=Length(2))))
_register("_RulesInputs", args=(Arg("axis", "int", -1, check=Axis(0)), Arg("axes", "ints", check=Axes(0)),
                                Arg("perm", "ints", check=Permutation(1))),
          checks=(DTypes((0, 1), "float"), SameDType((0, 1)), Rank(0, 2, 3), Scalar(2), Broadcast((0, 1))))
_register("_RulesNone")


def _run(op_type, inputs, **args):
    blobs = dict(inputs)
    op = core.CreateOperator(op_type, list(inputs), ["out"], **args)
    net = caffe2_pb2.NetDef(name="rules")
    net.op.append(op)
    plan = compile_net(net, blobs.keys())
    plan.run(blobs)
    return plan


@pytest.mark.parametrize("args,expected", [
    (dict(k=0), r"argument 'k' must be in \[1, 8\], got 0"),
    (dict(k=9), r"argument 'k' must be in \[1, 8\]"),
    (dict(k="x"), "argument 'k' should be an int"),
    (dict(mode="c"), "argument 'mode' must be one of 'a', 'b', got 'c'"),
    (dict(b=[1.0, float("inf")]), "argument 'b' must hold finite numbers"),
    (dict(b=[1.0, 1.0]), "argument 'b' must be sorted strictly ascending"),
    (dict(pair=[1, 2, 3]), "argument 'pair' must hold 2 values, got 3"),
])
def test_argument_rules_run_at_plan_time(args, expected):
    op = core.CreateOperator("_RulesArgs", [], ["out"], **args)
    net = caffe2_pb2.NetDef(name="plan")
    net.op.append(op)
    del CALLS[:]
    with pytest.raises(Caffe2Error, match=r"_RulesArgs #0 'out': " + expected):
        compile_net(net, ())
    assert CALLS == []


def test_valid_arguments_pass_and_ops_without_rules_get_no_guard():
    _run("_RulesArgs", {}, k=8, mode="b", b=[0.0, 1.0], pair=[3, 4])
    plan = _run("_RulesNone", {"x": np.ones(2)})
    assert plan.steps[0].guard is None
    plan = _run("_RulesInputs", {"a": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32),
                                 "s": np.ones(1)}, axis=1)
    assert plan.steps[0].guard is not None and len(plan.steps[0].guard.checks) >= 5


GOOD = {"a": np.ones((2, 3), np.float32), "b": np.ones((1, 3), np.float32), "s": np.array(1.0)}


@pytest.mark.parametrize("change,args,expected", [
    (dict(a=np.ones((2, 3), np.int32)), {}, r"blob 'a': input 0 must be a tensor of float16/float32/float64, "
                                            r"got int32"),
    (dict(a=[1, 2]), {}, "got a list"),
    (dict(b=np.ones((1, 3), np.float64)), {}, "blob 'b': input 1 has dtype float64 but input 0 has float32"),
    (dict(a=np.ones(3, np.float32), b=np.ones(3, np.float32)), {}, r"input 0 must have 2 to 3 dims, got shape \[3\]"),
    (dict(s=np.ones(2)), {}, "blob 's': input 2 must hold exactly one value"),
    (dict(b=np.ones((1, 4), np.float32)), {}, r"input shapes \[2, 3\] and \[1, 4\] do not broadcast"),
    ({}, dict(axis=2), r"argument 'axis' = 2 is out of range for input 0 of rank 2 \(valid: -2 to 1\)"),
    ({}, dict(axis=-3), "out of range"),
    ({}, dict(axes=[0, -2]), "names an axis twice"),
    ({}, dict(perm=[0, 0]), "is not a permutation of the 2 dims of input 1"),
])
def test_input_rules_run_before_the_kernel(change, args, expected):
    inputs = dict(GOOD, **change)
    del CALLS[:]
    with pytest.raises(Caffe2Error, match=expected):
        _run("_RulesInputs", inputs, **args)
    assert CALLS == []


def test_the_observed_path_applies_the_same_rules():
    from caffe2py.executor import NetObserver
    ws_blobs = dict(GOOD, a=np.ones((2, 3), np.int64))
    op = core.CreateOperator("_RulesInputs", list(GOOD), ["out"])
    net = caffe2_pb2.NetDef(name="observed")
    net.op.append(op)
    plan = compile_net(net, ws_blobs.keys())
    with pytest.raises(Caffe2Error, match="must be a tensor of"):
        plan.run_observed(ws_blobs, [NetObserver()])
    assert "out" not in ws_blobs


def test_rules_follow_schema_input_positions_past_absent_onnx_inputs():
    schema = OpSchema("_Absent", checks=(DTypes(2, "int"),))
    op = core.CreateOperator("_Absent", ["x", "z"], ["y"])
    op.arg.add(name="_onnx_absent", ints=[1])     # input 1 is absent: "z" is schema input 2
    guard = runtime_guard(schema, registry.OpContext(op, schema, 0))
    guard(np.ones(1, np.float32), np.ones(1, np.int64))
    with pytest.raises(Caffe2Error, match="blob 'z': input 2 must be a tensor of"):
        guard(np.ones(1, np.float32), np.ones(1, np.float32))


def test_broadcast_problem_and_dtype_families():
    assert broadcast_problem([(2, 1, 3), (4, 3), (3,)]) is None
    assert "dimension 1 from the right is 3 vs 4" in broadcast_problem([(2, 3), (4,)])
    assert dtype_family("int32/64") == {np.dtype(np.int32), np.dtype(np.int64)}
    assert np.dtype(np.bool_) in dtype_family("numeric_or_bool")


def test_every_registered_rule_is_one_of_the_known_kinds():
    """Schemas declare rules from schema_rules (or the ONNX spec rules): nothing else
    sneaks into `check` / `checks`, so the fuzzer can replay them."""
    import caffe2py.operators  # noqa: F401
    from caffe2py import schema_rules
    for schema in registry.all_schemas():
        for arg in schema.args:
            for rule in schema_rules._rules(arg.check):
                assert isinstance(rule, schema_rules.ArgRule), (schema.name, arg.name)
        for rule in schema.checks:
            assert isinstance(rule, schema_rules.InputRule), schema.name
