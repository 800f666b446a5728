"""EnforceFinite (caffe2/operators/enforce_finite_op): fails the net when its input
holds a NaN or an infinity, naming the first such element."""
import numpy as np

from caffe2py.gradients import should_not_do_gradient
from caffe2py.registry import OpSchema, register_kernel, register_schema

register_schema(OpSchema(
    "EnforceFinite", num_inputs=1, num_outputs=0, inputs=("input",), outputs=(),
    inference=lambda ctx, ins: [],
    doc="Raises unless every element of the float or double input is finite; no outputs."))


@register_kernel("EnforceFinite")
def enforce_finite(ctx):
    def run(x):
        if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64):
            raise ctx.input_error(0, "must be a float or double tensor, got %s"
                                  % getattr(x, "dtype", type(x).__name__))
        bad = np.flatnonzero(~np.isfinite(x.reshape(-1)))
        if bad.size:
            i = int(bad[0])
            raise ctx.input_error(0, "Index %d is not finite (e.g., NaN, Inf): %s" % (i, x.reshape(-1)[i]))
    return run


should_not_do_gradient("EnforceFinite")
