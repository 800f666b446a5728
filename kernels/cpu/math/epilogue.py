"""Per-channel passes over NCHW feature maps, compiled: the pass that finishes a
convolution output, and inference batch norm.

Public:
    finish_channels(y, bias=None, residual=None, relu=False) -> y
        y (N, M, ...) float32/float64 C-contiguous, changed in place:
        y = [relu](y + bias[channel] + residual). residual has y's shape.
    channel_affine(x, mul, add, relu=False) -> y
        y = [relu](x * mul[channel] + add[channel]) as a new array (x (N, C, ...)
        float32/float64, any layout).
    finish_rows_into(acc, row_length, bias, out, first_row, relu)
        acc (M, R * row_length) holds R output rows of row_length >= OW values each
        (a GEMM over padded rows); writes [relu](acc + bias) cropped to OW into
        out[:, first_row:first_row + R] (out (M, OH, OW), any strides).
    bias_values(bias, dtype)
        the bias as compiled output passes take it (see the function).

As NumPy calls a per-channel bias, a residual add and a ReLU are three passes over
the output, each with its own Python overhead (the bias one on a slow broadcast
loop, see elementwise.row_scalars); here they are one pass that reads every value
once while it is in cache. ReLU keeps NaN and -0.0, as np.maximum(y, 0) does.
"""
import numpy as np

from ..runtime.jit import compiled, prange, serial_variant, team_blocks
from ..runtime.output_pool import output_array

_NO_BIAS = {np.dtype(t).char: np.zeros(1, t) for t in (np.float32, np.float64)}


def bias_values(bias, dtype):
    """What compiled output passes take for a bias: its values as a contiguous 1-D
    array of `dtype`, or one zero when there is none (a pass reads the bias only when
    told it has one, but numba needs an array of the output's dtype either way). Always
    writable: a read-only bias (weights loaded from a model file) would be another numba
    type, so every kernel taking it would compile a second time."""
    if bias is not None:
        values = np.ascontiguousarray(bias.reshape(-1), dtype=dtype)
        return values if values.flags.writeable else values.copy()
    zero = _NO_BIAS.get(np.dtype(dtype).char)
    return zero if zero is not None else np.zeros(1, dtype)


@compiled(parallel=True)
def _finish_rows(y, bias, residual, has_bias, has_residual, relu, blocks):
    """Rows of y (R, L), in `blocks` blocks on the team: row r gets bias[r % len(bias)]
    (when has_bias), then residual[r] (when has_residual), then ReLU. bias always has one value at least, of
    y's dtype, so the arithmetic stays in that dtype."""
    for t in prange(blocks):
        lo, hi = y.shape[0] * t // blocks, y.shape[0] * (t + 1) // blocks
        channels = bias.shape[0]
        length = y.shape[1]
        for r in range(lo, hi):
            row = y[r]
            b = bias[r % channels]
            # the ReLU in the same loop as the adds: a store every element vectorises,
            # a ReLU pass of its own stores only where it clamps (3-5x slower, team_gemm.py)
            if has_residual:
                res = residual[r]
                if has_bias:
                    for i in range(length):
                        v = row[i] + b + res[i]
                        row[i] = 0.0 if relu and v < 0 else v
                else:
                    for i in range(length):
                        v = row[i] + res[i]
                        row[i] = 0.0 if relu and v < 0 else v
            elif has_bias:
                for i in range(length):
                    v = row[i] + b
                    row[i] = 0.0 if relu and v < 0 else v
            elif relu:
                for i in range(length):
                    v = row[i]
                    row[i] = 0.0 if v < 0 else v


def _per_row(values, rows):
    """values[r % len(values)] for r < rows, as a column."""
    return np.resize(values, rows)[:, None]


@_finish_rows.numpy_twin
def _finish_rows_numpy(y, bias, residual, has_bias, has_residual, relu, blocks):
    if has_bias:
        y += _per_row(bias, y.shape[0])
    if has_residual:
        y += residual
    if relu:
        np.maximum(y, y.dtype.type(0), out=y)


def finish_channels(y, bias=None, residual=None, relu=False):
    """See the module docstring. Other dtypes or layouts go through NumPy."""
    if bias is None and residual is None and not relu:
        return y
    n, m = y.shape[:2]
    compiled_ok = (y.dtype in (np.float32, np.float64) and y.flags.c_contiguous
                   and (residual is None or (residual.shape == y.shape and residual.dtype == y.dtype)))
    if not compiled_ok:
        if bias is not None:
            y += bias.reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype, copy=False)
        if residual is not None:
            y += residual
        if relu:
            np.maximum(y, y.dtype.type(0), out=y)
        return y
    rows = y.reshape(n * m, -1)
    b = bias_values(bias, y.dtype)
    res = np.ascontiguousarray(residual).reshape(n * m, -1) if residual is not None else rows[:0]
    args = (rows, b, res, bias is not None, residual is not None, relu)
    blocks = team_blocks(n * m, rows.shape[1])
    (_finish_rows if blocks > 1 else _finish_rows_serial)(*args, blocks)
    return y


