"""Caffe2's caffe2.python.control: control flow built from execution steps.

    Do(name, *nets_or_steps)            run once, in order
    DoParallel(name, *nets_or_steps)    run at once, wait for all
    For(name, nets_or_steps, n)         run n times
    While / Until(name, cond, body)     test, then run, while the condition holds / until it does
    DoWhile / DoUntil(name, cond, body) run, then test
    If / IfNot(name, cond, then, else=None)
    Switch / SwitchNot(name, (cond, body), ...)   every body whose condition holds / fails

A condition is a bool blob, or a net whose last external output is that blob (the
net then runs where the condition is tested). Bodies are a net, a step, or a list
of either. Everything is an ExecutionStep whose should_stop_blob ends it (a
For counts down a counter; While-style loops stop on the negated condition),
so the steps run with workspace.RunPlan. Step names are made unique in the
current name scope.

BoolNet, NotNet, MergeConditionNets and CombineConditions build the condition
nets these use.
"""
from . import core

_step_names_used = set()
_name_counter = [1]


def _get_next_step_name(control_name, base_name):
    name = "%s/%s" % (base_name, control_name)
    candidate = name
    while candidate in _step_names_used:
        candidate = "%s_%d" % (name, _name_counter[0])
        _name_counter[0] += 1
    _step_names_used.add(candidate)
    return candidate


def _MakeList(items):
    """(a, b) -> [a, b]; (a,) -> [a]; ([a, b],) -> [a, b]."""
    if len(items) == 0:
        raise ValueError("input cannot be empty.")
    if len(items) == 1:
        return items[0] if isinstance(items[0], list) else [items[0]]
    return list(items)


def _IsNets(nets_or_steps):
    if isinstance(nets_or_steps, list):
        return all(isinstance(n, core.Net) for n in nets_or_steps)
    return isinstance(nets_or_steps, core.Net)


def _PrependNets(nets_or_steps, *nets):
    nets_or_steps = _MakeList((nets_or_steps,))
    nets = _MakeList(nets)
    if _IsNets(nets_or_steps):
        return nets + nets_or_steps
    return [Do("prepend", nets)] + nets_or_steps


def _AppendNets(nets_or_steps, *nets):
    nets_or_steps = _MakeList((nets_or_steps,))
    nets = _MakeList(nets)
    if _IsNets(nets_or_steps):
        return nets_or_steps + nets
    return nets_or_steps + [Do("append", nets)]


def GetConditionBlobFromNet(condition_net):
    """The condition of a condition net: its last external output (a bool)."""
    outputs = condition_net.Proto().external_output
    assert len(outputs) > 0, "Condition net %s must has at least one external output" % condition_net.Name()
    # a reference, so that ops built on it later do not add the name scope again
    return core.BlobReference(outputs[-1])


def BoolNet(*blobs_with_bool_value):
    """A net setting each (blob, value) pair's blob to the bool value."""
    net = core.Net("bool_net")
    for blob, value in _MakeList(blobs_with_bool_value):
        out = net.ConstantFill([], [blob], shape=[], value=value, dtype=core.DataType.BOOL)
        net.AddExternalOutput(out)
    return net


def NotNet(condition_blob_or_net):
    """(net computing Not of the condition, its output blob)."""
    condition = (GetConditionBlobFromNet(condition_blob_or_net)
                 if isinstance(condition_blob_or_net, core.Net) else condition_blob_or_net)
    net = core.Net("not_net")
    out = net.Not(condition)
    net.AddExternalOutput(out)
    return net, out


def _CopyConditionBlobNet(condition_blob):
    net = core.Net("copy_condition_blob_net")
    out = net.Copy(condition_blob)
    net.AddExternalOutput(out)
    return net, out


def _relate(net, relation, left, right):
    return getattr(net, relation)([left, right])


def MergeConditionNets(name, condition_nets, relation):
    """One condition net holding the ops of all of condition_nets, its condition
    the `relation` ('And' or 'Or') of theirs."""
    if not isinstance(condition_nets, list):
        return condition_nets
    if len(condition_nets) <= 1:
        return condition_nets[0] if condition_nets else None
    merged = core.Net(name)
    last = None
    for i, net in enumerate(condition_nets):
        proto = net.Proto()
        assert proto.device_option == merged.Proto().device_option, "condition nets on different devices"
        assert proto.type == merged.Proto().type, "condition nets of different net types"
        merged._ExtendOps(list(proto.op))
        merged.Proto().external_input.extend(proto.external_input)
        condition = GetConditionBlobFromNet(net)
        last = condition if i == 0 else _relate(merged, relation, last, condition)
        for key in net.__dict__.get("_attr_dict", {}):
            for value in net.get_attributes(key):
                merged.add_attribute(key, value)
    merged.AddExternalOutput(last)
    return merged


