"""caffe2py.control (Caffe2's caffe2.python.control): loops and conditionals built
from execution steps, checked by counting how often a counting net ran."""
import numpy as np
import pytest

from caffe2py import control, core, workspace


@pytest.fixture
def counter():
    """A counter `count` incremented by count_net, whose output 'value' it holds after."""
    workspace.ResetWorkspace()
    init = core.Net("init")
    handle = init.CreateCounter([], "count", init_count=0)
    init.ConstantFill([], "value", shape=[], value=0, dtype=core.DataType.INT64)
    workspace.RunNetOnce(init)
    count_net = core.Net("count_up")
    count_net.CountUp([handle])
    count_net.RetrieveCount([handle], "value")
    yield count_net
    workspace.ResetWorkspace()


def _below(limit):
    """A condition net: value < limit."""
    net = core.Net("below_%d" % limit)
    workspace.FeedBlob("limit_%d" % limit, np.array(limit, np.int64))
    cond = net.LT(["value", "limit_%d" % limit])
    net.AddExternalOutput(cond)
    return net


def _const_condition(value):
    net = core.Net("const_%s" % value)
    cond = net.ConstantFill([], shape=[], value=value, dtype=core.DataType.BOOL)
    net.AddExternalOutput(cond)
    return net


def _run(step):
    plan = core.Plan("control_plan")
    plan.AddStep(step)
    workspace.RunPlan(plan)
    return int(workspace.FetchBlob("value"))


def test_for_runs_n_times(counter):
    assert _run(control.For("loop", counter, 7)) == 7


def test_while_tests_before_and_do_while_after(counter):
    assert _run(control.While("w", _below(5), counter)) == 5
    # already at 5: While does not run, DoWhile runs once
    assert _run(control.While("w2", _below(5), counter)) == 5
    assert _run(control.DoWhile("dw", _below(5), counter)) == 6


def test_until_and_do_until(counter):
    reached = core.Net("reached_3")
    workspace.FeedBlob("three", np.array(3, np.int64))
    reached.AddExternalOutput(reached.GE(["value", "three"]))
    assert _run(control.Until("u", reached, counter)) == 3
    assert _run(control.DoUntil("du", reached, counter)) == 4


def test_if_picks_one_branch(counter):
    other = core.Net("add_ten")
    workspace.FeedBlob("ten", np.array(10, np.int64))
    other.Add(["value", "ten"], "value")
    assert _run(control.If("if_true", _const_condition(True), counter, other)) == 1
    assert _run(control.If("if_false", _const_condition(False), counter, other)) == 11
    assert _run(control.IfNot("ifnot", _const_condition(False), counter)) == 2
    assert _run(control.If("if_only", _const_condition(False), counter)) == 2


def test_switch_runs_every_body_whose_condition_holds(counter):
    step = control.Switch("sw", (_const_condition(True), counter), (_const_condition(False), counter),
                          (_const_condition(True), counter))
    assert _run(step) == 2
    assert _run(control.SwitchNot("swn", (_const_condition(False), counter))) == 3


def test_do_and_do_parallel_run_each_once(counter):
    assert _run(control.Do("do", counter, counter)) == 2
    assert _run(control.DoParallel("par", [core.execution_step("a", counter), core.execution_step("b", counter)])) == 4


def test_merged_and_combined_conditions():
    workspace.ResetWorkspace()
    t, f = _const_condition(True), _const_condition(False)
    merged_and = control.MergeConditionNets("both", [t, f], "And")
    merged_or = control.MergeConditionNets("either", [t, f], "Or")
    workspace.RunNetOnce(merged_and)
    workspace.RunNetOnce(merged_or)
    assert not workspace.FetchBlob(str(control.GetConditionBlobFromNet(merged_and)))
    assert workspace.FetchBlob(str(control.GetConditionBlobFromNet(merged_or)))
    # CombineConditions only relates blobs that are computed already
    combined = control.CombineConditions("combined", [t, f], "Or")
    assert len(combined.Proto().op) == 1
    workspace.RunNetOnce(combined)
    assert workspace.FetchBlob(str(control.GetConditionBlobFromNet(combined)))
    assert control.MergeConditionNets("one", [t], "And") is t and control.CombineConditions("none", [], "Or") is None
    workspace.ResetWorkspace()
