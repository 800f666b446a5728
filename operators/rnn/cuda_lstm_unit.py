"""CUDA kernels (device=CUDA) of LSTMUnit and LSTMUnitGradient (float32 and float16,
vectorised over the hidden dimension)."""
import numpy as np

from caffe2py.registry import CUDA, register_kernel

from .. import _cuda_runtime
from .._cuda_runtime import _elementwise_launch, _ptr


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
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
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
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
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
