"""Caffe2's Int8 layout ops, which move bytes and keep their input's quantization
(Y_scale / Y_zero_point must equal it, as Caffe2 checks): Int8Reshape, Int8Flatten,
Int8Transpose, Int8Concat, Int8Slice, Int8ChannelShuffle, Int8ResizeNearest; and
Int8RoIAlign, which requantizes (Caffe2's integer bilinear sampling). Shape rules are the
float ops' (operators/tensor/), shared."""
import numpy as np

from caffe2py.kernels.cpu.quant import int8_pool as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from ..tensor.caffe2_shape import slice_bounds
from ..tensor.tensor import _flatten_dims, _perm, _resolve_shape
from ._int8 import (Y_ARGS, RequantizationError, describe, int8_input, output, output_params,
                    require_input_params, requant_error, uint8_like)

DT = caffe2_pb2.TensorProto


def _kept(ctx, x):
    """Int8 input 0 whose quantization the output keeps (checked against the arguments)."""
    x = int8_input(ctx, 0, x)
    require_input_params(ctx, x, *_params(ctx))
    return x


def _params(ctx):
    return output_params(ctx)


# ----------------------------------------------------------------- Int8Reshape / Int8Flatten

def _reshape_infer(ctx, ins):
    old = TensorType((len(ins[0].dims),), DT.INT64)
    if ctx.n_inputs == 2:
        return [UNKNOWN, old]
    return [TensorType(_resolve_shape(ctx, ins[0].dims, ctx.ints("shape")), DT.UINT8), old][:ctx.n_outputs]


register_schema(OpSchema(
    "Int8Reshape", num_inputs=(1, 2), num_outputs=(1, 2), allow_inplace={(0, 0)},
    args=(Arg("shape", "ints", None, doc="new shape; 0 copies a dim, one -1 is inferred"),) + Y_ARGS,
    inference=_reshape_infer, inputs=("data", "new_shape"), outputs=("reshaped", "old_shape"),
    doc="Reshape of an Int8 tensor (as Reshape: `shape` or input 1's values); output 1 holds the old shape "
        "(int64)."))


@register_kernel("Int8Reshape")
def int8_reshape(ctx):
    if (ctx.n_inputs == 1) != ctx.has("shape"):
        raise ctx.error("takes the new shape from argument 'shape' or from input 1 (exactly one of them)")
    arg_shape = ctx.ints("shape")

    def run(x, shape_blob=None):
        x = _kept(ctx, x)
        if shape_blob is not None and (not isinstance(shape_blob, np.ndarray) or shape_blob.dtype.kind not in "iu"):
            raise ctx.input_error(1, "the new shape must be an int32/int64 tensor, got %s" % describe(shape_blob))
        target = arg_shape if shape_blob is None else [int(v) for v in shape_blob.reshape(-1)]
        y = output(x.data.reshape(_resolve_shape(ctx, x.shape, target)), x.scale, x.zero_point)
        return (y, np.asarray(x.shape, dtype=np.int64)) if ctx.n_outputs == 2 else y
    return run


register_schema(OpSchema(
    "Int8Flatten", num_inputs=1, num_outputs=1, args=(Arg("axis", "int", 1),) + Y_ARGS,
    inference=lambda ctx, ins: [TensorType(_flatten_dims(ins[0].dims, ctx.int("axis")), DT.UINT8)],
    inputs=("X",), outputs=("Y",),
    doc="2-D view of an Int8 tensor: dims before `axis` times dims from `axis` on."))


@register_kernel("Int8Flatten")
def int8_flatten(ctx):
    axis = ctx.int("axis", 1)

    def run(x):
        x = _kept(ctx, x)
        if not 0 <= axis <= x.ndim:
            raise ctx.input_error(0, "axis %d is out of range for a %d-D tensor" % (axis, x.ndim))
        return output(x.data.reshape(_flatten_dims(x.shape, axis)), x.scale, x.zero_point)
    return run


# ----------------------------------------------------------------- Int8Transpose

