"""ONNX control flow: If, Loop, Scan. Their bodies arrive as nested NetDefs
(see caffe2py.onnx.convert); outer-scope values the bodies read arrive as
extra trailing inputs named in the `_onnx_captured` argument. Each body is
compiled once at plan time and run on a fresh dict of blobs per iteration."""
import numpy as np

from ..onnx_base import onnx_op

CAPTURED_ARG = "_onnx_captured"


class Body:
    """A compiled subgraph: run(values by name) -> tuple of its outputs."""

    def __init__(self, ctx, net):
        from caffe2py.executor import compile_net
        self.net = net
        self.inputs = list(net.external_input)
        self.outputs = list(net.external_output)
        self.plan = compile_net(net, known_blobs=self.inputs) if len(net.op) else None
        self.ctx = ctx

    def run(self, values):
        blobs = dict(values)
        if self.plan is not None:
            self.plan.run(blobs)
        try:
            return tuple(blobs[name] for name in self.outputs)
        except KeyError as exc:
            raise self.ctx.error("subgraph '%s' did not produce output '%s'" % (self.net.name, exc.args[0])) from None


def _split_captured(ctx, args):
    names = ctx.strings(CAPTURED_ARG, []) if ctx.has(CAPTURED_ARG) else []
    if not names:
        return list(args), {}
    return list(args[:-len(names)]), dict(zip(names, args[-len(names):]))


def _stack(ctx, parts, name):
    if not parts:
        raise ctx.error("scan output '%s' has no iterations to stack" % name)
    return np.stack(parts)


@onnx_op("If", (1, None))
def if_op(ctx):
    then_body, else_body = Body(ctx, ctx.net("then_branch")), Body(ctx, ctx.net("else_branch"))

    def run(*args):
        own, outer = _split_captured(ctx, args)
        cond = own[0]
        if np.size(cond) != 1:
            raise ctx.input_error(0, "condition must hold one value, got shape %s" % list(np.shape(cond)))
        out = (then_body if bool(np.asarray(cond).reshape(-1)[0]) else else_body).run(outer)
        return out if len(out) != 1 else out[0]
    return run


@onnx_op("Loop", (1, None))
def loop(ctx):
    body = Body(ctx, ctx.net("body"))
    n_out = ctx.n_outputs

    def run(*args):
        own, outer = _split_captured(ctx, args)
        own += [None] * (2 - len(own))
        max_trips, cond, state = own[0], own[1], list(own[2:])
        trips = None if max_trips is None else int(np.asarray(max_trips).reshape(-1)[0])
        keep_going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
        n_state = len(state)
        scans = [[] for _ in range(n_out - n_state)]
        i = 0
        while keep_going and (trips is None or i < trips):
            values = dict(outer)
            values[body.inputs[0]] = np.array(i, dtype=np.int64)
            values[body.inputs[1]] = np.array(keep_going)
            values.update(zip(body.inputs[2:], state))
            out = body.run(values)
            keep_going = bool(np.asarray(out[0]).reshape(-1)[0])
            state = list(out[1:1 + n_state])
            for k, value in enumerate(out[1 + n_state:]):
                scans[k].append(value)
            i += 1
        result = state + [np.stack(s) if s else np.zeros((0,), np.float32) for s in scans]
        return tuple(result) if len(result) != 1 else result[0]
    return run


@onnx_op("Scan", (9, None))
def scan(ctx):
    body = Body(ctx, ctx.net("body"))
    n_scan = ctx.int("num_scan_inputs")

    def run(*args):
        own, outer = _split_captured(ctx, args)
        n_state = len(own) - n_scan
        state, xs = list(own[:n_state]), own[n_state:]
        in_axes = ctx.ints("scan_input_axes", None) or [0] * n_scan
        in_dirs = ctx.ints("scan_input_directions", None) or [0] * n_scan
        n_scan_out = ctx.n_outputs - n_state
        out_axes = ctx.ints("scan_output_axes", None) or [0] * n_scan_out
        out_dirs = ctx.ints("scan_output_directions", None) or [0] * n_scan_out
        xs = [np.moveaxis(x, a % x.ndim, 0) for x, a in zip(xs, in_axes)]
        xs = [x[::-1] if d else x for x, d in zip(xs, in_dirs)]
        steps = {x.shape[0] for x in xs}
        if len(steps) != 1:
            raise ctx.error("scan inputs have different sequence lengths %s" % sorted(steps))
        scans = [[] for _ in range(n_scan_out)]
        for t in range(steps.pop()):
            values = dict(outer)
            values.update(zip(body.inputs, state + [x[t] for x in xs]))
            out = body.run(values)
            state = list(out[:n_state])
            for k, value in enumerate(out[n_state:]):
                scans[k].append(value)
        outs = []
        for k, parts in enumerate(scans):
            stacked = _stack(ctx, parts[::-1] if out_dirs[k] else parts, ctx.outputs[n_state + k])
            outs.append(np.ascontiguousarray(np.moveaxis(stacked, 0, out_axes[k] % stacked.ndim)))
        result = state + outs
        return tuple(result) if len(result) != 1 else result[0]
    return run


@onnx_op("Scan", (8, 8))
def scan_v8(ctx):
    """Opset 8: a leading batch axis on states and scan inputs (scanned along
    axis 1), optional per-batch sequence_lens as the first input."""
    body = Body(ctx, ctx.net("body"))
    n_scan = ctx.int("num_scan_inputs")

    def run(*args):
        own, outer = _split_captured(ctx, args)
        lengths, rest = own[0], own[1:]
        n_state = len(rest) - n_scan
        states, xs = rest[:n_state], rest[n_state:]
        dirs = ctx.ints("directions", None) or [0] * n_scan
        batch, steps = xs[0].shape[0], xs[0].shape[1]
        finals = [[] for _ in range(n_state)]
        scans = [[] for _ in range(ctx.n_outputs - n_state)]
        for b in range(batch):
            n = steps if lengths is None else int(lengths[b])
            state = [s[b] for s in states]
            seqs = [x[b, :n][::-1] if d else x[b, :n] for x, d in zip(xs, dirs)]
            outs = [[] for _ in scans]
            for t in range(n):
                values = dict(outer)
                values.update(zip(body.inputs, state + [s[t] for s in seqs]))
                out = body.run(values)
                state = list(out[:n_state])
                for k, value in enumerate(out[n_state:]):
                    outs[k].append(value)
            for k, value in enumerate(state):
                finals[k].append(value)
            for k, parts in enumerate(outs):
                stacked = np.stack(parts)
                if n < steps:   # positions past this entry's length stay zero
                    stacked = np.concatenate([stacked, np.zeros((steps - n,) + stacked.shape[1:], stacked.dtype)])
                scans[k].append(stacked)
        result = [np.stack(f) for f in finals] + [np.stack(s) for s in scans]
        return tuple(result) if len(result) != 1 else result[0]
    return run
