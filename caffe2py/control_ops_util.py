"""Caffe2's caffe2.python.control_ops_util: add If / While ops whose branches run in
their own workspaces (through Do ops), with outer and local blobs told apart by
a lexical scope.

A blob of a branch net is *outer* when its name is in the lexical scope (the
names visible to the If/While op) or when the branch reads it before writing
it; outer blobs are bound into the branch's workspace, everything else stays
local to it. Names are sorted so the generated nets do not depend on set order.
"""
from . import core


def get_external_blob_names(net, lexical_scope):
    """(inputs, outputs): the blobs `net` reads before writing them (each must be in
    lexical_scope) and the lexical-scope blobs it writes."""
    proto = net.Proto()
    ssa, _ = core.get_ssa(proto)
    input_names = core.get_undefined_blobs(ssa)
    for name in input_names:
        assert str(name) in lexical_scope, "Input blob " + name + " is undefined"
    output_names = {out for op in proto.op for out in op.output if out in lexical_scope}
    return input_names, output_names


def _refs(names):
    return [core.BlobReference(name) for name in sorted(names)]


def _do_net(name, body, input_names, output_names, workspace_blob, **do_args):
    """A net holding one Do op that runs `body` with the given outer blobs bound."""
    inputs, outputs = _refs(input_names), _refs(output_names)
    ordered = [str(b) for b in inputs + outputs]
    outer = sorted(set(input_names) | set(output_names))
    do_net = core.Net(name)
    do_net.Do(inputs + [workspace_blob], outputs + [workspace_blob], net=body.Proto(),
              inner_blobs=outer, outer_blobs_idx=[ordered.index(b) for b in outer], **do_args)
    do_net.AddExternalOutput(*(outputs + [workspace_blob]))
    return do_net, inputs, outputs


def add_if_op(if_net, cond_blob, lexical_scope, then_net, else_net=None):
    """Append CreateScope ops and an If op running then_net / else_net (each in a Do
    with its own workspace) to if_net."""
    then_in, then_out = get_external_blob_names(then_net, lexical_scope)
    else_in, else_out = (get_external_blob_names(else_net, lexical_scope)
                         if else_net else (set(), set()))
    if_inputs = [cond_blob] + _refs(then_in | else_in)
    if_outputs = _refs(then_out | else_out)

    then_ws = if_net.NextScopedBlob(if_net.Name() + "/workspace_if_then")
    do_then, _, _ = _do_net("do_then_net", then_net, then_in, then_out, then_ws)
    if_inputs.append(then_ws)
    if_outputs.append(then_ws)
    if_args = {"then_net": do_then.Proto()}

    else_ws = None
    if else_net:
        else_ws = if_net.NextScopedBlob(if_net.Name() + "/workspace_if_else")
        do_else, _, _ = _do_net("do_else_net", else_net, else_in, else_out, else_ws)
        if_inputs.append(else_ws)
        if_outputs.append(else_ws)
        if_args["else_net"] = do_else.Proto()

    if_net.CreateScope([], [then_ws])
    if else_ws is not None:
        if_net.CreateScope([], [else_ws])
    if_net.If(if_inputs, if_outputs, **if_args)
    if_net.AddExternalOutput(*if_outputs)


def add_while_op(while_net, cond_blob, lexical_scope, loop_body_net, condition_body_net=None):
    """Append CreateScope ops and a While op to while_net. The body runs in its own
    workspace (keeping copies of the outer blobs it saw, as Caffe2 does for its
    gradient); condition_body_net, when given, runs in another one before every
    check and must write cond_blob."""
    body_in, body_out = get_external_blob_names(loop_body_net, lexical_scope)
    body_in = body_in | body_out     # the body may not run at all: its outputs are inputs too
    body_ws = while_net.NextScopedBlob(while_net.Name() + "/workspace_loop_body")
    do_body, loop_inputs, loop_outputs = _do_net(
        "do_loop_body_net", loop_body_net, body_in, body_out, body_ws, copy_external_blobs=True)
    while_inputs = [cond_blob] + loop_inputs + [body_ws]
    while_outputs = loop_outputs + [body_ws]
    while_args = {"loop_net": do_body.Proto()}

    cond_ws = None
    if condition_body_net:
        cond_in, cond_out = get_external_blob_names(condition_body_net, lexical_scope)
        assert any(str(cond_blob) in op.output for op in condition_body_net.Proto().op), \
            "Condition net does not write into condition blob"
        cond_out = cond_out | {str(cond_blob)}
        cond_ws = while_net.NextScopedBlob(while_net.Name() + "/workspace_loop_cond")
        do_cond, cond_inputs, cond_outputs = _do_net(
            "do_loop_condition_net", condition_body_net, cond_in, cond_out, cond_ws)
        while_args["cond_net"] = do_cond.Proto()
        while_inputs += [b for b in cond_inputs if str(b) not in body_in] + [cond_ws]
        while_outputs += [b for b in cond_outputs if str(b) not in body_out] + [cond_ws]
        if str(cond_blob) not in lexical_scope:
            while_net.ConstantFill([], cond_blob, dtype=core.DataType.BOOL, value=False)

    while_net.CreateScope([], [body_ws])
    if cond_ws is not None:
        while_net.CreateScope([], [cond_ws])
    while_net.While(while_inputs, while_outputs, **while_args)
    while_net.AddExternalOutput(*while_outputs)
