"""Locally connected layers: LC, LC1D, LC2D, LC3D and their gradients
(caffe2/operators/locally_connected_op). Convolution arguments as for Conv (kernel(s),
stride(s), pad(s) / pad_t..., dilation(s), order); the kernel defaults to the filter's.
group must be 1 (Caffe2's LC sizes its column buffer for one group)."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.cnn import locally_connected as K
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from .._common import conv_geometry

_ARGS = (Arg("kernel", "int"), Arg("kernels", "ints"), Arg("stride", "int", 1), Arg("strides", "ints"),
         Arg("pad", "int", 0), Arg("pads", "ints"), Arg("dilation", "int", 1), Arg("dilations", "ints"),
         Arg("group", "int", 1), Arg("order", "string", "NCHW"))
_RANKS = {"LC": None, "LC1D": 1, "LC2D": 2, "LC3D": 3}


def _geometry(ctx, x, w, nhwc):
    rank = x.ndim - 2
    want = _RANKS[ctx.type.replace("Gradient", "")]
    if rank < 1 or (want is not None and rank != want):
        raise ctx.input_error(0, "X must be %s, got shape %s" % ("[N, C, *spatial]" if want is None
                                                                 else "%d-D" % (want + 2), list(x.shape)))
    if nhwc and rank != 2:
        raise ctx.error("Only 2d locally connected op is supported for NHWC storage type.")
    if w.ndim != x.ndim + rank:
        raise ctx.input_error(1, "filter must be %d-D [*out, M, C, *kernel], got shape %s"
                              % (x.ndim + rank, list(w.shape)))
    filt_kernel = w.shape[rank + 1:rank + 3] if nhwc else w.shape[rank + 2:]
    kernel, strides, pads, dilations = conv_geometry(ctx, rank, kernel_from=filt_kernel)
    if len(kernel) != rank or min(kernel + strides + dilations) <= 0 or min(pads) < 0:
        raise ctx.error("kernel %s, strides %s, dilations %s must be %d positive values, pads >= 0"
                        % (kernel, strides, dilations, rank))
    spatial = x.shape[1:3] if nhwc else x.shape[2:]
    c = x.shape[3] if nhwc else x.shape[1]
    out = K.out_sizes(spatial, kernel, strides, pads, dilations)
    if min(out) <= 0:
        raise ctx.input_error(0, "the kernel %s does not fit the padded input %s" % (kernel, list(spatial)))
    m = w.shape[rank]
    want_w = tuple(out) + (m,) + ((tuple(kernel) + (c,)) if nhwc else ((c,) + tuple(kernel)))
    if w.shape != want_w:
        raise ctx.input_error(1, "filter must be %s for this input and geometry, got %s"
                              % (list(want_w), list(w.shape)))
    return kernel, strides, pads, dilations, out, m


def _check_float(ctx, index, a, what):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ctx.input_error(index, "%s must be a float32 tensor" % what)


def _infer(ctx, ins):
    x, w = ins[0], ins[1]
    if not x.known or not w.known:
        return [UNKNOWN]
    rank = len(x.dims) - 2
    nhwc = ctx.string("order") == "NHWC"
    if rank < 1 or len(w.dims) < rank + 1:
        return [UNKNOWN]
    out, m = tuple(w.dims[:rank]), w.dims[rank]
    dims = (x.dims[0],) + out + (m,) if nhwc else (x.dims[0], m) + out
    return [TensorType(dims, x.dtype)]


def _setup(ctx):
    if ctx.int("group") != 1:
        raise ctx.error("group %d is not supported: Caffe2's locally connected op sizes its buffers for "
                        "group 1" % ctx.int("group"))
    order = ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    return order == "NHWC"


for _name, _rank in _RANKS.items():
    _dims = "" if _rank is None else "%dD " % _rank
    register_schema(OpSchema(
        _name, num_inputs=(2, 3), num_outputs=1, args=_ARGS, inputs=("X", "filter", "bias"), outputs=("Y",),
        inference=_infer,
        doc="Locally connected %slayer: like Conv, but every output position has its own filter. filter "
            "[*out, M, C, *kernel] (NHWC, 2-D only: [out_h, out_w, M, kh, kw, C]), bias [*out, M]; Y "
            "[N, M, *out] (NHWC [N, out_h, out_w, M])." % _dims))
    register_schema(OpSchema(
        _name + "Gradient", num_inputs=3, num_outputs=(1, 3),
        args=_ARGS + (Arg("no_bias", "bool", False), Arg("no_gradient_to_input", "bool", False)),
        inputs=("X", "filter", "dY"), outputs=("dfilter", "dbias", "dX"),
        inference=lambda ctx, ins: ([ins[1]] + ([UNKNOWN] if not ctx.bool("no_bias") else []) + [ins[0]])
        [:ctx.n_outputs],
        doc="Gradient of %s: dfilter, then dbias (unless no_bias), then dX (when a last output is given)." % _name))


def _forward(ctx):
    nhwc = _setup(ctx)

    def run(x, w, *rest):
        _check_float(ctx, 0, x, "X")
        _check_float(ctx, 1, w, "filter")
        kernel, strides, pads, dilations, out, m = _geometry(ctx, x, w, nhwc)
        b = None
        if rest:
            b = rest[0]
            _check_float(ctx, 2, b, "bias")
            if b.shape != tuple(out) + (m,):
                raise ctx.input_error(2, "bias must be %s, got %s" % (list(out) + [m], list(b.shape)))
        return K.forward(x, w, b, kernel, strides, pads, dilations, nhwc)
    return run


def _backward(ctx):
    nhwc = _setup(ctx)
    no_bias = ctx.bool("no_bias")
    n_fixed = 1 if no_bias else 2
    if ctx.n_outputs not in (n_fixed, n_fixed + 1):
        raise ctx.error("with no_bias=%d the gradient produces %d or %d outputs, got %d"
                        % (int(no_bias), n_fixed, n_fixed + 1, ctx.n_outputs))
    need_dx = ctx.n_outputs == n_fixed + 1

    def run(x, w, dy):
        _check_float(ctx, 0, x, "X")
        _check_float(ctx, 1, w, "filter")
        kernel, strides, pads, dilations, out, m = _geometry(ctx, x, w, nhwc)
        _check_float(ctx, 2, dy, "dY")
        want = (x.shape[0],) + tuple(out) + (m,) if nhwc else (x.shape[0], m) + tuple(out)
        if dy.shape != want:
            raise ctx.input_error(2, "dY must be %s, got %s" % (list(want), list(dy.shape)))
        dw, db, dx = K.backward(x, w, dy, kernel, strides, pads, dilations, nhwc, need_dx)
        outs = [dw] + ([] if no_bias else [db]) + ([dx] if need_dx else [])
        return tuple(outs)
    return run


def _gradient_maker(g):
    need_dx = not g.arg("no_gradient_to_input", False)
    if len(g.def_.input) == 3:
        outs = [g.GI(1), g.GI(2)] + ([g.GI(0)] if need_dx else [])
        return [g.op(g.def_.type + "Gradient", [g.I(0), g.I(1), g.GO(0)], outs)]
    outs = [g.GI(1)] + ([g.GI(0)] if need_dx else [])
    return [g.op(g.def_.type + "Gradient", [g.I(0), g.I(1), g.GO(0)], outs, no_bias=1)]


for _name in _RANKS:
    register_kernel(_name)(_forward)
    register_kernel(_name + "Gradient")(_backward)
    register_gradient(_name)(_gradient_maker)
