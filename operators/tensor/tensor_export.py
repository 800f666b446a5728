"""ONNX translations of tensor.py's shape and layout ops: Copy & co., Reshape
(with its old_shape output), Flatten, Transpose, ChannelShuffle, Concat (with
split_info) and Split (sizes from the argument or from a blob such as a
Concat's split_info)."""
import numpy as np

from caffe2py.onnx.export_registry import register_exporter


@register_exporter("Copy", "Alias", "StopGradient", "EnsureDense", "CopyFromCPUInput",
                   onnx_form="Identity")
def export_copy(ex):
    ex.identity(ex.inputs[0], ex.outputs[0])


@register_exporter("Reshape", onnx_form="Reshape (0 copies a dim, -1 is inferred, as in Caffe2); "
                                        "old_shape as Shape; a shape blob is cast to int64")
def export_reshape(ex):
    x = ex.inputs[0]
    if len(ex.inputs) == 2:
        if ex.args.has("shape"):
            raise ex.error("takes the shape from argument 'shape' or from input 1, not both")
        shape = ex.inputs[1]
        if ex.dtype(shape) != np.dtype(np.int64):
            shape = ex.cast(shape, np.int64)
    elif ex.args.has("shape"):
        shape = ex.int64s(ex.args.ints("shape"))
    else:
        raise ex.error("needs argument 'shape' or a second input holding the shape")
    ex.reshape(x, shape, ex.outputs[0])
    if len(ex.outputs) == 2 and ex.is_read(1):
        ex.node("Shape", [x], [ex.outputs[1]])


@register_exporter("Flatten", onnx_form="Flatten")
def export_flatten(ex):
    ex.node("Flatten", [ex.inputs[0]], ex.outputs, axis=ex.args.int("axis", 1))


@register_exporter("Transpose", onnx_form="Transpose (axes as perm; none reverses the dims)")
def export_transpose(ex):
    axes = ex.args.ints("axes") if ex.args.has("axes") else None
    if not axes:
        ex.node("Transpose", [ex.inputs[0]], ex.outputs)
        return
    if any(a < 0 for a in axes):
        rank = ex.need_rank(ex.inputs[0], "negative axes count from its end")
        axes = [a % rank for a in axes]
    ex.transpose(ex.inputs[0], axes, ex.outputs[0])


@register_exporter("NCHW2NHWC", "NHWC2NCHW", onnx_form="Transpose moving the channel dim last / second")
def export_layout_change(ex):
    rank = ex.need_rank(ex.inputs[0], "the permutation depends on the number of dims")
    if ex.type == "NCHW2NHWC":
        perm = [0] + list(range(2, rank)) + [1]
    else:
        perm = [0, rank - 1] + list(range(1, rank - 1))
    ex.transpose(ex.inputs[0], perm, ex.outputs[0])


@register_exporter("ChannelShuffle", onnx_form="Reshape to (group, C / group) channel grid -> Transpose "
                                               "-> Reshape back (NCHW and NHWC)")
