"""Caffe2's control-flow ops: If, While, Do, CreateScope, HasScope, ONNXWhile and
Conditional.

Subnets arrive as NetDef arguments and are compiled once, when the op's net is
compiled (so a bad subnet fails CreateNet, as in Caffe2). The ops that run
subnets ask for the workspace view (OpContext.use_workspace): If and While run
their nets against the parent's blobs; Do runs its net in a child workspace
that sees only the blobs bound through inner_blobs/outer_blobs_idx and keeps
its own blobs between runs in the WorkspaceStack of a CreateScope blob;
ONNXWhile runs its body in a private child workspace (or in the parent's with
disable_scopes). See docs/control_flow.md.
"""
import numpy as np

from caffe2py.blob_scopes import ForwardedBlobs, WorkspaceStack
from caffe2py.kernels.cpu.tensor import select as S
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.proto import caffe2_pb2

BOOL = caffe2_pb2.TensorProto.BOOL


def compile_subnet(ctx, arg_name, required=False):
    """The Plan of the NetDef in argument arg_name (None when absent and optional)."""
    if not ctx.has(arg_name) or ctx.net(arg_name) is None:
        if required:
            raise ctx.error("argument '%s' (a NetDef) must be given" % arg_name)
        return None
    return build_subnet(ctx, ctx.net(arg_name), arg_name)


def build_subnet(ctx, net_def, what):
    """Compile a subnet of the op `ctx` describes; errors name the op and `what`."""
    from caffe2py.executor import compile_net
    # Which blobs exist is known only when the subnet runs: the existence check is
    # left to the run (a missing blob is then named with the op reading it).
    reads = {b for op in net_def.op for b in op.input}
    try:
        return compile_net(net_def, known_blobs=reads)
    except Exception as exc:  # noqa: BLE001 - say which subnet of which op
        raise ctx.error("cannot build subnet '%s' (%s): %s" % (what, net_def.name or "unnamed", exc)) from exc


def _scalar_condition(ctx, value, index, what, kinds="b"):
    if not isinstance(value, np.ndarray):
        raise ctx.input_error(index, "%s must be a tensor, got %s" % (what, type(value).__name__))
    if value.size != 1:
        raise ctx.input_error(index, "%s must hold a single value, got shape %s" % (what, list(value.shape)))
    if value.dtype.kind not in kinds:
        raise ctx.input_error(index, "%s must be %s, got %s"
                              % (what, "bool" if kinds == "b" else "bool or integer", value.dtype))
    return bool(value.reshape(-1)[0])


def _outputs_from(blobs, names):
    values = tuple(blobs.get(name) for name in names)
    return values[0] if len(values) == 1 else (values or None)


# --------------------------------------------------------------------------- If / While

register_schema(OpSchema(
    "If", num_inputs=(1, None), num_outputs=(0, None), allow_inplace=lambda i, o: True,
    args=(Arg("then_net", "net", required=True, doc="net run when the condition is true"),
          Arg("else_net", "net", doc="net run when the condition is false")),
    inputs=("condition",),
    doc="Runs then_net if the scalar bool condition (input 0) is true, else else_net, "
        "against the parent's blobs. The other inputs and the outputs only declare which "
        "outer blobs the subnets read and write."))


@register_kernel("If")
def if_op(ctx):
    ctx.use_workspace()
    then_plan = compile_subnet(ctx, "then_net", required=True)
    else_plan = compile_subnet(ctx, "else_net")
    outputs = ctx.outputs

    def run(blobs, condition, *_declared):
        if _scalar_condition(ctx, condition, 0, "the If condition"):
            then_plan.run(blobs)
        elif else_plan is not None:
            else_plan.run(blobs)
        return _outputs_from(blobs, outputs)
    return run


register_schema(OpSchema(
    "While", num_inputs=(1, None), num_outputs=(0, None), allow_inplace=lambda i, o: True,
    args=(Arg("loop_net", "net", required=True, doc="net run while the condition holds"),
          Arg("cond_net", "net", doc="net run before every check that recomputes the condition")),
    inputs=("condition",),
    doc="Runs cond_net (when given), then stops if the scalar bool blob of input 0 is false, "
        "else runs loop_net and repeats; both nets see the parent's blobs."))


@register_kernel("While")
def while_op(ctx):
    ctx.use_workspace()
    loop_plan = compile_subnet(ctx, "loop_net", required=True)
    cond_plan = compile_subnet(ctx, "cond_net")
    cond_name, outputs = ctx.inputs[0], ctx.outputs

    def run(blobs, condition, *_declared):
        _scalar_condition(ctx, condition, 0, "the While condition")
        while True:
            if cond_plan is not None:
                cond_plan.run(blobs)
            if not _scalar_condition(ctx, blobs.get(cond_name), 0, "the While condition"):
                return _outputs_from(blobs, outputs)
            loop_plan.run(blobs)
    return run


