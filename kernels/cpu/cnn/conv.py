"""N-d convolution (NCHW) on BLAS.

Public:
    conv_nchw(x, w, b, strides, pads, dilations, group, *, scratch=None, activation=None, residual=None)
        x (N, C, *S), w (M, C/group, *K), b (M,) or None -> (N, M, *out).
        pads: begins then ends, one per spatial dim. activation: None or "relu"
        (applied in the output pass). residual: added before the activation (same
        shape as the output). scratch: a Scratch owned by the caller (one per op) so
        im2col and padding buffers are allocated once, not per run. channel_map (C ints):
        convolve x[:, channel_map] (a channel shuffle folded into the convolution; the
        compiled depthwise kernel reads its planes through the map, other paths gather).
    conv_output_size(size, kernel, stride, pad_begin, pad_end, dilation)
    pad_input(x, pads, value=0.0), windows(x, kernel, strides, dilations)

Strategy, chosen once per geometry (a cached plan holds every slice it copies):
  * on CPUs with 16-lane registers (AVX-512), float32 group-1 1x1s with output
    channels in multiples of 8 (pointwise_conv.takes: maps of 96+ pixels, 7x7 maps with
    512+ outputs) run 8 output channels x 48 pixels in registers, the input read in
    place, over weights packed once (pointwise_conv.py);
  * on the same CPUs, float32 group-1 2-D convs on small maps (panel_conv.takes: the
    blocked branch's kxk convs up to 14x14 outputs, the other 1x1s on 7x7 maps) run 32
    output channels x 12 outputs in registers over packed weight panels
    (panel_conv.py);
  * 1x1, no padding: a plain matmul W (M, C) @ X (C, H*W) per image and group
    (strided 1x1 subsamples first); grouped ones in float, one BLAS GEMM per group on
    the team with bias / residual / ReLU in one pass per group (grouped_pointwise.py);
  * stride-1 2-D with at least twice as many input as output channels: one GEMM of
    the tap-major weights with the flattened padded input, then a compiled
    shift-add of the taps (shift_conv.py);
  * 2-D float32, group 1, C_in >= 16, kernel larger than 1x1 (blocked_direct_wins:
    all but the stride-1 3x3s above 8x8 outputs that Winograd takes, above 14x14 on
    16-lane CPUs; grouped ones with C_in / group >= 16 per group), and short
    reductions (C * kh * kw from DIRECT_MIN_K to DIRECT_MAX_K: 16 -> 64 3x3, 7x7
    stems): a cache-blocked direct convolution whose register blocks of 4
    channels x 24 outputs (8 x 48 with 16 lanes) accumulate in vector registers
    (direct_conv.py), no tap stack;
  * 3x3 stride-1, float32/float64, many channels: Winograd F(4x4, 3x3) from 28x28 outputs, else
    F(2x2, 3x3): 36 or 16 GEMMs on transformed 6x6 / 4x4 tiles (4x / 2.25x fewer
    multiplies), the tile transforms themselves GEMMs with Kronecker matrices;
    transformed filters are cached per weight array, re-made when sampled values
    changed;
  * 2-D depthwise, float32/float64: a compiled kernel (depthwise.py);
  * any other 2-D conv (groups included): the input copied into its
    stride phases with flattened rows, so each tap is a contiguous slice; one strided
    copy per phase stacks the taps and one GEMM per row tile (batched over groups)
    reduces them, bias and ReLU applied on the way out;
  * N-d depthwise: a multiply-add per kernel offset;
  * otherwise (N-d) im2col into a reused buffer, in row tiles small enough to stay
    in cache, then one GEMM per tile (batched over groups) written straight into the
    output.
Padding goes into a zero-bordered buffer that is allocated once: only the
interior is rewritten per run. Every GEMM runs on caffe2py's thread team with its
output pass (bias, residual, ReLU) fused per block (team_gemm.py, jit.py).
"""
import functools
import itertools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..runtime.blas import gemm_entry
from ..runtime.buffers import Scratch, default_scratch, team_work, temp_buffer  # noqa: F401 - Scratch is public here
from .depthwise import channel_map_problem, depthwise_plan
from .direct_conv import direct_is_wide, direct_plan, grouped_direct_plan
from .phases import _copy_phase, subsample
from .grouped_pointwise import direct_grouped_pointwise_plan, grouped_pointwise_product
from .panel_conv import panel_plan
from .pointwise_conv import pointwise_plan
from ..math.epilogue import _crop_rows_numpy, bias_values, finish_channels, finish_rows_into
from ..runtime.output_pool import output_array
from ..runtime.packed_weights import is_stand_in, values_of
from ..runtime.jit import call_gemm, compiled, prange, serial_variant, team, team_blocks, team_size, thread_id
from .shift_conv import shift_plan
from .stem_conv import STEM_MAX_CHANNELS, stem_plan
from ..math.team_gemm import gemm_into
from .winograd import winograd_plan, winograd_tile

# im2col tiles are kept around this size so they stay in L2/L3 while the GEMM reads them.
_TILE_BYTES = 2 << 20
# Tap stacks of the flattened-row 2-D path (one copy per tile, so fewer, bigger tiles).
_FLAT_TILE_BYTES = 4 << 20
# Blocks of the fused path (a tap stack and its product) are kept about this size.
_FLAT_BLOCK_BYTES = 1 << 20
# ... and this size when the products are short (C * kh * kw at most _SHORT_K, the
# 3-channel stems): their GEMMs are memory-bound, so L2-sized blocks win. 2 threads,
# a cache-cold input as inside a net, 1 MB -> 256-384 KB blocks: 3 -> 64 3x3/s2 at 224
# 0.78-0.83 -> 0.71-0.73 ms, 3 -> 24 (ShuffleNet) 0.45-0.47 -> 0.38-0.41, 3 -> 64 7x7/s2
# even (1.88-1.96); wider layers lose with smaller blocks (128 -> 128 3x3/s2 at 56:
# 3.05 -> 3.23 ms at 384 KB).
_SHORT_K_BLOCK_BYTES = 320 << 10
_SHORT_K = 160
# Depthwise tap stacks per channel tile (kept well inside L2).


