"""CUDA kernels (device=CUDA) for the embedding lookups, rowwise quantisation,
LSTMUnit, elementwise arithmetic and activations, Softmax, Concat, Transpose,
Gather, FC / MatMul / BatchMatMul (cuBLAS), and the copy ops CopyCPUToGPU,
CopyGPUToCPU, EnsureCPUOutput.

Factories import the CUDA device lazily, so this module loads without PyCUDA;
creating a CUDA op without PyCUDA or a GPU raises a Caffe2Error that says why.
Every kernel reads and writes device arrays on the op's device; each op is one
launch (lengths-based lookups: two, the lengths scan and the lookup; FC: the GEMM
and the bias add). Kernels check indices on the device and the op raises the CPU
op's error text from the status words.
"""
import numpy as np

from caffe2py.errors import Caffe2Error
from caffe2py.registry import CPU, CUDA, OpSchema, register_kernel, register_schema, schema_for

from ._common import legacy_broadcast_shape, same_as_input

SUM_MESSAGE = ("Your input seems to be incorrect: the sum of lengths values should be "
               "the size of the indices tensor, but it appears not.")
_BITS_BY_ITEMSIZE = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}


# --------------------------------------------------------------------------- runtime

class _Runtime:
    """What one CUDA op needs at run time: its device, programs, scratch buffers."""

    def __init__(self, ctx):
        from caffe2py.cuda import adapter, allocator, context, launch, program  # noqa: PLC0415
        self.ctx = ctx
        self.device_id = ctx.device_id
        self.adapter, self.allocator, self.context, self.launch, self.program = (
            adapter, allocator, context, launch, program)
        self.stream = context.stream(self.device_id)
        self._programs = {}
        self._status = None

    def fn(self, source, function, arg_format):
        key = (source, function)
        p = self._programs.get(key)
        if p is None:
            p = self._programs[key] = self.program.Program(source, function, arg_format, self.device_id)
        return p

    def empty(self, shape, dtype):
        return self.adapter.tag(self.allocator.empty(shape, dtype, self.device_id), self.device_id)

    def zero(self, array):
        """Fill with zero bytes on the op's stream."""
        return self.allocator.memset(array, 0, self.device_id)

    def status(self):
        if self._status is None:
            self._status = self.program.ErrorStatus(self.device_id)
        return self._status

    def expect(self, index, value, dtypes=None, what=None):
        """value must be a contiguous device array on this op's device (of dtypes)."""
        ctx = self.ctx
        if not self.adapter.is_device_array(value):
            raise ctx.input_error(index, "expected a CUDA tensor on device %d, got %s; copy it with "
                                  "CopyCPUToGPU or feed it with a CUDA device_option"
                                  % (self.device_id, type(value).__name__))
        if self.adapter.device_id_of(value) != self.device_id:
            raise ctx.input_error(index, "is on CUDA device %d but the op runs on device %d"
                                  % (self.adapter.device_id_of(value), self.device_id))
        if not value.flags.c_contiguous:
            raise ctx.input_error(index, "CUDA kernels need contiguous tensors")
        if dtypes is not None and value.dtype not in dtypes:
            raise ctx.input_error(index, "%s must be %s, got %s" % (
                what or "input", " or ".join(np.dtype(d).name for d in dtypes), value.dtype))
        return value


def _runtime(ctx):
    """The op's runtime; a clear Caffe2Error when PyCUDA or the GPU is missing."""
    try:
        from caffe2py.cuda import context  # noqa: PLC0415
        context.require(ctx.device_id)
    except ImportError as exc:
        raise ctx.error("CUDA kernels need PyCUDA (pip install caffe2py[cuda]): %s" % exc) from None
    except Caffe2Error as exc:
        raise ctx.error("cannot create a CUDA kernel: %s" % exc) from None
    return _Runtime(ctx)


def _ptr(a):
    """A device array's address (0 for None or an empty array, which has no buffer)."""
    return int(a.gpudata) if a is not None and a.gpudata is not None else 0


def _prod(shape):
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _padded(values, n=6, fill=0):
    return list(values) + [fill] * (n - len(values))