register_schema(OpSchema(
    "Int8Transpose", num_inputs=1, num_outputs=1, args=(Arg("axes", "ints", None, doc="permutation; default "
                                                              "reverses"),) + Y_ARGS,
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims[a] for a in _perm(ctx, len(ins[0].dims))), DT.UINT8)],
    inputs=("X",), outputs=("Y",), doc="Permute the dims of an Int8 tensor."))


@register_kernel("Int8Transpose")
def int8_transpose(ctx):
    def run(x):
        x = _kept(ctx, x)
        return output(x.data.transpose(_perm(ctx, x.ndim)).copy(order="C"), x.scale, x.zero_point)
    return run


# ----------------------------------------------------------------- Int8Concat

def _concat_axis(ctx):
    order = ctx.string("order", "")
    return ctx.int("axis", {"NHWC": 3, "NCHW": 1}.get(order, 0))


def _concat_infer(ctx, ins):
    axis = _concat_axis(ctx)
    first = ins[0].dims
    dims = first[:axis] + (sum(t.dims[axis] for t in ins),) + first[axis + 1:]
    return [TensorType(dims, DT.UINT8), TensorType((len(ins),), DT.INT32)][:ctx.n_outputs]


register_schema(OpSchema(
    "Int8Concat", num_inputs=(1, None), num_outputs=(1, 2),
    args=(Arg("axis", "int", None, doc="default 3 with order NHWC, 1 with NCHW, else 0"),
          Arg("order", "string", None)) + Y_ARGS,
    inference=_concat_infer, outputs=("concat_result", "split_info"),
    doc="Join Int8 tensors along `axis`; the output has input 0's quantization, and Caffe2 does not check "
        "the other inputs' (their bytes are copied as they are). Output 1 holds each input's size on the axis."))


@register_kernel("Int8Concat")
def int8_concat(ctx):
    axis = _concat_axis(ctx)

    def run(*xs):
        first = _kept(ctx, xs[0])
        if not 0 <= axis < first.ndim:
            raise ctx.error("axis %d is out of range for %d-D inputs" % (axis, first.ndim))
        datas = [first.data]
        for k, x in enumerate(xs[1:], 1):
            x = int8_input(ctx, k, x)
            a, b = list(first.shape), list(x.shape)
            if len(a) != len(b) or a[:axis] + a[axis + 1:] != b[:axis] + b[axis + 1:]:
                raise ctx.input_error(k, "shape %s does not match input 0's %s for concatenation on axis %d"
                                      % (b, a, axis))
            datas.append(x.data)
        y = output(np.concatenate(datas, axis=axis), first.scale, first.zero_point)
        if ctx.n_outputs == 1:
            return y
        return y, np.asarray([d.shape[axis] for d in datas], dtype=np.int32)
    return run


# ----------------------------------------------------------------- Int8Slice

def _slice_args(ctx, rank):
    if ctx.has("dim") and ctx.has("start_idx") and ctx.has("end_idx"):
        dim = ctx.int("dim")
        if not 0 <= dim < rank:
            raise ctx.error("dim %d is out of range for a %d-D tensor" % (dim, rank))
        starts, ends = [0] * rank, [-1] * rank
        starts[dim], ends[dim] = ctx.int("start_idx"), ctx.int("end_idx")
        return starts, ends
    return ctx.ints("starts"), ctx.ints("ends")


def _slice_infer(ctx, ins):
    if ctx.n_inputs != 1:
        return [UNKNOWN]
    starts, ends = _slice_args(ctx, len(ins[0].dims))
    return [TensorType(tuple(e - s for s, e in slice_bounds(ctx, ins[0].dims, starts, ends)), DT.UINT8)]


register_schema(OpSchema(
    "Int8Slice", num_inputs={1, 3}, num_outputs=1, inputs=("X", "starts", "ends"), outputs=("Y",),
    args=(Arg("starts", "ints", None), Arg("ends", "ints", None), Arg("dim", "int", None),
          Arg("start_idx", "int", None), Arg("end_idx", "int", None)) + Y_ARGS,
    inference=_slice_infer,
    doc="Slice of an Int8 tensor as Slice (starts / ends from the arguments or inputs 1 and 2; a negative "
        "index i means dim + 1 + i), or of one dimension with dim / start_idx / end_idx."))


