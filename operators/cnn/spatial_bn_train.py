"""SpatialBN in training mode (is_test=0; nn.py's SpatialBN kernel hands over to
training_kernel), SpatialBNGradient and the SpatialBN maker (Caffe2's
GetSpatialBNGradient: inputs X, scale, dY and the saved mean / inverse std in
training, the running mean / variance with is_test=1; outputs dX, dscale, dbias).

The multi-batch form (num_batches > 1, what data_parallel_model's combine_spatial_bn
builds): SpatialBN's inputs 5 / 6 are the per-channel sums and sums of squares of
X over all the batches (ChannelStats, summed), SpatialBNGradient's inputs 5 / 6 the
summed ChannelBackpropStats (scale and bias gradients of all the batches)."""
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
    num_batches = ctx.int("num_batches", 1)
    if num_batches < 1:
        raise ctx.error("argument 'num_batches' must be >= 1, got %d" % num_batches)
    if num_batches > 1 and ctx.n_inputs != 7:
        raise ctx.error("num_batches > 1 needs 7 inputs (the batch sums and sums of squares as inputs 5 and 6), "
                        "got %d" % ctx.n_inputs)
    eps, momentum = ctx.float("epsilon"), ctx.float("momentum")

    def run(x, scale, bias, running_mean, running_var, *sums):
        axis = _channel_axis(ctx, x)
        _check_channels(ctx, x, axis, ((1, scale), (2, bias), (3, running_mean), (4, running_var)))
        if num_batches > 1:
            _check_channels(ctx, x, axis, ((5, sums[0]), (6, sums[1])))
        if x.shape[0] == 0:
            # Caffe2 (either form): an empty batch leaves the running statistics as they were
            # and saves zeros
            zeros = np.zeros(x.shape[axis], x.dtype)
            return (np.empty_like(x), running_mean.copy(), running_var.copy(), zeros, zeros.copy())
        if num_batches > 1:
            if x.size == 0:
                raise ctx.input_error(0, "multi-batch statistics over zero values per channel (shape %s) "
                                      "are undefined" % list(x.shape))
            return K.batch_norm_train_multi(x, scale, bias, running_mean, running_var, sums[0], sums[1],
                                            num_batches, eps, momentum, axis)
        if x.size == 0:
            raise ctx.input_error(0, "batch statistics over zero values per channel (shape %s) are undefined"
                                  % list(x.shape))
        return K.batch_norm_train(x, scale, bias, running_mean, running_var, eps, momentum, axis)
    return run


register_schema(OpSchema(
    "SpatialBNGradient", num_inputs={5, 7}, num_outputs=3, allow_inplace={(5, 1), (6, 2)},
    args=(Arg("is_test", "bool", False), Arg("epsilon", "float", 1e-5), Arg("order", "string", "NCHW"),
          Arg("num_batches", "int", 1, doc="batches whose summed scale / bias gradients are inputs 5 / 6")),
    inference=lambda ctx, ins: [ins[0], ins[1], ins[1]],
    inputs=("X", "scale", "dY", "mean", "inv_std_or_var"), outputs=("dX", "dscale", "dbias"),
    doc="Gradient of SpatialBN. Training (is_test=0): through the batch statistics, inputs 3 / 4 "
        "the saved mean and inverse std. is_test=1: the statistics are constants, inputs 3 / 4 "
        "the running mean and variance. num_batches > 1: inputs 5 / 6 are the scale and bias "
        "gradients summed over the batches (ChannelBackpropStats); dscale / dbias are those "
        "sums / num_batches."))


@register_kernel("SpatialBNGradient")
def spatial_bn_gradient(ctx):
    is_test, eps = ctx.bool("is_test"), ctx.float("epsilon")
    num_batches = ctx.int("num_batches", 1)
    if num_batches < 1:
        raise ctx.error("argument 'num_batches' must be >= 1, got %d" % num_batches)
    if num_batches > 1 and (ctx.n_inputs != 7 or is_test):
        raise ctx.error("num_batches > 1 needs training mode and 7 inputs (the summed scale and bias "
                        "gradients as inputs 5 and 6)")

    def run(x, scale, dy, mean, second, *sums):
        axis = _channel_axis(ctx, x)
        _check_channels(ctx, x, axis, ((1, scale), (3, mean), (4, second)))
        if dy.shape != x.shape:
            raise ctx.input_error(2, "gradient of shape %s does not match X's %s" % (list(dy.shape), list(x.shape)))
        if num_batches > 1:
            _check_channels(ctx, x, axis, ((5, sums[0]), (6, sums[1])))
        if x.shape[0] == 0:          # Caffe2 (either form): an empty batch has zero scale and bias gradients
            zeros = np.zeros(scale.shape, x.dtype)
            return np.empty_like(x), zeros, zeros.copy()
        if num_batches > 1:
            return K.batch_norm_backward_multi(x, scale, dy, mean, second, sums[0], sums[1], num_batches, axis)
        if is_test:
            return K.batch_norm_backward_fixed(x, scale, dy, mean, second, eps, axis)
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
        if g.arg("num_batches", 1) > 1:     # Caffe2: the summed scale / bias gradients come in place
            ins += [g.GI(1), g.GI(2)]
            return [g.op("SpatialBNGradient", ins, [g.GI(0), g.GI(1), g.GI(2)], is_test=0)]
    return [g.op("SpatialBNGradient", ins, [g.GI(0), g.GI(1), g.GI(2)], is_test=is_test)]
