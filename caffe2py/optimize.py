"""NetDef rewrites run once at prepare time, before the net is compiled.

    net = optimize(predict_net, blobs)      # also accepts optimize(blobs, predict_net)

`blobs` maps constant blob names (initializers, folded constants) to arrays; the
passes read it and add the new constants they make (never modifying existing
ones). The input NetDef is not modified; the returned copy keeps the net's
external inputs and outputs (new constants are appended to external_input).

Passes, each applied only when the rewrite cannot change results beyond float
rounding:
  * drop_inference_dropout: an ONNX Dropout that cannot be in training mode (no
    training_mode input, or a constant false one) and whose mask nobody reads is
    the identity: the op goes and its readers read its input (so a Conv before it
    can fuse with what follows). Kept when its output is a net output.
  * fold_conv_affine: Conv followed by per-channel affine ops (inference
    BatchNormalization / SpatialBN, Mul or Add by a per-channel constant) folds
    them into the convolution's weights and bias. Needs constant weights and
    parameters, and each intermediate output read by nothing else.
  * merge_affine_chains: a BatchNormalization followed by per-channel constant
    Mul/Add (the Caffe2-exported "BN, scale, shift" pattern) becomes one BN.
  * fuse_conv_relu: Conv followed by Relu becomes one Caffe2 "ConvRelu" op whose
    kernel applies the ReLU in the convolution's output pass; other ONNX Convs
    (auto_pad NOTSET) become Caffe2 Convs, whose kernels own reusable buffers.
  * fuse_bn_relu: an inference BN with constant parameters (left after the folds,
    e.g. DenseNet's pre-activation BN after a Concat) followed by Relu becomes one
    Caffe2 "SpatialBNRelu" with the folded scale/shift (mean 0, var 1, eps 0):
    one fresh array and in-place passes instead of two ops and two arrays.
  * fuse_channel_shuffle: ONNX's Reshape (N, G, K, H, W) -> Transpose (0, 2, 1, 3, 4)
    -> Reshape (N, G*K, H, W) (ShuffleNet's channel shuffle) becomes a Reshape to
    the final shape (a view) and one Caffe2 "ChannelShuffle": one copy in one op
    where there were three ops.
  * fold_shuffle_into_depthwise: a ChannelShuffle (NCHW) whose output only a Caffe2
    depthwise conv reads (one input channel per group: ShuffleNet's 3x3 after each
    shuffle) goes: the conv reads the shuffle's input with `shuffle_group`, its
    kernel taking each input plane through the channel map, and the shuffle's copy
    is gone. Kept when the channels do not split into the groups (the shuffle's
    error stays).
  * place_concat_inputs: convs (Caffe2 Conv/ConvRelu by then) whose outputs only a
    channel Concat reads write straight into the concat's output (`concat_channels`):
    the first allocates it, the others fill their channels in place, and the copy
    the Concat made is gone (SqueezeNet's fire modules, Inception's branches).
  * write_concat_in_place: a channel Concat of convs' outputs and other tensors
    (ShuffleNet's downsampling units: a conv branch and an AveragePool), and a Relu
    that alone reads it: the convs write into the concat's buffer as above (ConvRelu
    when the Relu goes), each other input is copied into its channels by a
    "ChannelWrite" (with the ReLU) where the Concat was; the Concat's copy of the
    convs' channels and the Relu's pass are gone.
  * fuse_conv_sum: a Conv whose output only a two-input Sum/Add reads, and the Relu
    that alone reads that sum, become one "ConvSum"/"ConvSumRelu" op (ResNet's and
    ShuffleNet's residual joins): the addition and the ReLU happen in the
    convolution's output pass instead of two more ops and two more arrays.
"""
import numpy as np

from .kernels.cpu.cnn.norm import bn_affine
from .proto import caffe2_pb2
from .registry import normalize_domain

ONNX = "ai.onnx"
CAFFE2 = ""
_CONV_ONNX_ARGS = {"strides", "pads", "dilations", "group", "kernel_shape", "auto_pad"}


def optimize(predict_net, blobs):
    if isinstance(predict_net, dict):          # the (blobs, net) order is accepted too
        predict_net, blobs = blobs, predict_net
    net = caffe2_pb2.NetDef()
    net.CopyFrom(predict_net)
    drop_inference_dropout(net, blobs)
    fold_conv_affine(net, blobs)
    merge_affine_chains(net, blobs)
    fuse_conv_relu(net, blobs)
    fuse_bn_relu(net, blobs)
    fuse_conv_sum(net, blobs)
    fuse_channel_shuffle(net, blobs)
    fold_shuffle_into_depthwise(net, blobs)
    place_concat_inputs(net, blobs)
    grow_concat_chains(net, blobs)
    write_concat_in_place(net, blobs)
    return net


# ----------------------------------------------------------------- net helpers