# --------------------------------------------------------------------------- SparseLengths*

_LAYOUTS = {"float": "", "fused8": "Fused8BitRowwise", "fused4": "Fused4BitRowwise", "fused2": "Fused2BitRowwise"}
_FUSED_VALUES_PER_BYTE = {"fused8": 1, "fused4": 2, "fused2": 4}
_SLS_FORMAT = "PqqPqPqqPiiPP"


def _register_sls(reduction, layout, offsets):
    name = "SparseLengths%s%s%s" % (reduction, _LAYOUTS[layout], "Idx" if offsets else "")
    weighted, mean = reduction == "WeightedSum", reduction == "Mean"

    @register_kernel(name, device=CUDA)
    def factory(ctx):
        rt = _runtime(ctx)
        include_last = ctx.bool("include_last_offset", True) if offsets else True
        i_idx = 2 if weighted else 1
        i_seg = i_idx + 1

        def run(*ins):
            data, indices, seg = ins[0], ins[i_idx], ins[i_seg]
            weights = ins[1] if weighted else None
            if layout == "float":
                rt.expect(0, data, (np.float32, np.float16), "DATA")
                if data.ndim < 1:
                    raise ctx.input_error(0, "DATA must be at least 1-D")
                kind = "f32" if data.dtype == np.float32 else "f16"
                dim, vec = _prod(data.shape[1:]), 4
                out_tail = tuple(data.shape[1:])
            else:
                rt.expect(0, data, (np.uint8,), "DATA")
                extra = 8 if layout == "fused8" else 4
                if data.ndim != 2:
                    raise ctx.input_error(0, "DATA must be a matrix, got shape %s" % list(data.shape))
                if data.shape[1] <= extra:
                    raise ctx.input_error(0, "DATA must have more than %d columns" % extra)
                kind = layout
                dim = (data.shape[1] - extra) * _FUSED_VALUES_PER_BYTE[layout]
                vec = 4 * _FUSED_VALUES_PER_BYTE[layout]
                out_tail = (dim,)
            rt.expect(i_idx, indices, (np.int32, np.int64), "INDICES")
            if indices.ndim != 1:
                raise ctx.input_error(i_idx, "INDICES must be a vector")
            seg_name = "OFFSETS" if offsets else "LENGTHS"
            rt.expect(i_seg, seg, (np.int32, np.int64) if offsets else (np.int32,), seg_name)
            if seg.ndim != 1:
                raise ctx.input_error(i_seg, "%s must be a vector" % seg_name)
            if weighted:
                rt.expect(1, weights, (np.float32,), "WEIGHTS")
                if weights.ndim != 1:
                    raise ctx.input_error(1, "WEIGHTS must be a vector")
                if weights.shape[0] != indices.shape[0]:
                    raise ctx.input_error(1, "WEIGHTS should have the same length as INDICES." if layout != "float"
                                          else "Weight should have the same length as indices.")
            n_idx = indices.shape[0]
            if n_idx == 0:  # as on the CPU: zeros, once the segments describe no indices
                _check_empty_segments(ctx, i_seg, np.asarray(seg.get()), offsets, include_last)
                n_bags = seg.shape[0] - (1 if offsets and include_last and seg.shape[0] else 0)
                return rt.zero(rt.empty((n_bags,) + out_tail, np.float32))
            status = rt.status()
            if offsets:
                if seg.shape[0] == 0 and include_last:
                    raise ctx.input_error(i_seg, "OFFSETS must have output_size + 1 entries, got none")
                n_bags = seg.shape[0] - 1 if include_last else seg.shape[0]
                offs, n_offsets, otype = seg, seg.shape[0], "o64" if seg.dtype == np.int64 else "o32"
            else:
                n_bags = seg.shape[0]
                offs = rt.empty((n_bags + 1,), np.int64)
                n_offsets, otype = n_bags + 1, "o64"
                scan = rt.fn("embedding", "lengths_to_offsets", "PqPqP")
                scan(rt.launch.scan(n_bags), _ptr(seg), n_bags, _ptr(offs), n_idx, _ptr(status.device))
            out = rt.empty((n_bags,) + out_tail, np.float32)
            if n_bags and dim:
                itype = "i32" if indices.dtype == np.int32 else "i64"
                vectorized = dim % vec == 0 and _ptr(data) % 16 == 0 and _ptr(out) % 16 == 0
                lookup = rt.fn("embedding", "sls_%s_%s_%s" % (kind, itype, otype), _SLS_FORMAT)
                lookup(rt.launch.bags(n_bags, dim, vec if vectorized else 1), _ptr(data), data.shape[0], dim,
                       _ptr(indices), n_idx, _ptr(offs), n_offsets, n_bags, _ptr(weights), int(mean),
                       int(vectorized), _ptr(out), _ptr(status.device))
            pos, code = status.read()  # always: the lengths scan reports too
            if pos is not None:
                bad = int(indices[pos:pos + 1].get()[0])
                raise ctx.input_error(i_idx, "Index %d is out of bounds: %d, range 0 to %d"
                                      % (pos, bad, data.shape[0]))
            if code:
                raise ctx.input_error(i_seg, SUM_MESSAGE if not offsets else
                                      "OFFSETS must be non-decreasing and within INDICES (%d entries)" % n_idx)
            return out
        return run


