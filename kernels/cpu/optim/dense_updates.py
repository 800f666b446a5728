"""Dense optimizer steps: RMSProp and LARS (Caffe2's rmsprop_op, lars_op), float32."""
import numpy as np

F32 = np.float32


def rmsprop(g, ms, mom, lr, decay, momentum, epsilon):
    """(grad_o, mean_squares_o, mom_o): ms' = ms + (1 - decay) (g^2 - ms); mom' =
    momentum * mom + lr * g / sqrt(epsilon + ms'); grad_o = mom'."""
    new_ms = (ms + F32(1.0 - decay) * (g * g - ms)).astype(F32)
    new_mom = (mom * F32(momentum) + F32(lr) * g / np.sqrt(F32(epsilon) + new_ms)).astype(F32)
    return new_mom.copy(), new_ms, new_mom


def lars_rescale(x, dx, wd, offset, trust=1.0):
    """float32 trust / (|dx| / |x| + wd + offset), or 1 when |x| is 0 (l2 norms): the
    whole of Caffe2's older Lars forms (2 inputs: wd = 0; 3 inputs)."""
    x_norm = F32(np.sqrt(np.square(x, dtype=F32).sum(dtype=F32)))
    if not x_norm > 0:
        return F32(1.0)
    dx_norm = F32(np.sqrt(np.square(dx, dtype=F32).sum(dtype=F32)))
    return F32(trust) / (dx_norm / x_norm + F32(wd) + F32(offset))


def lars(x, dx, wd, trust, lr_max, offset, lr_min):
    """[1] float32: clip(trust / (|dx| / |x| + wd + offset), lr_min, lr_max), or
    clip(1, ...) when |x| is 0 (l2 norms)."""
    val = lars_rescale(x, dx, wd, offset, trust)
    return np.array([max(min(val, F32(lr_max)), F32(lr_min))], F32)