def _args(op):
    out = {}
    for a in op.arg:
        if a.HasField("f"):
            out[a.name] = a.f
        elif a.HasField("i"):
            out[a.name] = a.i
        elif a.HasField("s"):
            out[a.name] = a.s.decode("utf-8", "replace")
        elif a.ints:
            out[a.name] = list(a.ints)
        elif a.floats:
            out[a.name] = list(a.floats)
        else:
            out[a.name] = None
    return out


def _readers(net, count=None):
    """blob -> number of reads by ops, nested nets (control-flow bodies) included;
    a blob read twice by one op counts twice."""
    count = {} if count is None else count
    for op in net.op:
        for blob in op.input:
            count[blob] = count.get(blob, 0) + 1
        for a in op.arg:
            for sub in ([a.n] if a.HasField("n") else []) + list(a.nets):
                _readers(sub, count)
    return count


def _sole_reader(net, index, blob, reads, protected):
    """The op after `index` that alone reads `blob`, if the blob has no other use."""
    if blob in protected or reads.get(blob, 0) != 1:
        return None
    for j in range(index + 1, len(net.op)):
        if blob in net.op[j].input:
            return j
        if blob in net.op[j].output:   # rewritten before being read
            return None
    return None


def _new_name(blobs, base):
    name, k = base, 0
    while name in blobs:
        k += 1
        name = "%s_%d" % (base, k)
    return name


def _add_constant(net, blobs, base, value):
    name = _new_name(blobs, base)
    blobs[name] = value
    if net.external_input:
        net.external_input.append(name)
    return name


def _domain(op):
    return normalize_domain(op.domain)


def _const(blobs, name):
    value = blobs.get(name) if name else None
    return value if isinstance(value, np.ndarray) else None


# ----------------------------------------------------------------- affine ops

def _conv_weight(op, blobs):
    """Weights (and bias or None) of a foldable NCHW Conv, else None."""
    if op.type != "Conv" or _domain(op) not in (ONNX, CAFFE2) or len(op.output) != 1:
        return None
    args = _args(op)
    if _domain(op) == CAFFE2 and (args.get("order", "NCHW") != "NCHW"):
        return None
    w = _const(blobs, op.input[1]) if len(op.input) > 1 else None
    if w is None or w.ndim < 3 or w.dtype.kind != "f":
        return None
    b = None
    if len(op.input) > 2 and op.input[2]:
        b = _const(blobs, op.input[2])
        if b is None or b.size != w.shape[0]:
            return None
    return w, b


def _bn_params(op, blobs):
    """(mul, add) per channel for an inference batch norm with constant parameters."""
    args = _args(op)
    if op.type == "BatchNormalization" and _domain(op) == ONNX:
        if any(op.output[1:]) or args.get("training_mode", 0) or not args.get("spatial", 1):
            return None
        if op.op_version and op.op_version < 7 and len(op.output) > 1:
            return None
    elif op.type == "SpatialBN" and _domain(op) == CAFFE2:
        if len(op.output) != 1 or not args.get("is_test", 1) or args.get("order", "NCHW") != "NCHW":
            return None
    else:
        return None
    if len(op.input) != 5:
        return None
    params = [_const(blobs, name) for name in op.input[1:5]]
    if any(p is None for p in params) or len({p.size for p in params}) != 1:
        return None
    return bn_affine(*params, float(args.get("epsilon", 1e-5)), np.float64)


def _channel_vector(const, rank, channels):
    """A constant that broadcasts per channel against an (N, C, ...) tensor of `rank`
    without changing its shape, as a length-`channels` vector; else None."""
    if const.ndim > rank or const.dtype.kind != "f":
        return None
    shape = (1,) * (rank - const.ndim) + const.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(const.reshape(-1).astype(np.float64), (channels,))


def _affine_step(op, blob, blobs, rank, channels):
    """(mul, add) when op applies a per-channel affine map to `blob`, else None."""
    if op.type in ("BatchNormalization", "SpatialBN"):
        if op.input[0] != blob:
            return None
        params = _bn_params(op, blobs)
        if params is None or params[0].size != channels:
            return None
        return params
    if op.type in ("Mul", "Add") and _domain(op) == ONNX and len(op.input) == 2 and len(op.output) == 1:
        if list(op.input).count(blob) != 1:
            return None
        other = op.input[1] if op.input[0] == blob else op.input[0]
        const = _const(blobs, other)
        if const is None or rank is None:
            return None
        vec = _channel_vector(const, rank, channels)
        if vec is None:
            return None
        if op.type == "Mul":
            return vec, np.zeros(channels)
        return np.ones(channels), vec
    return None


def _follow_affine_chain(net, index, blob, blobs, rank, channels, reads, protected):
    """Ops after `index` that form a per-channel affine chain on `blob`:
    ([op indices], mul, add, last output)."""
    mul, add = np.ones(channels), np.zeros(channels)
    chain = []
    while True:
        j = _sole_reader(net, index, blob, reads, protected)
        if j is None:
            break
        step = _affine_step(net.op[j], blob, blobs, rank, channels)
        if step is None:
            break
        m, a = step
        mul, add = mul * m, add * m + a
        chain.append(j)
        index, blob = j, net.op[j].output[0]
    return chain, mul, add, blob