def _check_empty_segments(ctx, i_seg, seg, offsets, include_last):
    """LENGTHS (or OFFSETS) for an empty INDICES: the CPU kernel's checks."""
    from caffe2py.kernels.cpu.recsys import sparse_lengths as K
    try:
        if offsets:
            if seg.size == 0 and include_last:
                raise K.LookupInputError("lengths", "OFFSETS must have output_size + 1 entries, got none")
            lengths = K.lengths_from_offsets(seg, 0, include_last) if seg.size else np.zeros(0, np.int64)
        else:
            lengths = seg
        if lengths.size and lengths.min() < 0:
            raise K.LookupInputError("lengths", "LENGTHS must be non-negative, got %d" % int(lengths.min()))
        if int(lengths.sum(dtype=np.int64)) != 0:
            raise K.LookupInputError("lengths", SUM_MESSAGE)
    except K.LookupInputError as exc:
        raise ctx.input_error(i_seg, str(exc)) from None


for _offsets in (False, True):
    for _layout in _LAYOUTS:
        for _reduction in ("Sum", "WeightedSum", "Mean"):
            _register_sls(_reduction, _layout, _offsets)


# --------------------------------------------------------------------------- conversions

def _elementwise_launch(rt, n, per_thread=1):
    return rt.launch.elementwise(n, per_thread)


@register_kernel("FloatToFused8BitRowwiseQuantized", device=CUDA)
def float_to_fused8(ctx):
    rt = _runtime(ctx)

    def run(x):
        rt.expect(0, x, (np.float32,))
        if x.ndim < 1:
            raise ctx.input_error(0, "input must have at least one dimension")
        cols = x.shape[-1]
        rows = _prod(x.shape[:-1])
        out = rt.empty(tuple(x.shape[:-1]) + (cols + 8,), np.uint8)
        if rows:
            rt.fn("quantize", "float_to_fused8", "PqqP")(rt.launch.rows(rows, cols, 256), _ptr(x), rows, cols,
                                                         _ptr(out))
        return out
    return run


@register_kernel("Fused8BitRowwiseQuantizedToFloat", device=CUDA)
def fused8_to_float(ctx):
    rt = _runtime(ctx)

    def run(q):
        rt.expect(0, q, (np.uint8,))
        if q.ndim < 1 or q.shape[-1] <= 8:
            raise ctx.input_error(0, "input must have more than 8 columns, got shape %s" % list(q.shape))
        cols = q.shape[-1] - 8
        rows = _prod(q.shape[:-1])
        out = rt.empty(tuple(q.shape[:-1]) + (cols,), np.float32)
        if rows:
            rt.fn("quantize", "fused8_to_float", "PqqP")(_elementwise_launch(rt, rows * cols), _ptr(q), rows, cols,
                                                         _ptr(out))
        return out
    return run