def pad_input(x, pads, value=0.0):
    """x: (N, C, *spatial); pads: begins then ends, one per spatial dim."""
    k = x.ndim - 2
    if not any(pads):
        return x
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + k]) for i in range(k)]
    return np.pad(x, width, mode="constant", constant_values=value)


def padded_image(scratch, role, img, pads, fill=0.0):
    """img (C, *S) copied into a reused buffer bordered with `fill` (img itself without pads).
    Negative pads crop."""
    k = img.ndim - 1
    if not any(pads):
        return img
    if any(p < 0 for p in pads):
        crop = (slice(None),) + tuple(slice(max(0, -pads[i]), img.shape[1 + i] - max(0, -pads[k + i]))
                                      for i in range(k))
        img = img[crop]
        pads = [max(0, p) for p in pads]
        if not any(pads):
            return img
    shape = (img.shape[0],) + tuple(img.shape[1 + i] + pads[i] + pads[k + i] for i in range(k))
    # The key holds the pads: buffers of one shape padded differently must not mix borders.
    buf = (scratch or default_scratch()).zeros((role, tuple(pads)), shape, img.dtype, fill)
    interior = (slice(None),) + tuple(slice(pads[i], pads[i] + img.shape[1 + i]) for i in range(k))
    buf[interior] = img
    return buf