@register_kernel("Int8Slice")
def int8_slice(ctx):
    from_args = ctx.n_inputs == 1
    if from_args and not ((ctx.has("starts") and ctx.has("ends"))
                          or (ctx.has("dim") and ctx.has("start_idx") and ctx.has("end_idx"))):
        raise ctx.error("needs starts and ends (arguments or inputs), or dim, start_idx and end_idx")

    def run(x, starts=None, ends=None):
        x = _kept(ctx, x)
        if from_args:
            starts, ends = _slice_args(ctx, x.ndim)
        else:
            for k, v in ((1, starts), (2, ends)):
                if not isinstance(v, np.ndarray) or v.dtype not in (np.int32, np.int64) or v.ndim != 1:
                    raise ctx.input_error(k, "must be a 1-D int32/int64 tensor, got %s" % describe(v))
            starts, ends = starts.tolist(), ends.tolist()
        bounds = slice_bounds(ctx, x.shape, starts, ends)
        return output(np.ascontiguousarray(x.data[tuple(slice(s, e) for s, e in bounds)]), x.scale, x.zero_point)
    return run


# ----------------------------------------------------------------- Int8ChannelShuffle

register_schema(OpSchema(
    "Int8ChannelShuffle", num_inputs=1, num_outputs=1,
    args=(Arg("group", "int", 1), Arg("order", "string", "NCHW", doc="must be NHWC")) + Y_ARGS,
    inference=lambda ctx, ins: [uint8_like(ins)], inputs=("X",), outputs=("Y",),
    doc="ShuffleNet's channel shuffle of an NHWC Int8 tensor: the C = group * K channels read as a (group, K) "
        "grid are written out transposed."))