def _register_cast(op_type, function, src, dst):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _runtime(ctx)

        def run(x):
            rt.expect(0, x, (src,))
            out = rt.empty(x.shape, dst)
            if x.size:
                rt.fn("quantize", function, "PqP")(_elementwise_launch(rt, x.size, 2), _ptr(x), x.size, _ptr(out))
            return out
        return run


_register_cast("FloatToHalf", "float_to_half", np.float32, np.float16)
_register_cast("HalfToFloat", "half_to_float", np.float16, np.float32)


# --------------------------------------------------------------------------- LSTMUnit

def _lstm_vector(dtype, d):
    for v in ((4, 1) if dtype == np.float32 else (4, 2, 1)):
        if d % v == 0:
            return v
    return 1


def _lstm_common(rt, ctx, h_prev, c_prev, gates, seq, t, t_index):
    floats = (np.float32, np.float16)
    for k, a in ((0, h_prev), (1, c_prev), (2, gates)):
        rt.expect(k, a, floats)
        if a.ndim != 3 or a.shape[0] != 1:
            raise ctx.input_error(k, "must be shaped [1, N, *], got %s" % list(a.shape))
        if a.dtype != c_prev.dtype:
            raise ctx.input_error(k, "dtype %s differs from cell_t_prev's %s" % (a.dtype, c_prev.dtype))
    n, d = c_prev.shape[1], c_prev.shape[2]
    if h_prev.shape != c_prev.shape:
        raise ctx.input_error(0, "shape %s differs from cell_t_prev's %s" % (list(h_prev.shape), list(c_prev.shape)))
    if gates.shape[1] != n or gates.shape[2] != 4 * d:
        raise ctx.input_error(2, "gates must be [1, %d, %d] (4 * D), got %s" % (n, 4 * d, list(gates.shape)))
    if seq is not None:
        rt.expect(3, seq, (np.int32,), "seq_lengths")
        if seq.size != n:
            raise ctx.input_error(3, "seq_lengths must have N = %d entries, got %d" % (n, seq.size))
    # The kernel reads the timestep's first 4 bytes on the device: an int32, or the
    # low word of a little-endian int64 (timesteps are small and non-negative).
    rt.expect(t_index, t, (np.int32, np.int64), "timestep")
    if t.size != 1:
        raise ctx.input_error(t_index, "timestep must hold one value, got shape %s" % list(t.shape))
    return n, d


@register_kernel("LSTMUnit", device=CUDA)
def lstm_unit(ctx):
    rt = _runtime(ctx)
    with_seq = ctx.bool("sequence_lengths", True)
    if ctx.n_inputs != 4 + int(with_seq):
        raise ctx.error("with sequence_lengths=%d this op takes %d inputs, got %d"
                        % (int(with_seq), 4 + int(with_seq), ctx.n_inputs))
    forget_bias, drop = ctx.float("forget_bias", 0.0), int(ctx.bool("drop_states", False))
    t_index = 4 if with_seq else 3

    def run(h_prev, c_prev, gates, *rest):
        seq = rest[0] if with_seq else None
        t = rest[-1]
        n, d = _lstm_common(rt, ctx, h_prev, c_prev, gates, seq, t, t_index)
        h, c = rt.empty(c_prev.shape, c_prev.dtype), rt.empty(c_prev.shape, c_prev.dtype)
        if n * d:
            v = _lstm_vector(c_prev.dtype, d)
            name = "lstm_unit_%s_v%d" % ("f32" if c_prev.dtype == np.float32 else "f16", v)
            rt.fn("lstm", name, "PPPPPqqfiPP")(_elementwise_launch(rt, n * d, v), _ptr(h_prev), _ptr(c_prev),
                                               _ptr(gates), _ptr(seq), _ptr(t), n, d, forget_bias, drop,
                                               _ptr(h), _ptr(c))
        return h, c
    return run


