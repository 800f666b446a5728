"""Dense optimizer updates (Caffe2's WeightedSum and its gradient, MomentumSGD(Update),
Adagrad, Adam) as NumPy expressions in float32, in Caffe2's order of operations. Each returns new
arrays: a dense update reads and writes every element anyway, so writing into a fresh
array costs what writing in place would, and the inputs stay untouched (a failing net
needs no undo for them).

Hyper-parameters are np.float32 scalars (NumPy keeps float32 arithmetic with them).
"""
import numpy as np

F32 = np.float32


def weighted_sum(arrays, weights):
    """sum_i weights[i] * arrays[i]; the arrays have equal sizes, the result the
    first one's shape and dtype (float16 tables are summed in float32)."""
    x0 = arrays[0]
    out = np.multiply(x0, weights[0], dtype=np.float32)
    for x, w in zip(arrays[1:], weights[1:]):
        out += w * x.reshape(x0.shape).astype(np.float32, copy=False)
    return out if x0.dtype == np.float32 else out.astype(x0.dtype)


def weighted_sum_grad(dy, xs, weights, grad_on_w):
    """(dX_i = weights[i] * dy in dy's dtype, and with grad_on_w dw_i = sum(dy * X_i)
    as float32 [1] arrays, summed in float64)."""
    dxs = [np.multiply(dy, w, dtype=np.float32).astype(dy.dtype, copy=False) for w in weights]
    dws = []
    if grad_on_w:
        flat = dy.reshape(-1).astype(np.float64)
        dws = [np.array([flat @ x.reshape(-1).astype(np.float64)], F32) for x in xs]
    return dxs, dws


def momentum_sgd(grad, moment, lr, momentum, nesterov):
    """(step, new moment): step = lr * g + momentum * m (= new moment), or with
    nesterov m' = momentum * m + lr * g and step = (1 + momentum) * m' - momentum * m."""
    if not nesterov:
        step = lr * grad + momentum * moment
        return step, step.copy()
    new = momentum * moment + lr * grad
    step = (F32(1) + momentum) * new - momentum * moment
    return step, new


def adagrad(param, moment, grad, lr, epsilon, decay, weight_decay):
    """(param', moment', effective lr, update): g' = g + weight_decay * w;
    h' = decay * h + g'^2; effective lr = lr / (sqrt(h') + epsilon); w' = w + effective lr * g'."""
    g = grad + weight_decay * param if weight_decay else grad
    h = decay * moment + g * g
    effective = lr / (np.sqrt(h) + epsilon)
    update = effective * g
    return param + update, h, effective, update


def adam_correction(beta1, beta2, iteration):
    """Caffe2's bias correction at t = iteration + 1: sqrt(1 - beta2^t) / (1 - beta1^t),
    computed in double from the float32 betas, used as float32."""
    t = int(iteration) + 1
    b1, b2 = float(F32(beta1)), float(F32(beta2))
    return F32(np.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t))


def adam(param, m1, m2, grad, lr, correction, beta1, beta2, epsilon, want_grad):
    """(param', m1', m2', effective grad or None): m1' = beta1 m1 + (1 - beta1) g,
    m2' = beta2 m2 + (1 - beta2) g^2; with want_grad the effective gradient
    correction * m1' / (sqrt(m2') + epsilon) is output and w' = w + lr * it, else
    w' = w + lr * correction * m1' / (sqrt(m2') + epsilon)."""
    one = F32(1)
    m = m1 * beta1 + grad * (one - beta1)
    v = m2 * beta2 + grad * grad * (one - beta2)
    root = np.sqrt(v) + epsilon
    if want_grad:
        step = correction * m / root
        return param + lr * step, m, v, step
    return param + lr * correction * m / root, m, v, None
