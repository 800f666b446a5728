"""Caffe2's compressed-weight ops in the caffe2 domain: QuantDecode (codebook lookup,
with QuantDecodeGradient) and TT (a linear layer whose weight matrix is a tensor
train). Kernels: kernels/cpu/quant/compressed.py."""
import math

import numpy as np

from caffe2py.kernels.cpu.quant import compressed as K
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .._gradient_hooks import register_gradient

_CODE_TYPES = (np.uint8, np.uint16, np.int32)


# ----------------------------------------------------------------- QuantDecode

register_schema(OpSchema(
    "QuantDecode", num_inputs=(2, None), num_outputs=(1, None),
    inputs_outputs_check=lambda n_in, n_out: n_out + 1 == n_in,
    inputs=("codebook", "codes_0", "codes_n"), outputs=("decoded_0", "decoded_n"),
    inference=lambda ctx, ins: [TensorType(t.dims, ins[0].dtype) for t in ins[1:]],
    cost=lambda ctx, ins: Cost(bytes_read=sum(4.0 * math.prod(t.dims) for t in ins[1:] if t.known)),
    doc="decoded_i = codebook[codes_i] elementwise (the codebook flattened; codes uint8, uint16 or "
        "int32, each in [0, codebook size)). One output per codes input."))
register_schema(OpSchema(
    "QuantDecodeGradient", num_inputs=lambda n: n >= 3 and n % 2 == 1, num_outputs=1,
    inputs=("codebook", "codes_0..n", "decoded_grad_0..n"), outputs=("codebook_grad",),
    inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of QuantDecode for the codebook: every decoded gradient value added at its code."))


def _check_codes(ctx, index, codes, size):
    check_dtype(ctx, index, codes, _CODE_TYPES)
    if codes.size and (int(codes.max()) >= size or int(codes.min()) < 0):
        bad = codes[(codes >= size) | (codes < 0)].reshape(-1)[0]
        raise ctx.input_error(index, "code %d at position %d is out of range [0, %d) for the codebook"
                              % (bad, int(np.flatnonzero((codes.reshape(-1) >= size) | (codes.reshape(-1) < 0))[0]),
                                 size))


@register_kernel("QuantDecode")
def quant_decode(ctx):
    def run(codebook, *codes):
        check_dtype(ctx, 0, codebook, (np.float32,))
        for k, c in enumerate(codes, 1):
            _check_codes(ctx, k, c, codebook.size)
        outs = tuple(K.codebook_decode(codebook, c) for c in codes)
        return outs[0] if len(outs) == 1 else outs
    return run


@register_kernel("QuantDecodeGradient")
def quant_decode_gradient(ctx):
    n = (ctx.n_inputs - 1) // 2

    def run(codebook, *rest):
        check_dtype(ctx, 0, codebook, (np.float32,))
        codes, grads = rest[:n], rest[n:]
        for k, (c, g) in enumerate(zip(codes, grads)):
            _check_codes(ctx, 1 + k, c, codebook.size)
            if g.size != c.size:
                raise ctx.input_error(1 + n + k, "has %d values; codes input %d has %d" % (g.size, 1 + k, c.size))
        return K.codebook_gradient(codebook.shape, codes, grads, codebook.dtype)
    return run


@register_gradient("QuantDecode")
def _quant_decode_maker(g):
    n_out = len(g.def_.output)
    ins = [g.I(i) for i in range(len(g.def_.input))] + [g.GO(i) for i in range(n_out)]
    return [g.op("QuantDecodeGradient", ins, [g.GI(0)])]


# ----------------------------------------------------------------- TT

_TT_ARGS = (Arg("inp_sizes", "ints", None, required=True, doc="factors of the input width"),
            Arg("out_sizes", "ints", None, required=True, doc="factors of the output width"),
            Arg("tt_ranks", "ints", None, required=True, doc="d + 1 ranks, first and last 1"))


def _tt_geometry(ctx):
    """(inp_sizes, out_sizes, ranks, core sizes) checked at plan time."""
    inp, out, ranks = ctx.ints("inp_sizes"), ctx.ints("out_sizes"), ctx.ints("tt_ranks")
    d = len(inp)
    if d == 0 or len(out) != d:
        raise ctx.error("inp_sizes %s and out_sizes %s must be non-empty lists of one length" % (inp, out))
    if len(ranks) != d + 1 or ranks[0] != 1 or ranks[-1] != 1:
        raise ctx.error("tt_ranks %s must have len(inp_sizes) + 1 = %d values, the first and last 1"
                        % (ranks, d + 1))
    if min(inp + out + ranks) < 1:
        raise ctx.error("inp_sizes, out_sizes and tt_ranks must be positive: %s, %s, %s" % (inp, out, ranks))
    cores = sum(inp[k] * ranks[k + 1] * ranks[k] * out[k] for k in range(d))
    return list(inp), list(out), list(ranks), cores


def _tt_infer(ctx, ins):
    _, out, _, _ = _tt_geometry(ctx)
    return [TensorType((ins[0].dims[0], math.prod(out)), ins[0].dtype)]


def _tt_cost(ctx, ins):
    """The core-by-core GEMMs: (rest, rows) @ (rows, cols) for each core."""
    inp, out, ranks, n_cores = _tt_geometry(ctx)
    batch = ins[0].dims[0] if ins[0].known else 0
    size, flops = batch * math.prod(inp), 0
    for k in range(len(inp) - 1, -1, -1):
        rows, cols = inp[k] * ranks[k + 1], ranks[k] * out[k]
        flops += 2 * size * cols
        size = size // rows * cols
    return Cost(flops=flops, bytes_read=4.0 * (batch * math.prod(inp) + n_cores),
                bytes_written=4.0 * batch * math.prod(out), params_bytes=4.0 * n_cores)


register_schema(OpSchema(
    "TT", num_inputs=3, num_outputs=1, args=_TT_ARGS, inputs=("X", "b", "cores"), outputs=("Y",),
    inference=_tt_infer, cost=_tt_cost,
    doc="Tensor-train linear layer: Y = X W + b for X (batch, prod(inp_sizes)) and a weight W of "
        "prod(inp_sizes) x prod(out_sizes) given as d cores in the 1-D `cores` (Caffe2's TT-layer "
        "layout, as caffe2.python.tt_core.matrix_to_tt writes it: the last core first)."))


@register_kernel("TT")
def tt(ctx):
    inp, out, ranks, n_cores = _tt_geometry(ctx)
    width, out_width = math.prod(inp), math.prod(out)

    def run(x, b, cores):
        check_dtype(ctx, 0, x, FLOATS)
        if x.ndim < 2 or x.size != x.shape[0] * width:
            raise ctx.input_error(0, "must be (batch, %d) (the product of inp_sizes %s), got shape %s"
                                  % (width, inp, list(x.shape)))
        for k, v, want in ((1, b, out_width), (2, cores, n_cores)):
            if v.ndim != 1 or v.size != want:
                raise ctx.input_error(k, "must be 1-D with %d values, got shape %s" % (want, list(v.shape)))
            if v.dtype != x.dtype:
                raise ctx.input_error(k, "dtype %s differs from X's %s" % (v.dtype, x.dtype))
        return K.tt_linear(x.reshape(x.shape[0], width), b, cores, inp, out, ranks)
    return run
