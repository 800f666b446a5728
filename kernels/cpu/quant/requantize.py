"""The fixed-point arithmetic of Caffe2's Int8 operators (QNNPACK's, gemmlowp's), as
NumPy on whole arrays, plus the parameters the compiled kernels use.

Every function reproduces one integer formula exactly (the tests compare bit for bit
against references written from the formulas):

* quantize_uint8: round(x / scale) half to even in float32, + zero point, saturated to
  [0, 255] (Caffe2's QuantizeUint8). NaN gives 0, as x86's float->int conversion makes
  of it in Caffe2; values past the int32 range saturate.
* q31_multiplier(scale) / requantize_q31: a real multiplier in [2**-32, 1) as a Q31
  fixed-point multiplier and a right shift (gemmlowp's QuantizeMultiplierSmallerThanOne
  of the float32 value: exact, it has 24 significant bits), then
  RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc, multiplier), shift): the
  int32 accumulator times the multiplier rounded to the high 32 bits (ties up), then
  divided by 2**shift rounding ties away from zero.
* add_*: QNNPACK's q8 add (each operand times a 22-bit multiplier, one rounding shift).
* avgpool_*: QNNPACK's q8 average pooling (the window sum less zero points, times a
  24-bit multiplier, rounding ties away from zero).
* *_table: the 256-entry tables of QNNPACK's sigmoid, leaky ReLU and soft-argmax.
"""
import math

import numpy as np


class RequantizationError(ValueError):
    """Scales the fixed-point arithmetic cannot represent (the op names them)."""


def float32_bits(x):
    return int(np.asarray(x, dtype=np.float32).reshape(()).view(np.uint32))


# ----------------------------------------------------------------- quantize / dequantize

def quantize_uint8(x, scale, zero_point):
    """uint8 of x (float32) with Caffe2's rounding and saturation."""
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale))
    with np.errstate(invalid="ignore"):
        q = np.where(np.isnan(q), -np.inf, q)              # NaN: 0, as Caffe2 on x86
    q = np.clip(q, -2.0 ** 31, 2.0 ** 31 - 1).astype(np.int64) + int(zero_point)
    return np.clip(q, 0, 255).astype(np.uint8)


def dequantize(q, scale, zero_point):
    """float32 (q - zero_point) * scale."""
    return (q.astype(np.int32) - np.int32(zero_point)).astype(np.float32) * np.float32(scale)


def relu_floor(y_scale, y_zero_point):
    """The lower clamp of a fused ReLU: the quantized 0.0 (Caffe2's activationLimits)."""
    return int(quantize_uint8(np.float32(0.0), y_scale, y_zero_point))


# ----------------------------------------------------------------- Q31 requantization

def check_positive_scale(scale, what):
    value = float(np.float32(scale))
    if not (value > 0.0 and math.isfinite(value)) or value < float(np.finfo(np.float32).tiny):
        raise RequantizationError("%s scale must be a finite, positive (normal) float32, got %r" % (what, scale))
    return value


def conv_scale(x_scale, w_scale, y_scale):
    """QNNPACK's requantization scale in float32: x_scale * w_scale / y_scale."""
    return np.float32(np.float32(x_scale) * np.float32(w_scale)) / np.float32(y_scale)


def q31_multiplier(scale):
    """(multiplier, shift) with scale == multiplier * 2**-(31 + shift); scale in [2**-32, 1)."""
    scale = np.float32(scale)
    if not (scale < 1.0):
        raise RequantizationError("the requantization scale (input scale x weight scale / output scale) is "
                                  "%.7g; Caffe2's (QNNPACK's) fixed-point arithmetic needs it below 1"
                                  % float(scale))
    if not (scale >= 2.0 ** -32):
        raise RequantizationError("the requantization scale (input scale x weight scale / output scale) is "
                                  "%.7g; the fixed-point arithmetic needs it at least 2**-32" % float(scale))
    bits = float32_bits(scale)
    return ((bits & 0x7FFFFF) | 0x800000) << 7, 127 + 31 - 32 - (bits >> 23)


def requantize_q31(acc, multiplier, shift, zero_point, lo=0, hi=255):
    """uint8 of int32 accumulators: the Q31 multiply, the rounding shift, + zero point,
    clamped to [lo, hi]."""
    acc = np.asarray(acc).astype(np.int64)
    q31 = (acc * multiplier + (1 << 30)) >> 31
    mask = (1 << shift) - 1
    remainder = (q31 & mask) - (acc < 0)
    n = (q31 >> shift) + (remainder > (mask >> 1))
    return np.clip(n + zero_point, lo, hi).astype(np.uint8)


def gemmlowp_multiplier(real):
    """gemmlowp's QuantizeMultiplierSmallerThanOne of a double in [0, 1)."""
    if not 0.0 <= real < 1.0:
        raise RequantizationError("multiplier %.9g is outside [0, 1)" % real)
    if real == 0.0:
        return 0, 0
    q, exponent = math.frexp(real)
    fixed = int(np.rint(q * 2.0 ** 31))
    shift = -exponent
    if fixed == 2 ** 31:
        fixed //= 2
        shift -= 1
    return fixed, shift


def multiply_smaller_than_one(x, multiplier, shift):
    """gemmlowp's MultiplyByQuantizedMultiplierSmallerThanOne on int32 arrays (int64 out)."""
    x = np.asarray(x).astype(np.int64)
    ab = x * multiplier
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = ab + nudge
    high = np.where(high >= 0, high >> 31, -((-high) >> 31))       # C's division: toward zero
    mask = (1 << shift) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> shift) + ((high & mask) > threshold)


