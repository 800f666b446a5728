"""YellowFin (Zhang & Mitliagkas 2017), Caffe2's YellowFin op: a momentum SGD step
with the current (moving-average) learning rate and momentum, then the moving
averages of the gradient statistics that tune them for the next step.

All state lives in the op's inputs/outputs (Caffe2 runs it in place): param, moment,
lr_avg [1], mu_avg [1], curv_win [width] (log squared gradient norms, a ring),
g_avg, g2_avg (like param), scalars_memory [5] = moving averages of (|g|, |g|^2,
min and max of the curvature window, distance to the optimum). float32."""
import math

import numpy as np

F32 = np.float32


def _moving(beta, avg, value, debias):
    new = F32(beta) * avg + F32(1.0 - beta) * value
    return F32(new) if np.ndim(new) == 0 else new.astype(F32), debias * new


def _tune(distance_deb, norm2_min_deb, norm2_max_deb, variance):
    """(mu, lr) of the YellowFin single-step problem (a cubic solved in closed form)."""
    curv_ratio = math.sqrt(norm2_max_deb / norm2_min_deb)
    mu_limit = (curv_ratio - 1.0) / (curv_ratio + 1.0)
    pre_p = distance_deb * norm2_min_deb
    p = pre_p * pre_p / (2.0 * variance)
    w3 = (-math.sqrt(p * p + 4.0 / 27.0 * p * p * p) - p) / 2.0
    w = math.copysign(abs(w3) ** (1.0 / 3.0), w3) if w3 != 0 else 0.0
    y = w - p / 3.0 / w if w != 0 else float("nan")
    root = y + 1.0
    mu = max(root * root, mu_limit * mu_limit)
    lr = (1.0 - math.sqrt(mu)) ** 2 / norm2_min_deb
    return F32(mu), F32(lr)


def yellowfin(param, moment, lr_avg, mu_avg, curv_win, g_avg, g2_avg, memory, grad, it,
              beta, width, epsilon, nesterov, zero_debias):
    """The 8 new state tensors (shaped like the inputs)."""
    shape = param.shape
    p, m, g = param.reshape(-1), moment.reshape(-1), grad.reshape(-1)
    lr, mu = F32(lr_avg.reshape(-1)[0]), F32(mu_avg.reshape(-1)[0])
    eps = F32(epsilon)
    debias = F32(1.0 / (1.0 - F32(beta) ** it)) if zero_debias else F32(1.0)
    # momentum SGD with the current averages
    new_m = (mu * m + lr * g).astype(F32)
    if nesterov:
        new_p = (p - (F32(1) + mu) * new_m + mu * m).astype(F32)
    else:
        new_p = (p - new_m).astype(F32)
    # moving averages of the gradient statistics
    mem = memory.reshape(-1).astype(F32)
    new_mem = mem.copy()
    new_g_avg, g_deb = _moving(beta, g_avg.reshape(-1), g, debias)
    new_g2_avg, _ = _moving(beta, g2_avg.reshape(-1), g * g, debias)
    g_norm2 = max(eps, F32(np.dot(g.astype(F32), g.astype(F32))))
    new_mem[1], g_norm2_deb = _moving(beta, mem[1], g_norm2, debias)
    g_norm = F32(np.sqrt(g_norm2))
    new_mem[0], g_norm_deb = _moving(beta, mem[0], g_norm, debias)
    new_win = curv_win.reshape(-1).astype(F32).copy()
    new_win[(it - 1) % width] = np.log(g_norm2)
    valid = new_win[:min(width, it)]
    new_mem[2], norm2_min_deb = _moving(beta, mem[2], valid.min(), debias)
    new_mem[3], norm2_max_deb = _moving(beta, mem[3], valid.max(), debias)
    norm2_min_deb = max(eps, F32(np.exp(norm2_min_deb)))
    norm2_max_deb = max(eps, F32(np.exp(norm2_max_deb)))
    variance = max(eps, F32(g_norm2_deb - np.dot(g_deb, g_deb)))
    distance = new_mem[0] / new_mem[1]
    new_mem[4], distance_deb = _moving(beta, mem[4], distance, debias)
    new_lr, new_mu = lr_avg.astype(F32).copy(), mu_avg.astype(F32).copy()
    if it > 1:
        mu_t, lr_t = _tune(float(distance_deb), float(norm2_min_deb), float(norm2_max_deb), float(variance))
        new_mu.reshape(-1)[0] = _moving(beta, mu, mu_t, debias)[0]
        new_lr.reshape(-1)[0] = _moving(beta, lr, lr_t, debias)[0]
    return (new_p.reshape(shape), new_m.reshape(moment.shape), new_lr, new_mu, new_win.reshape(curv_win.shape),
            new_g_avg.reshape(g_avg.shape), new_g2_avg.reshape(g2_avg.shape), new_mem.reshape(memory.shape))