def _remove_ops(net, indices):
    keep = [op for k, op in enumerate(net.op) if k not in set(indices)]
    del net.op[:]
    net.op.extend(keep)


# ----------------------------------------------------------------- passes

def _identity_dropout(op, blobs, reads, protected):
    """Whether this op is an ONNX inference Dropout whose removal nobody can see."""
    if op.type != "Dropout" or _domain(op) != ONNX or not op.input or not op.output or not op.output[0]:
        return False
    if op.op_version and op.op_version < 7 and _args(op).get("is_test", 0) == 0:
        return False                       # opset 1-6 without is_test=1 is training mode
    training = op.input[2] if len(op.input) > 2 else ""
    if training:
        value = _const(blobs, training)
        if value is None or value.size != 1 or bool(value.reshape(-1)[0]):
            return False
    mask = op.output[1] if len(op.output) > 1 else ""
    if mask and (reads.get(mask, 0) or mask in protected):
        return False
    return op.output[0] not in protected


def drop_inference_dropout(net, blobs):
    """Removes identity Dropouts (see the module docstring); returns how many."""
    protected = set(net.external_output)
    dropped = 0
    i = 0
    while i < len(net.op):
        op = net.op[i]
        reads = _readers(net) if op.type == "Dropout" else {}
        if not _identity_dropout(op, blobs, reads, protected):
            i += 1
            continue
        # readers inside control-flow bodies would need renaming there too, and a
        # later write of the input or output name (non-SSA nets) would change what
        # the readers see: both left alone
        top_reads = sum(list(o.input).count(op.output[0]) for o in net.op)
        rewritten = any(op.output[0] in later.output or op.input[0] in later.output for later in net.op[i + 1:])
        if reads.get(op.output[0], 0) != top_reads or rewritten:
            i += 1
            continue
        source, result = op.input[0], op.output[0]
        for later in net.op[i + 1:]:
            for k, name in enumerate(later.input):
                if name == result:
                    later.input[k] = source
        _remove_ops(net, [i])
        dropped += 1
    return dropped


def fold_conv_affine(net, blobs):
    """Conv -> (BN | per-channel Mul | per-channel Add)* becomes one Conv with new weights."""
    protected = set(net.external_output)
    folded = 0
    i = 0
    while i < len(net.op):
        op = net.op[i]
        wb = _conv_weight(op, blobs)
        if wb is None:
            i += 1
            continue
        w, b = wb
        reads = _readers(net)
        chain, mul, add, last = _follow_affine_chain(net, i, op.output[0], blobs, w.ndim, w.shape[0],
                                                     reads, protected)
        if chain:
            shape = (-1,) + (1,) * (w.ndim - 1)
            new_w = (w.astype(np.float64) * mul.reshape(shape)).astype(w.dtype)
            base_b = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
            new_b = (base_b * mul + add).astype(w.dtype)
            w_name = _add_constant(net, blobs, op.input[1] + "_folded", new_w)
            b_name = _add_constant(net, blobs, op.output[0] + "_folded_bias", new_b)
            del op.input[1:]
            op.input.extend([w_name, b_name])
            op.output[0] = last
            _remove_ops(net, chain)
            folded += len(chain)
        i += 1
    return folded


def _ranks(net, blobs):
    """Tensor rank per blob where it follows from constants and conv weights."""
    rank = {name: v.ndim for name, v in blobs.items() if isinstance(v, np.ndarray)}
    same_as_first = {"Relu", "BatchNormalization", "SpatialBN", "MaxPool", "AveragePool", "Dropout", "LRN",
                     "Concat", "Sum", "Add", "Mul", "Sub", "Div", "Sigmoid", "Tanh", "LeakyRelu", "Clip",
                     "ConvRelu", "InstanceNormalization"}
    for op in net.op:
        if op.type in ("Conv", "ConvRelu") and len(op.input) > 1 and op.input[1] in rank:
            r = rank[op.input[1]]
        elif op.type in same_as_first and op.input and op.input[0] in rank:
            r = rank[op.input[0]]
            if op.type in ("Sum", "Add", "Mul", "Sub", "Div"):
                others = [rank.get(x) for x in op.input]
                r = None if None in others else max(others)
        else:
            r = None
        for k, out in enumerate(op.output):
            if r is not None and k == 0:
                rank[out] = r
            else:
                rank.pop(out, None)
    return rank


