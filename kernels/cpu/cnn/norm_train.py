"""Batch normalisation in training mode and its gradient (Caffe2's SpatialBN with
is_test=0 and SpatialBNGradient).

Public:
    batch_norm_train(x, scale, bias, running_mean, running_var, epsilon, momentum, axis)
        -> (y, new running_mean, new running_var, saved_mean, saved_inv_std)
        statistics over every axis but the channel axis; the running variance takes
        the unbiased batch variance (late Caffe2: var * R / (R - 1), R values per
        channel), the normalisation the biased one
    batch_norm_train_from_sums(x, scale, bias, running_mean, running_var, sums, sums_sq,
                               num_batches, epsilon, momentum, axis)
        the same with the statistics of num_batches batches of x's size taken from the
        per-channel sum and sum of squares over all of them (multi-batch SpatialBN)
    batch_norm_backward(x, scale, dy, mean, inv_std, axis) -> (dx, dscale, dbias)
        through the batch statistics (mean / inv_std: the saved ones)
    batch_norm_backward_from_sums(x, scale, dy, mean, inv_std, dscale_sum, dbias_sum,
                                  num_batches, axis) -> (dx, dscale, dbias)
        the multi-batch gradient: dscale / dbias are the sums over the batches divided
        by num_batches; dx goes through this batch's statistics with them
    batch_norm_backward_fixed(x, scale, dy, mean, var, epsilon, axis) -> (dx, dscale, dbias)
        the inference form's gradient (is_test=1: mean and var are constants)

Sums are taken in float64 and results returned in x's dtype.
"""
import numpy as np


def _shape(x, axis):
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return shape


def _reduce_axes(x, axis):
    return tuple(a for a in range(x.ndim) if a != axis)


def batch_norm_train(x, scale, bias, running_mean, running_var, epsilon, momentum, axis):
    axes = _reduce_axes(x, axis)
    count = x.size // max(1, x.shape[axis])
    shape = _shape(x, axis)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes)
    centered = x64 - mean.reshape(shape)
    var = np.square(centered).mean(axis=axes)
    inv_std = 1.0 / np.sqrt(var + epsilon)
    y = centered * (inv_std * scale.reshape(-1)).reshape(shape) + bias.reshape(shape).astype(np.float64)
    unbias = count / (count - 1) if count > 1 else np.inf
    new_mean = momentum * running_mean.reshape(-1).astype(np.float64) + (1.0 - momentum) * mean
    with np.errstate(invalid="ignore"):
        new_var = momentum * running_var.reshape(-1).astype(np.float64) + (1.0 - momentum) * unbias * var
    dt = x.dtype
    return (y.astype(dt), new_mean.astype(running_mean.dtype).reshape(running_mean.shape),
            new_var.astype(running_var.dtype).reshape(running_var.shape), mean.astype(dt), inv_std.astype(dt))


def _normalise(x, scale, bias, mean, var, epsilon, axis):
    shape = _shape(x, axis)
    inv_std = 1.0 / np.sqrt(var + epsilon)
    y = ((x.astype(np.float64) - mean.reshape(shape)) * (inv_std * scale.reshape(-1)).reshape(shape)
         + bias.reshape(shape).astype(np.float64))
    return y, inv_std


def _running(running, value, momentum):
    with np.errstate(invalid="ignore"):
        new = momentum * running.reshape(-1).astype(np.float64) + (1.0 - momentum) * value
    return new.astype(running.dtype).reshape(running.shape)


def batch_norm_train_from_sums(x, scale, bias, running_mean, running_var, sums, sums_sq, num_batches,
                               epsilon, momentum, axis):
    count = num_batches * (x.size // max(1, x.shape[axis]))
    mean = sums.reshape(-1).astype(np.float64) / count
    var = sums_sq.reshape(-1).astype(np.float64) / count - np.square(mean)
    y, inv_std = _normalise(x, scale, bias, mean, var, epsilon, axis)
    unbias = count / (count - 1) if count > 1 else np.inf
    dt = x.dtype
    return (y.astype(dt), _running(running_mean, mean, momentum), _running(running_var, unbias * var, momentum),
            mean.astype(dt), inv_std.astype(dt))


def batch_norm_backward_from_sums(x, scale, dy, mean, inv_std, dscale_sum, dbias_sum, num_batches, axis):
    count = x.size // max(1, x.shape[axis])
    shape = _shape(x, axis)
    inv = inv_std.reshape(-1).astype(np.float64)
    dscale = dscale_sum.reshape(-1).astype(np.float64) / num_batches
    dbias = dbias_sum.reshape(-1).astype(np.float64) / num_batches
    # dx = alpha * dy + beta * x + gamma per channel, as in batch_norm_backward
    alpha = scale.reshape(-1).astype(np.float64) * inv
    beta = -alpha * dscale * inv / count
    gamma = alpha * (mean.reshape(-1) * dscale * inv - dbias) / count
    dx = alpha.reshape(shape) * dy + beta.reshape(shape) * x + gamma.reshape(shape)
    dt = x.dtype
    return dx.astype(dt), dscale.astype(dt), dbias.astype(dt)


def batch_norm_backward(x, scale, dy, mean, inv_std, axis):
    axes = _reduce_axes(x, axis)
    count = x.size // max(1, x.shape[axis])
    shape = _shape(x, axis)
    inv = inv_std.reshape(-1).astype(np.float64)
    xhat = (x.astype(np.float64) - mean.reshape(shape)) * inv.reshape(shape)
    dy64 = dy.astype(np.float64)
    dbias = dy64.sum(axis=axes)
    dscale = (dy64 * xhat).sum(axis=axes)
    factor = (scale.reshape(-1).astype(np.float64) * inv / count).reshape(shape)
    dx = factor * (count * dy64 - dbias.reshape(shape) - xhat * dscale.reshape(shape))
    dt = x.dtype
    return dx.astype(dt), dscale.astype(dt), dbias.astype(dt)


def batch_norm_backward_fixed(x, scale, dy, mean, var, epsilon, axis):
    """Gradient of y = (x - mean) / sqrt(var + eps) * scale + bias with mean and var
    constant (the inference form)."""
    axes = _reduce_axes(x, axis)
    shape = _shape(x, axis)
    inv = 1.0 / np.sqrt(var.reshape(-1).astype(np.float64) + epsilon)
    dy64 = dy.astype(np.float64)
    xhat = (x.astype(np.float64) - mean.reshape(shape)) * inv.reshape(shape)
    dx = dy64 * (scale.reshape(-1) * inv).reshape(shape)
    dt = x.dtype
    return dx.astype(dt), (dy64 * xhat).sum(axis=axes).astype(dt), dy64.sum(axis=axes).astype(dt)