# --------------------------------------------------------------------------- scopes and Do

register_schema(OpSchema(
    "CreateScope", num_inputs=0, num_outputs=1,
    doc="Outputs a workspace stack for Do ops (kept, and emptied, when the blob exists)."))


@register_kernel("CreateScope")
def create_scope(ctx):
    ctx.use_workspace()
    name = ctx.outputs[0]

    def run(blobs):
        stack = blobs.get(name)
        if not isinstance(stack, WorkspaceStack):
            stack = WorkspaceStack()
        stack.clear()
        return stack
    return run


register_schema(OpSchema(
    "HasScope", num_inputs=1, num_outputs=1,
    inference=lambda ctx, ins: [TensorType((1,), BOOL)],
    doc="Outputs a bool [1]: whether the workspace stack of input 0 holds a workspace."))


def _stack(ctx, value, index):
    if not isinstance(value, WorkspaceStack):
        raise ctx.input_error(index, "expected a workspace stack made by CreateScope, got %s"
                              % type(value).__name__)
    return value


@register_kernel("HasScope")
def has_scope(ctx):
    def run(stack):
        return np.array([not _stack(ctx, stack, 0).empty()])
    return run


register_schema(OpSchema(
    "Do", num_inputs=(1, None), num_outputs=(1, None), allow_inplace=lambda i, o: True,
    args=(Arg("net", "net", required=True, doc="subnet run in a child workspace"),
          Arg("inner_blobs", "strings", [], doc="inner names bound to outer blobs"),
          Arg("outer_blobs_idx", "ints", [], doc="for each inner name, the index of its outer blob "
                                                 "among the op's inputs then outputs (workspace blobs skipped)"),
          Arg("saved_fwd_blobs", "strings", [], doc="forward blobs a gradient Do needs"),
          Arg("reuse_workspace", "bool", False, doc="re-enter the top workspace of the stack"),
          Arg("copy_external_blobs", "bool", False, doc="after the run, keep local copies of the bound blobs")),
    doc="Runs `net` in a child workspace of the stack in the last input (also the last "
        "output): the child sees only the bound blobs (inner_blobs -> outer_blobs_idx) and "
        "keeps its own blobs between runs."))


def _do_bindings(ctx):
    ins, outs = ctx.inputs, ctx.outputs
    if ins[-1] != outs[-1]:
        raise ctx.error("the last input and the last output must be the same workspace blob, "
                        "got '%s' and '%s'" % (ins[-1], outs[-1]))
    in_names, out_names = ins[:-1], outs[:-1]
    if len(set(in_names)) != len(in_names):
        raise ctx.error("duplicate input blobs")
    if len(set(out_names)) != len(out_names):
        raise ctx.error("duplicate output blobs")
    outer_names = in_names + out_names
    inner, idx = ctx.strings("inner_blobs", []), ctx.ints("outer_blobs_idx", [])
    if len(inner) != len(idx):
        raise ctx.error("invalid blob bindings: %d inner_blobs but %d outer_blobs_idx" % (len(inner), len(idx)))
    bindings, used = {}, set()
    for name, k in zip(inner, idx):
        if name in bindings:
            raise ctx.error("invalid blob bindings: inner blob '%s' is bound twice" % name)
        if not 0 <= k < len(outer_names):
            raise ctx.error("invalid blob bindings: outer blob index %d (inner name '%s') is out of "
                            "bounds [0, %d)" % (k, name, len(outer_names)))
        if outer_names[k] in used:
            raise ctx.error("outer blob '%s' is bound twice" % outer_names[k])
        used.add(outer_names[k])
        bindings[name] = outer_names[k]
    if used != set(outer_names):
        missing = sorted(set(outer_names) - used)
        raise ctx.error("not all outer blobs are bound to inner blobs: %s" % ", ".join(missing))
    return bindings


@register_kernel("Do")
def do_op(ctx):
    ctx.use_workspace()
    plan = compile_subnet(ctx, "net", required=True)
    bindings = _do_bindings(ctx)
    gradient = bool(ctx.op_def.is_gradient_op)
    reuse = ctx.bool("reuse_workspace")
    copy_external = ctx.bool("copy_external_blobs")
    if gradient and reuse:
        raise ctx.error("a gradient Do needs stacked workspaces; reuse_workspace must be 0")
    stack_index, outputs = ctx.n_inputs - 1, ctx.outputs

    def run(blobs, *ins):
        stack = _stack(ctx, ins[stack_index], stack_index)
        if gradient:
            child = stack.pop_gradient(blobs, bindings)
        elif reuse and not stack.empty():
            child = stack.reuse_last_forward(blobs, bindings)
        else:
            child = stack.push_forward(blobs, bindings)
        if child is None:
            raise ctx.error("no forward workspace to run the gradient in (empty stack '%s')"
                            % ctx.inputs[stack_index])
        plan.run(child)
        if copy_external and not gradient:
            child.copy_forwarded(list(bindings))
        return _outputs_from(blobs, outputs)
    return run


