"""ONNX translations of Caffe2's Int8 ops, in QDQ form: every Int8 tensor becomes a uint8
tensor of the same (NHWC) layout; an op reads its inputs through DequantizeLinear, runs
the float ONNX op (NCHW through Transposes for the image ops) and writes its output with
QuantizeLinear at Y_scale / Y_zero_point. Weights and biases stay uint8 / int32
initializers behind DequantizeLinear (a bias at input scale x weight scale, the scale
Caffe2's kernels add it at). onnxruntime fuses such QDQ groups into its QLinear kernels.
Results agree with caffe2py's within one quantization step (the float ops round
differently from Caffe2's fixed-point requantization).

Each Int8 tensor's scale and zero point are known when the net is exported: from the
init net's Int8 blobs (graph.quant) and from the arguments of the ops that write them.
Layout ops move the uint8 values as they are."""
import numpy as np

from caffe2py.onnx.export_registry import register_exporter

from .._common import conv_geometry
from ..cnn.nn_export import _conv_attrs
from ..tensor.caffe2_shape import slice_bounds

_QDQ = "QDQ: DequantizeLinear of the inputs, %s, QuantizeLinear at Y_scale / Y_zero_point"


def _params(ex, name):
    found = ex.graph.quant.get(name)
    if found is None:
        raise ex.error("the scale and zero point of this Int8 tensor are not known when the net is exported "
                       "(Int8 inputs of the graph are not supported: quantize in the net with Int8Quantize)",
                       blob=name)
    return found


def _y_params(ex):
    return float(np.float32(ex.args.float("Y_scale", 1.0))), ex.args.int("Y_zero_point", 0)


def _dq(ex, name):
    scale, zero_point = _params(ex, name)
    return ex.node("DequantizeLinear", [name, ex.scalar(scale, "float32", "scale"),
                                        ex.scalar(zero_point, "uint8", "zero_point")])


def _q(ex, value, out, scale, zero_point):
    ex.node("QuantizeLinear", [value, ex.scalar(scale, "float32", "y_scale"),
                               ex.scalar(zero_point, "uint8", "y_zero_point")], [out])
    ex.graph.quant[out] = (scale, zero_point)


def _keep(ex, out, source):
    """The output keeps input `source`'s quantization (layout ops)."""
    ex.graph.quant[out] = _params(ex, source)


def _constant(ex, name, what):
    value = ex.value(name)
    if value is None:
        raise ex.error("%s must be a constant (an init net blob) to be exported" % what, blob=name)
    return value


def _weights(ex, name, layout):
    """DequantizeLinear of a uint8 weight initializer, its axes permuted by `layout`."""
    value = _constant(ex, name, "the weights")
    scale, zero_point = _params(ex, name)
    w = ex.const(np.ascontiguousarray(np.transpose(value, layout)), "weights")
    return ex.node("DequantizeLinear", [w, ex.scalar(scale, "float32", "w_scale"),
                                        ex.scalar(zero_point, "uint8", "w_zero_point")]), scale


def _bias(ex, name, x_name, w_scale):
    """float bias: the int32 values at input scale x weight scale (how Caffe2 adds them)."""
    value = _constant(ex, name, "the bias")
    scale = float(np.float32(np.float32(_params(ex, x_name)[0]) * np.float32(w_scale)))
    return ex.node("DequantizeLinear", [ex.const(value.reshape(-1).astype(np.int32), "bias"),
                                        ex.scalar(scale, "float32", "b_scale")])


def _nchw(ex, x):
    return ex.transpose(x, [0, 3, 1, 2])


def _nhwc(ex, y):
    return ex.transpose(y, [0, 2, 3, 1])


# ----------------------------------------------------------------- quantize / dequantize

@register_exporter("Int8Quantize", onnx_form="QuantizeLinear (uint8, Y_scale / Y_zero_point)")
def export_quantize(ex):
    if len(ex.inputs) > 1:
        raise ex.error("the Qparam input is not exported; give Y_scale / Y_zero_point")
    _q(ex, ex.inputs[0], ex.outputs[0], *_y_params(ex))


@register_exporter("Int8Dequantize", onnx_form="DequantizeLinear (the input's scale and zero point)")
def export_dequantize(ex):
    scale, zero_point = _params(ex, ex.inputs[0])
    ex.node("DequantizeLinear", [ex.inputs[0], ex.scalar(scale, "float32", "scale"),
                                 ex.scalar(zero_point, "uint8", "zero_point")], [ex.outputs[0]])


# ----------------------------------------------------------------- conv / FC

@register_exporter("Int8Conv", "Int8ConvRelu", onnx_form=_QDQ % "Conv in NCHW (uint8 NHWC weights as (M, C, kH, kW) "
                   "initializers), Relu for Int8ConvRelu")