def merge_affine_chains(net, blobs):
    """BN -> per-channel Mul/Add chain (not after a conv) becomes one BN with eps 0."""
    protected = set(net.external_output)
    merged = 0
    i = 0
    while i < len(net.op):
        op = net.op[i]
        params = _bn_params(op, blobs) if op.type in ("BatchNormalization", "SpatialBN") else None
        if params is None:
            i += 1
            continue
        ranks = _ranks(net, blobs)
        channels = params[0].size
        chain, mul, add, last = _follow_affine_chain(net, i, op.output[0], blobs, ranks.get(op.input[0]),
                                                     channels, _readers(net), protected)
        if chain:
            mul, add = params[0] * mul, params[1] * mul + add
            dtype = blobs[op.input[1]].dtype
            names = [_add_constant(net, blobs, op.output[0] + suffix, value.astype(dtype))
                     for suffix, value in (("_merged_scale", mul), ("_merged_bias", add),
                                           ("_merged_mean", np.zeros_like(mul)), ("_merged_var", np.ones_like(mul)))]
            del op.input[1:]
            op.input.extend(names)
            for a in op.arg:
                if a.name == "epsilon":
                    a.f = 0.0
            if not any(a.name == "epsilon" for a in op.arg):
                op.arg.add(name="epsilon", f=0.0)
            op.output[0] = last
            _remove_ops(net, chain)
            merged += len(chain)
        i += 1
    return merged


def _caffe2_conv_args(op):
    """Caffe2 Conv arguments equivalent to this conv's, or None when there are none."""
    args = _args(op)
    if _domain(op) == CAFFE2:
        if args.get("legacy_pad", 0) or args.get("order", "NCHW") != "NCHW":
            return None
        return list(op.arg)
    if set(args) - _CONV_ONNX_ARGS or args.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return None
    keep = []
    for a in op.arg:
        if a.name in ("strides", "pads", "dilations", "group"):
            keep.append(a)
    return keep


def fuse_conv_relu(net, blobs):
    """Conv -> Relu becomes a Caffe2 ConvRelu op (ReLU applied in the output pass);
    every other ONNX Conv becomes the equivalent Caffe2 Conv, whose kernel keeps its
    padding and im2col buffers between runs."""
    protected = set(net.external_output)
    fused = 0
    i = 0
    while i < len(net.op):
        op = net.op[i]
        args = _caffe2_conv_args(op) if op.type == "Conv" and _domain(op) in (ONNX, CAFFE2) \
            and len(op.output) == 1 else None
        if args is None:
            i += 1
            continue
        j = _sole_reader(net, i, op.output[0], _readers(net), protected)
        relu = net.op[j] if j is not None else None
        if relu is None or relu.type != "Relu" or _domain(relu) not in (ONNX, CAFFE2) or len(relu.input) != 1:
            relu = None
            if _domain(op) == CAFFE2:
                i += 1
                continue
        new = caffe2_pb2.OperatorDef(type="ConvRelu" if relu is not None else "Conv", name=op.name)
        new.input.extend(x for x in op.input if x)
        new.output.append(relu.output[0] if relu is not None else op.output[0])
        new.arg.extend(args)
        if op.HasField("device_option"):
            new.device_option.CopyFrom(op.device_option)
        new.engine = op.engine if _domain(op) == CAFFE2 else ""
        net.op[i].CopyFrom(new)
        if relu is not None:
            _remove_ops(net, [j])
            fused += 1
        i += 1
    return fused


def fuse_bn_relu(net, blobs):
    """Inference BN (constant parameters, NCHW) -> Relu becomes one Caffe2
    SpatialBNRelu whose scale/bias are the folded multiplier/offset."""
    protected = set(net.external_output)
    fused = 0
    i = 0
    while i < len(net.op):
        op = net.op[i]
        params = _bn_params(op, blobs) if op.type in ("BatchNormalization", "SpatialBN") else None
        j = _sole_reader(net, i, op.output[0], _readers(net), protected) if params is not None else None
        relu = net.op[j] if j is not None else None
        if relu is None or relu.type != "Relu" or _domain(relu) not in (ONNX, CAFFE2) or len(relu.input) != 1:
            i += 1
            continue
        dtype = blobs[op.input[1]].dtype
        mul, add = params
        names = [_add_constant(net, blobs, op.output[0] + suffix, value.astype(dtype))
                 for suffix, value in (("_bnrelu_scale", mul), ("_bnrelu_bias", add),
                                       ("_bnrelu_mean", np.zeros_like(mul)), ("_bnrelu_var", np.ones_like(mul)))]
        new = caffe2_pb2.OperatorDef(type="SpatialBNRelu", name=op.name)
        new.input.extend([op.input[0]] + names)
        new.output.append(relu.output[0])
        new.arg.add(name="is_test", i=1)
        new.arg.add(name="epsilon", f=0.0)
        if op.HasField("device_option"):
            new.device_option.CopyFrom(op.device_option)
        net.op[i].CopyFrom(new)
        _remove_ops(net, [j])
        fused += 1
        i += 1
    return fused


def _writes_between(net, start, stop, blobs):
    """Whether an op strictly between indices start and stop writes any of `blobs`."""
    return any(out in blobs for op in net.op[start + 1:stop] for out in op.output)