def windows(x, kernel, strides, dilations):
    """View (N, C, *out, *kernel) of x (already padded)."""
    k = len(kernel)
    span = [(kernel[i] - 1) * dilations[i] + 1 for i in range(k)]
    v = sliding_window_view(x, span, axis=tuple(range(2, 2 + k)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) \
        + tuple(slice(None, None, d) for d in dilations)
    return v[index]


def conv_output_size(size, kernel, stride, pad_begin, pad_end, dilation):
    return (size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) // stride + 1


@functools.lru_cache(maxsize=1)
def _physical_memory_bytes():
    import os
    try:
        return min(1 << 48, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 1 << 48


def memory_bytes():
    """What this process could ever allocate: the machine's memory, or less under an
    address-space limit (ulimit -v). The machine's memory is read once; the limit every
    call, since a process may lower it after its first op (the fuzz workers do)."""
    total = _physical_memory_bytes()
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            total = min(total, soft)
    except (ImportError, OSError, ValueError):
        pass
    return total


def check_window_sizes(x_shape, out_shape, pads, itemsize, pads_input=True):
    """ValueError, before anything is planned or allocated, when the padded input or the
    output of a window op (conv, pool) is larger than this process could ever hold.
    Absurd pads would otherwise reach NumPy's own refusal, worded for NumPy's developers,
    or a plan whose tiles are counted in billions (fuzz mutate:6:224: a 2**31 pad).
    pads_input=False for the pools, which clip their windows and never pad the input."""
    k = len(pads) // 2
    checked = [("the output", tuple(out_shape))]
    if pads_input:
        padded = tuple(x_shape[:2]) + tuple(int(x_shape[2 + i]) + int(pads[i]) + int(pads[k + i])
                                            for i in range(k))
        checked.insert(0, ("the padded input", padded))
    limit = memory_bytes()
    for what, shape in checked:
        count = 1
        for d in shape:                       # Python ints: no wrap-around
            count *= max(int(d), 0)
        if count * itemsize > limit:
            raise ValueError("pads %s make %s %s: %d bytes, more than this process can hold (%d bytes)"
                             % (list(pads), what, list(shape), count * itemsize, limit))


def offset_view(xp, offset, dilations, strides, out_spatial, lead=1):
    """Strided view of xp (lead dims, *padded) holding the input each output position
    reads at kernel offset `offset`."""
    index = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                  for o, d, s, n in zip(offset, dilations, strides, out_spatial))
    return xp[(slice(None),) * lead + index]


def _check_activation(activation):
    if activation not in (None, "relu"):
        raise ValueError("unsupported fused activation '%s'" % activation)


def conv_nchw(x, w, b, strides, pads, dilations, group, *, scratch=None, activation=None, residual=None,
              out=None, channel_map=None):
    """x (N, C, *S), w (M, C/group, *K), b (M,) or None -> (N, M, *out).
    residual: None or an array of the output's shape added before the activation
    (a ResNet-style Conv + Sum [+ Relu] in one op). out: where to write the result (an
    array of its shape and dtype whose images are C-contiguous, e.g. a channel range of
    a concat buffer); a new array by default. channel_map: see the module docstring."""
    _check_activation(activation)
    dtype, plan = _call_plan(x, w, strides, pads, dilations, group)
    if plan is None:
        return _conv_half(_gathered(x, channel_map), values_of(w), b, strides, pads, dilations, group, scratch,
                          activation, residual, out)
    mapped = False
    if channel_map is not None:
        if getattr(plan.compute, "takes_channel_map", False):     # it checks the map itself
            mapped = True
        else:                                   # paths without the map read a gathered copy
            x = _gathered(x, channel_map)
    if residual is not None and tuple(residual.shape) != plan.out_shape:
        raise ValueError("residual of shape %s does not match the output shape %s"
                         % (list(residual.shape), list(plan.out_shape)))
    # the conversions cost a call each even when they return their argument (per-op
    # overhead adds up on small nets: ShuffleNet runs 49 convs)
    if x.dtype != dtype:
        x = x.astype(dtype)
    if w.dtype != dtype or not w.flags.c_contiguous:
        w = _weights_as(w, dtype, plan.compute)
    if out is None:
        out = output_array(plan.out_shape, dtype)
    elif tuple(out.shape) != plan.out_shape or out.dtype != dtype or not all(o.flags.c_contiguous for o in out):
        raise ValueError("output buffer of shape %s (%s) does not take a %s result (%s) with C-contiguous images"
                         % (list(out.shape), out.dtype, list(plan.out_shape), dtype))
    relu = activation == "relu"
    bias = b
    if b is not None and (b.dtype != dtype or b.ndim != 1):
        bias = b.astype(dtype, copy=False).reshape(-1)
    if residual is not None:
        residual = np.ascontiguousarray(residual, dtype=dtype)
    with team():
        if plan.fuses_output:
            # bias, residual and ReLU applied per block while it is in cache (the ReLU
            # waits for a residual the plan cannot add itself)
            takes = residual if plan.takes_residual else None
            fused_relu = relu and (residual is None or takes is not None)
            if mapped:
                plan.compute(x, w, out, scratch or default_scratch(), bias, fused_relu, takes,
                             channel_map=channel_map)
            else:
                plan.compute(x, w, out, scratch or default_scratch(), bias, fused_relu, takes)
            if residual is not None and takes is None:
                finish_channels(out, None, residual, relu)
        else:
            plan.compute(x, w, out, scratch or default_scratch())
            finish_channels(out, bias, residual, relu)
    return out


def _weights_as(w, dtype, compute):
    """w C-contiguous in dtype; a stand-in (packed_weights.py) as it is for a compute
    that packs its weights, else the values it stands for."""
    if is_stand_in(w):
        if w.dtype == dtype and getattr(compute, "takes_stand_ins", False):
            return w
        w = values_of(w)
    return np.ascontiguousarray(w, dtype=dtype)


# (x shape, x dtype, w shape, w dtype, strides, pads, dilations, group) -> (dtype, plan):
# one dict lookup per call instead of np.result_type and _plan's argument conversions
_CALL_PLANS = {}
_CALL_PLANS_LIMIT = 1024


def _call_plan(x, w, strides, pads, dilations, group):
    """(result dtype, _plan's plan) for a conv_nchw call; plan None for float16 (which
    computes in float32). _plan's errors are raised on every call (not cached)."""
    try:
        key = (x.shape, x.dtype, w.shape, w.dtype, strides, pads, dilations, group)
        found = _CALL_PLANS.get(key)
    except TypeError:            # list arguments: unhashable, take the long way
        key = found = None
    if found is not None:
        return found
    dtype = np.result_type(x.dtype, w.dtype)
    found = (dtype, None if dtype == np.float16 else
             _plan(x.shape, w.shape, tuple(strides), tuple(pads), tuple(dilations), group, dtype.str))
    if key is not None:
        if len(_CALL_PLANS) >= _CALL_PLANS_LIMIT:
            _CALL_PLANS.clear()
        _CALL_PLANS[key] = found
    return found


def _gathered(x, channel_map):
    """x[:, channel_map] once the map is checked (NumPy would wrap negative indices)."""
    if channel_map is None:
        return x
    problem = channel_map_problem(channel_map, x.shape[1] if x.ndim > 1 else 0)
    if problem:
        raise ValueError(problem)
    return np.take(x, channel_map, axis=1)


def _conv_half(x, w, b, strides, pads, dilations, group, scratch, activation, residual, out):
    """float16 accumulates in float32 and rounds once at the end, as onnx's reference
    and onnxruntime do (per-tap float16 sums drift by several ulps)."""
    def wide(a):
        return None if a is None else a.astype(np.float32)
    y = conv_nchw(wide(x), wide(w), wide(b), strides, pads, dilations, group, scratch=scratch,
                  activation=activation, residual=wide(residual))
    if out is None:
        return y.astype(np.float16)
    if tuple(out.shape) != y.shape or out.dtype != np.float16:
        raise ValueError("output buffer of shape %s (%s) does not take a %s result (float16)"
                         % (list(out.shape), out.dtype, list(y.shape)))
    out[...] = y
    return out


class _Plan:
    """Everything about one convolution geometry that does not depend on values:
    output shape, method and the precomputed slices of every copy it makes."""
    __slots__ = ("out_shape", "compute", "fuses_output", "takes_residual")


def _plan(x_shape, w_shape, strides, pads, dilations, group, dtype):
    """The _Plan of one convolution geometry (cached; `_plan.cache_clear()` forgets every
    plan, also conv_nchw's per-call lookup, after a dispatch switch changed)."""
    return _make_plan(x_shape, w_shape, strides, pads, dilations, group, dtype)


def _clear_plans():
    _make_plan.cache_clear()
    _CALL_PLANS.clear()


_plan.cache_clear = _clear_plans


@functools.lru_cache(maxsize=1024)
def _make_plan(x_shape, w_shape, strides, pads, dilations, group, dtype):
    kernel = tuple(w_shape[2:])
    k = len(kernel)
    if len(x_shape) != k + 2 or len(strides) != k or len(dilations) != k or len(pads) != 2 * k:
        raise ValueError("input shape %s, filter shape %s, strides %s, pads %s and dilations %s do not agree"
                         % (list(x_shape), list(w_shape), list(strides), list(pads), list(dilations)))
    if any(v <= 0 for v in strides + dilations) or group <= 0:
        raise ValueError("strides %s, dilations %s and group %d must be positive"
                         % (list(strides), list(dilations), group))
    if any(kk <= 0 for kk in kernel):
        raise ValueError("filter of shape %s has an empty kernel window" % list(w_shape))
    n, c = x_shape[:2]
    m = w_shape[0]
    out_spatial = tuple(conv_output_size(x_shape[2 + i], kernel[i], strides[i], pads[i], pads[k + i],
                                         dilations[i]) for i in range(k))
    if any(o <= 0 for o in out_spatial):
        padded = [x_shape[2 + i] + pads[i] + pads[k + i] for i in range(k)]
        raise ValueError("kernel %s does not fit the padded input %s" % (list(kernel), padded))
    if c != w_shape[1] * group or m % group:
        raise ValueError("filter of shape %s with group %d does not fit %d input channels"
                         % (list(w_shape), group, c))
    check_window_sizes(x_shape, (n, m) + out_spatial, pads, np.dtype(dtype).itemsize)
    plan = _Plan()
    plan.out_shape = (n, m) + out_spatial
    plan.fuses_output = True
    plan.takes_residual = False
    if BLOCKED_DIRECT and k == 2 and group == 1 and blocked_direct_wins(
            x_shape, w_shape, strides, dilations, pads, out_spatial, dtype) and (
            direct := panel_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)
            or direct_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)):
        plan.compute = direct       # channel panels where they take the conv (small maps, AVX-512)
        plan.takes_residual = True
    elif all(kk == 1 for kk in kernel) and not any(pads) and group == 1 and (
            panel := pointwise_plan(x_shape, w_shape, strides, out_spatial, dtype)
            or panel_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)):
        plan.compute = panel
        plan.takes_residual = True
    elif all(kk == 1 for kk in kernel) and not any(pads):
        plan.compute = direct_grouped_pointwise_plan(x_shape, m, group, strides, out_spatial, dtype) or \
            _pointwise_plan(x_shape, m, strides, group, out_spatial,
                            grouped_pointwise_product(m, group, out_spatial, dtype) or gemm_into)
        plan.takes_residual = True
    # Stems (C_in <= 4, float32, rows of 24+ outputs, any K = C*kh*kw: 27..363) go to
    # stem_conv.py before the other kxk paths. 1 thread, CPU time, loaded 2-CPU Zen 3 VM,
    # median ms before -> after (onnxruntime) (benchmarks/small_conv_bench.py, RESULTS.md
    # "Small convolutions"): 3 -> 64 3x3/s2 1.70 -> 1.56 (1.19), 3 -> 24 3x3/s2 0.81 ->
    # 0.51 (0.45), 3 -> 96 11x11/s4 4.20 -> 3.81 (3.15), 3 -> 96 7x7/s2 6.15 -> 5.90 (5.40),
    # 3 -> 64 3x3 at 224 5.29 -> 4.31 (5.18), 3 -> 64 7x7/s2 pad 3 4.46 -> 3.96 (4.16).
    elif k == 2 and group == 1 and c <= STEM_MAX_CHANNELS and (
            stem := stem_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)):
        plan.compute = stem
        plan.takes_residual = True
    elif k == 2 and group == 1 and all(s == 1 for s in strides) and SHIFT_MIN_CHANNEL_RATIO * m <= c and (
            shift := shift_plan(x_shape, w_shape, pads, dilations, out_spatial, dtype)):
        plan.compute = shift
    elif k == 2 and group == 1 and DIRECT_MIN_K <= c * kernel[0] * kernel[1] <= DIRECT_MAX_K and (
            direct := direct_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)):
        plan.compute = direct
        plan.takes_residual = True
    elif np.dtype(dtype) in (np.float32, np.float64) and (
            tile := winograd_tile(kernel, strides, dilations, pads, group, c, m, out_spatial)):
        plan.compute = winograd_plan(x_shape, w_shape, pads, out_spatial, tile, dtype)
    elif k == 2 and group == c and w_shape[1] == 1 and (
            depthwise := depthwise_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)):
        plan.compute = depthwise
    elif k == 2 and BLOCKED_DIRECT and group > 1 and blocked_direct_wins(
            x_shape, (m // group,) + tuple(w_shape[1:]), strides, dilations, pads, out_spatial, dtype, group) and (
            grouped := grouped_direct_plan(x_shape, w_shape, strides, pads, dilations, group, out_spatial, dtype)):
        plan.compute = grouped
        plan.takes_residual = True
    elif k == 2:
        plan.compute = _flat2d_plan(x_shape, w_shape, strides, pads, dilations, group, out_spatial, dtype)
    elif group == c and group > 1:
        plan.compute = _depthwise_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)
        plan.fuses_output = False
    else:
        plan.compute = _im2col_plan(x_shape, w_shape, strides, pads, dilations, group, out_spatial, dtype)
        plan.fuses_output = False
    return plan


