"""ONNX Gradient (domain ai.onnx.preview.training): d y / d xs through the
forward subgraph the converter attaches as the `_forward` NetDef argument
(see caffe2py.onnx.convert). The forward subgraph is compiled once and run on
the op's inputs; the derivative rules live in kernels/cpu/optim/onnx_grad.py."""
from caffe2py.kernels.cpu.optim import onnx_grad

from ..onnx_base import onnx_op

TRAINING_DOMAIN = "ai.onnx.preview.training"


@onnx_op("Gradient", (1, None), domain=TRAINING_DOMAIN)
def gradient(ctx):
    from caffe2py.executor import compile_net

    xs, y = ctx.strings("xs"), ctx.string("y")
    if len(xs) != ctx.n_outputs:
        raise ctx.error("xs names %d tensors (%s) but the node has %d outputs: one gradient per name"
                        % (len(xs), ", ".join(xs), ctx.n_outputs))
    forward = ctx.net("_forward")
    if forward is None:
        raise ctx.error("Gradient needs its forward subgraph; convert the model with caffe2py.onnx.convert")
    steps = [(op.type, list(op.input), op.output[0]) for op in forward.op]
    unsupported = sorted({t for t, _, _ in steps if t not in onnx_grad.RULES})
    if unsupported:
        raise ctx.error("Gradient through %s is not supported (supported: %s)"
                        % (", ".join(unsupported), ", ".join(sorted(onnx_grad.RULES))))
    plan = compile_net(forward, known_blobs=list(forward.external_input)) if forward.op else None
    names = list(forward.external_input)
    known = set(names) | {out for _, _, out in steps}
    unknown = [x for x in xs if x not in known]
    if unknown:
        raise ctx.error("xs names %s, which the forward subgraph to y '%s' neither takes nor computes (it has: %s)"
                        % (", ".join("'%s'" % x for x in unknown), y, ", ".join(sorted(known))))

    def run(*inputs):
        values = dict(zip(names, inputs))
        if plan is not None:
            plan.run(values)
        if y not in values:
            raise ctx.error("y '%s' is not computed from the Gradient's inputs" % y)
        result = onnx_grad.backprop(steps, values, y, xs)
        return tuple(result) if len(result) > 1 else result[0]
    return run