# --------------------------------------------------------------------------- ONNXWhile

register_schema(OpSchema(
    "ONNXWhile", num_inputs=(2, None), num_outputs=(0, None), allow_inplace=lambda i, o: True,
    args=(Arg("body", "net", required=True, doc="loop body: inputs (iteration, condition, deps...), "
                                                "outputs (condition, deps..., scan outputs...)"),
          Arg("has_trip_count", "int", 0, doc="input 0 bounds the number of iterations"),
          Arg("has_cond", "int", 0, doc="the loop stops when the condition is false"),
          Arg("save_scopes", "int", 0, doc="keep every iteration's workspace"),
          Arg("disable_scopes", "int", 0, doc="run the body in the parent's workspace"),
          Arg("num_loop_carried_deps", "int", -1, doc="number of loop-carried dependencies "
                                                       "(-1: all inputs after the first two)")),
    inputs=("max_trip_count", "first_iter_condition"),
    doc="ONNX Loop semantics: outputs the final loop-carried dependencies, then the scan outputs "
        "as Caffe2's ONNXWhile builds them: the first iteration's value, grown by one row of its "
        "first axis per further iteration (per-iteration outputs [1, ...] over T iterations give "
        "[T, ...]); an int32 [0] after no iteration. The body sees the iteration number (int64 "
        "scalar) and the condition ([1], the condition input's type)."))


def _caffe2_scan_output(ctx, name, steps):
    """Scan output `name` from its per-iteration values, as Caffe2's ONNXWhile lays it
    out: the first value copied as it is, then for each later iteration its first dim
    extended by one while the whole value is written at offset (iteration * value size).
    Caffe2 reads and writes only inside its buffer when the values are [1, ...], when
    there are two iterations, or when they hold nothing; other layouts overrun it (and
    0-d values cannot be extended), so they are refused."""
    if not steps:
        return np.zeros((0,), np.int32)
    first = steps[0]
    if len(steps) == 1:
        return first
    if first.ndim == 0:
        raise ctx.error("scan output '%s' is 0-d: Caffe2's ONNXWhile can only extend scan outputs of at "
                        "least 1 dim past the first iteration" % name)
    rows, rest = first.shape[0] + len(steps) - 1, first.shape[1:]
    row_size = int(np.prod(rest, dtype=np.int64))
    if row_size and (first.shape[0] == 0 or (first.shape[0] > 1 and len(steps) > 2)):
        raise ctx.error("scan output '%s' of per-iteration shape %s: Caffe2's ONNXWhile grows it by one "
                        "row per iteration, which %s; use per-iteration shape [1, ...]"
                        % (name, list(first.shape), "leaves rows unwritten" if first.shape[0] == 0
                           else "its writes overrun after two iterations"))
    for k, step in enumerate(steps[1:], start=1):
        if step.dtype.itemsize != first.dtype.itemsize:
            raise ctx.error("scan output '%s' changed element size across iterations: %s then %s (iteration %d)"
                            % (name, first.dtype, step.dtype, k))
    flat = np.concatenate([np.ascontiguousarray(s).reshape(-1).view(first.dtype) for s in steps])
    return flat[:rows * row_size].reshape((rows,) + rest)