def export_conv(ex):
    x, w = ex.inputs[0], ex.inputs[1]
    w_value = _constant(ex, w, "the weights")
    attrs, _ = _conv_attrs(ex, 2, list(w_value.shape[1:3]))
    w_f, w_scale = _weights(ex, w, (0, 3, 1, 2))
    inputs = [_nchw(ex, _dq(ex, x)), w_f]
    if len(ex.inputs) > 2:
        inputs.append(_bias(ex, ex.inputs[2], x, w_scale))
    y = ex.node("Conv", inputs, group=ex.args.int("group", 1), **attrs)
    if ex.type == "Int8ConvRelu":
        y = ex.node("Relu", [y])
    _q(ex, _nhwc(ex, y), ex.outputs[0], *_y_params(ex))


@register_exporter("Int8ConvTranspose", onnx_form=_QDQ % "ConvTranspose in NCHW (output_padding = adj)")
def export_conv_transpose(ex):
    x, w, b = ex.inputs
    w_value = _constant(ex, w, "the weights")
    kernel, strides, pads, _ = conv_geometry(ex.args, 2, kernel_from=list(w_value.shape[1:3]))
    adj = [ex.args.int("adj", 0)] * 2 if not ex.args.has("adjs") else list(ex.args.ints("adjs"))
    if ex.args.has("adj_h") or ex.args.has("adj_w"):
        adj = [ex.args.int("adj_h", 0), ex.args.int("adj_w", 0)]
    w_f, w_scale = _weights(ex, w, (0, 3, 1, 2))          # (C, kH, kW, M) -> (C, M, kH, kW)
    y = ex.node("ConvTranspose", [_nchw(ex, _dq(ex, x)), w_f, _bias(ex, b, x, w_scale)], kernel_shape=kernel,
                strides=strides, pads=pads, output_padding=adj)
    _q(ex, _nhwc(ex, y), ex.outputs[0], *_y_params(ex))


@register_exporter("Int8FC", onnx_form=_QDQ % "Gemm (transB=1) of X flattened at `axis`")
def export_fc(ex):
    if len(ex.inputs) > 3:
        raise ex.error("the Qparam input is not exported; give Y_scale / Y_zero_point")
    x, w, b = ex.inputs
    axis = ex.args.int("axis", 1)
    w_value = _constant(ex, w, "the weights")
    axis_w = ex.args.int("axis_w", 1)
    n = int(np.prod(w_value.shape[:axis_w]))
    w_f, w_scale = _weights(ex, w, range(w_value.ndim))
    w_f = ex.reshape(w_f, [n, -1])
    x_f = ex.node("Flatten", [_dq(ex, x)], axis=axis)
    y = ex.node("Gemm", [x_f, w_f, _bias(ex, b, x, w_scale)], transB=1)
    if axis != 1:
        y = ex.reshape(y, ex.node("Concat", [ex.shape_of(x, 0, axis), ex.int64s([n], "n")], axis=0))
    _q(ex, y, ex.outputs[0], *_y_params(ex))


# ----------------------------------------------------------------- elementwise

@register_exporter("Int8Add", "Int8AddRelu", "Int8Sum", "Int8SumRelu", onnx_form=_QDQ % "Add (and Relu)")
def export_add(ex):
    y = ex.node("Add", [_dq(ex, ex.inputs[0]), _dq(ex, ex.inputs[1])])
    if ex.type.endswith("Relu"):
        y = ex.node("Relu", [y])
    _q(ex, y, ex.outputs[0], *_y_params(ex))


@register_exporter("Int8Relu", onnx_form=_QDQ % "Relu")
def export_relu(ex):
    _q(ex, ex.node("Relu", [_dq(ex, ex.inputs[0])]), ex.outputs[0], *_params(ex, ex.inputs[0]))


@register_exporter("Int8LeakyRelu", onnx_form=_QDQ % "LeakyRelu (alpha)")
def export_leaky_relu(ex):
    y = ex.node("LeakyRelu", [_dq(ex, ex.inputs[0])], alpha=float(ex.args.float("alpha", 0.01)))
    _q(ex, y, ex.outputs[0], *_y_params(ex))


@register_exporter("Int8Sigmoid", onnx_form=_QDQ % "Sigmoid")
def export_sigmoid(ex):
    _q(ex, ex.node("Sigmoid", [_dq(ex, ex.inputs[0])]), ex.outputs[0], *_y_params(ex))


@register_exporter("Int8Softmax", onnx_form=_QDQ % "Softmax over the dims after the first (Flatten, Reshape back)")
def export_softmax(ex):
    x_f = _dq(ex, ex.inputs[0])
    y = ex.node("Softmax", [ex.node("Flatten", [x_f], axis=1)], axis=1)
    _q(ex, ex.reshape(y, ex.shape_of(x_f)), ex.outputs[0], *_y_params(ex))


# ----------------------------------------------------------------- pooling

@register_exporter("Int8AveragePool", "Int8AveragePoolRelu", "Int8MaxPool", "Int8MaxPoolRelu",
                   onnx_form=_QDQ % "AveragePool (count_include_pad=1, as QNNPACK) / MaxPool or their Global "
                                    "forms in NCHW (and Relu)")