def fuse_conv_sum(net, blobs):
    """Caffe2 Conv (no activation) -> two-input Sum/Add -> [Relu] becomes one
    ConvSum / ConvSumRelu at the Sum's position (the other operand may be computed
    after the conv), provided nothing in between rewrites the conv's inputs."""
    protected = set(net.external_output)
    fused = 0
    i = 0
    while i < len(net.op):
        op = net.op[i]
        if op.type != "Conv" or _domain(op) != CAFFE2 or len(op.output) != 1 or len(op.input) < 2 \
                or _caffe2_conv_args(op) is None:
            i += 1
            continue
        reads = _readers(net)
        j = _sole_reader(net, i, op.output[0], reads, protected)
        add = net.op[j] if j is not None else None
        if add is None or len(add.input) != 2 or len(add.output) != 1 or list(add.input).count(op.output[0]) != 1 \
                or not ((add.type == "Sum" and _domain(add) in (ONNX, CAFFE2))
                        or (add.type == "Add" and _domain(add) == ONNX)) \
                or _writes_between(net, i, j, set(op.input)):
            i += 1
            continue
        other = add.input[1] if add.input[0] == op.output[0] else add.input[0]
        k = _sole_reader(net, j, add.output[0], reads, protected)
        relu = net.op[k] if k is not None else None
        if relu is not None and (relu.type != "Relu" or _domain(relu) not in (ONNX, CAFFE2) or len(relu.input) != 1
                                 or _writes_between(net, j, k, set(op.input) | {other})):
            relu = None
        new = caffe2_pb2.OperatorDef(type="ConvSumRelu" if relu is not None else "ConvSum", name=op.name)
        bias = op.input[2] if len(op.input) > 2 and op.input[2] else None
        if bias is None:
            w = _const(blobs, op.input[1])
            if w is None:
                i += 1
                continue
            bias = _add_constant(net, blobs, op.output[0] + "_zero_bias", np.zeros(w.shape[0], w.dtype))
        new.input.extend([op.input[0], op.input[1], bias, other])
        new.output.append(relu.output[0] if relu is not None else add.output[0])
        new.arg.extend(op.arg)
        if op.HasField("device_option"):
            new.device_option.CopyFrom(op.device_option)
        new.engine = op.engine
        last = k if relu is not None else j
        net.op[last].CopyFrom(new)
        _remove_ops(net, [i, j] if relu is not None else [i])
        fused += 1
    return fused


def _shape_constant(op, blobs):
    """The explicit dims of an ONNX Reshape's constant shape input (all positive), else None."""
    if op.type != "Reshape" or _domain(op) != ONNX or len(op.input) != 2 or len(op.output) != 1:
        return None
    shape = _const(blobs, op.input[1])
    if shape is None or shape.dtype.kind not in "iu" or shape.ndim != 1 or (shape <= 0).any():
        return None
    return [int(d) for d in shape]


def fuse_channel_shuffle(net, blobs):
    """Reshape(x, [n, g, k, h, w]) -> Transpose(perm 0,2,1,3,4) -> Reshape(., [n, g*k, h, w])
    becomes Reshape(x, [n, g*k, h, w]) -> ChannelShuffle(group=g). Both spellings
    permute x's values in memory order the same way whatever x's own shape is, so
    the result is the same array; the first Reshape checks the element count as before."""
    protected = set(net.external_output)
    fused = 0
    i = 0
    while i < len(net.op):
        first = net.op[i]
        grid = _shape_constant(first, blobs)
        if grid is None or len(grid) != 5:
            i += 1
            continue
        reads = _readers(net)
        j = _sole_reader(net, i, first.output[0], reads, protected)
        perm = _args(net.op[j]).get("perm") if j is not None else None
        if j is None or net.op[j].type != "Transpose" or _domain(net.op[j]) != ONNX or perm != [0, 2, 1, 3, 4] \
                or len(net.op[j].output) != 1:
            i += 1
            continue
        k = _sole_reader(net, j, net.op[j].output[0], reads, protected)
        last = net.op[k] if k is not None else None
        n, g, kk, h, w = grid
        if last is None or _shape_constant(last, blobs) != [n, g * kk, h, w] \
                or _writes_between(net, i, k, {first.input[0], last.input[1]}):
            i += 1
            continue
        view = caffe2_pb2.OperatorDef()
        view.CopyFrom(last)
        del view.input[:]
        view.input.extend([first.input[0], last.input[1]])
        view.output[0] = _new_name(blobs, last.output[0] + "_grouped")
        shuffle = caffe2_pb2.OperatorDef(type="ChannelShuffle", name=last.name)
        shuffle.input.append(view.output[0])
        shuffle.output.append(last.output[0])
        shuffle.arg.add(name="group", i=g)
        if last.HasField("device_option"):
            shuffle.device_option.CopyFrom(last.device_option)
        ops = [op for index, op in enumerate(net.op) if index not in (i, j, k)]
        at = k - 2                                  # where the last Reshape was, once i and j are gone
        del net.op[:]
        net.op.extend(ops[:at] + [view, shuffle] + ops[at:])
        fused += 1
    return fused


_CAFFE2_CONVS = ("Conv", "ConvRelu", "ConvSum", "ConvSumRelu")