@register_kernel("ONNXWhile")
def onnx_while(ctx):
    ctx.use_workspace()
    body_def = ctx.net("body")
    if body_def is None:
        raise ctx.error("argument 'body' (a NetDef) must be given")
    plan = compile_subnet(ctx, "body", required=True)
    has_trips, has_cond = bool(ctx.int("has_trip_count")), bool(ctx.int("has_cond"))
    save_scopes, disable_scopes = bool(ctx.int("save_scopes")), bool(ctx.int("disable_scopes"))
    if disable_scopes and save_scopes:
        raise ctx.error("cannot save scopes when disable_scopes=1")
    n_deps = ctx.int("num_loop_carried_deps")
    if n_deps == -1:
        n_deps = ctx.n_inputs - 2
    if n_deps < 0 or n_deps > ctx.n_inputs - 2:
        raise ctx.error("num_loop_carried_deps=%d but the op has %d dependency inputs"
                        % (n_deps, ctx.n_inputs - 2))
    body_in, body_out = list(body_def.external_input), list(body_def.external_output)
    if len(body_in) < 2 + n_deps:
        raise ctx.error("the body must declare %d external inputs (iteration, condition, %d deps), "
                        "it declares %d" % (2 + n_deps, n_deps, len(body_in)))
    n_scan = len(body_out) - n_deps - 1
    if n_scan < 0:
        raise ctx.error("the body must have 1 + N + K external outputs (condition, %d deps, scan "
                        "outputs), it has %d" % (n_deps, len(body_out)))
    if ctx.n_outputs != n_deps + n_scan:
        raise ctx.error("the op must have %d outputs (%d deps + %d scan outputs), it has %d"
                        % (n_deps + n_scan, n_deps, n_scan, ctx.n_outputs))
    stack = WorkspaceStack()     # op-private, as in Caffe2

    def run(blobs, max_trips, first_cond, *deps):
        trips = None
        if has_trips:
            if not isinstance(max_trips, np.ndarray) or max_trips.size != 1 or max_trips.dtype.kind not in "iu":
                raise ctx.input_error(0, "max_trip_count must be a single integer")
            trips = int(max_trips.reshape(-1)[0])
        cond_dtype = np.asarray(first_cond).dtype
        cond = _scalar_condition(ctx, first_cond, 1, "the loop condition", kinds="biu")
        stack.clear()
        scope = blobs if disable_scopes else stack.push_forward(blobs, {})
        state = [np.array(d, copy=True) for d in deps[:n_deps]]
        scans = [[] for _ in range(n_scan)]
        i = 0
        while (trips is None or i < trips) and (not has_cond or cond):
            scope[body_in[0]] = np.array(i, dtype=np.int64)
            scope[body_in[1]] = np.array([cond], dtype=cond_dtype)      # Caffe2 sizes it [1]
            for name, value in zip(body_in[2:2 + n_deps], state):
                scope[name] = value
            plan.run(scope)
            try:
                cond_value = scope[body_out[0]]
                state = [np.array(scope[name], copy=True) for name in body_out[1:1 + n_deps]]
                step_scans = [scope[name] for name in body_out[1 + n_deps:]]
            except KeyError as exc:
                raise ctx.error("the body did not produce its output '%s'" % exc.args[0]) from None
            cond = _scalar_condition(ctx, cond_value, 1, "the body's condition output", kinds="biu")
            for k, value in enumerate(step_scans):
                if scans[k] and np.shape(value) != np.shape(scans[k][0]):
                    raise ctx.error("scan output '%s' changed shape across iterations: %s then %s"
                                    % (body_out[1 + n_deps + k], list(np.shape(scans[k][0])),
                                       list(np.shape(value))))
                scans[k].append(np.array(value, copy=True))
            i += 1
            if save_scopes:
                scope = stack.push_forward(blobs, {})
        results = state + [_caffe2_scan_output(ctx, body_out[1 + n_deps + k], s) for k, s in enumerate(scans)]
        return results[0] if len(results) == 1 else (tuple(results) or None)
    return run


# --------------------------------------------------------------------------- Conditional

def _conditional_infer(ctx, ins):
    return [ins[1]]


register_schema(OpSchema(
    "Conditional", num_inputs=3, num_outputs=1, inference=_conditional_infer,
    inputs=("Condition", "DataT", "DataF"), outputs=("DataO",),
    doc="Row i of DataO is row i of DataT where Condition[i] is true, else of DataF. "
        "Condition is 1-D bool; DataT and DataF have the same shape and type."))


@register_kernel("Conditional")
def conditional(ctx):
    def run(cond, data_t, data_f):
        if cond.ndim != 1 or cond.dtype != np.bool_:
            raise ctx.input_error(0, "must be a 1-D bool tensor, got %s %s" % (cond.dtype, list(cond.shape)))
        if data_t.ndim < 1 or data_t.shape[0] != cond.shape[0]:
            raise ctx.input_error(1, "must have %d rows (one per condition), got shape %s"
                                  % (cond.shape[0], list(data_t.shape)))
        if data_f.shape != data_t.shape:
            raise ctx.input_error(2, "shape %s differs from DataT's %s" % (list(data_f.shape), list(data_t.shape)))
        if data_f.dtype != data_t.dtype:
            raise ctx.input_error(2, "type %s differs from DataT's %s" % (data_f.dtype, data_t.dtype))
        return S.select_rows(cond, data_t, data_f)
    return run


try:
    from caffe2py.gradients import no_gradient
except ImportError:          # a build without the gradient registry
    no_gradient = None

if no_gradient is not None:
    no_gradient("Conditional", "HasScope", "CreateScope")