def _padding(x_shape, pads, fill=0.0):
    """(padded per-image shape, interior index, crop index or None) for pads (negative pads crop)."""
    k = len(x_shape) - 2
    crop = None
    if any(p < 0 for p in pads):
        crop = (slice(None),) + tuple(slice(max(0, -pads[i]), x_shape[2 + i] - max(0, -pads[k + i]))
                                      for i in range(k))
        x_shape = x_shape[:2] + tuple(x_shape[2 + i] - max(0, -pads[i]) - max(0, -pads[k + i]) for i in range(k))
        pads = [max(0, p) for p in pads]
    if not any(pads):
        return None, None, crop
    shape = (x_shape[1],) + tuple(x_shape[2 + i] + pads[i] + pads[k + i] for i in range(k))
    interior = (slice(None),) + tuple(slice(pads[i], pads[i] + x_shape[2 + i]) for i in range(k))
    return shape, interior, crop


def _pad_one(img, scratch, role, padding, dtype, fill=0.0):
    shape, interior, crop = padding
    if crop is not None:
        img = img[crop]
    if shape is None:
        return img
    # The interior is part of the key: buffers of one shape padded differently must not mix borders.
    layout = tuple((sl.start, sl.stop) for sl in interior[1:])
    buf = scratch.zeros((role, layout), shape, dtype, fill)
    buf[interior] = img
    return buf


def _offset_index(offset, dilations, strides, out_spatial):
    return (slice(None),) + tuple(slice(o * d, o * d + (nn - 1) * s + 1, s)
                                  for o, d, s, nn in zip(offset, dilations, strides, out_spatial))


