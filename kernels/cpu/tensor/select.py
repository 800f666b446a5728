"""Row selection between two tensors by a per-row flag (Caffe2's Conditional)."""
import numpy as np


def select_rows(flags, if_true, if_false):
    """Row i of the result is if_true[i] where flags[i], else if_false[i].
    flags: 1-D bool [N]; if_true, if_false: same shape [N, ...] and dtype."""
    mask = flags.reshape((-1,) + (1,) * (if_true.ndim - 1))
    return np.where(mask, if_true, if_false)
