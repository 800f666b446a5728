"""CUDA kernels (device=CUDA) of the recommendation ops: the SparseLengths* lookups (float,
half and fused 8/4/2-bit tables; lengths or offsets), the rowwise quantisation and
half conversions, Gather and BatchMatMul (cuBLAS). Lengths-based lookups are two
launches: the lengths scan and the lookup."""
import numpy as np

from caffe2py.registry import CUDA, register_kernel

from .. import _cuda_runtime
from .._cuda_runtime import _elementwise_launch, _bits, _gemm, _prod, _ptr


SUM_MESSAGE = ("Your input seems to be incorrect: the sum of lengths values should be "
               "the size of the indices tensor, but it appears not.")


# --------------------------------------------------------------------------- SparseLengths*

_LAYOUTS = {"float": "", "fused8": "Fused8BitRowwise", "fused4": "Fused4BitRowwise", "fused2": "Fused2BitRowwise"}
_FUSED_VALUES_PER_BYTE = {"fused8": 1, "fused4": 2, "fused2": 4}
_SLS_FORMAT = "PqqPqPqqPiiPP"


def _register_sls(reduction, layout, offsets):
    name = "SparseLengths%s%s%s" % (reduction, _LAYOUTS[layout], "Idx" if offsets else "")
    weighted, mean = reduction == "WeightedSum", reduction == "Mean"

    @register_kernel(name, device=CUDA)
    def factory(ctx):
        rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
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

@register_kernel("FloatToFused8BitRowwiseQuantized", device=CUDA)
def float_to_fused8(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake

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
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake

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
        rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake

        def run(x):
            rt.expect(0, x, (src,))
            out = rt.empty(x.shape, dst)
            if x.size:
                rt.fn("quantize", function, "PqP")(_elementwise_launch(rt, x.size, 2), _ptr(x), x.size, _ptr(out))
            return out
        return run


_register_cast("FloatToHalf", "float_to_half", np.float32, np.float16)
_register_cast("HalfToFloat", "half_to_float", np.float16, np.float32)


@register_kernel("Gather", device=CUDA)
def gather(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
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


@register_kernel("BatchMatMul", device=CUDA)
def batch_matmul(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
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
