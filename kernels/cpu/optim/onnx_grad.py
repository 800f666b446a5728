"""Reverse-mode derivative rules for ONNX's Gradient op (preview.training):
given an op's input values, output value and the output's gradient, the
gradient of each input. Broadcast inputs get their gradient summed back to
their own shape."""
import numpy as np


def unbroadcast(grad, shape):
    """Sum grad over the axes that broadcasting added or stretched."""
    shape = tuple(shape)
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, dim in enumerate(shape):
        if dim == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad.reshape(shape)


def _binary(rule):
    def grads(inputs, output, g):
        a, b = inputs
        ga, gb = rule(a, b, output, g)
        return [unbroadcast(ga, np.shape(a)), unbroadcast(gb, np.shape(b))]
    return grads


RULES = {
    "Add": _binary(lambda a, b, y, g: (g, g)),
    "Sub": _binary(lambda a, b, y, g: (g, -g)),
    "Mul": _binary(lambda a, b, y, g: (g * b, g * a)),
    "Div": _binary(lambda a, b, y, g: (g / b, -g * a / (b * b))),
    "Neg": lambda ins, y, g: [-g],
    "Identity": lambda ins, y, g: [g],
    "Relu": lambda ins, y, g: [g * (ins[0] > 0)],
    "Sigmoid": lambda ins, y, g: [g * y * (1 - y)],
    "Tanh": lambda ins, y, g: [g * (1 - y * y)],
    "Exp": lambda ins, y, g: [g * y],
    "Log": lambda ins, y, g: [g / ins[0]],
    "Sqrt": lambda ins, y, g: [g / (2 * y)],
    "MatMul": lambda ins, y, g: [unbroadcast(np.matmul(g, np.swapaxes(ins[1], -1, -2)), ins[0].shape),
                                 unbroadcast(np.matmul(np.swapaxes(ins[0], -1, -2), g), ins[1].shape)],
}


def backprop(steps, values, y, xs):
    """steps: [(op type, input names, output name)] in forward order; values: every
    blob's value. Returns d y / d x for each x (zeros where y does not depend on x)."""
    grads = {y: np.ones_like(values[y])}
    for op_type, inputs, output in reversed(steps):
        g = grads.get(output)
        if g is None:
            continue
        ins = [values[n] for n in inputs]
        for name, gi in zip(inputs, RULES[op_type](ins, values[output], g)):
            gi = np.asarray(gi, dtype=np.asarray(values[name]).dtype)
            grads[name] = grads[name] + gi if name in grads else gi
    return [grads.get(x, np.zeros_like(values[x])) for x in xs]
