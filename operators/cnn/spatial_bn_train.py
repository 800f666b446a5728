"""SpatialBN in training mode (is_test=0; nn.py's SpatialBN kernel hands over to
training_kernel), SpatialBNGradient and the SpatialBN maker (Caffe2's
GetSpatialBNGradient: inputs X, scale, dY and the saved mean / inverse std in
training, the running mean / variance with is_test=1; outputs dX, dscale, dbias).
The multi-batch form (num_batches > 1) takes the statistics from sums over all
batches: SpatialBN's inputs 5 / 6 (sum and sum of squares of X), SpatialBNGradient's
inputs 5 / 6 (summed dscale and dbias)."""
import numpy as np

from caffe2py.errors import Caffe2Error
from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.cnn import norm_train as K
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema


def _channel_axis(ctx, x):
    order = ctx.string("order", "NCHW")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    if x.ndim < 2:
        raise ctx.input_error(0, "needs (N, C, ...) input, got shape %s" % list(x.shape))
    return 1 if order == "NCHW" else x.ndim - 1


def _check_channels(ctx, x, axis, vectors):
    c = x.shape[axis]
    for index, v in vectors:
        if v.size != c:
            raise ctx.input_error(index, "has %d elements, expected %d channels" % (v.size, c))


def training_kernel(ctx):
    if ctx.n_outputs != 5:
        raise ctx.error("training mode (is_test=0) has 5 outputs (Y, running_mean, running_var, "
                        "saved_mean, saved_inv_std), got %d" % ctx.n_outputs)
    eps, momentum = ctx.float("epsilon"), ctx.float("momentum")
    num_batches = ctx.int("num_batches", 1)
    if num_batches < 1:
        raise ctx.error("num_batches must be >= 1, got %d" % num_batches)
    if num_batches > 1 and ctx.n_inputs != 7:
        raise ctx.error("num_batches=%d needs 7 inputs (the per-channel sum and sum of squares of X over "
                        "all batches as inputs 5 and 6), got %d" % (num_batches, ctx.n_inputs))

    def run(x, scale, bias, running_mean, running_var, sums=None, sums_of_squares=None):
        axis = _channel_axis(ctx, x)
        _check_channels(ctx, x, axis, ((1, scale), (2, bias), (3, running_mean), (4, running_var)))
        if x.shape[0] == 0:
            # Caffe2: an empty batch leaves the running statistics as they were and saves zeros
            zeros = np.zeros(x.shape[axis], x.dtype)
            return (np.empty_like(x), running_mean.copy(), running_var.copy(), zeros, zeros.copy())
        if x.size == 0:
            raise ctx.input_error(0, "batch statistics over zero values per channel (shape %s) are undefined"
                                  % list(x.shape))
        if num_batches > 1:
            # the statistics of all num_batches batches (of this one's size), from their sums
            _check_channels(ctx, x, axis, ((5, sums), (6, sums_of_squares)))
            return K.batch_norm_train_from_sums(x, scale, bias, running_mean, running_var, sums,
                                                sums_of_squares, num_batches, eps, momentum, axis)
        return K.batch_norm_train(x, scale, bias, running_mean, running_var, eps, momentum, axis)
    return run


register_schema(OpSchema(
    "SpatialBNGradient", num_inputs=(5, 7), num_outputs=3,
    args=(Arg("is_test", "bool", False), Arg("epsilon", "float", 1e-5), Arg("order", "string", "NCHW"),
          Arg("num_batches", "int", 1)),
    allow_inplace={(5, 1), (6, 2)},
    inference=lambda ctx, ins: [ins[0], ins[1], ins[1]],
    inputs=("X", "scale", "dY", "mean", "inv_std_or_var", "dscale_sum", "dbias_sum"),
    outputs=("dX", "dscale", "dbias"),
    doc="Gradient of SpatialBN. Training (is_test=0): through the batch statistics, inputs 3 / 4 "
        "the saved mean and inverse std. is_test=1: the statistics are constants, inputs 3 / 4 "
        "the running mean and variance. num_batches > 1 (7 inputs): dscale and dbias are the sums "
        "over all batches (inputs 5 / 6) divided by num_batches, and dX goes through the "
        "statistics with them."))


@register_kernel("SpatialBNGradient")
def spatial_bn_gradient(ctx):
    is_test, eps = ctx.bool("is_test"), ctx.float("epsilon")
    num_batches = ctx.int("num_batches", 1)
    if num_batches < 1:
        raise ctx.error("num_batches must be >= 1, got %d" % num_batches)
    if num_batches > 1 and ctx.n_inputs != 7:
        raise ctx.error("num_batches=%d needs 7 inputs (the summed dscale and dbias as inputs 5 and 6), "
                        "got %d" % (num_batches, ctx.n_inputs))

    def run(x, scale, dy, mean, second, dscale_sum=None, dbias_sum=None):
        axis = _channel_axis(ctx, x)
        _check_channels(ctx, x, axis, ((1, scale), (3, mean), (4, second)))
        if dy.shape != x.shape:
            raise ctx.input_error(2, "gradient of shape %s does not match X's %s" % (list(dy.shape), list(x.shape)))
        if x.shape[0] == 0:          # Caffe2: an empty batch has zero scale and bias gradients
            zeros = np.zeros(scale.shape, x.dtype)
            return np.empty_like(x), zeros, zeros.copy()
        if is_test:
            return K.batch_norm_backward_fixed(x, scale, dy, mean, second, eps, axis)
        if num_batches > 1:
            _check_channels(ctx, x, axis, ((5, dscale_sum), (6, dbias_sum)))
            return K.batch_norm_backward_from_sums(x, scale, dy, mean, second, dscale_sum, dbias_sum,
                                                   num_batches, axis)
        return K.batch_norm_backward(x, scale, dy, mean, second, axis)
    return run


@register_gradient("SpatialBN")
def _spatial_bn_maker(g):
    is_test = int(bool(g.arg("is_test", int(len(g.def_.output) == 1))))
    if is_test:
        if len(g.def_.input) != 5 or len(g.def_.output) != 1:
            raise Caffe2Error("%s: in test mode the gradient needs 5 inputs and 1 output" % g.label)
        ins = [g.input_value(0), g.I(1), g.GO(0), g.I(3), g.I(4)]
    else:
        if len(g.def_.output) != 5:
            raise Caffe2Error("%s: in training mode the gradient needs the 5 outputs (saved mean and "
                              "inverse std)" % g.label)
        ins = [g.input_value(0), g.I(1), g.GO(0), g.O(3), g.O(4)]
        if int(g.arg("num_batches", 1)) > 1:
            # Caffe2: the multi-batch gradient reads dscale / dbias already summed over
            # the batches, in place in the gradient blobs
            ins += [g.GI(1), g.GI(2)]
    return [g.op("SpatialBNGradient", ins, [g.GI(0), g.GI(1), g.GI(2)], is_test=is_test)]