def _depthwise_reader(net, blobs, index, blob, reads, protected):
    """The Caffe2 NCHW depthwise conv (constant 4-D weights with one input channel per
    group) that alone reads `blob`, as its X, after op `index`; else None."""
    j = _sole_reader(net, index, blob, reads, protected)
    op = net.op[j] if j is not None else None
    if op is None or op.type not in _CAFFE2_CONVS or _domain(op) != CAFFE2 or op.input[0] != blob \
            or _caffe2_conv_args(op) is None or "shuffle_group" in _args(op):
        return None
    w = _const(blobs, op.input[1]) if len(op.input) > 1 else None
    if w is None or w.ndim != 4 or w.shape[1] != 1:
        return None
    return j


def fold_shuffle_into_depthwise(net, blobs):
    """ChannelShuffle(x, group=g) -> depthwise conv becomes the conv on x with
    shuffle_group = g. A depthwise conv works per channel, so convolving the shuffled
    channels is convolving x's channels in the shuffled order: the kernel reads its
    input planes through the shuffle's channel map (the same sums, bit for bit).
    Returns the number of shuffles folded."""
    protected = set(net.external_output)
    folded = 0
    i = 0
    while i < len(net.op):
        shuffle = net.op[i]
        args = _args(shuffle)
        if shuffle.type != "ChannelShuffle" or _domain(shuffle) != CAFFE2 or len(shuffle.input) != 1 \
                or len(shuffle.output) != 1 or args.get("order", "NCHW") != "NCHW":
            i += 1
            continue
        group = args.get("group", 1)
        j = _depthwise_reader(net, blobs, i, shuffle.output[0], _readers(net), protected)
        # the conv's group is its input channel count: fold only when the shuffle splits it
        channels = _args(net.op[j]).get("group", 1) if j is not None else 0
        if j is None or not isinstance(group, int) or group < 1 or channels % group \
                or _writes_between(net, i, j, {shuffle.input[0]}):
            i += 1
            continue
        conv = net.op[j]
        conv.input[0] = shuffle.input[0]
        conv.arg.add(name="shuffle_group", i=group)
        _remove_ops(net, [i])
        folded += 1
    return folded


def _channel_concat(op):
    """Whether op concatenates NCHW tensors along channels into one output."""
    args = _args(op)
    if op.type != "Concat" or len(op.output) != 1 or len(op.input) < 2:
        return False
    if _domain(op) == ONNX:
        return args.get("axis") == 1
    if _domain(op) == CAFFE2:
        if args.get("add_axis"):
            return False
        axis = args.get("axis", 3 if args.get("order") == "NHWC" else 1)
        return axis == 1 and args.get("order", "NCHW") == "NCHW"
    return False


def place_concat_inputs(net, blobs):
    """Concat(a_1, .., a_k) along channels, each a_i made by a Caffe2 NCHW Conv or ConvRelu
    with constant weights and read by nothing else, becomes those convs writing into
    the concat's output: the earliest conv (in net order) allocates it
    (concat_channels = [total, its offset]), each later one takes it as a 4th input and
    writes its channels in place. Nothing between the first conv and the Concat may
    read or write the output's name, or rewrite a later conv's inputs."""
    protected = set(net.external_output)
    placed = 0
    j = 0
    while j < len(net.op):
        concat = net.op[j]
        if not _channel_concat(concat) or len(set(concat.input)) != len(concat.input):
            j += 1
            continue
        reads = _readers(net)
        producers = []
        for blob in concat.input:
            k = next((i for i in range(j - 1, -1, -1) if blob in net.op[i].output), None)
            op = net.op[k] if k is not None else None
            w = _const(blobs, op.input[1]) if op is not None and len(op.input) > 1 else None
            if (op is None or op.type not in ("Conv", "ConvRelu") or _domain(op) != CAFFE2 or len(op.output) != 1
                    or len(op.input) > 3 or w is None or _caffe2_conv_args(op) is None
                    or reads.get(blob, 0) != 1 or blob in protected
                    or any(a.name == "concat_channels" for a in op.arg)):
                producers = None
                break
            producers.append((k, int(w.shape[0])))
        if not producers:
            j += 1
            continue
        y = concat.output[0]
        first = min(k for k, _ in producers)
        between = net.op[first + 1:j]
        if any(y in op.input or y in op.output for op in between) or any(
                _writes_between(net, k, j, set(net.op[k].input)) for k, _ in producers):
            j += 1
            continue
        total = sum(m for _, m in producers)
        offset = 0
        for k, m in producers:
            _write_conv_into(net, blobs, net.op[k], y, k != first, total, offset)
            offset += m
        _remove_ops(net, [j])
        placed += 1
    return placed


def _write_conv_into(net, blobs, op, buffer, buffer_exists, total, offset):
    """Make conv `op` write its channels into `buffer` at `offset` (of `total`):
    concat_channels, its output renamed, and the buffer as its 4th input when an
    earlier op has made it (a zero bias goes 3rd first when the conv has none)."""
    if len(op.input) < 3:
        w = _const(blobs, op.input[1])
        op.input.append(_add_constant(net, blobs, op.output[0] + "_zero_bias", np.zeros(w.shape[0], w.dtype)))
    if buffer_exists:
        op.input.append(buffer)
    op.output[0] = buffer
    op.arg.add(name="concat_channels", ints=[total, offset])