@register_kernel("LSTMUnitGradient", device=CUDA)
def lstm_unit_gradient(ctx):
    rt = _runtime(ctx)
    with_seq = ctx.bool("sequence_lengths", True)
    if ctx.n_inputs != 8 + int(with_seq):
        raise ctx.error("with sequence_lengths=%d this op takes %d inputs, got %d"
                        % (int(with_seq), 8 + int(with_seq), ctx.n_inputs))
    forget_bias, drop = ctx.float("forget_bias", 0.0), int(ctx.bool("drop_states", False))
    t_index = 4 if with_seq else 3

    def run(h_prev, c_prev, gates, *rest):
        seq = rest[0] if with_seq else None
        t, _h, c, dh, dc = rest[-5:]
        n, d = _lstm_common(rt, ctx, h_prev, c_prev, gates, seq, t, t_index)
        for k, a in ((t_index + 2, c), (t_index + 3, dh), (t_index + 4, dc)):
            rt.expect(k, a, (c_prev.dtype,))
            if a.shape != c_prev.shape:
                raise ctx.input_error(k, "shape %s differs from cell_t_prev's %s" % (list(a.shape), list(c_prev.shape)))
        dh_prev = rt.empty(c_prev.shape, c_prev.dtype)
        dc_prev = rt.empty(c_prev.shape, c_prev.dtype)
        dgates = rt.empty(gates.shape, gates.dtype)
        if n * d:
            v = _lstm_vector(c_prev.dtype, d)
            name = "lstm_unit_gradient_%s_v%d" % ("f32" if c_prev.dtype == np.float32 else "f16", v)
            rt.fn("lstm", name, "PPPPPPPqqfiPPP")(_elementwise_launch(rt, n * d, v), _ptr(c_prev), _ptr(gates),
                                                  _ptr(seq), _ptr(t), _ptr(c), _ptr(dh), _ptr(dc), n, d,
                                                  forget_bias, drop, _ptr(dh_prev), _ptr(dc_prev), _ptr(dgates))
        return dh_prev, dc_prev, dgates
    return run


# --------------------------------------------------------------------------- elementwise

_BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}
_UNARY_OPS = {"Relu": 0, "Sigmoid": 1, "Tanh": 2}
_FLOATS = (np.float32, np.float16)


def _register_binary(op_type, code):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _runtime(ctx)
        legacy = ctx.bool("broadcast", False)
        axis = ctx.int("axis", -1)
        if legacy and ctx.string("axis_str", ""):
            axis = ctx.string("order", "NCHW").index(ctx.string("axis_str"))

        def run(a, b):
            rt.expect(0, a, _FLOATS)
            rt.expect(1, b, (a.dtype,))
            if legacy:
                try:
                    b_shape = tuple(legacy_broadcast_shape(a.shape, b.shape, axis))
                except ValueError as exc:
                    raise ctx.input_error(1, str(exc)) from None
                out_shape = tuple(a.shape)
            else:
                b_shape = tuple(b.shape)
                try:
                    out_shape = tuple(np.broadcast_shapes(a.shape, b.shape))
                except ValueError:
                    raise ctx.error("shapes %s of '%s' and %s of '%s' do not broadcast"
                                    % (list(a.shape), ctx.inputs[0], list(b.shape), ctx.inputs[1])) from None
            out = rt.empty(out_shape, a.dtype)
            n = _prod(out_shape)
            if n == 0:
                return out
            same = tuple(a.shape) == out_shape and b_shape == out_shape
            dims, (sa, sb) = rt.launch.broadcast_strides(out_shape, a.shape, b_shape)
            geometry = [len(dims)] + _padded(dims, fill=1) + _padded(sa) + _padded(sb)
            fn = rt.fn("tensor_ops", "binary_f32" if a.dtype == np.float32 else "binary_f16", "PPPq" + "q" * 19 + "ii")
            fn(_elementwise_launch(rt, n), _ptr(a), _ptr(b), _ptr(out), n, *geometry, code, int(same))
            return out
        return run


for _op, _code in _BINARY_OPS.items():
    _register_binary(_op, _code)


def _register_unary(op_type, code):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _runtime(ctx)

        def run(x):
            rt.expect(0, x, _FLOATS)
            out = rt.empty(x.shape, x.dtype)
            if x.size:
                fn = rt.fn("tensor_ops", "unary_f32" if x.dtype == np.float32 else "unary_f16", "PPqi")
                fn(_elementwise_launch(rt, x.size), _ptr(x), _ptr(out), x.size, code)
            return out
        return run


