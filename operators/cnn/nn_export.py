"""ONNX translations of nn.py's ops: FC / FCTransposed, Conv (and the fused
ConvRelu / ConvSum / ConvSumRelu caffe2py.optimize makes), MaxPool /
AveragePool, SpatialBN (and SpatialBNRelu), LRN, Dropout."""
import numpy as np

from caffe2py.onnx.export_registry import register_exporter

from .._common import LEGACY_CAFFE_POOLING, LEGACY_SAME, LEGACY_VALID, conv_geometry, legacy_pads


# ----------------------------------------------------------------- layout

def _nhwc(ex):
    order = ex.args.string("order", "NCHW")
    if order not in ("NCHW", "NHWC"):
        raise ex.error("order must be NCHW or NHWC, got '%s'" % order)
    return order == "NHWC"


def _to_nchw(ex, x, rank):
    """x (N, spatial..., C) as (N, C, spatial...)."""
    return ex.transpose(x, [0, rank + 1] + list(range(1, rank + 1)))


def _from_nchw(ex, y, rank, out):
    return ex.transpose(y, [0] + list(range(2, rank + 2)) + [1], out)


def _channels_first(ex, x, rank, body):
    """Run body(x_nchw, out_name) in NCHW; an NHWC op transposes around it."""
    if not _nhwc(ex):
        return body(x, ex.outputs[0])
    y = body(_to_nchw(ex, x, rank), ex.temp("nchw"))
    return _from_nchw(ex, y, rank, ex.outputs[0])


# ----------------------------------------------------------------- FC

@register_exporter("FC", "FCTransposed",
                   onnx_form="Gemm (transB=1 for FC); Flatten of X / W when not 2-D at axis / axis_w, "
                             "Reshape of Y to X.shape[:axis] + [N] when axis != 1")
def export_fc(ex):
    x, w, b = ex.inputs
    rank_x = ex.need_rank(x, "FC flattens X at `axis`")
    axis = ex.args.int("axis", 1)
    if not -rank_x <= axis < rank_x:
        raise ex.error("axis %d is out of range for %d-D X" % (axis, rank_x))
    axis %= rank_x
    rank_w = ex.need_rank(w, "FC flattens W at `axis_w`")
    axis_w = ex.args.int("axis_w", 1) % max(rank_w, 1)
    transposed = ex.type == "FCTransposed"
    x2 = x if (rank_x == 2 and axis == 1) else ex.node("Flatten", [x], axis=axis)
    w2 = w if (rank_w == 2 and axis_w == 1) else ex.node("Flatten", [w], axis=axis_w)
    if ex.rank(b) != 1:
        b = ex.reshape(b, [-1])
    if axis == 1:
        ex.node("Gemm", [x2, w2, b], [ex.outputs[0]], transB=0 if transposed else 1)
        return
    y2 = ex.node("Gemm", [x2, w2, b], transB=0 if transposed else 1)
    w_dims = ex.shape(w)
    n = -1
    if w_dims is not None and all(d is not None for d in w_dims):
        n = int(np.prod(w_dims[axis_w:] if transposed else w_dims[:axis_w], dtype=np.int64))
    lead = ex.shape_of(x, 0, axis)
    target = ex.node("Concat", [lead, ex.int64s([n], "n")], axis=0)
    ex.reshape(y2, target, ex.outputs[0])


# ----------------------------------------------------------------- Conv

def _spatial_rank(ex):
    w_rank = ex.rank(ex.inputs[1])
    if w_rank is not None:
        return w_rank - 2
    return ex.need_rank(ex.inputs[0], "the convolution's dimensionality depends on it") - 2


def _explicit_or_auto_pads(ex, x, rank, kernel, strides, pads, dilations, legacy):
    """(pads, auto_pad) for Caffe2's legacy_pad: VALID has none; SAME's pads depend
    on the input size (explicit when it is static, auto_pad SAME_UPPER when not: the
    same rule, the odd pixel at the end)."""
    if legacy == LEGACY_VALID:
        return [0] * (2 * rank), None
    if legacy == LEGACY_SAME:
        dims = ex.shape(x)
        nhwc = _nhwc(ex)
        spatial = None if dims is None else (list(dims[1:-1]) if nhwc else list(dims[2:]))
        if spatial is None or any(d is None for d in spatial) or 0 in kernel:
            return None, "SAME_UPPER"
        return legacy_pads(LEGACY_SAME, spatial, kernel, strides, dilations, pads), None
    return pads, None