def _concat_parts(net, blobs, j, reads, protected):
    """For channel Concat j: [(input, producing conv index or None, channels)] when at
    least one input is made by a placeable conv and every other input's channel count
    follows from the net; else None."""
    parts = []
    for blob in net.op[j].input:
        k = _producer(net, j, blob)
        if _placeable_conv(net, blobs, k, blob, reads, protected):
            parts.append((blob, k, int(_const(blobs, net.op[k].input[1]).shape[0])))
            continue
        channels = _channels_of(net, blobs, j, blob)
        if channels is None:
            return None
        parts.append((blob, None, channels))
    convs = [k for _, k, _ in parts if k is not None]
    return parts if convs and len(convs) < len(parts) else None


def write_concat_in_place(net, blobs):
    """Concat(a_1, .., a_k) along channels, some a_i made by placeable convs (see
    _placeable_conv), the others by anything whose channel count follows from the net
    (_channels_of), optionally followed by a Relu that alone reads it: the earliest
    conv allocates the buffer (concat_channels), the later ones write into it, and at
    the Concat's place one ChannelWrite per other input copies it into its channels.
    With the Relu, the convs become ConvRelu, the ChannelWrites apply it (relu=1) and
    the buffer takes the Relu's output name. Nothing between the first conv and the
    last rewritten op may read or write the buffer's name or rewrite a conv's inputs.
    Returns the number of Concats rewritten."""
    protected = set(net.external_output)
    written = 0
    j = 0
    while j < len(net.op):
        concat = net.op[j]
        if not _channel_concat(concat) or len(set(concat.input)) != len(concat.input):
            j += 1
            continue
        reads = _readers(net)
        parts = _concat_parts(net, blobs, j, reads, protected)
        if parts is None:
            j += 1
            continue
        first = min(k for _, k, _ in parts if k is not None)
        y = concat.output[0]
        r = _sole_reader(net, j, y, reads, protected)
        relu = net.op[r] if r is not None else None
        if relu is not None and (relu.type != "Relu" or _domain(relu) not in (ONNX, CAFFE2)
                                 or list(relu.input) != [y] or len(relu.output) != 1):
            relu, r = None, None
        last = r if relu is not None else j
        name = relu.output[0] if relu is not None else y
        span = [op for index, op in enumerate(net.op[first + 1:last], first + 1) if index != j]
        if name in concat.input or any(name in op.input or name in op.output for op in span) or any(
                _writes_between(net, k, j, set(net.op[k].input)) for _, k, _ in parts if k is not None):
            j += 1
            continue
        total = sum(m for _, _, m in parts)
        writes, offset = [], 0
        for blob, k, m in parts:
            if k is None:
                write = caffe2_pb2.OperatorDef(type="ChannelWrite", name=concat.name)
                write.input.extend([blob, name])
                write.output.append(name)
                write.arg.add(name="offset", i=offset)
                if relu is not None:
                    write.arg.add(name="relu", i=1)
                if concat.HasField("device_option"):
                    write.device_option.CopyFrom(concat.device_option)
                writes.append(write)
            else:
                op = net.op[k]
                _write_conv_into(net, blobs, op, name, k != first, total, offset)
                if relu is not None:
                    op.type = "ConvRelu"
            offset += m
        ops = list(net.op)
        del net.op[:]
        net.op.extend(ops[:j] + writes + [op for index, op in enumerate(ops[j + 1:], j + 1) if index != r])
        written += 1
        j += len(writes)
    return written


def _placeable_conv(net, blobs, index, blob, reads, protected):
    """Whether op `index` is a Caffe2 NCHW Conv/ConvRelu with constant weights making
    `blob` for one reader only, which can write into a concat buffer."""
    if index is None:
        return False
    op = net.op[index]
    return (op.type in ("Conv", "ConvRelu") and _domain(op) == CAFFE2 and list(op.output) == [blob]
            and 2 <= len(op.input) <= 3 and _const(blobs, op.input[1]) is not None
            and _const(blobs, op.input[1]).ndim == 4 and _caffe2_conv_args(op) is not None
            and reads.get(blob, 0) == 1 and blob not in protected
            and not any(a.name == "concat_channels" for a in op.arg))


def _producer(net, stop, blob):
    """Index of the last op before `stop` that writes `blob`, or None."""
    return next((i for i in range(stop - 1, -1, -1) if blob in net.op[i].output), None)