def export_channel_shuffle(ex):
    x = ex.inputs[0]
    group = ex.args.int("group", 1)
    order = ex.args.string("order", "NCHW")
    if order not in ("NCHW", "NHWC"):
        raise ex.error("order must be NCHW or NHWC, got '%s'" % order)
    if group < 1:
        raise ex.error("group must be positive, got %d" % group)
    rank = ex.need_rank(x, "the channel axis is read against it")
    axis = 1 if order == "NCHW" else rank - 1
    channels = ex.need_dims(x, "the channel count sets the shuffle grid", axes=[axis])[axis]
    if channels % group:
        raise ex.error("%d channels do not split into %d groups" % (channels, group), blob=x)
    if order == "NCHW":
        grid = ex.reshape(x, [0, group, channels // group, -1])
        swapped = ex.transpose(grid, [0, 2, 1, 3])
    else:
        grid = ex.reshape(x, [-1, group, channels // group])
        swapped = ex.transpose(grid, [0, 2, 1])
    ex.reshape(swapped, ex.shape_of(x), ex.outputs[0])


def _axis(ex):
    """Caffe2's Concat/Split axis: `order` alone picks the channel axis."""
    if ex.args.has("order") and not ex.args.has("axis"):
        return 1 if ex.args.string("order") == "NCHW" else 3
    return ex.args.int("axis", 1)


@register_exporter("Concat", onnx_form="Concat (add_axis: Unsqueeze each input first); split_info as "
                                       "an int32 constant, or Shape slices -> Concat -> Cast when sizes "
                                       "are symbolic")
def export_concat(ex):
    inputs = list(ex.inputs)
    add_axis = ex.args.bool("add_axis")
    axis = _axis(ex)
    rank = ex.rank(inputs[0])
    if axis < 0 or add_axis:
        rank = ex.need_rank(inputs[0], "the concat axis is read against it")
        out_rank = rank + (1 if add_axis else 0)
        if not -out_rank <= axis < out_rank:
            raise ex.error("axis %d is out of range for %d-D output" % (axis, out_rank))
        axis %= out_rank
    if add_axis:
        inputs = [ex.unsqueeze(x, [axis]) for x in inputs]
    ex.node("Concat", inputs, [ex.outputs[0]], axis=axis)
    if len(ex.outputs) < 2 or not ex.is_read(1):
        return
    sizes = [ex.shape(x) for x in inputs]
    if add_axis or all(s is not None and s[axis] is not None for s in sizes):
        info = np.ones(len(inputs), np.int32) if add_axis else np.array([s[axis] for s in sizes], np.int32)
        ex.node("Identity", [ex.const(info, "split_info")], [ex.outputs[1]])
        ex.set_value(ex.outputs[1], info)
        return
    parts = [ex.shape_of(x, axis, axis + 1) for x in inputs]
    ex.cast(ex.node("Concat", parts, axis=0), np.int32, ex.outputs[1])


@register_exporter("Split", onnx_form="Split (sizes from `split`, from input 1 cast to int64, or equal "
                                      "parts: num_outputs from opset 18); add_axis: Squeeze each part")
def export_split(ex):
    x = ex.inputs[0]
    axis = _axis(ex)
    add_axis = ex.args.bool("add_axis")
    n = len(ex.outputs)
    attrs = {"axis": axis}
    known = ex.value(ex.inputs[1]) if len(ex.inputs) == 2 else None
    if known is not None:                          # a Concat's static split_info
        inputs = [x, ex.int64s(known.reshape(-1), "split")]
    elif len(ex.inputs) == 2:
        sizes = ex.inputs[1]
        if ex.dtype(sizes) != np.dtype(np.int64):
            sizes = ex.cast(sizes, np.int64)
        inputs = [x, sizes]
        _declare_split_types(ex, x, axis, add_axis)
    elif ex.args.has("split"):
        split = ex.args.ints("split")
        if len(split) != n:
            raise ex.error("split %s has %d sizes for %d outputs" % (split, len(split), n))
        inputs = [x, ex.int64s(split, "split")]
    else:
        inputs = [x]
        if ex.opset >= 18:
            attrs["num_outputs"] = n
    if not add_axis:
        ex.node("Split", inputs, ex.outputs, **attrs)
        return
    parts = ex.node("Split", inputs, n, **attrs)
    _declare_split_types(ex, x, axis, add_axis)
    parts = [parts] if n == 1 else parts
    for part, out in zip(parts, ex.outputs):
        ex.squeeze(part, [axis], out)


def _declare_split_types(ex, x, axis, add_axis):
    """Parts of sizes only known at run time: X's dims with the split one unknown."""
    dims, dtype = ex.shape(x), ex.dtype(x)
    if dims is None:
        return
    axis %= len(dims)
    dims = list(dims)
    if add_axis:
        del dims[axis]
    else:
        dims[axis] = None
    for out in ex.outputs:
        ex.set_type(out, dims, dtype)
