"""Strategies and references shared by the caffe2-domain op tests."""
import caffe2py.compat  # noqa: F401

import hypothesis.strategies as st
import numpy as np

import caffe2.python.hypothesis_test_util as hu


def floats_tensor(lo=-3.0, hi=3.0, dtype=np.float32, **kwargs):
    width = {np.float16: 16, np.float32: 32, np.float64: 64}[dtype]
    lo, hi = float(dtype(lo)), float(dtype(hi))        # bounds exactly representable at that width
    return hu.tensor(dtype=dtype, elements=st.floats(lo, hi, width=width), **kwargs)


def legacy_view(a_shape, b_shape, axis):
    """Written out from Caffe2's ComputeLegacyBroadcastSizes: B's dims, leading and
    trailing 1s dropped, sit at A's dims from axis."""
    if axis == -1:
        axis = len(a_shape) - len(b_shape)
    core_dims = list(b_shape)
    lead = 0
    while core_dims and core_dims[0] == 1:
        core_dims.pop(0)
        lead += 1
    while core_dims and core_dims[-1] == 1:
        core_dims.pop()
    start = axis + lead
    return [1] * start + core_dims + [1] * (len(a_shape) - start - len(core_dims))


@st.composite
def legacy_pair(draw, dtype=np.float32, lo=-3.0, hi=3.0):
    """(A, B, axis) for broadcast=1: B's shape is a run of A's dims (maybe padded with 1s)."""
    a_shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    start = draw(st.integers(0, len(a_shape)))
    end = draw(st.integers(start, len(a_shape)))
    b_core = a_shape[start:end]
    pad_front, pad_back = draw(st.integers(0, 1)), draw(st.integers(0, 1))
    b_shape = [1] * pad_front + b_core + [1] * pad_back
    if len(b_shape) > len(a_shape) or start - pad_front < 0 or start - pad_front > len(a_shape) - len(b_shape):
        b_shape = b_core
        pad_front = 0
    axis = start - pad_front
    if axis == len(a_shape) - len(b_shape) and draw(st.booleans()):
        axis = -1
    elements = st.floats(float(np.float32(lo)), float(np.float32(hi)), width=32) if dtype == np.float32 \
        else st.booleans()
    A = draw(hu.arrays(a_shape, dtype, elements))
    B = draw(hu.arrays(b_shape, dtype, elements))
    return A, B, axis




def spread(*shape, seed=0, step=0.37, low=0.5):
    """float32 values all at least `step` apart (a shuffled arithmetic progression):
    finite differences with Caffe2's step 0.05 never reorder them, so max / top-k /
    window choices stay put while a gradient checker perturbs them."""
    n = int(np.prod(shape))
    values = low + step * np.random.RandomState(seed).permutation(n)
    return values.reshape(shape).astype(np.float32)
