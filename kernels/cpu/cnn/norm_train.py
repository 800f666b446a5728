"""Batch normalisation in training mode and its gradient (Caffe2's SpatialBN with
is_test=0 and SpatialBNGradient).

Public:
    batch_norm_train(x, scale, bias, running_mean, running_var, epsilon, momentum, axis)
        -> (y, new running_mean, new running_var, saved_mean, saved_inv_std)
        statistics over every axis but the channel axis; the running variance takes
        the unbiased batch variance (late Caffe2: var * R / (R - 1), R values per
        channel), the normalisation the biased one
    batch_norm_backward(x, scale, dy, mean, inv_std, axis) -> (dx, dscale, dbias)
        through the batch statistics (mean / inv_std: the saved ones)
    batch_norm_backward_fixed(x, scale, dy, mean, var, epsilon, axis) -> (dx, dscale, dbias)
        the inference form's gradient (is_test=1: mean and var are constants)

    batch_norm_train_multi(x, scale, bias, running_mean, running_var, sums, sumsqs,
                           num_batches, epsilon, momentum, axis)
        the multi-batch form (num_batches > 1): the statistics come from per-channel
        sums and sums of squares over num_batches equal batches (ChannelStats summed
        across devices), R = num_batches * values per channel of this batch
    batch_norm_backward_multi(x, scale, dy, mean, inv_std, dscale_sum, dbias_sum, num_batches, axis)
        its gradient: dscale_sum / dbias_sum are ChannelBackpropStats summed over the
        batches; dscale and dbias come out divided by num_batches (each batch's share,
        so that summing them across batches gives the whole gradient)

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


def batch_norm_train_multi(x, scale, bias, running_mean, running_var, sums, sumsqs, num_batches, epsilon,
                           momentum, axis):
    count = num_batches * (x.size // max(1, x.shape[axis]))
    shape = _shape(x, axis)
    mean = sums.reshape(-1).astype(np.float64) / count
    var = np.maximum(sumsqs.reshape(-1).astype(np.float64) / count - mean * mean, 0.0)
    inv_std = 1.0 / np.sqrt(var + epsilon)
    y = (x.astype(np.float64) - mean.reshape(shape)) * (inv_std * scale.reshape(-1)).reshape(shape) \
        + bias.reshape(shape).astype(np.float64)
    unbias = count / (count - 1) if count > 1 else np.inf
    new_mean = momentum * running_mean.reshape(-1).astype(np.float64) + (1.0 - momentum) * mean
    with np.errstate(invalid="ignore"):
        new_var = momentum * running_var.reshape(-1).astype(np.float64) + (1.0 - momentum) * unbias * var
    dt = x.dtype
    return (y.astype(dt), new_mean.astype(running_mean.dtype).reshape(running_mean.shape),
            new_var.astype(running_var.dtype).reshape(running_var.shape), mean.astype(dt), inv_std.astype(dt))


def batch_norm_backward_multi(x, scale, dy, mean, inv_std, dscale_sum, dbias_sum, num_batches, axis):
    count = num_batches * (x.size // max(1, x.shape[axis]))
    shape = _shape(x, axis)
    inv = inv_std.reshape(-1).astype(np.float64)
    xhat = (x.astype(np.float64) - mean.reshape(shape)) * inv.reshape(shape)
    dscale_total = dscale_sum.reshape(-1).astype(np.float64)
    dbias_total = dbias_sum.reshape(-1).astype(np.float64)
    factor = (scale.reshape(-1).astype(np.float64) * inv / count).reshape(shape)
    dx = factor * (count * dy.astype(np.float64) - dbias_total.reshape(shape) - xhat * dscale_total.reshape(shape))
    dt = x.dtype
    return dx.astype(dt), (dscale_total / num_batches).astype(dt), (dbias_total / num_batches).astype(dt)
