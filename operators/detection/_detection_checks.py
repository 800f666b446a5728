"""Input checks shared by the detection operator modules (RoI ops, proposals, NMS)."""
import numpy as np


def storage_order(ctx):
    order = ctx.string("order", "NCHW")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    return order == "NHWC"


def positive(ctx, *names):
    values = []
    for name in names:
        v = ctx.int(name)
        if v <= 0:
            raise ctx.error("argument %s must be positive, got %d" % (name, v))
        values.append(v)
    return values


def float_tensor(ctx, index, x, what, ndim=None):
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise ctx.input_error(index, "%s must be a float32 tensor, got %s"
                              % (what, getattr(x, "dtype", type(x).__name__)))
    if ndim is not None and x.ndim != ndim:
        raise ctx.input_error(index, "%s must be %d-D, got shape %s" % (what, ndim, list(x.shape)))
    return x


def finite(ctx, index, x, what):
    if x.size and not np.isfinite(x).all():
        bad = np.argwhere(~np.isfinite(x))[0]
        raise ctx.input_error(index, "%s holds a non-finite value at %s" % (what, list(bad)))


def rois(ctx, index, r, n_images, cols=(4, 5), what="RoIs"):
    """A float32 [R, cols] RoI table with finite values and, with a batch column,
    batch indices in [0, n_images)."""
    float_tensor(ctx, index, r, what)
    if r.ndim != 2 or r.shape[1] not in cols:
        raise ctx.input_error(index, "%s must be [R, %s], got shape %s"
                              % (what, " or ".join(str(c) for c in cols), list(r.shape)))
    finite(ctx, index, r, what)
    if r.shape[1] == 4:
        if r.shape[0] and n_images < 1:
            raise ctx.input_error(index, "%s without a batch column refer to image 0, but the "
                                         "input holds no image" % what)
        return
    batch = r[:, 0].astype(np.int64)
    bad = np.flatnonzero((batch < 0) | (batch >= n_images))
    if bad.size:
        raise ctx.input_error(index, "%s row %d has batch index %g, outside [0, %d)"
                              % (what, bad[0], r[bad[0], 0], n_images))
