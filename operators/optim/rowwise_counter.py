"""RowWiseCounter (caffe2/sgd/rowwise_counter): per-row decayed update counts, in place.
Kernel: kernels/cpu/optim/row_counter.py."""
import numpy as np

from caffe2py import inplace
from caffe2py.kernels.cpu.optim import row_counter as K
from caffe2py.kernels.cpu.optim import sparse as S
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from .._gradient_hooks import should_not_do_gradient
from ._optim_common import _INDEX_TYPES, iteration, like_inputs

register_schema(OpSchema(
    "RowWiseCounter", num_inputs=4, num_outputs=2, enforce_inplace={(0, 0), (1, 1)},
    inputs=("prev_iter", "update_counter", "indices", "iter"),
    outputs=("output_prev_iter", "output_update_counter"),
    args=(Arg("counter_halflife", "int", -1,
              doc="iterations after which a count weighs half; <= 0 turns the op off"),),
    inference=like_inputs(0, 1),
    doc="For each index i in order (int32/int64 indices into the flattened tables): delta = "
        "max(0, iter - prev_iter[i]); update_counter[i] = 1 + exp(-delta * ln(2) / "
        "counter_halflife) * update_counter[i]; prev_iter[i] = max(iter, prev_iter[i]). prev_iter "
        "is int64, update_counter float64 (with as many elements), iter one int64. An "
        "out-of-range index raises before anything is written."))

should_not_do_gradient("RowWiseCounter")


def _check_dtype(ctx, index, value, dtype, what):
    if not isinstance(value, np.ndarray) or value.dtype != dtype:
        raise ctx.input_error(index, "%s must be a %s tensor, got %s"
                              % (what, np.dtype(dtype).name, getattr(value, "dtype", type(value).__name__)))


@register_kernel("RowWiseCounter")
def rowwise_counter(ctx):
    halflife = ctx.int("counter_halflife")
    rate = K.decay_rate(halflife) if halflife > 0 else None

    def run(prev_iter, counter, indices, curr_iter):
        # Caffe2 writes int64 and double through the in-place outputs: other types would
        # be reallocated there, losing the tables.
        _check_dtype(ctx, 0, prev_iter, np.int64, "prev_iter")
        _check_dtype(ctx, 1, counter, np.float64, "update_counter")
        if counter.size != prev_iter.size:
            raise ctx.input_error(1, "has %d elements but prev_iter '%s' has %d"
                                  % (counter.size, ctx.inputs[0], prev_iter.size))
        if not isinstance(curr_iter, np.ndarray) or curr_iter.dtype != np.int64:
            raise ctx.input_error(3, "the iteration must be one int64 value, got %s"
                                  % getattr(curr_iter, "dtype", type(curr_iter).__name__))
        now = iteration(ctx, 3, curr_iter)
        if not isinstance(indices, np.ndarray) or indices.dtype not in _INDEX_TYPES:
            raise ctx.input_error(2, "indices must be int32 or int64, got %s"
                                  % getattr(indices, "dtype", type(indices).__name__))
        flat = indices.reshape(-1)
        bad = S.check_indices(flat, counter.size)
        if bad is not None:
            raise ctx.input_error(2, "index %d at position %d is out of range [0, %d) for '%s'; "
                                  "nothing was updated" % (bad[1], bad[0], counter.size, ctx.inputs[1]))
        if rate is None or flat.size == 0:
            return prev_iter, counter
        prev_iter, counter = inplace.claim(prev_iter), inplace.claim(counter)
        p1, c1 = prev_iter.reshape(-1), counter.reshape(-1)
        rows = np.unique(flat)
        old_prev, old_counter = p1[rows].copy(), c1[rows].copy()

        def restore():
            p1[rows], c1[rows] = old_prev, old_counter
        inplace.remember(restore)
        K.update_rows(p1, c1, flat, np.int64(now), rate)
        return prev_iter, counter
    return run