for _op, _code in _UNARY_OPS.items():
    _register_unary(_op, _code)


@register_kernel("Softmax", device=CUDA)
def softmax(ctx):
    rt = _runtime(ctx)
    axis_arg = ctx.int("axis", 1)

    def run(x):
        rt.expect(0, x, (np.float32,))
        if not -x.ndim <= axis_arg < max(x.ndim, 1):
            raise ctx.input_error(0, "axis %d is out of range for %d-D input" % (axis_arg, x.ndim))
        axis = axis_arg % max(x.ndim, 1)
        rows, cols = _prod(x.shape[:axis]), _prod(x.shape[axis:])
        out = rt.empty(x.shape, np.float32)
        if rows and cols:
            rt.fn("tensor_ops", "softmax_rows", "PqqP")(rt.launch.rows(rows, cols, 1024), _ptr(x), rows, cols, _ptr(out))
        return out
    return run


# --------------------------------------------------------------------------- layout ops

def _bits(rt, ctx, x, index=0):
    bits = _BITS_BY_ITEMSIZE.get(x.dtype.itemsize)
    if bits is None:
        raise ctx.input_error(index, "dtype %s is not supported on CUDA" % x.dtype)
    return bits


@register_kernel("Concat", device=CUDA)
def concat(ctx):
    rt = _runtime(ctx)
    add_axis = ctx.bool("add_axis", False)
    axis_arg = (1 if ctx.string("order") == "NCHW" else 3) if ctx.has("order") and not ctx.has("axis") \
        else ctx.int("axis", 1)
    two = ctx.n_outputs == 2

    def run(*xs):
        first = xs[0]
        for k, x in enumerate(xs):
            rt.expect(k, x, (first.dtype,) if k else None)
        rank = first.ndim + (1 if add_axis else 0)
        if not -rank <= axis_arg < rank:
            raise ctx.input_error(0, "axis %d is out of range for %d-D output" % (axis_arg, rank))
        axis = axis_arg % rank
        for k, x in enumerate(xs[1:], 1):
            a, b = list(first.shape), list(x.shape)
            if not add_axis and len(a) == len(b):
                a.pop(axis)
                b.pop(axis)
            if a != b:
                raise ctx.input_error(k, "shape %s does not match input 0's %s for concatenation on axis %d"
                                      % (list(x.shape), list(first.shape), axis))
        sizes = [1 if add_axis else x.shape[axis] for x in xs]
        if add_axis:
            out_shape = tuple(first.shape[:axis]) + (len(xs),) + tuple(first.shape[axis:])
            inner = _prod(first.shape[axis:])
        else:
            out_shape = tuple(first.shape[:axis]) + (sum(sizes),) + tuple(first.shape[axis + 1:])
            inner = _prod(first.shape[axis + 1:])
        outer = _prod(first.shape[:axis])
        cols = [s * inner for s in sizes]
        out = rt.empty(out_shape, first.dtype)
        out_cols = sum(cols)
        fn = rt.fn("tensor_ops", "concat_" + _bits(rt, ctx, first), "Pqqqqq" + "P" * 8 + "q" * 8)
        begin = 0
        for lo in range(0, len(xs), 8):  # eight inputs per launch
            chunk = list(range(lo, min(lo + 8, len(xs))))
            chunk_cols = sum(cols[k] for k in chunk)
            if outer * chunk_cols:
                fn(_elementwise_launch(rt, outer * chunk_cols), _ptr(out), outer, out_cols, begin, chunk_cols,
                   len(chunk), *(_padded([_ptr(xs[k]) for k in chunk], 8) + _padded([cols[k] for k in chunk], 8)))
            begin += chunk_cols
        if not two:
            return out
        split = rt.adapter.tag(rt.allocator.to_device(np.asarray(sizes, np.int32), rt.device_id), rt.device_id)
        return out, split
    return run