@register_kernel("Int8ChannelShuffle")
def int8_channel_shuffle(ctx):
    if ctx.string("order", "NCHW") != "NHWC":
        raise ctx.error("Int8ChannelShuffle only supports NHWC order, got '%s'" % ctx.string("order", "NCHW"))
    group = ctx.int("group", 1)
    if group < 1:
        raise ctx.error("group must be positive, got %d" % group)

    def run(x):
        x = _kept(ctx, x)
        if x.ndim != 4 or x.shape[3] % group:
            raise ctx.input_error(0, "shape %s: a 4-D NHWC tensor whose %s channels split into %d groups"
                                  % (list(x.shape), x.shape[-1] if x.ndim else 0, group))
        grid = x.data.reshape(-1, group, x.shape[3] // group)
        return output(np.ascontiguousarray(grid.transpose(0, 2, 1)).reshape(x.shape), x.scale, x.zero_point)
    return run


# ----------------------------------------------------------------- Int8ResizeNearest

def _resize_infer(ctx, ins):
    n, h, w, c = ins[0].dims
    return [TensorType((n, int(np.float32(h) * np.float32(ctx.float("height_scale", 1.0))),
                        int(np.float32(w) * np.float32(ctx.float("width_scale", 1.0))), c), DT.UINT8)]


register_schema(OpSchema(
    "Int8ResizeNearest", num_inputs=1, num_outputs=1,
    args=(Arg("width_scale", "float", 1.0), Arg("height_scale", "float", 1.0)) + Y_ARGS,
    inference=_resize_infer, inputs=("X",), outputs=("Y",),
    doc="Nearest-neighbour resize of an NHWC Int8 tensor: output size int(in * scale), each output pixel "
        "copies input min(int(out / scale), in - 1) (float32 arithmetic, as Caffe2's)."))


@register_kernel("Int8ResizeNearest")
def int8_resize_nearest(ctx):
    hs, ws = ctx.float("height_scale", 1.0), ctx.float("width_scale", 1.0)
    if not (hs > 0 and ws > 0 and np.isfinite(hs) and np.isfinite(ws)):
        raise ctx.error("height_scale %r and width_scale %r must be positive and finite" % (hs, ws))

    def run(x):
        x = _kept(ctx, x)
        if x.ndim != 4:
            raise ctx.input_error(0, "Int8ResizeNearest takes a 4-D NHWC tensor, got shape %s" % list(x.shape))
        limit = 1 << 31
        if x.shape[1] * hs >= limit or x.shape[2] * ws >= limit:
            raise ctx.error("output size %g x %g does not fit int32" % (x.shape[1] * hs, x.shape[2] * ws))
        return output(K.resize_nearest(x.data, hs, ws), x.scale, x.zero_point)
    return run


# ----------------------------------------------------------------- Int8RoIAlign

def _roi_infer(ctx, ins):
    return [TensorType((ins[1].dims[0], ctx.int("pooled_h", 1), ctx.int("pooled_w", 1), ins[0].dims[3]), DT.UINT8)]


register_schema(OpSchema(
    "Int8RoIAlign", num_inputs=2, num_outputs=1,
    args=(Arg("order", "string", "NHWC"), Arg("spatial_scale", "float", 1.0), Arg("pooled_h", "int", 1),
          Arg("pooled_w", "int", 1), Arg("sampling_ratio", "int", -1)) + Y_ARGS,
    inference=_roi_infer, inputs=("X", "RoIs"), outputs=("Y",),
    doc="RoIAlign of an NHWC Int8 feature map X over float RoIs (R, 4) or (R, 5) (batch index first) with "
        "Caffe2's integer arithmetic: bilinear weights rounded to x255 bytes, per-bin sums less the zero "
        "point, requantized by a gemmlowp multiplier of X.scale / (Y_scale * 255 * samples). Y (R, pooled_h, "
        "pooled_w, C) with Y_scale / Y_zero_point."))


@register_kernel("Int8RoIAlign")
def int8_roi_align(ctx):
    if ctx.string("order", "NHWC") != "NHWC":
        raise ctx.error("Int8RoIAlign only supports NHWC order, got '%s'" % ctx.string("order"))
    y_scale, y_zp = output_params(ctx)
    spatial_scale = ctx.float("spatial_scale", 1.0)
    ph, pw, ratio = ctx.int("pooled_h", 1), ctx.int("pooled_w", 1), ctx.int("sampling_ratio", -1)
    if not (spatial_scale > 0 and np.isfinite(spatial_scale)) or ph < 1 or pw < 1:
        raise ctx.error("spatial_scale must be positive and pooled_h / pooled_w at least 1, got %r, %d, %d"
                        % (spatial_scale, ph, pw))

    def run(x, rois):
        x = int8_input(ctx, 0, x)
        if x.ndim != 4:
            raise ctx.input_error(0, "Int8RoIAlign takes a 4-D NHWC tensor, got shape %s" % list(x.shape))
        if not isinstance(rois, np.ndarray) or rois.dtype != np.float32:
            raise ctx.input_error(1, "RoIs must be a float32 tensor, got %s" % describe(rois))
        if rois.size == 0:
            return output(np.zeros((0, ph, pw, x.shape[3]), np.uint8), y_scale, y_zp)
        if rois.ndim != 2 or rois.shape[1] not in (4, 5):
            raise ctx.input_error(1, "RoIs must be (R, 4) or (R, 5), got shape %s" % list(rois.shape))
        if not np.all(np.isfinite(rois)):
            raise ctx.input_error(1, "RoIs must be finite")
        if rois.shape[1] == 5:
            batch = rois[:, 0].astype(np.int64)
            if batch.min() < 0 or batch.max() >= x.shape[0]:
                raise ctx.input_error(1, "batch index %d is out of range for %d images"
                                      % (batch[(batch < 0) | (batch >= x.shape[0])][0], x.shape[0]))
        try:
            y = K.roi_align(x.data, x.scale, x.zero_point, rois, spatial_scale, ph, pw, ratio, y_scale, y_zp)
        except RequantizationError as exc:
            raise requant_error(ctx, exc) from None
        return output(y, y_scale, y_zp)
    return run