def _pointwise_plan(x_shape, m, strides, group, out_spatial, product):
    """1x1 convolutions without padding: per image, product(w (G, M/G, C/G), x (G, C/G,
    P), out (G, M/G, P), bias, residual, relu) (team_gemm.gemm_into, or the grouped
    path of grouped_pointwise.py)."""
    n, c = x_shape[:2]
    p = int(np.prod(out_spatial, dtype=np.int64))
    sub = None if all(s == 1 for s in strides) else \
        (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
    shape_in, shape_w, shape_out = (group, c // group, p), (group, m // group, c // group), (group, m // group, p)

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        wg = w.reshape(shape_w)
        for i in range(n):
            xi = x[i] if sub is None else \
                subsample(x[i], strides, out_spatial) if len(strides) == 2 else x[i][sub[1:]]
            xi = np.ascontiguousarray(xi).reshape(shape_in)
            res = None if residual is None else residual[i].reshape(shape_out)
            product(wg, xi, out[i].reshape(shape_out), bias, res, relu)
    compute.product = product       # which product runs (tests, debugging)
    return compute


def _depthwise_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype):
    """One input channel per group: sum over kernel offsets of weight * shifted input."""
    n, c = x_shape[:2]
    mult = w_shape[0] // c
    kernel = tuple(w_shape[2:])
    k = len(kernel)
    padding = _padding(x_shape, pads)
    offsets = list(itertools.product(*(range(kk) for kk in kernel)))
    src_index = [_offset_index(o, dilations, strides, out_spatial) + (None,) for o in offsets]
    src_index = [(ix[0], None) + ix[1:-1] for ix in src_index]   # (C, 1, *out) views
    w_index = [(slice(None), slice(None)) + o for o in offsets]
    acc_shape = (c, mult) + out_spatial
    wt_shape = (c, mult) + (1,) * k

    def compute(x, w, out, scratch):
        wk = w.reshape((c, mult) + kernel)
        tmp = scratch.empty("dw_tmp", acc_shape, dtype)
        for i in range(n):
            xp = _pad_one(x[i], scratch, "dw_pad", padding, dtype)
            acc = out[i].reshape(acc_shape)
            np.multiply(xp[src_index[0]], wk[w_index[0]].reshape(wt_shape), out=acc)
            for si, wi in zip(src_index[1:], w_index[1:]):
                np.multiply(xp[si], wk[wi].reshape(wt_shape), out=tmp)
                acc += tmp
    return compute


def _tap_progression(k, d, s, phase):
    """Kernel offsets a in range(k) whose input index a*d falls in stride phase `phase`:
    (first a, step, count, first flat row/col, row/col step) - an arithmetic progression."""
    hits = [a for a in range(k) if (a * d) % s == phase]
    step = hits[1] - hits[0] if len(hits) > 1 else 1
    move = (hits[1] * d) // s - (hits[0] * d) // s if len(hits) > 1 else 0
    return hits[0], step, len(hits), (hits[0] * d) // s, move


@compiled
def _stack_channel_taps(row, taps, first, a0, astep, na, b0, bstep, nb, start, amove, bmove):
    """taps[a0 + ia * astep, b0 + ib * bstep, :] = the `length` values of row (one
    channel of a phase buffer, flattened) from first + start + ia * amove + ib * bmove:
    the taps that read this phase, as contiguous copies. taps (kh, kw, length)."""
    length = taps.shape[2]
    for ia in range(na):
        for ib in range(nb):
            at = first + start + ia * amove + ib * bmove
            src = row[at:at + length]
            dst = taps[a0 + ia * astep, b0 + ib * bstep]
            for k in range(length):
                dst[k] = src[k]


@compiled(parallel=True)
def _stack_taps(flat, cols, first, a0, astep, na, b0, bstep, nb, start, amove, bmove, blocks):
    """_stack_channel_taps for every channel of flat (C, L) into cols (C, kh, kw,
    length); channels over the team."""
    c_count = cols.shape[0]
    for t in prange(blocks):
        for c in range(c_count * t // blocks, c_count * (t + 1) // blocks):
            _stack_channel_taps(flat[c], cols[c], first, a0, astep, na, b0, bstep, nb, start, amove, bmove)


def _phase_taps_view(flat, at, na, nb, amove, bmove, length):
    """(C, na, nb, length) read-only view: [c, ia, ib] = flat[c, at + ia * amove + ib * bmove:][:length]."""
    step = flat.strides[1]
    return np.lib.stride_tricks.as_strided(flat[:, at:], (flat.shape[0], na, nb, length),
                                           (flat.strides[0], amove * step, bmove * step, step), writeable=False)


@_stack_taps.numpy_twin
def _stack_taps_numpy(flat, cols, first, a0, astep, na, b0, bstep, nb, start, amove, bmove, blocks):
    length = cols.shape[3]
    cols[:, a0:a0 + (na - 1) * astep + 1:astep, b0:b0 + (nb - 1) * bstep + 1:bstep] = \
        _phase_taps_view(flat, first + start, na, nb, amove, bmove, length)


@compiled(parallel=True)
def _flat_rows(gemm, ilp64, flats, table, w2, bias, has_bias, relu, out, kh, kw, wq, per, blocks, work, stride):
    """The flattened-row conv, group 1, in `blocks` blocks of `per` output rows, each
    on one team thread from start to end: stack the block's taps from the phase
    buffers flats (P, C, rows * wq) (table[p] = a0, astep, na, b0, bstep, nb, start,
    amove, bmove: which taps read phase p, and from where), one GEMM with w2 (M, C*kh*kw),
    then the rows cropped to OW with bias and ReLU into out (M, OH, OW). Buffers are the
    thread's region of `work`, from thread_id() * stride (buffers.team_work; the caller
    owns it, see blas.py)."""
    c_count = flats.shape[1]
    m, oh, ow = out.shape
    k_all = c_count * kh * kw
    for blk in prange(blocks):
        r0 = blk * per
        r1 = min(oh, r0 + per)
        if r1 <= r0:
            continue
        length = (r1 - r0) * wq
        mine = work[thread_id() * stride:thread_id() * stride + stride]   # this thread's region
        cols = mine[0:k_all * length].reshape(c_count, kh, kw, length)
        acc = mine[k_all * per * wq:k_all * per * wq + m * length].reshape(m, length)
        for ph in range(flats.shape[0]):
            a0, astep, na, b0, bstep, nb, start, amove, bmove = table[ph]
            for ci in range(c_count):
                _stack_channel_taps(flats[ph, ci], cols[ci], r0 * wq, a0, astep, na, b0, bstep, nb, start, amove,
                                    bmove)
        call_gemm(gemm, ilp64, False, False, m, length, k_all, 1.0, w2.ctypes.data, k_all, cols.ctypes.data, length,
                  0.0, acc.ctypes.data, length, out)
        for o in range(m):
            bo = bias[o] if has_bias else bias[0] * 0
            for y in range(r1 - r0):
                src = acc[o, y * wq:y * wq + ow]
                dst = out[o, r0 + y]
                for k in range(ow):
                    v = src[k] + bo
                    dst[k] = 0.0 if relu and v < 0 else v


@_flat_rows.numpy_twin
def _flat_rows_numpy(gemm, ilp64, flats, table, w2, bias, has_bias, relu, out, kh, kw, wq, per, blocks, work, stride):
    """All output rows at once: every phase's taps stacked, one product, the crop."""
    c_count = flats.shape[1]
    m, oh, ow = out.shape
    length = oh * wq
    cols = np.empty((c_count, kh, kw, length), out.dtype)
    for ph in range(flats.shape[0]):
        a0, astep, na, b0, bstep, nb, start, amove, bmove = (int(v) for v in table[ph])
        cols[:, a0:a0 + (na - 1) * astep + 1:astep, b0:b0 + (nb - 1) * bstep + 1:bstep] = \
            _phase_taps_view(flats[ph], start, na, nb, amove, bmove, length)
    acc = w2 @ cols.reshape(c_count * kh * kw, length)
    _crop_rows_numpy(acc, bias, has_bias, out, wq, 0, relu, 1)


# Small work runs without a parallel region (prange as range, the same blocks, so the
# same results): on a loaded machine starting one waits until every team thread is
# scheduled (a one-block phase copy of a 4x11x11 image took ~3 ms a call under the
# shared VM's load, ~5 us serial: Caffe2's conv gradient checks run thousands of them)
_stack_taps_serial = serial_variant(_stack_taps, "_stack_taps_serial")


def _flat2d_plan(x_shape, w_shape, strides, pads, dilations, group, out_spatial, dtype):
    """2-D convolution on flattened rows (any group, depthwise included): the input is
    copied straight into its stride phases (one phase at stride 1), zero-bordered
    buffers of width wq whose rows are flattened, so each kernel tap is one contiguous
    slice of oh*wq values. The taps of one phase form a regular grid, so one strided
    copy per phase stacks them all (C, taps, L); a GEMM per group (batched) with the
    (M/g, C/g * taps) weights reduces them. Output columns past the real width (wq - ow
    per row) are computed on the way and dropped when the result is written out. This
    replaces im2col's kh*kw copies with short inner rows by one copy with long rows.
    Output rows are tiled so a tile's tap stack stays cache-sized; each tile's GEMM
    runs on the team."""
    n, c = x_shape[:2]
    m = w_shape[0]
    cg, mg = c // group, m // group
    kh, kw = w_shape[2:]
    (sh, sw), (dh, dw) = strides, dilations
    oh, ow = out_spatial
    _, _, crop = _padding(x_shape, pads)
    h_in = x_shape[2] - max(0, -pads[0]) - max(0, -pads[2])
    w_in = x_shape[3] - max(0, -pads[1]) - max(0, -pads[3])
    pt, pl = max(0, pads[0]), max(0, pads[1])
    hp = h_in + pt + max(0, pads[2])
    wp = w_in + pl + max(0, pads[3])
    hq, wq = -(-hp // sh), -(-wp // sw)
    max_start = ((kh - 1) * dh // sh) * wq + (kw - 1) * dw // sw
    rows = max(hq, max_start // wq + oh + 1)     # room for the last tap's overrun
    item = np.dtype(dtype).itemsize
    phases = sorted({((a * dh) % sh, (b * dw) % sw) for a in range(kh) for b in range(kw)})
    plan = []
    for p0, p1 in phases:
        # Where the input goes in this phase (input index i sits at padded index pad + i).
        i0, j0 = (p0 - pt) % sh, (p1 - pl) % sw
        ni, nj = len(range(i0, h_in, sh)), len(range(j0, w_in, sw))
        q0, r0 = (pt + i0) // sh, (pl + j0) // sw
        src = (slice(None), slice(i0, h_in, sh), slice(j0, w_in, sw))
        dst = (slice(None), slice(q0, q0 + ni), slice(r0, r0 + nj))
        # Which taps read this phase, as a grid in (a, b) and in flat offsets.
        a0, astep, na, arow, amove = _tap_progression(kh, dh, sh, p0)
        b0, bstep, nb, bcol, bmove = _tap_progression(kw, dw, sw, p1)
        # tap (a0 + ia * astep, b0 + ib * bstep) reads the phase from flat offset
        # arow * wq + bcol + ia * amove * wq + ib * bmove
        taps_of_phase = (a0, astep, na, b0, bstep, nb, arow * wq + bcol, amove * wq, bmove)
        plan.append(((p0, p1), src, dst, (i0, sh, j0, sw, q0, ni, r0, nj), taps_of_phase))
    taps = kh * kw
    row_bytes = c * taps * wq * item
    n_tiles = -(-oh * row_bytes // _FLAT_TILE_BYTES)
    rows_per_tile = -(-oh // n_tiles)           # balanced tiles
    tiles = [(r, min(oh, r + rows_per_tile)) for r in range(0, oh, rows_per_tile)]
    w_shape3 = (group, mg, cg * taps)
    compiled_copies = np.dtype(dtype) in (np.float32, np.float64)

    # group 1, float: each team thread stacks the taps of a block of output rows,
    # multiplies and writes them cropped (one parallel region; the block stays in cache)
    entry = gemm_entry(dtype) if group == 1 and compiled_copies else None
    if entry is not None:
        table = np.array([taps_of_phase for *_, taps_of_phase in plan], np.int64)
        phases_key = ("flat_phases", tuple(layout for _, _, _, layout, _ in plan))
        budget = _SHORT_K_BLOCK_BYTES if c * taps <= _SHORT_K else _FLAT_BLOCK_BYTES
        per = max(1, min(-(-oh // team_size()), budget // max(1, (c * taps + m) * wq * item)))
        blocks = team_size() * -(-oh // (team_size() * per))
        per = -(-oh // blocks)
        blocks = -(-oh // per)
        work_size = (c * taps + m) * per * wq

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        """bias: (M,) or None; relu: clamp at zero. Both applied to each result tile
        on its way out (no extra passes over the output)."""
        w3 = w.reshape(w_shape3)
        if entry is not None:
            b = bias_values(bias, dtype)
            for i in range(n):
                img = x[i] if crop is None else x[i][crop]
                phases = scratch.zeros(phases_key, (len(plan), c, rows, wq), dtype)
                for k, (_, _, _, layout, _) in enumerate(plan):
                    _copy_phase(img, phases[k], layout, team_blocks(c * layout[5], layout[7]))
                work, stride = team_work(work_size, dtype)
                with team():
                    _flat_rows(entry.gemm, entry.ilp64, phases.reshape(len(plan), c, rows * wq), table,
                               w3[0], b, bias is not None, relu, out[i], kh, kw, wq, per, blocks, work, stride)
            return
        for i in range(n):
            img = x[i] if crop is None else x[i][crop]
            flats = []
            for ph, src, dst, layout, taps_of_phase in plan:
                buf = scratch.zeros(("flat_phase", ph, layout), (c, rows, wq), dtype)
                if compiled_copies:
                    _copy_phase(img, buf, layout, team_blocks(c * layout[5], layout[7]))
                else:
                    buf[dst] = img[src]
                flats.append((buf.reshape(c, rows * wq), taps_of_phase))
            yi = out[i]
            for r0, r1 in tiles:
                length = (r1 - r0) * wq
                # Tap stacks and results hold nothing between calls: shared per-thread
                # buffers (1.5-2x faster per layer in shufflenet than a buffer per op).
                cols = temp_buffer("flat_cols", (c, kh, kw, length), dtype)
                for flat, taps_of_phase in flats:
                    if compiled_copies:
                        tap_blocks = team_blocks(c, length * kh * kw)
                        (_stack_taps if tap_blocks > 1 else _stack_taps_serial)(flat, cols, r0 * wq,
                                                                                 *taps_of_phase, tap_blocks)
                    else:
                        a0, astep, na, b0, bstep, nb, start, amove, bmove = taps_of_phase
                        cols[:, a0:a0 + (na - 1) * astep + 1:astep, b0:b0 + (nb - 1) * bstep + 1:bstep] = \
                            np.lib.stride_tricks.as_strided(
                                flat[:, start + r0 * wq:], (c, na, nb, length),
                                (flat.strides[0], amove * item, bmove * item, item), writeable=False)
                acc = temp_buffer("flat_acc", (group, mg, length), dtype)
                gemm_into(w3, cols.reshape(group, cg * taps, length), acc)
                finish_rows_into(acc.reshape(m, length), wq, bias, yi, r0, relu)
    return compute


# 2-D float32 convs (group 1) with C * kh * kw in [DIRECT_MIN_K, DIRECT_MAX_K] use the
# register-blocked direct kernel (direct_conv.py). Per layer, bias + ReLU, 1 thread, CPU
# time, shared 2-CPU Zen 3 VM (benchmarks/direct_conv_bench.py; RESULTS.md "Direct
# convolution"), ms without -> with it: 16 -> 64 3x3 at 55 (K 144, Winograd before)
# 1.30-1.50 -> 1.08-1.15, 3 -> 64 7x7/s2 (K 147) 4.7-5.0 -> 4.4. Longer reductions lose
# to Winograd / the flattened-row GEMM: 32 -> 128 at 27 (K 288) 0.97-1.02 -> 1.07-1.27,
# 48 -> 192 at 13 (K 432) 0.58-0.65 -> 0.65-0.69, 64 -> 256 at 13 0.89-0.92 -> 0.94-1.17.
# The K 27 stems gain nothing: 3 -> 24 3x3/s2 0.6-0.78 -> 0.49-0.71 alone, and 3 -> 64
# 3x3/s2 loses inside squeezenet (1.40-1.70 -> 1.79-1.84 ms; its 3.1 MB output is
# written 64 planes at a time), so short ones keep the flattened-row GEMM.
DIRECT_MIN_K = 64
DIRECT_MAX_K = 160

BLOCKED_DIRECT = True       # benchmarks/direct_conv_bench.py --sweep switches it off for its "before"
# Group-1 float32 2-D convs with C_in >= 16, a kernel larger than 1x1 and a reduction
# C * kh * kw >= DIRECT_MIN_K run on the cache-blocked direct kernel (direct_conv.py),
# except where Winograd applies to an output of more than BLOCKED_MAX_WINOGRAD_PIXELS
# (Winograd does 2.25-4x fewer multiplies and won from 12x12 up). Every light-model conv
# with C_in >= 16, 1 thread, CPU time, shared 2-CPU Zen 3 VM, before -> blocked ms
# (onnxruntime), `benchmarks/direct_conv_bench.py --sweep`, RESULTS.md "Cache-blocked
# direct convolution":
#   shift-add before (densenet 128 -> 32 3x3): 56x56 3.53 -> 3.08 (2.65), 28x28 0.89 -> 0.80
#     (0.64), 14x14 0.275 -> 0.250 (0.168), 7x7 0.119 -> 0.095 (0.052);
#   flattened-row GEMM before: 3x3/s2 128@56 5.43 -> 4.22 (3.31), 256@28 4.94 -> 4.44 (3.12),
#     512@14 6.44 -> 5.23 (3.68), 128 -> 160@28 1.31 -> 1.24 (0.92), 96@28 0.84 -> 0.74 (0.50),
#     at 14 even (128 -> 192 0.53 / 0.54, 256 1.43 / 1.45); 5x5 zfnet 96 -> 256/s2 14.7 -> 12.3
#     (9.9), inception_v1 5x5s 16 -> 32@27 0.52 -> 0.38, 32 -> 96@27 2.15 -> 1.79, 24 -> 64@13
#     0.33 -> 0.26, 32 -> 128@13 0.79 -> 0.72, 48 -> 128@6 0.38 -> 0.33;
#   Winograd before, outputs up to 7x7: 512@7 5.15 -> 4.84 (3.69), 224@7 1.18 -> 0.94 (0.59),
#     192 -> 320@7 1.36 -> 1.15, 160 -> 224@7 0.80 -> 0.70, 192 -> 384@6 1.58 -> 0.92,
#     160 -> 320@6 0.80 -> 0.67; from 12x12 up Winograd wins: 256@14 3.39 / 3.99,
#     128@14 0.73 / 1.11, 512@12 7.98 / 10.5, 64 -> 256@13 0.92 / 0.98, vgg19 all 1.4-1.9x.
# 1x1 convs keep the pointwise GEMM: it ran 1.2-1.8x faster than the blocked kernel on every
# light-model 1x1 (the 24-pixel blocks waste up to 47% on 7x7 maps: 49 -> 72 outputs).
# Grouped convs whose groups qualify (no Winograd for them) run the kernel per group:
# alexnet, same conditions, flattened rows -> blocked ms (onnxruntime): 96 -> 256 g2 5x5 at
# 27 9.82 -> 7.65 (5.51), 384 -> 384 g2 3x3 at 13 4.99 -> 4.48 (3.22), 384 -> 256 g2 3.64
# -> 3.14 (2.19).
BLOCKED_MAX_WINOGRAD_PIXELS = 64
# With 16-lane registers (direct_conv.direct_is_wide) the blocked branch also beats
# Winograd inside the models up to 14x14 outputs (there the channel panels take them,
# in row blocks; Winograd's transformed filters, 4x the weights, are read from memory on
# every run). 1 thread, Intel Xeon AVX-512 VM, per op inside the model, Winograd ->
# blocked ms: resnet50 256@14 x5 11.36 -> 10.62 (before the panels' row blocks);
# inception_v2 96 -> 128@14 x3 1.90 -> 1.46, 64 -> 96@14 0.38 -> 0.29; inception_v1
# 160 -> 320@13 1.83 -> 1.53; with row blocks, vgg19 512@14 x4 28.5 -> 26.6, zfnet512
# 256 -> 512@12 3.39 -> 2.90, 512@12 x2 12.2 -> 11.2, alexnet 256 -> 384@12 2.66 ->
# 2.29. At 28x28 and up Winograd stays faster (inception_v2 64 -> 96@28 x4 2.93 -> 3.62).
WIDE_MAX_WINOGRAD_PIXELS = 196
# ... and with a reduction of up to WIDE_DIRECT_MAX_K on maps up to
# WIDE_DIRECT_MAX_PIXELS outputs: squeezenet's 32 -> 128 3x3s at 27x27 (K 288), per op
# inside kernel-replayed runs, Winograd -> blocked ms: 1 thread 0.540-0.548 ->
# 0.450-0.469, 2 threads 0.327-0.338 -> 0.265-0.284 (the same VM, 2026-11-30). Longer
# reductions at 28x28 stay on Winograd (inception_v2's 64 -> 96, K 576, above).
WIDE_DIRECT_MAX_K = 320
WIDE_DIRECT_MAX_PIXELS = 784


def blocked_direct_wins(x_shape, w_shape, strides, dilations, pads, out_spatial, dtype, group=1):
    """Whether the cache-blocked direct kernel takes a 2-D conv (see above); grouped ones
    (no Winograd path) run it per group."""
    c, kh, kw = w_shape[1:]
    if np.dtype(dtype) != np.float32 or c < 16 or kh * kw == 1 or c * kh * kw < DIRECT_MIN_K:
        return False
    shift_first = all(s == 1 for s in strides) and SHIFT_MIN_CHANNEL_RATIO * w_shape[0] <= c
    pixels = out_spatial[0] * out_spatial[1]
    wide = pixels <= WIDE_MAX_WINOGRAD_PIXELS and direct_is_wide(w_shape[0])
    if group == 1 and pixels > BLOCKED_MAX_WINOGRAD_PIXELS and not wide and not shift_first and \
            winograd_tile((kh, kw), strides, dilations, pads, 1, c, w_shape[0], out_spatial):
        if c * kh * kw <= WIDE_DIRECT_MAX_K and pixels <= WIDE_DIRECT_MAX_PIXELS and direct_is_wide(w_shape[0]):
            return True
        return c * kh * kw <= DIRECT_MAX_K     # short reductions: direct_plan's own rule below
    return True


# Stride-1 2-D convs with at least this many times more input than output channels
# use the tap-major GEMM + shift-add (shift_conv.py): per-layer timings on a 2-CPU Zen 5
# VM, 2 threads: 128 -> 32 (DenseNet) 1.3-2x faster than the best other path at 7x7 to
# 56x56, 96 -> 128 at 14x14 even; with more outputs than inputs it loses (64 -> 64 at
# 56x56: 2.26 ms against Winograd F(4x4)'s 1.73).
SHIFT_MIN_CHANNEL_RATIO = 2


def _im2col_plan(x_shape, w_shape, strides, pads, dilations, group, out_spatial, dtype):
    n, c = x_shape[:2]
    m = w_shape[0]
    kernel = tuple(w_shape[2:])
    kprod = int(np.prod(kernel, dtype=np.int64))
    cg, mg = c // group, m // group
    padding = _padding(x_shape, pads)
    # Tile over the outermost output dim so a column tile stays cache-sized.
    inner = int(np.prod(out_spatial[1:], dtype=np.int64))
    row_bytes = c * kprod * inner * np.dtype(dtype).itemsize
    rows_per_tile = max(1, min(out_spatial[0], _TILE_BYTES // max(1, row_bytes)))
    offsets = list(itertools.product(*(range(kk) for kk in kernel)))
    s0, d0 = strides[0], dilations[0]

    def make_tiles(rows_per_tile):
        tiles = []
        for r0 in range(0, out_spatial[0], rows_per_tile):
            rows = min(rows_per_tile, out_spatial[0] - r0)
            tile_spatial = (rows,) + tuple(out_spatial[1:])
            # Rows of this tile start r0 * stride further along the first padded dim.
            first = (slice(None), slice(r0 * s0, r0 * s0 + (rows - 1) * s0 + (kernel[0] - 1) * d0 + 1))
            copies = [((slice(None),) + o, _offset_index(o, dilations, strides, tile_spatial)) for o in offsets]
            tiles.append(((c,) + kernel + tile_spatial, first, copies, (group, cg * kprod, rows * inner),
                          (slice(None), slice(None), slice(r0 * inner, (r0 + rows) * inner))))
        return tiles
    tiles = make_tiles(rows_per_tile)
    w_shape3 = (group, mg, cg * kprod)
    y_shape3 = (group, mg, out_spatial[0] * inner)

    def compute(x, w, out, scratch):
        wg = w.reshape(w_shape3)
        for i in range(n):
            xp = _pad_one(x[i], scratch, "pad", padding, dtype)
            yi = out[i].reshape(y_shape3)
            for cols_shape, first, copies, gemm_shape, target in tiles:
                cols = temp_buffer("cols", cols_shape, dtype)
                xt = xp[first]
                for dst, src in copies:
                    cols[dst] = xt[src]
                if len(tiles) == 1:
                    gemm_into(wg, cols.reshape(gemm_shape), yi)
                else:
                    tile_out = temp_buffer("cols_out", (group, mg, gemm_shape[2]), dtype)
                    gemm_into(wg, cols.reshape(gemm_shape), tile_out)
                    yi[target] = tile_out
    return compute