@register_kernel("Transpose", device=CUDA)
def transpose(ctx):
    rt = _runtime(ctx)
    axes_arg = ctx.ints("axes", None) if ctx.has("axes") else None

    def run(x):
        rt.expect(0, x)
        rank = x.ndim
        axes = list(range(rank))[::-1] if not axes_arg else [a % rank if rank else a for a in axes_arg]
        if sorted(axes) != list(range(rank)):
            raise ctx.error("axes %s are not a permutation of %d dims" % (list(axes_arg), rank))
        out = rt.empty(tuple(x.shape[a] for a in axes), x.dtype)
        if x.size == 0:
            return out
        try:
            dims, strides = rt.launch.permuted_strides(list(x.shape), axes)
        except ValueError as exc:
            raise ctx.input_error(0, str(exc)) from None
        fn = rt.fn("tensor_ops", "transpose_" + _bits(rt, ctx, x), "PPq" + "q" * 13)
        fn(_elementwise_launch(rt, x.size), _ptr(x), _ptr(out), x.size,
           len(dims), *(_padded(dims, fill=1) + _padded(strides)))
        return out
    return run


@register_kernel("Gather", device=CUDA)
def gather(ctx):
    rt = _runtime(ctx)
    if ctx.int("axis", 0) != 0:
        raise ctx.error("the CUDA Gather supports axis=0 only")
    if ctx.bool("wrap_indices", False):
        raise ctx.error("the CUDA Gather does not support wrap_indices")

    def run(data, indices):
        rt.expect(0, data)
        rt.expect(1, indices, (np.int32, np.int64), "INDICES")
        if data.ndim < 1:
            raise ctx.input_error(0, "DATA must have more than 0 dims for axis 0")
        inner = _prod(data.shape[1:])
        out = rt.empty(tuple(indices.shape) + tuple(data.shape[1:]), data.dtype)
        if out.size == 0:
            return out
        status = rt.status()
        name = "gather_%s_%s" % (_bits(rt, ctx, data), "i32" if indices.dtype == np.int32 else "i64")
        rt.fn("tensor_ops", name, "PqqPqPP")(_elementwise_launch(rt, out.size), _ptr(data), data.shape[0], inner,
                                             _ptr(indices), indices.size, _ptr(out), _ptr(status.device))
        pos, _ = status.read()
        if pos is not None:
            bad = int(indices.reshape(-1)[pos:pos + 1].get()[0])
            raise ctx.input_error(1, "INDICES element is out of DATA bounds, id=%d axis_dim=%d" % (bad, data.shape[0]))
        return out
    return run


# --------------------------------------------------------------------------- GEMMs

def _gemm(rt, a, b, c, m, n, k, batch=1, trans_a=False, trans_b=False):
    from caffe2py.cuda import cublas  # noqa: PLC0415
    cublas.sgemm_batched(_ptr(a), _ptr(b), _ptr(c), m, n, k, batch, trans_a, trans_b,
                         m * k, k * n, m * n, device_id=rt.device_id)


def _register_fc(op_type, transposed):
    @register_kernel(op_type, device=CUDA)
    def factory(ctx):
        rt = _runtime(ctx)
        axis_arg, axis_w = ctx.int("axis", 1), ctx.int("axis_w", 1)

        def run(x, w, b):
            for i, v in enumerate((x, w, b)):
                rt.expect(i, v, (np.float32,))
            axis = axis_arg % max(x.ndim, 1)
            m, k = _prod(x.shape[:axis]), _prod(x.shape[axis:])
            aw = axis_w % max(w.ndim, 1)
            rows_w, cols_w = _prod(w.shape[:aw]), _prod(w.shape[aw:])
            n, kw = (cols_w, rows_w) if transposed else (rows_w, cols_w)
            if k != kw:
                raise ctx.input_error(1, "W of shape %s needs %d inputs per row but X '%s' of shape %s gives %d"
                                      % (list(w.shape), kw, ctx.inputs[0], list(x.shape), k))
            if b.size != n:
                raise ctx.input_error(2, "bias has %d elements, expected %d" % (b.size, n))
            y = rt.empty(tuple(x.shape[:axis]) + (n,), np.float32)
            if m * n:
                _gemm(rt, x, w, y, m, n, k, trans_b=not transposed)
                rt.fn("tensor_ops", "add_bias_rows", "PPqq")(_elementwise_launch(rt, m * n), _ptr(y), _ptr(b), m, n)
            return y
        return run


