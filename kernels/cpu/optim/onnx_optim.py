"""One optimizer step per tensor, as ONNX's training ops define them."""
import numpy as np


def adagrad(r, t, x, g, h, decay, eps, norm):
    rate = r / (1 + t * decay)
    g_reg = norm * x + g
    h_new = h + g_reg * g_reg
    x_new = x - rate * g_reg / (np.sqrt(h_new) + eps)
    return x_new.astype(x.dtype), h_new.astype(h.dtype)


def momentum(r, t, x, g, v, alpha, beta, norm, nesterov):
    g_reg = norm * x + g
    beta_t = beta if t > 0 else 1.0          # the first step takes the whole gradient
    v_new = alpha * v + beta_t * g_reg
    step = g_reg + alpha * v_new if nesterov else v_new
    return (x - r * step).astype(x.dtype), v_new.astype(v.dtype)


def adam(r, t, x, g, v, h, alpha, beta, eps, norm, norm_post):
    g_reg = norm * x + g
    v_new = alpha * v + (1 - alpha) * g_reg
    h_new = beta * h + (1 - beta) * g_reg * g_reg
    rate = r * np.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
    x_new = (x - rate * v_new / (np.sqrt(h_new) + eps)) * (1 - norm_post)
    return x_new.astype(x.dtype), v_new.astype(v.dtype), h_new.astype(h.dtype)
