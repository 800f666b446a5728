"""Caffe2's experiments FunHash and SparseFunHash (a hashed fully-connected layer over
sparse rows given as values / feature keys / segment ids) and their gradients:
FunHashGradient (dense weight gradient), SparseFunHashGradient (the weight gradient
as a GradientSlice of one value per entry, output and alpha index).
Kernels: kernels/cpu/recsys/funhash.py."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.recsys import funhash as K
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from ._checks import check_int_vector

# num_outputs has no usable default, but Caffe2 only reads it when the op is built: a net
# may carry the op without it (its gradient is still built), the kernel refuses it
_ARGS = (Arg("num_outputs", "int", -1, doc="columns of the output (must be given to run)"),
         Arg("num_segments", "int", -1, doc="rows of the output; -1: the largest segment id + 1"),
         Arg("seed", "int", 0, doc="the hash's seed"))
_INPUTS = ("scalars", "indices", "segment_ids", "weight", "alpha")


def _check(ctx, val, key, seg, weight, alpha, first=0):
    """Shapes and types; index `first` is that of `val` in the op's inputs."""
    if val.dtype != np.float32 or val.ndim != 1:
        raise ctx.input_error(first, "must be a float32 vector, got %s of shape %s" % (val.dtype, list(val.shape)))
    check_int_vector(ctx, first + 1, key, "indices")
    check_int_vector(ctx, first + 2, seg, "segment_ids")
    if not len(val) == len(key) == len(seg):
        raise ctx.error("scalars, indices and segment_ids must have one entry each per non-zero, got %d, %d, %d"
                        % (len(val), len(key), len(seg)))
    if len(seg) and seg.min() < 0:
        raise ctx.input_error(first + 2, "segment ids must be >= 0, got %d" % int(seg.min()))
    if weight.dtype != np.float32 or weight.ndim != 1:
        raise ctx.input_error(first + 3, "must be a float32 vector")
    if len(key) and weight.size == 0:
        raise ctx.input_error(first + 3, "is empty; the hashed positions need at least one weight")
    if alpha is not None and (alpha.dtype != np.float32 or alpha.ndim != 1):
        raise ctx.input_error(first + 4, "must be a float32 vector")


def _forward_factory(sparse):
    def factory(ctx):
        num_outputs, num_segments, seed = ctx.int("num_outputs"), ctx.int("num_segments"), ctx.int("seed")
        if not ctx.has("num_outputs"):
            raise ctx.error("argument 'num_outputs' (the output's columns) is required")
        if num_outputs < 0:
            raise ctx.error("num_outputs must be >= 0, got %d" % num_outputs)

        def run(val, key, seg, weight, alpha=None):
            _check(ctx, val, key, seg, weight, alpha)
            rows = num_segments
            if rows == -1:
                rows = int(seg.max()) + 1 if len(seg) else 0
            elif len(seg) and seg.max() >= rows:
                raise ctx.input_error(2, "segment id %d is out of range for num_segments=%d" % (int(seg.max()), rows))
            if rows < 0:
                raise ctx.error("num_segments must be -1 or >= 0, got %d" % rows)
            if not len(key):
                return np.zeros((rows, num_outputs), np.float32)
            index, sign = K.slots(key, seed, weight.size, sparse)
            return K.funhash(val, index, sign, seg, weight, alpha, rows, num_outputs)
        return run
    return factory


def _grad_factory(sparse):
    def factory(ctx):
        seed = ctx.int("seed")

        def run(grad_out, val, key, seg, weight, alpha=None):
            _check(ctx, val, key, seg, weight, alpha, first=1)
            if grad_out.ndim != 2 or (len(seg) and seg.max() >= grad_out.shape[0]):
                raise ctx.input_error(0, "shape %s does not cover segment id %s"
                                      % (list(grad_out.shape), int(seg.max()) if len(seg) else "-"))
            grad_out = grad_out.astype(np.float32, copy=False)
            if len(key):
                index, sign = K.slots(key, seed, weight.size, sparse)
            else:
                index, sign = np.zeros(0, np.int64), np.zeros(0, np.float32)
            if sparse:
                values, indices, dalpha = K.sparse_funhash_grad(grad_out, val, index, sign, seg, weight, alpha)
                return (values, indices) + (() if alpha is None else (dalpha,))
            dweight, dalpha = K.funhash_grad(grad_out, val, index, sign, seg, weight, alpha)
            return dweight if alpha is None else (dweight, dalpha)     # one output: the array itself
        return run
    return factory


def _forward_infer(ctx, ins):
    return [TensorType(None, ins[0].dtype)]


for _op, _sparse in (("FunHash", False), ("SparseFunHash", True)):
    register_schema(OpSchema(
        _op, num_inputs=(4, 5), num_outputs=1, args=_ARGS, inference=_forward_infer,
        inputs=_INPUTS, outputs=("output",),
        doc="A fully-connected layer of num_outputs columns over sparse rows (scalars, indices, "
            "segment_ids: entry j adds scalars[j] times the row of feature indices[j] to output row "
            "segment_ids[j]) whose weights are entries of `weight` at hashed positions with hashed "
            "signs; with `alpha`, each weight is a combination of K hashed entries with coefficients "
            "alpha. %s" % ("Sign: the hash's lowest bit; position: the rest modulo len(weight)."
                           if _sparse else "Position: the hash modulo len(weight); sign: its parity.")))
    register_kernel(_op)(_forward_factory(_sparse))

register_schema(OpSchema(
    "FunHashGradient", num_inputs=(5, 6), num_outputs=(1, 2), args=_ARGS[1:] + (Arg("num_outputs", "int", -1),),
    inference=lambda ctx, ins: [ins[4]] + ([ins[5]] if len(ins) > 5 else []),
    inputs=("grad_out",) + _INPUTS, outputs=("weight_grad", "alpha_grad"),
    doc="Gradient of FunHash with respect to weight (and alpha)."))
register_kernel("FunHashGradient")(_grad_factory(False))

register_schema(OpSchema(
    "SparseFunHashGradient", num_inputs=(5, 6), num_outputs=(2, 3),
    args=_ARGS[1:] + (Arg("num_outputs", "int", -1),),
    inference=lambda ctx, ins: [TensorType(None, ins[4].dtype), TensorType(None, 10)]
    + ([ins[5]] if len(ins) > 5 else []),
    inputs=("grad_out",) + _INPUTS, outputs=("weight_grad_values", "weight_grad_indices", "alpha_grad"),
    doc="Gradient of SparseFunHash: the weight gradient as (values, int64 indices), one pair per "
        "entry, output and alpha index; the alpha gradient dense."))
register_kernel("SparseFunHashGradient")(_grad_factory(True))


@register_gradient("FunHash")
def _funhash_maker(g):
    n = len(g.def_.input)
    outputs = [g.GI(3)] + ([g.GI(4)] if n == 5 else [])
    return [g.op("FunHashGradient", [g.GO(0)] + [g.I(i) for i in range(n)], outputs)]


@register_gradient("SparseFunHash")
def _sparse_funhash_maker(g):
    n = len(g.def_.input)
    values, indices = g.GI_V(3), g.GI_I(3)
    outputs = [values, indices] + ([g.GI(4)] if n == 5 else [])
    return [g.op("SparseFunHashGradient", [g.GO(0)] + [g.I(i) for i in range(n)], outputs)]
