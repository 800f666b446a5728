"""Caffe2's --caffe2_operator_throw_if_fp_exceptions flag (core.GlobalInit): while it is
on, an operator whose float arithmetic divides by zero, overflows or produces an
invalid result (NaN from non-NaN inputs) fails instead of writing inf / NaN.

caffe2py checks this through NumPy's error state around each net run, so it covers the
NumPy kernels; compiled (numba) loops do not report floating-point exceptions."""
import contextlib

import numpy as np

_enabled = [False]


def set_enabled(flag):
    _enabled[0] = bool(flag)


def enabled():
    return _enabled[0]


def run_context():
    """What a net run is wrapped in: NumPy raises FloatingPointError while the flag is on."""
    if _enabled[0]:
        return np.errstate(divide="raise", over="raise", invalid="raise")
    return contextlib.nullcontext()
