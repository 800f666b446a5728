"""ONNX signal ops: DFT (17: axis attribute, 20: axis input) and STFT, over
NumPy's FFT. Complex values travel as a trailing dimension of 2 (real, imag)."""
import numpy as np

from caffe2py.schema_rules import Rank, Scalar

from ..onnx_base import axis_of, onnx_op

_MAX_FRAMES = 1 << 26


def _as_complex(x):
    if x.shape[-1] == 2:
        return x[..., 0] + 1j * x[..., 1]
    if x.shape[-1] == 1:
        return x[..., 0].astype(np.complex128)
    raise ValueError("the last dimension must be 1 (real) or 2 (complex), got %d" % x.shape[-1])


def _as_real_pairs(c, dtype):
    return np.stack([c.real, c.imag], axis=-1).astype(dtype)


@onnx_op("DFT", (17, 19), (20, None), checks=(Rank(0, 2), Scalar((1, 2))))
def dft(ctx):
    inverse, onesided = bool(ctx.int("inverse", 0)), bool(ctx.int("onesided", 0))
    attr_axis = ctx.int("axis", 1) if ctx.op_version < 20 else None

    def run(x, dft_length=None, axis=None):
        if attr_axis is not None:
            a = attr_axis
        else:
            a = -2 if axis is None else int(np.asarray(axis).reshape(-1)[0])
        a = axis_of(ctx, a, x.ndim)
        if a == x.ndim - 1:
            raise ctx.error("axis cannot be the last (real/imaginary) dimension")
        try:
            c = _as_complex(x)
        except ValueError as exc:
            raise ctx.input_error(0, str(exc)) from None
        n = None if dft_length is None else int(np.asarray(dft_length).reshape(-1)[0])
        if n is not None and not 1 <= n <= _MAX_FRAMES:
            raise ctx.input_error(1, "dft_length must lie in [1, %d], got %d" % (_MAX_FRAMES, n))
        if n is None and x.shape[a] == 0:
            raise ctx.input_error(0, "a DFT along an empty axis %d needs a dft_length" % a)
        if inverse and onesided:   # half spectrum in, real signal of length n out
            real = np.fft.irfft(c, n=n, axis=a)
            return real[..., None].astype(x.dtype)
        out = np.fft.ifft(c, n=n, axis=a) if inverse else np.fft.fft(c, n=n, axis=a)
        if onesided:
            keep = out.shape[a] // 2 + 1
            out = np.take(out, np.arange(keep), axis=a)
        return _as_real_pairs(out, x.dtype)
    return run


@onnx_op("STFT", (17, None), checks=(Rank(0, 3, 3), Scalar((1, 3)), Rank(2, 1, 1)))
def stft(ctx):
    onesided = bool(ctx.int("onesided", 1))

    def run(signal, frame_step, window=None, frame_length=None):
        step = int(np.asarray(frame_step).reshape(-1)[0])
        if frame_length is not None:
            length = int(np.asarray(frame_length).reshape(-1)[0])
        elif window is not None:
            length = window.shape[0]
        else:
            raise ctx.error("STFT needs a window or a frame_length")
        if window is not None and window.shape[0] != length:
            raise ctx.input_error(2, "the window has %d values for frame_length %d" % (window.shape[0], length))
        if step < 1 or not 1 <= length <= signal.shape[1]:
            raise ctx.error("frame_step %d must be positive and frame_length %d in [1, %d] (the signal length)"
                            % (step, length, signal.shape[1]))
        try:
            c = _as_complex(signal)                   # (batch, signal_length)
        except ValueError as exc:
            raise ctx.input_error(0, str(exc)) from None
        frames = (c.shape[1] - length) // step + 1
        index = np.arange(length)[None, :] + step * np.arange(frames)[:, None]
        chunks = c[:, index]                          # (batch, frames, length)
        if window is not None:
            chunks = chunks * window
        out = np.fft.fft(chunks, axis=-1)
        if onesided:
            out = out[..., :length // 2 + 1]
        return _as_real_pairs(out, signal.dtype)
    return run