def grow_concat_chains(net, blobs):
    """Channel Concats k_1 = Concat(x0, y_1), k_i = Concat(c_(i-1), y_i), with every y_i
    made by a placeable conv (see _placeable_conv) that comes after k_(i-1), at least
    two links, and no c_i written again, become: ChannelBuffer(x0) -> B before the
    first conv; each conv writing its channels into B in place (concat_channels =
    [total, offset], B its 4th input and its output); each c_i = ChannelPrefix(B)
    at k_i's place. Returns the number of chains."""
    protected = set(net.external_output)
    grown = 0
    j = 0
    while j < len(net.op):
        reads = _readers(net)
        chain = []                  # (concat index, conv index, conv channels)
        k = j
        while k < len(net.op):
            op = net.op[k]
            if not _channel_concat(op) or len(op.input) != 2 or op.input[0] == op.input[1]:
                break
            if chain and op.input[0] != net.op[chain[-1][0]].output[0]:
                break
            conv = _producer(net, k, op.input[1])
            if not _placeable_conv(net, blobs, conv, op.input[1], reads, protected) \
                    or conv < (chain[-1][0] if chain else 0):
                break
            chain.append((k, conv, int(_const(blobs, net.op[conv].input[1]).shape[0])))
            # the next link: the first later Concat that reads this one's output first
            out = op.output[0]
            k = next((i for i in range(k + 1, len(net.op)) if _channel_concat(net.op[i])
                      and list(net.op[i].input[:1]) == [out]), len(net.op))
        if len(chain) < 2 or not _chain_is_safe(net, blobs, chain, protected):
            j += 1
            continue
        _grow_chain(net, blobs, chain)
        grown += 1
        j = chain[-1][0] + 2        # past the last link (one op was inserted before it)
    return grown


def _chain_is_safe(net, blobs, chain, protected):
    """The chain's values c_i become views of one buffer: nothing may write them after
    their Concat, the intermediate ones must not be net outputs, and x0 must exist
    before the first conv."""
    outputs = [net.op[k].output[0] for k, _, _ in chain]
    if any(c in protected for c in outputs[:-1]) or len(set(outputs)) != len(outputs):
        return False
    writers = {}
    for op in net.op:
        for blob in op.output:
            writers[blob] = writers.get(blob, 0) + 1
    if any(writers.get(c, 0) != 1 for c in outputs):
        return False
    x0 = net.op[chain[0][0]].input[0]
    first_conv = min(conv for _, conv, _ in chain)
    made = _producer(net, len(net.op), x0)
    return (made is None or made < first_conv) and _channels_of(net, blobs, chain[0][0], x0) is not None


def _grow_chain(net, blobs, chain):
    names = set(blobs) | set(net.external_input) | set(net.external_output)
    for op in net.op:
        names.update(op.input)
        names.update(op.output)
    first = net.op[chain[0][0]]
    x0 = first.input[0]
    buffer = _new_name(names, first.output[0] + "_buffer")
    x0_channels = _channels_of(net, blobs, chain[0][0], x0)
    total = x0_channels + sum(m for _, _, m in chain)
    offset = x0_channels
    for k, conv, m in chain:
        _write_conv_into(net, blobs, net.op[conv], buffer, True, total, offset)
        offset += m
        concat = net.op[k]
        view = caffe2_pb2.OperatorDef(type="ChannelPrefix", name=concat.name)
        view.input.append(buffer)
        view.output.append(concat.output[0])
        view.arg.add(name="channels", i=offset)
        if concat.HasField("device_option"):
            view.device_option.CopyFrom(concat.device_option)
        net.op[k].CopyFrom(view)
    make = caffe2_pb2.OperatorDef(type="ChannelBuffer", name=first.name + "_buffer")
    make.input.append(x0)
    make.output.append(buffer)
    make.arg.add(name="channels", i=total)
    at = min(conv for _, conv, _ in chain)
    ops = list(net.op)
    del net.op[:]
    net.op.extend(ops[:at] + [make] + ops[at:])


# single-input ops that keep an NCHW tensor's channels (the way back from a dense
# block's input to the conv that set its width)
_SAME_CHANNELS = {"MaxPool", "AveragePool", "Relu", "SpatialBN", "SpatialBNRelu", "BatchNormalization"}


def _channels_of(net, blobs, stop, blob, depth=8):
    """The channel count of NCHW `blob` as written before op `stop`, when the ops that
    make it tell it without shapes: a Caffe2 conv (its weights, or its concat buffer),
    through channel-keeping ops (pools, ReLU, BN) and channel Concats; else None."""
    k = _producer(net, stop, blob)
    if k is None or depth == 0:
        return None
    op = net.op[k]
    args = _args(op)
    if op.type in ("Conv", "ConvRelu", "ConvSum", "ConvSumRelu") and _domain(op) == CAFFE2 \
            and args.get("order", "NCHW") == "NCHW":
        if args.get("concat_channels"):
            return int(args["concat_channels"][0])
        w = _const(blobs, op.input[1]) if len(op.input) > 1 else None
        return int(w.shape[0]) if w is not None and w.ndim >= 3 else None
    if op.type == "ChannelPrefix" or op.type == "ChannelBuffer":
        return int(args["channels"])
    if _channel_concat(op):
        parts = [_channels_of(net, blobs, k, b, depth - 1) for b in op.input]
        return None if None in parts else sum(parts)
    if op.type in _SAME_CHANNELS and args.get("order", "NCHW") == "NCHW" and op.input \
            and args.get("global_pooling", 0) in (0, None):
        return _channels_of(net, blobs, k, op.input[0], depth - 1)
    return None