def _conv_attrs(ex, rank, kernel_from):
    kernel, strides, pads, dilations = conv_geometry(ex.args, rank, kernel_from=kernel_from)
    if len(kernel) != rank or len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise ex.error("kernel %s, strides %s, pads %s, dilations %s do not fit a %d-D convolution"
                       % (kernel, strides, pads, dilations, rank))
    legacy = ex.args.int("legacy_pad", 0)
    pads, auto_pad = _explicit_or_auto_pads(ex, ex.inputs[0], rank, kernel, strides, pads, dilations, legacy)
    attrs = {"strides": strides, "dilations": dilations}
    if all(k > 0 for k in kernel):
        attrs["kernel_shape"] = kernel
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = pads
    return attrs, legacy


@register_exporter("Conv", "ConvRelu", "ConvSum", "ConvSumRelu",
                   onnx_form="Conv (group, dilations, pads; legacy_pad VALID as zero pads, SAME as its pads "
                             "or auto_pad SAME_UPPER); NHWC through Transposes; ConvRelu adds Relu, "
                             "ConvSum(Relu) Add (and Relu)")
def export_conv(ex):
    if ex.args.has("concat_channels"):
        raise ex.error("a Conv that writes into a concat buffer (concat_channels) is not exported; "
                       "export the net before caffe2py.optimize")
    if ex.args.has("shuffle_group"):
        raise ex.error("a Conv that reads its input through a channel shuffle (shuffle_group) is not "
                       "exported; export the net before caffe2py.optimize")
    rank = _spatial_rank(ex)
    x, w = ex.inputs[0], ex.inputs[1]
    nhwc = _nhwc(ex)
    w_dims = ex.shape(w)
    kernel_from = None
    if w_dims is not None and len(w_dims) == rank + 2:
        spatial = w_dims[1:-1] if nhwc else w_dims[2:]
        kernel_from = list(spatial) if all(d is not None for d in spatial) else None
    attrs, _ = _conv_attrs(ex, rank, kernel_from)
    group = ex.args.int("group", 1)
    fused_sum = ex.type in ("ConvSum", "ConvSumRelu")
    relu = ex.type in ("ConvRelu", "ConvSumRelu")
    bias = ex.inputs[2:3] if len(ex.inputs) >= 3 else []

    def body(x_nchw, out):
        w_nchw = _to_nchw(ex, w, rank) if nhwc else w
        last = not fused_sum and not relu
        y = ex.node("Conv", [x_nchw, w_nchw] + bias, [out] if last else None, group=group, **attrs)
        if fused_sum:
            s = ex.inputs[3]
            s = _to_nchw(ex, s, rank) if nhwc else s
            y = ex.node("Add", [y, s], None if relu else [out])
        if relu:
            y = ex.node("Relu", [y], [out])
        return y
    _channels_first(ex, x, rank, body)


# ----------------------------------------------------------------- pooling

@register_exporter("MaxPool", "AveragePool", *("%s%dD" % (p, r) for p in ("MaxPool", "AveragePool") for r in (1, 2, 3)),
                   onnx_form="MaxPool / AveragePool (also Caffe2's MaxPool1D..3D / AveragePool1D..3D "
                             "names; count_include_pad; legacy_pad=3 or ceil_mode as "
                             "ceil_mode=1; MaxPool dilations); global_pooling as "
                             "GlobalMaxPool / GlobalAveragePool; NHWC through Transposes")