# ----------------------------------------------------------------- QNNPACK add

def add_params(a_scale, b_scale, y_scale):
    """(a multiplier, b multiplier, shift) of QNNPACK's q8 add."""
    a_out = np.float32(a_scale) / np.float32(y_scale)
    b_out = np.float32(b_scale) / np.float32(y_scale)
    top = max(a_out, b_out)
    if not (2.0 ** -10 <= top < 2.0 ** 8) or not (a_out < 2.0 ** 8 and b_out < 2.0 ** 8):
        raise RequantizationError("input scale / output scale ratios %.7g and %.7g: QNNPACK's fixed-point add "
                                  "needs the larger in [2**-10, 2**8)" % (float(a_out), float(b_out)))
    shift = 21 - ((float32_bits(top) >> 23) - 127)
    a_mult = int(np.rint(a_out * np.float32(2.0 ** shift)))
    b_mult = int(np.rint(b_out * np.float32(2.0 ** shift)))
    return a_mult, b_mult, shift


def add_uint8(a, b, a_zp, b_zp, params, y_zp, lo=0, hi=255):
    a_mult, b_mult, shift = params
    acc = (a.astype(np.int64) * a_mult + b.astype(np.int64) * b_mult - (a_mult * a_zp + b_mult * b_zp))
    mask = (1 << shift) - 1
    remainder = (acc & mask) - (acc < 0)
    acc = (acc >> shift) + (remainder > (mask >> 1))
    return np.clip(acc + y_zp, lo, hi).astype(np.uint8)


# ----------------------------------------------------------------- QNNPACK average pooling

def avgpool_params(x_scale, y_scale, pool_size):
    """(multiplier, shift) of QNNPACK's q8 average pooling over pool_size values."""
    ratio = np.float32(x_scale) / np.float32(y_scale)
    if not (2.0 ** -8 <= ratio < 2.0 ** 8):
        raise RequantizationError("input scale / output scale is %.7g; QNNPACK's average pooling needs it in "
                                  "[2**-8, 2**8)" % float(ratio))
    if pool_size >= 1 << 24:
        raise RequantizationError("%d values in a pooling window; QNNPACK's average pooling needs fewer "
                                  "than 2**24" % pool_size)
    scale = np.float32(x_scale) / (np.float32(y_scale) * np.float32(pool_size))
    bits = float32_bits(scale)
    return (bits & 0x7FFFFF) | 0x800000, 127 + 23 - (bits >> 23)


def avgpool_requantize(acc, params, y_zp, lo=0, hi=255):
    """uint8 of window sums less zero points (int32 arrays)."""
    multiplier, shift = params
    acc = np.asarray(acc).astype(np.int64)
    n = (acc * multiplier - (acc < 0) + (1 << (shift - 1))) >> shift
    return np.clip(n + y_zp, lo, hi).astype(np.uint8)


# ----------------------------------------------------------------- lookup tables

def sigmoid_table(x_scale, x_zp):
    """QNNPACK's sigmoid table (output scale 1/256, zero point 0): index = input byte."""
    x = np.float32(x_scale) * (np.arange(256, dtype=np.int32) - np.int32(x_zp)).astype(np.float32)
    with np.errstate(over="ignore"):
        y = np.float32(256.0) / (np.float32(1.0) + np.exp(-x))
    return np.rint(np.clip(y, np.float32(0), np.float32(255))).astype(np.uint8)


def leaky_relu_table(alpha, x_scale, x_zp, y_scale, y_zp, lo=0, hi=255):
    """QNNPACK's leaky ReLU table."""
    ratio = np.float32(x_scale) / np.float32(y_scale)
    if not (2.0 ** -8 <= ratio < 2.0 ** 8):
        raise RequantizationError("input scale / output scale is %.7g; QNNPACK's leaky ReLU needs it in "
                                  "[2**-8, 2**8)" % float(ratio))
    x = ratio * (np.arange(256, dtype=np.int32) - np.int32(x_zp)).astype(np.float32)
    y = np.where(x < 0, x * np.float32(alpha), x)
    y = np.clip(y, np.float32(lo - y_zp), np.float32(hi - y_zp))
    return (np.rint(y).astype(np.int64) + y_zp).astype(np.uint8)


def softmax_table(x_scale, channels):
    """QNNPACK's soft-argmax table: round(qscale * exp((i - 255) * x_scale)), uint32."""
    qscale = min(float(2 ** 32 - 1) / float(channels), 8388607.0)
    i = np.arange(256, dtype=np.float64)
    return np.rint(qscale * np.exp((i - 255.0) * float(np.float32(x_scale)))).astype(np.uint32)


def softmax_rows(rows, table):
    """QNNPACK's soft-argmax of uint8 rows (2-D) with a softmax_table."""
    shifted = table[(rows.astype(np.int64) + 255 - rows.max(axis=1, keepdims=True))].astype(np.uint64)
    total = shifted.sum(axis=1, keepdims=True) & 0xFFFFFFFF           # uint32 sum, as QNNPACK's
    q = ((shifted << 8) + (total >> 1)) & 0xFFFFFFFF
    return np.minimum(q // np.maximum(total, 1), 255).astype(np.uint8)
