"""Conversions between float/half tables and fused rowwise-quantised uint8 tables,
plus FloatToHalf / HalfToFloat. Rounding rule: see kernels/cpu/recsys/fused_rowwise.py."""
import numpy as np

from caffe2py.kernels.cpu.recsys import fused_rowwise as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Cost, OpSchema, TensorType, register_kernel, register_schema

T = caffe2_pb2.TensorProto
_NP_TO_PROTO = {np.float32: T.FLOAT, np.float16: T.FLOAT16, np.uint8: T.UINT8}


def _quantize(bits, in_dtype, half_scale_bias=False):
    """float [..., D] -> uint8 [..., width(D)]."""
    if bits == 8 and not half_scale_bias:
        return K.float_to_fused8, lambda d: d + 8
    k = 8 // bits
    return (lambda x: K.float_to_fused_nbit(x, bits)), lambda d: (d + k - 1) // k + 4


def _dequantize(bits, out_dtype, half_scale_bias=False):
    if bits == 8 and not half_scale_bias:
        return (lambda q: K.fused8_to_float(q, out_dtype)), lambda w: w - 8, 8
    k = 8 // bits
    return (lambda q: K.fused_nbit_to_float(q, bits, out_dtype)), lambda w: (w - 4) * k, 4


def _register(name, fn, in_dtype, out_dtype, width, min_cols=0, doc="", needs_rows=True):
    def infer(ctx, ins):
        x = ins[0]
        if not x.known or (needs_rows and not x.dims):
            return [UNKNOWN]
        if not needs_rows:
            return [TensorType(x.dims, _NP_TO_PROTO[out_dtype])]
        return [TensorType(tuple(x.dims[:-1]) + (width(x.dims[-1]),), _NP_TO_PROTO[out_dtype])]

    def cost(ctx, ins):
        x = ins[0]
        if not x.known:
            return Cost()
        n = float(np.prod(x.dims, dtype=np.int64))
        return Cost(flops=3 * n, bytes_read=n * np.dtype(in_dtype).itemsize,
                    bytes_written=n * np.dtype(out_dtype).itemsize)

    register_schema(OpSchema(name, num_inputs=1, num_outputs=1, inference=infer, cost=cost, doc=doc))

    @register_kernel(name)
    def factory(ctx):
        def run(x):
            if x.dtype != in_dtype:
                raise ctx.input_error(0, "expected %s input, got %s" % (np.dtype(in_dtype).name, x.dtype))
            if needs_rows and x.ndim < 1:
                raise ctx.input_error(0, "input must have at least one dimension")
            if min_cols and x.shape[-1] <= min_cols:
                raise ctx.input_error(0, "input must have more than %d columns, got %d"
                                      % (min_cols, x.shape[-1]))
            return fn(x)
        return run


_ROW_DOC = ("Each row of the last dim is quantised to %s: values in [0, %d] then %s scale and bias "
            "(scale = (max - min) / %d, bias = min; round half to even).")

for _bits in (8, 4, 2):
    for _hsb in ((False, True) if _bits == 8 else (True,)):
        _sb = "float16" if _hsb else "float32"
        _q_doc = _ROW_DOC % ("%d bits" % _bits, (1 << _bits) - 1, _sb, (1 << _bits) - 1)
        _suffix = "HalfScaleBias" if (_hsb and _bits == 8) else ""
        if _bits == 8:
            q_names = [("FloatToFused8BitRowwiseQuantized" + _suffix, np.float32),
                       ("HalfFloatToFused8BitRowwiseQuantized" + _suffix, np.float16)]
            d_names = [("Fused8BitRowwiseQuantized%sToFloat" % _suffix, np.float32),
                       ("Fused8BitRowwiseQuantized%sToHalfFloat" % _suffix, np.float16)]
        else:
            q_names = [("FloatToFused%dBitRowwiseQuantized" % _bits, np.float32),
                       ("HalfToFused%dBitRowwiseQuantized" % _bits, np.float16)]
            d_names = [("Fused%dBitRowwiseQuantizedToFloat" % _bits, np.float32),
                       ("Fused%dBitRowwiseQuantizedToHalf" % _bits, np.float16)]
        for _name, _dt in q_names:
            _fn, _width = _quantize(_bits, _dt, _hsb)
            _register(_name, _fn, _dt, np.uint8, _width, doc=_q_doc)
        for _name, _dt in d_names:
            _fn, _width, _extra = _dequantize(_bits, _dt, _hsb)
            _register(_name, _fn, np.uint8, _dt, _width, min_cols=_extra,
                      doc="Inverse of the matching quantisation: value * scale + bias per row.")

_register("FloatToHalf", K.float_to_half, np.float32, np.float16, None,
          doc="Convert float32 to float16 (round to nearest even).", needs_rows=False)
_register("HalfToFloat", K.half_to_float, np.float16, np.float32, None,
          doc="Convert float16 to float32 (exact).", needs_rows=False)
