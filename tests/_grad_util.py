"""Helpers for the gradient tests: run an op's registered gradient ops with given
output gradients, finite-difference checks through GradientChecker, and the same
gradients from torch.autograd (when torch is installed)."""
import numpy as np

from caffe2py import workspace
from caffe2py.gradient_checker import GradientChecker
from caffe2py.gradients import GradientSlice, get_gradient_for_op

try:
    import torch
except ImportError:          # the torch comparisons skip
    torch = None


def finite_difference_check(op, inputs, to_check, outputs_with_grads=(0,), stepsize=1e-2, threshold=1e-2):
    checker = GradientChecker(stepsize=stepsize, threshold=threshold)
    for i in to_check:
        ok, grad, estimate = checker.CheckSimple(op, [np.array(v, copy=True) for v in inputs], i,
                                                 list(outputs_with_grads))
        assert ok, "%s: gradient of input %d differs from finite differences:\n%s\n%s" % (
            op.type, i, grad, estimate)


def dense(grad, shape):
    """A gradient blob value, or a GradientSlice's values added at its indices."""
    if isinstance(grad, GradientSlice):
        indices = np.asarray(workspace.FetchBlob(grad.indices)).astype(np.int64).reshape(-1)
        values = np.asarray(workspace.FetchBlob(grad.values))
        out = np.zeros(shape, np.float64)
        np.add.at(out, indices, values.reshape((indices.size,) + tuple(shape[1:])))
        return out
    return np.asarray(workspace.FetchBlob(grad))


def run_gradient(op, inputs, output_grads):
    """Run op, feed output_grads {output index: array} as '<output>_grad', run the
    registered gradient ops; returns ({input index: gradient value}, g_input)."""
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    g_output = [None] * len(op.output)
    for i, g in output_grads.items():
        g_output[i] = op.output[i] + "_grad"
        workspace.FeedBlob(g_output[i], g)
    grad_ops, g_input = get_gradient_for_op(op, g_output)
    workspace.RunOperatorsOnce(grad_ops)
    grads = {i: dense(g, np.shape(inputs[i])) for i, g in enumerate(g_input) if g is not None}
    return grads, g_input


def torch_gradients(fn, inputs, wrt, upstream):
    """torch.autograd gradients of fn(*tensors) (a list of outputs) against upstream
    gradients, for the inputs in wrt; float64 so torch is the precise side."""
    tensors = [torch.tensor(np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" else np.asarray(v),
                            requires_grad=i in wrt) for i, v in enumerate(inputs)]
    outs = fn(*tensors)
    grads = torch.autograd.grad(outs, [tensors[i] for i in wrt],
                                [torch.tensor(np.asarray(u, np.float64)) for u in upstream], allow_unused=True)
    return {i: (np.zeros(np.shape(inputs[i])) if g is None else g.detach().numpy()) for i, g in zip(wrt, grads)}


def outputs_of(op, inputs):
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(o) for o in op.output]


def compare_with_torch(op, inputs, wrt, torch_fn, outputs=(0,), rtol=1e-4, atol=1e-5, rng=None):
    """Our gradients against torch's for random upstream gradients of `outputs`."""
    rng = rng or np.random.default_rng(0)
    values = outputs_of(op, inputs)
    upstream = {i: rng.standard_normal(np.shape(values[i])).astype(np.float32) for i in outputs}
    ours, _ = run_gradient(op, inputs, upstream)
    theirs = torch_gradients(torch_fn, inputs, list(wrt), [upstream[i] for i in outputs])
    for i in wrt:
        np.testing.assert_allclose(ours[i], theirs[i], rtol=rtol, atol=atol,
                                   err_msg="%s: gradient of input %d differs from torch" % (op.type, i))