def CombineConditions(name, condition_nets, relation):
    """A condition net relating the conditions of condition_nets without running
    their ops (their condition blobs must already be computed)."""
    if not condition_nets:
        return None
    if not isinstance(condition_nets, list):
        raise ValueError("condition_nets must be a list of nets.")
    if len(condition_nets) == 1:
        net, _ = _CopyConditionBlobNet(GetConditionBlobFromNet(condition_nets[0]))
        return net
    combined = core.Net(name)
    last = None
    for i, net in enumerate(condition_nets):
        condition = GetConditionBlobFromNet(net)
        last = condition if i == 0 else _relate(combined, relation, last, condition)
    combined.AddExternalOutput(last)
    return combined


def Do(name, *nets_or_steps):
    nets_or_steps = _MakeList(nets_or_steps)
    if len(nets_or_steps) == 1 and isinstance(nets_or_steps[0], core.ExecutionStep):
        return nets_or_steps[0]
    return core.scoped_execution_step(_get_next_step_name("Do", name), nets_or_steps)


def DoParallel(name, *nets_or_steps):
    nets_or_steps = _MakeList(nets_or_steps)
    if len(nets_or_steps) == 1 and isinstance(nets_or_steps[0], core.ExecutionStep):
        return nets_or_steps[0]
    return core.scoped_execution_step(_get_next_step_name("DoParallel", name), nets_or_steps,
                                      concurrent_substeps=True)


def _RunOnceIf(name, condition_blob_or_net, nets_or_steps):
    """Run nets_or_steps once if the condition holds (a condition net runs first)."""
    not_net, stop_blob = NotNet(condition_blob_or_net)
    if isinstance(condition_blob_or_net, core.Net):
        nets_or_steps = _PrependNets(nets_or_steps, condition_blob_or_net, not_net)
    else:
        nets_or_steps = _PrependNets(nets_or_steps, not_net)

    def if_step(control_name):
        return core.scoped_execution_step(_get_next_step_name(control_name, name), nets_or_steps,
                                          should_stop_blob=stop_blob, only_once=True)

    if _IsNets(nets_or_steps):
        # a stop blob left true by an earlier run would stop the step at once
        return Do(name + "/_RunOnceIf", BoolNet((stop_blob, False)), if_step("_RunOnceIf-inner"))
    return if_step("_RunOnceIf")


def _RunOnceIfNot(name, condition_blob_or_net, nets_or_steps):
    """Run nets_or_steps once if the condition does not hold."""
    if isinstance(condition_blob_or_net, core.Net):
        condition_blob = GetConditionBlobFromNet(condition_blob_or_net)
        nets_or_steps = _PrependNets(nets_or_steps, condition_blob_or_net)
    else:
        copy_net, condition_blob = _CopyConditionBlobNet(condition_blob_or_net)
        nets_or_steps = _PrependNets(nets_or_steps, copy_net)
    return core.scoped_execution_step(_get_next_step_name("_RunOnceIfNot", name), nets_or_steps,
                                      should_stop_blob=condition_blob, only_once=True)


def For(name, nets_or_steps, iter_num):
    """Run nets_or_steps iter_num times."""
    init_net = core.Net("init-net")
    counter = init_net.CreateCounter([], init_count=iter_num)
    iter_net = core.Net("For-iter")
    done = iter_net.CountDown([counter])
    loop = core.scoped_execution_step(_get_next_step_name("For-inner", name),
                                      _PrependNets(nets_or_steps, iter_net), should_stop_blob=done)
    return Do(name + "/For", Do(name + "/For-init-net", init_net), loop)


def While(name, condition_blob_or_net, nets_or_steps):
    """Run nets_or_steps as long as the condition holds, testing it first."""
    not_net, stop_blob = NotNet(condition_blob_or_net)
    if isinstance(condition_blob_or_net, core.Net):
        nets_or_steps = _PrependNets(nets_or_steps, condition_blob_or_net, not_net)
    else:
        nets_or_steps = _PrependNets(nets_or_steps, not_net)

    def while_step(control_name):
        return core.scoped_execution_step(_get_next_step_name(control_name, name), nets_or_steps,
                                          should_stop_blob=stop_blob)

    if _IsNets(nets_or_steps):
        # the stop blob may still be true from an earlier loop: reset it first
        return Do(name + "/While", BoolNet((stop_blob, False)), while_step("While-inner"))
    return while_step("While")