def export_pool(ex):
    x = ex.inputs[0]
    rank = ex.need_rank(x, "pooling needs the number of spatial dims") - 2
    kind = "Max" if ex.type.startswith("MaxPool") else "Average"
    if ex.args.bool("global_pooling"):
        _channels_first(ex, x, rank, lambda xc, out: ex.node("Global%sPool" % kind, [xc], [out]))
        return
    kernel, strides, pads, dilations = conv_geometry(ex.args, rank)
    if len(kernel) != rank or any(k <= 0 for k in kernel):
        raise ex.error("kernel %s does not suit %d-D input" % (kernel, rank + 2), blob=x)
    legacy = ex.args.int("legacy_pad", 0)
    pads, auto_pad = _explicit_or_auto_pads(ex, x, rank, kernel, strides, pads, dilations, legacy)
    attrs = {"kernel_shape": kernel, "strides": strides}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = pads
    if legacy == LEGACY_CAFFE_POOLING or ex.args.bool("ceil_mode"):
        attrs["ceil_mode"] = 1
    if any(d != 1 for d in dilations):
        if kind == "Average":      # Caffe2 refuses it; caffe2py's kernel ignores it
            raise ex.error("AveragePool with dilations %s is not exported: Caffe2's pooling has no "
                           "dilation (caffe2py's MaxPool extends it)" % dilations)
        attrs["dilations"] = dilations
    if kind == "Average":
        attrs["count_include_pad"] = int(ex.args.bool("count_include_pad"))
    _channels_first(ex, x, rank, lambda xc, out: ex.node(kind + "Pool", [xc], [out], **attrs))


# ----------------------------------------------------------------- SpatialBN

@register_exporter("SpatialBN", "SpatialBNRelu",
                   onnx_form="BatchNormalization (inference: is_test=1, one output; epsilon); "
                             "SpatialBNRelu adds Relu; NHWC through Transposes")
def export_spatial_bn(ex):
    is_test = ex.args.bool("is_test") if ex.args.has("is_test") else len(ex.outputs) == 1
    if not is_test or len(ex.outputs) != 1:
        raise ex.error("training-mode SpatialBN (is_test=0, five outputs) is not exported; export the "
                       "inference net (is_test=1)")
    x = ex.inputs[0]
    rank = ex.need_rank(x, "batch norm finds the channel axis from it") - 2 if _nhwc(ex) else 0
    eps = ex.args.float("epsilon", 1e-5)
    relu = ex.type == "SpatialBNRelu"

    def body(xc, out):
        y = ex.node("BatchNormalization", [xc] + ex.inputs[1:5], None if relu else [out], epsilon=eps)
        return ex.node("Relu", [y], [out]) if relu else y
    _channels_first(ex, x, rank, body)


# ----------------------------------------------------------------- LRN

@register_exporter("LRN", onnx_form="LRN (size, alpha, beta, bias); NHWC through Transposes; "
                                    "the optional scale output only when nothing reads it")
def export_lrn(ex):
    if len(ex.outputs) == 2 and ex.is_read(1):
        raise ex.error("LRN's second output (scale) has no ONNX form and is read by the net")
    x = ex.inputs[0]
    rank = ex.need_rank(x, "LRN finds the channel axis from it") - 2 if _nhwc(ex) else 0
    attrs = dict(size=ex.args.int("size"), alpha=ex.args.float("alpha"), beta=ex.args.float("beta"),
                 bias=ex.args.float("bias"))
    _channels_first(ex, x, rank, lambda xc, out: ex.node("LRN", [xc], [out], **attrs))


# ----------------------------------------------------------------- Dropout

@register_exporter("Dropout", onnx_form="Identity (is_test=1); Dropout with training_mode=1 "
                                        "(is_test=0); Dropout for the mask output")
def export_dropout(ex):
    x = ex.inputs[0]
    wants_mask = len(ex.outputs) == 2 and ex.is_read(1)
    is_test = ex.args.bool("is_test")
    if is_test and not wants_mask:
        ex.identity(x, ex.outputs[0])
        return
    dtype = ex.dtype(x) or np.dtype(np.float32)
    ratio = ex.scalar(ex.args.float("ratio", 0.5), dtype, "ratio")
    training = ex.scalar(not is_test, np.bool_, "training_mode")
    ex.node("Dropout", [x, ratio, training], ex.outputs)