_register_fc("FC", transposed=False)
_register_fc("FCTransposed", transposed=True)


@register_kernel("MatMul", device=CUDA)
def matmul(ctx):
    rt = _runtime(ctx)
    ta, tb = bool(ctx.int("trans_a", 0)), bool(ctx.int("trans_b", 0))

    def run(a, b):
        rt.expect(0, a, (np.float32,))
        rt.expect(1, b, (np.float32,))
        if a.ndim != 2 or b.ndim != 2:
            raise ctx.error("the CUDA MatMul takes 2-D inputs, got %s and %s" % (list(a.shape), list(b.shape)))
        m, k = (a.shape[1], a.shape[0]) if ta else a.shape
        kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
        if k != kb:
            raise ctx.input_error(1, "inner dimensions differ: %d vs %d" % (k, kb))
        out = rt.empty((m, n), np.float32)
        _gemm(rt, a, b, out, m, n, k, 1, ta, tb)
        return out
    return run


@register_kernel("BatchMatMul", device=CUDA)
def batch_matmul(ctx):
    rt = _runtime(ctx)
    ta, tb = bool(ctx.int("trans_a", 0)), bool(ctx.int("trans_b", 0))

    def run(a, b):
        rt.expect(0, a, (np.float32,))
        rt.expect(1, b, (np.float32,))
        if a.ndim < 3 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]:
            raise ctx.error("the CUDA BatchMatMul takes inputs of rank >= 3 with equal batch dims, got %s and %s"
                            % (list(a.shape), list(b.shape)))
        m, k = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
        kb, n = (b.shape[-1], b.shape[-2]) if tb else b.shape[-2:]
        if k != kb:
            raise ctx.input_error(1, "inner dimensions differ: %d vs %d" % (k, kb))
        out = rt.empty(tuple(a.shape[:-2]) + (m, n), np.float32)
        _gemm(rt, a, b, out, m, n, k, _prod(a.shape[:-2]), ta, tb)
        return out
    return run


# --------------------------------------------------------------------------- copies

def _copy_schema(name, outputs_device, doc, inputs_device=None):
    if schema_for(name) is None:
        register_schema(OpSchema(name, num_inputs=1, num_outputs=1, inference=same_as_input(0),
                                 inputs_can_cross_devices=True, outputs_device=outputs_device,
                                 inputs_device=inputs_device, doc=doc))


_copy_schema("CopyCPUToGPU", None, "Copy a CPU tensor to the op's CUDA device.", inputs_device=CPU)
_copy_schema("CopyGPUToCPU", CPU, "Copy a CUDA tensor to the host (the output lives on the CPU).")
_copy_schema("EnsureCPUOutput", CPU, "The input as a CPU tensor: copied from the GPU when it lives there.")


@register_kernel("CopyCPUToGPU", device=CUDA)
def copy_cpu_to_gpu(ctx):
    rt = _runtime(ctx)

    def run(x):
        if not isinstance(x, np.ndarray):
            raise ctx.input_error(0, "expected a CPU tensor, got %s" % type(x).__name__)
        return rt.adapter.tag(rt.allocator.to_device(x, rt.device_id), rt.device_id)
    return run


@register_kernel("CopyGPUToCPU", device=CUDA)
def copy_gpu_to_cpu(ctx):
    rt = _runtime(ctx)

    def run(x):
        rt.expect(0, x)
        return rt.allocator.to_host(x, rt.device_id)
    return run


def _ensure_cpu(ctx):
    def run(x):
        if isinstance(x, np.ndarray):
            return x.copy()
        from caffe2py import devices  # noqa: PLC0415
        return devices.to_host(x)
    return run


register_kernel("EnsureCPUOutput")(_ensure_cpu)
register_kernel("EnsureCPUOutput", device=CUDA)(_ensure_cpu)


@register_kernel("Copy", device=CUDA)
def copy_on_device(ctx):
    rt = _runtime(ctx)

    def run(x):
        rt.expect(0, x)
        return rt.allocator.copy(rt.empty(x.shape, x.dtype), x, rt.device_id)
    return run
