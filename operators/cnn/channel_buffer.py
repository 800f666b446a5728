"""ChannelBuffer and ChannelPrefix: a chain of channel Concats sharing one buffer;
ChannelWrite: one input of a Concat copied into its channels of the concat's buffer.

DenseNet's dense block concatenates the block's input with every layer's output in
turn: c_1 = Concat(x0, y_1), c_2 = Concat(c_1, y_2), ... Each Concat copies all the
channels so far, so the copies grow with the square of the block's length (densenet121:
58 Concats, about 9% of a run). caffe2py.optimize (grow_concat_chains) rewrites such a
chain as one buffer with the block's final channel count: ChannelBuffer copies x0 into
its first channels once, each conv writes its channels in place (Conv's
concat_channels), and every c_i becomes ChannelPrefix, a view of the channels filled so
far. Later writes go to channels past every earlier view, so the views read what the
Concats would have copied. The views keep the buffer's memory alive (NumPy's base
reference), whatever the executor drops; a pool that recycles output arrays must not
hand out one that a live view still reads.

ShuffleNet's downsampling units concatenate a conv's output with an AveragePool's and
apply a ReLU to the whole: caffe2py.optimize (write_concat_in_place) lets the conv write
its channels (ReLU included) into the concat's buffer and copies the pool's output into
the rest with ChannelWrite (ReLU on the way), where the Concat copied both and the
Relu made a third pass.
"""
import numpy as np

from caffe2py.kernels.cpu.math import elementwise as ew
from caffe2py.kernels.cpu.runtime.output_pool import output_array
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import Range, Rank


def _with_channels(ctx, ins):
    """Both ops' output: X's shape and dtype with `channels` channels."""
    return [TensorType((ins[0].dims[0], ctx.int("channels")) + tuple(ins[0].dims[2:]), ins[0].dtype)]


_CHANNELS = (Arg("channels", "int", required=True, check=Range(1)),)

register_schema(OpSchema(
    "ChannelBuffer", num_inputs=1, num_outputs=1, args=_CHANNELS, checks=(Rank(0, 2),),
    inference=_with_channels, inputs=("X",), outputs=("Y",),
    doc="Y: a new NCHW array of `channels` channels (at least X's) whose first channels are X "
        "and whose others are left for the convs that write into it (what caffe2py.optimize "
        "makes of the first Concat of a chain, see ChannelPrefix)."))

register_schema(OpSchema(
    "ChannelPrefix", num_inputs=1, num_outputs=1, args=_CHANNELS, checks=(Rank(0, 2),),
    inference=_with_channels, inputs=("X",), outputs=("Y",),
    doc="Y = X[:, :channels], a view (no copy): the value of one Concat of a chain whose "
        "channels later ops fill in a shared buffer (caffe2py.optimize's grow_concat_chains)."))


@register_kernel("ChannelBuffer")
def channel_buffer(ctx):
    channels = ctx.int("channels")

    def run(x):
        if x.shape[1] > channels:
            raise ctx.input_error(0, "has %d channels, more than the buffer's %d" % (x.shape[1], channels))
        # from the plan's output pool when a run has one: a fresh buffer of a dense
        # block's size is new memory every run (page faults inside the convs that fill it)
        y = output_array((x.shape[0], channels) + x.shape[2:], x.dtype)
        y[:, :x.shape[1]] = x
        return y
    return run


@register_kernel("ChannelPrefix")
def channel_prefix(ctx):
    channels = ctx.int("channels")

    def run(x):
        if x.shape[1] < channels:
            raise ctx.input_error(0, "has %d channels, fewer than the %d asked for" % (x.shape[1], channels))
        return x[:, :channels]
    return run


def _write_cost(ctx, ins):
    n = float(np.prod(ins[0].dims))          # X read once, its channels of the buffer written once
    return Cost(bytes_read=4 * n, bytes_written=4 * n)


register_schema(OpSchema(
    "ChannelWrite", num_inputs=2, num_outputs=1, allow_inplace={(1, 0)},
    args=(Arg("offset", "int", required=True, check=Range(0)),
          Arg("relu", "int", 0, doc="1: write max(X, 0), as a Relu after the Concat would")),
    checks=(Rank(0, 2), Rank(1, 2)), inference=lambda ctx, ins: [ins[1]], cost=_write_cost,
    inputs=("X", "buffer"), outputs=("Y",),
    doc="Y = buffer (the same blob) with channels offset.. offset + C_X replaced by X (NCHW; N, "
        "spatial dims and dtype as the buffer's): one input of a channel Concat whose other "
        "channels convs wrote in place (what caffe2py.optimize makes of a Concat of convs' "
        "outputs and other tensors)."))


@register_kernel("ChannelWrite")
def channel_write(ctx):
    offset, relu = ctx.int("offset"), bool(ctx.int("relu", 0))

    def run(x, buffer):
        if x.shape[:1] + x.shape[2:] != buffer.shape[:1] + buffer.shape[2:] or x.dtype != buffer.dtype:
            raise ctx.input_error(0, "of shape %s (%s) does not fit the concat buffer of shape %s (%s) "
                                  "outside the channels" % (list(x.shape), x.dtype, list(buffer.shape), buffer.dtype))
        if offset + x.shape[1] > buffer.shape[1] or not buffer.flags.writeable:
            raise ctx.input_error(1, "channels %d..%d do not fit the %s buffer's %d"
                                  % (offset, offset + x.shape[1], "writable" if buffer.flags.writeable
                                     else "read-only", buffer.shape[1]))
        into = buffer[:, offset:offset + x.shape[1]]
        if relu:
            ew.relu(x, out=into)
        else:
            np.copyto(into, x)
        return buffer
    return run
