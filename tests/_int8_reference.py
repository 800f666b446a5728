"""NumPy references of Caffe2's Int8 integer arithmetic, written from the formulas of
gemmlowp (QuantizeMultiplierSmallerThanOne, SaturatingRoundingDoublingHighMul,
RoundingDivideByPOT) and QNNPACK (q8 add, average pooling, lookup tables, soft-argmax),
with plain loops over windows: independent of caffe2py's kernels."""
import math

import numpy as np

INT32_MIN = -2 ** 31


def wrap_int32(v):
    return ((np.asarray(v, np.int64) + 2 ** 31) % 2 ** 32) - 2 ** 31


def quantize_multiplier_smaller_than_one(real):
    """gemmlowp: real in [0, 1) -> (Q31 multiplier, right shift)."""
    assert 0.0 <= real < 1.0
    if real == 0.0:
        return 0, 0
    q, exponent = math.frexp(real)
    fixed = int(np.rint(q * (1 << 31)))
    shift = -exponent
    if fixed == 1 << 31:
        fixed, shift = fixed // 2, shift - 1
    return fixed, shift


def saturating_rounding_doubling_high_mul(a, b):
    a = np.asarray(a, np.int64)
    overflow = (a == b) & (a == INT32_MIN)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    num = ab + nudge
    high = np.sign(num) * (np.abs(num) // (1 << 31))           # C's integer division truncates
    return np.where(overflow, 2 ** 31 - 1, high)


def rounding_divide_by_pot(x, exponent):
    x = np.asarray(x, np.int64)
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def requantize(acc, real_multiplier, zero_point, lo=0, hi=255):
    """uint8 of int32 sums: gemmlowp's fixed-point multiply of the float32 multiplier."""
    multiplier, shift = quantize_multiplier_smaller_than_one(float(np.float32(real_multiplier)))
    y = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(wrap_int32(acc), multiplier), shift)
    return np.clip(y + zero_point, lo, hi).astype(np.uint8)


def conv_multiplier(x_scale, w_scale, y_scale):
    """QNNPACK computes the requantization scale in float32, left to right."""
    f = np.float32
    return f(f(f(x_scale) * f(w_scale)) / f(y_scale))


def quantize(x, scale, zero_point):
    """QuantizeUint8: zero_point + round-half-even(x / scale) (float32 division), clamped."""
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale)).astype(np.float64)
    return np.clip(q + zero_point, 0, 255).astype(np.uint8)


def conv_nhwc(x, x_zp, w, w_zp, bias, kernel, stride, pads, dilation, group):
    """int64 (N, OH, OW, M) sums of (x - x_zp) * (w - w_zp) + bias; pads (t, l, b, r)."""
    n, h, wd, c = x.shape
    m = w.shape[0]
    kh, kw = kernel
    cg, mg = c // group, m // group
    oh = (h + pads[0] + pads[2] - ((kh - 1) * dilation[0] + 1)) // stride[0] + 1
    ow = (wd + pads[1] + pads[3] - ((kw - 1) * dilation[1] + 1)) // stride[1] + 1
    acc = np.zeros((n, oh, ow, m), np.int64)
    for oy in range(oh):
        for ox in range(ow):
            for ky in range(kh):
                iy = oy * stride[0] - pads[0] + ky * dilation[0]
                if not 0 <= iy < h:
                    continue
                for kx in range(kw):
                    ix = ox * stride[1] - pads[1] + kx * dilation[1]
                    if not 0 <= ix < wd:
                        continue
                    for g in range(group):
                        xs = x[:, iy, ix, g * cg:(g + 1) * cg].astype(np.int64) - x_zp
                        ws = w[g * mg:(g + 1) * mg, ky, kx, :].astype(np.int64) - w_zp
                        acc[:, oy, ox, g * mg:(g + 1) * mg] += xs @ ws.T
    return acc + np.asarray(bias, np.int64)


def qnnpack_add(a, a_zp, a_scale, b, b_zp, b_scale, y_scale, y_zp, lo=0, hi=255):
    f = np.float32
    a_out, b_out = f(f(a_scale) / f(y_scale)), f(f(b_scale) / f(y_scale))
    exponent = math.frexp(float(max(a_out, b_out)))[1] - 1
    shift = 21 - exponent
    a_mult = int(np.rint(float(a_out) * 2.0 ** shift))
    b_mult = int(np.rint(float(b_out) * 2.0 ** shift))
    acc = a.astype(np.int64) * a_mult + b.astype(np.int64) * b_mult - (a_mult * a_zp + b_mult * b_zp)
    mask = (1 << shift) - 1
    acc = (acc >> shift) + (((acc & mask) - (acc < 0)) > (mask >> 1))
    return np.clip(acc + y_zp, lo, hi).astype(np.uint8)


def qnnpack_avgpool_quantize(acc, x_scale, y_scale, window, y_zp, lo=0, hi=255):
    """Window sums less zero points times X.scale / (Y_scale * window) in float32, as a
    24-bit mantissa and shift, rounded half away from zero."""
    f = np.float32
    scale = f(f(x_scale) / f(f(y_scale) * f(window)))
    mantissa, exponent = math.frexp(float(scale))             # scale = mantissa * 2**exponent
    multiplier = int(mantissa * 2 ** 24)
    shift = 24 - exponent
    acc = np.asarray(acc, np.int64)
    rounded = np.sign(acc) * ((np.abs(acc) * multiplier + (1 << (shift - 1))) >> shift)
    return np.clip(rounded + y_zp, lo, hi).astype(np.uint8)


def average_pool_sums(x, x_zp, kernel, stride, pads):
    """Per window: sum of (x - x_zp) over the pixels inside the image (padding is 0.0)."""
    n, h, w, c = x.shape
    oh = (h + pads[0] + pads[2] - kernel[0]) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // stride[1] + 1
    acc = np.zeros((n, oh, ow, c), np.int64)
    for oy in range(oh):
        for ox in range(ow):
            y0, x0 = oy * stride[0] - pads[0], ox * stride[1] - pads[1]
            window = x[:, max(y0, 0):y0 + kernel[0], max(x0, 0):x0 + kernel[1]]
            acc[:, oy, ox] = (window.astype(np.int64) - x_zp).sum(axis=(1, 2))
    return acc


def sigmoid_table(x_scale, x_zp):
    f = np.float32
    x = f(x_scale) * (np.arange(256) - x_zp).astype(f)
    return np.rint(np.minimum(f(256) / (f(1) + np.exp(-x)), f(255))).astype(np.uint8)


def softargmax(rows, x_scale):
    """QNNPACK's soft-argmax of uint8 rows: exp table in double scaled to fit uint32 sums,
    each entry * 256 / the row sum, rounded, capped at 255."""
    channels = rows.shape[1]
    qscale = min((2 ** 32 - 1) / channels, 8388607.0)
    table = [int(np.rint(qscale * math.exp((i - 255) * float(np.float32(x_scale))))) for i in range(256)]
    out = np.empty_like(rows)
    for r, row in enumerate(rows):
        top = int(row.max())
        values = [table[int(v) + 255 - top] for v in row]
        total = sum(values)
        out[r] = [min(255, ((v << 8) + total // 2) // total) for v in values]
    return out