def export_pool(ex):
    kind = "Average" if "Average" in ex.type else "Max"
    x_f = _nchw(ex, _dq(ex, ex.inputs[0]))
    if ex.args.bool("global_pooling"):
        y = ex.node("Global%sPool" % kind, [x_f])
    else:
        kernel, strides, pads, _ = conv_geometry(ex.args, 2)
        extra = {"count_include_pad": 1} if kind == "Average" else {}
        y = ex.node("%sPool" % kind, [x_f], kernel_shape=kernel, strides=strides, pads=pads, **extra)
    if ex.type.endswith("Relu"):
        y = ex.node("Relu", [y])
    params = _y_params(ex) if kind == "Average" else _params(ex, ex.inputs[0])
    _q(ex, _nhwc(ex, y), ex.outputs[0], *params)


# ----------------------------------------------------------------- layout ops (uint8 as it is)

@register_exporter("Int8Reshape", onnx_form="Reshape of the uint8 tensor (old shape: Shape)")
def export_reshape(ex):
    x = ex.inputs[0]
    target = ex.cast(ex.inputs[1], np.int64) if len(ex.inputs) > 1 else list(ex.args.ints("shape"))
    ex.reshape(x, target, ex.outputs[0])
    _keep(ex, ex.outputs[0], x)
    if len(ex.outputs) > 1:
        ex.node("Shape", [x], [ex.outputs[1]])


@register_exporter("Int8Flatten", onnx_form="Flatten (axis) of the uint8 tensor")
def export_flatten(ex):
    ex.node("Flatten", [ex.inputs[0]], [ex.outputs[0]], axis=ex.args.int("axis", 1))
    _keep(ex, ex.outputs[0], ex.inputs[0])


@register_exporter("Int8Transpose", onnx_form="Transpose of the uint8 tensor")
def export_transpose(ex):
    rank = ex.need_rank(ex.inputs[0], "the default permutation reverses the dims")
    axes = list(ex.args.ints("axes") or list(range(rank))[::-1])
    ex.transpose(ex.inputs[0], [a % rank for a in axes], ex.outputs[0])
    _keep(ex, ex.outputs[0], ex.inputs[0])


@register_exporter("Int8Concat", onnx_form="Concat of the uint8 tensors (input 0's quantization, as Caffe2's); "
                                           "split_info a constant")
def export_concat(ex):
    order = ex.args.string("order", "")
    axis = ex.args.int("axis", {"NHWC": 3, "NCHW": 1}.get(order, 0))
    ex.node("Concat", ex.inputs, [ex.outputs[0]], axis=axis)
    _keep(ex, ex.outputs[0], ex.inputs[0])
    if len(ex.outputs) > 1:
        sizes = [ex.need_dims(name, "split_info holds the sizes on the axis", [axis])[axis] for name in ex.inputs]
        ex.node("Identity", [ex.const(np.asarray(sizes, np.int32), "split")], [ex.outputs[1]])


@register_exporter("Int8Slice", onnx_form="Slice of the uint8 tensor (constant bounds from static dims)")
def export_slice(ex):
    x = ex.inputs[0]
    if len(ex.inputs) > 1:
        raise ex.error("starts / ends as inputs are not exported; give them as arguments")
    dims = ex.need_dims(x, "Caffe2's negative slice indices count from the dim's end")
    if ex.args.has("dim"):
        starts, ends = [0] * len(dims), [-1] * len(dims)
        starts[ex.args.int("dim")], ends[ex.args.int("dim")] = ex.args.int("start_idx"), ex.args.int("end_idx")
    else:
        starts, ends = ex.args.ints("starts"), ex.args.ints("ends")
    bounds = slice_bounds(ex.args, dims, starts, ends)
    ex.node("Slice", [x, ex.int64s([s for s, _ in bounds], "starts"), ex.int64s([e for _, e in bounds], "ends"),
                      ex.int64s(list(range(len(dims))), "axes")], [ex.outputs[0]])
    _keep(ex, ex.outputs[0], x)


@register_exporter("Int8ChannelShuffle", onnx_form="Reshape (N, H, W, group, C / group), Transpose, Reshape back")
def export_channel_shuffle(ex):
    x = ex.inputs[0]
    n, h, w, c = ex.need_dims(x, "the shuffle reshapes the channels into groups")
    group = ex.args.int("group", 1)
    grid = ex.reshape(x, [n, h, w, group, c // group])
    ex.reshape(ex.transpose(grid, [0, 1, 2, 4, 3]), [n, h, w, c], ex.outputs[0])
    _keep(ex, ex.outputs[0], x)


@register_exporter("Int8ResizeNearest", onnx_form="Resize (nearest, asymmetric, floor) of the uint8 NHWC tensor "
                                                  "with scales [1, height_scale, width_scale, 1]")
def export_resize_nearest(ex):
    scales = ex.const(np.asarray([1.0, ex.args.float("height_scale", 1.0), ex.args.float("width_scale", 1.0), 1.0],
                                 np.float32), "scales")
    ex.node("Resize", [ex.inputs[0], "", scales], [ex.outputs[0]], mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    _keep(ex, ex.outputs[0], ex.inputs[0])