@compiled(parallel=True)
def _crop_rows(acc, bias, has_bias, out, row_length, first_row, relu, blocks):
    m = acc.shape[0]
    rows = acc.shape[1] // row_length
    ow = out.shape[2]
    for t in prange(blocks):
        for o in range(m * t // blocks, m * (t + 1) // blocks):
            b = bias[o] if has_bias else bias[0] * 0
            for y in range(rows):
                src = acc[o, y * row_length:y * row_length + ow]
                dst = out[o, first_row + y]
                if relu:
                    for i in range(ow):
                        v = src[i] + b
                        dst[i] = 0.0 if v < 0 else v
                else:
                    for i in range(ow):
                        dst[i] = src[i] + b


@_crop_rows.numpy_twin
def _crop_rows_numpy(acc, bias, has_bias, out, row_length, first_row, relu, blocks):
    m = acc.shape[0]
    rows = acc.shape[1] // row_length
    ow = out.shape[2]
    vals = acc[:, :rows * row_length].reshape(m, rows, row_length)[:, :, :ow]
    vals = vals + (bias[:m].reshape(m, 1, 1) if has_bias else acc.dtype.type(0))
    if relu:
        np.maximum(vals, vals.dtype.type(0), out=vals)
    out[:m, first_row:first_row + rows] = vals


def finish_rows_into(acc, row_length, bias, out, first_row, relu):
    """See the module docstring (one pass: bias, ReLU and the crop of the padded rows)."""
    if acc.dtype not in (np.float32, np.float64) or out.dtype != acc.dtype:
        res = acc if bias is None else acc + bias.reshape(-1, 1)
        res = res.reshape(acc.shape[0], -1, row_length)[:, :, :out.shape[2]]
        rows = res.shape[1]
        np.copyto(out[:, first_row:first_row + rows], np.maximum(res, 0) if relu else res)
        return
    b = bias_values(bias, acc.dtype)
    blocks = team_blocks(acc.shape[0], acc.shape[1])
    (_crop_rows if blocks > 1 else _crop_rows_serial)(acc, b, bias is not None, out, row_length, first_row, relu, blocks)


@compiled(parallel=True)
def _affine_rows(x, mul, add, y, relu, blocks):
    for t in prange(blocks):
        lo, hi = x.shape[0] * t // blocks, x.shape[0] * (t + 1) // blocks
        channels = mul.shape[0]
        length = x.shape[1]
        for r in range(lo, hi):
            src = x[r]
            dst = y[r]
            a = mul[r % channels]
            b = add[r % channels]
            if relu:
                for i in range(length):
                    v = src[i] * a + b
                    dst[i] = 0.0 if v < 0 else v
            else:
                for i in range(length):
                    dst[i] = src[i] * a + b


@_affine_rows.numpy_twin
def _affine_rows_numpy(x, mul, add, y, relu, blocks):
    np.multiply(x, _per_row(mul, x.shape[0]), out=y)
    y += _per_row(add, x.shape[0])
    if relu:
        np.maximum(y, y.dtype.type(0), out=y)


def channel_affine(x, mul, add, relu=False):
    """See the module docstring: one pass where NumPy needs a multiply, an add and a
    maximum (DenseNet's pre-activation BN + ReLU on 256x56x56: see docs/performance.md)."""
    n, c = x.shape[:2]
    src = np.ascontiguousarray(x).reshape(n * c, -1)
    y = output_array(x.shape, x.dtype)
    args = (src, np.ascontiguousarray(mul, x.dtype), np.ascontiguousarray(add, x.dtype), y.reshape(n * c, -1), relu)
    blocks = team_blocks(n * c, src.shape[1])
    (_affine_rows if blocks > 1 else _affine_rows_serial)(*args, blocks)
    return y


# One block runs these copies, without a parallel region: at 2 threads on the loaded
# shared VM a one-block region of a 64 x 49 pass took 4 us at the median but 2 ms on
# average (it waits until the idle team thread is scheduled); the copy 12 us on average.
_finish_rows_serial = serial_variant(_finish_rows, "_finish_rows_serial")
_crop_rows_serial = serial_variant(_crop_rows, "_crop_rows_serial")
_affine_rows_serial = serial_variant(_affine_rows, "_affine_rows_serial")