def Until(name, condition_blob_or_net, nets_or_steps):
    """Run nets_or_steps until the condition holds, testing it first."""
    if isinstance(condition_blob_or_net, core.Net):
        stop_blob = GetConditionBlobFromNet(condition_blob_or_net)
        nets_or_steps = _PrependNets(nets_or_steps, condition_blob_or_net)
    else:
        stop_blob = core.BlobReference(str(condition_blob_or_net))
    return core.scoped_execution_step(_get_next_step_name("Until", name), nets_or_steps,
                                      should_stop_blob=stop_blob)


def DoWhile(name, condition_blob_or_net, nets_or_steps):
    """Run nets_or_steps, then again as long as the condition holds."""
    not_net, stop_blob = NotNet(condition_blob_or_net)
    if isinstance(condition_blob_or_net, core.Net):
        nets_or_steps = _AppendNets(nets_or_steps, condition_blob_or_net, not_net)
    else:
        nets_or_steps = _AppendNets(nets_or_steps, not_net)
    # a stop blob left true would end the loop after its first net
    return Do(name + "/DoWhile", BoolNet((stop_blob, False)),
              core.scoped_execution_step(_get_next_step_name("DoWhile-inner", name), nets_or_steps,
                                         should_stop_blob=stop_blob))


def DoUntil(name, condition_blob_or_net, nets_or_steps):
    """Run nets_or_steps, then again until the condition holds. A condition blob
    (not net) that is already true stops the loop after its first net or step."""
    if not isinstance(condition_blob_or_net, core.Net):
        return core.scoped_execution_step(_get_next_step_name("DoUntil", name), nets_or_steps,
                                          should_stop_blob=core.BlobReference(condition_blob_or_net))
    nets_or_steps = _AppendNets(nets_or_steps, condition_blob_or_net)
    stop_blob = GetConditionBlobFromNet(condition_blob_or_net)
    return Do(name + "/DoUntil", BoolNet((stop_blob, False)),
              core.scoped_execution_step(_get_next_step_name("DoUntil-inner", name), nets_or_steps,
                                         should_stop_blob=stop_blob))


def Switch(name, *conditions):
    """Run the body of every (condition, body) whose condition holds; every
    condition net runs once."""
    conditions = _MakeList(conditions)
    return core.scoped_execution_step(
        _get_next_step_name("Switch", name),
        [_RunOnceIf(name + "/Switch", cond, body) for cond, body in conditions])


def SwitchNot(name, *conditions):
    """Run the body of every (condition, body) whose condition does not hold."""
    conditions = _MakeList(conditions)
    return core.scoped_execution_step(
        _get_next_step_name("SwitchNot", name),
        [_RunOnceIfNot(name + "/SwitchNot", cond, body) for cond, body in conditions])


def _condition_blob(condition_blob_or_net):
    if isinstance(condition_blob_or_net, core.Net):
        return GetConditionBlobFromNet(condition_blob_or_net)
    return condition_blob_or_net


def If(name, condition_blob_or_net, true_nets_or_steps, false_nets_or_steps=None):
    """Run true_nets_or_steps if the condition holds, else false_nets_or_steps
    (a condition net runs once, first)."""
    if not false_nets_or_steps:
        return _RunOnceIf(name + "/If", condition_blob_or_net, true_nets_or_steps)
    return Do(name + "/If",
              _RunOnceIf(name + "/If-true", condition_blob_or_net, true_nets_or_steps),
              _RunOnceIfNot(name + "/If-false", _condition_blob(condition_blob_or_net), false_nets_or_steps))


def IfNot(name, condition_blob_or_net, true_nets_or_steps, false_nets_or_steps=None):
    """Run true_nets_or_steps if the condition does not hold, else false_nets_or_steps."""
    if not false_nets_or_steps:
        return _RunOnceIfNot(name + "/IfNot", condition_blob_or_net, true_nets_or_steps)
    return Do(name + "/IfNot",
              _RunOnceIfNot(name + "/IfNot-true", condition_blob_or_net, true_nets_or_steps),
              _RunOnceIf(name + "/IfNot-false", _condition_blob(condition_blob_or_net), false_nets_or_steps))
