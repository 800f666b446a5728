"""What the CUDA kernels of every family share: the per-op runtime (device, programs,
scratch buffers, the device-side error status), launch helpers and cuBLAS GEMMs.

Factories import the CUDA device lazily, so this module loads without PyCUDA;
creating a CUDA op without PyCUDA or a GPU raises a Caffe2Error that says why.
Every kernel reads and writes device arrays on the op's device; kernels check indices
on the device and the op raises the CPU op's error text from the status words. The
family modules (operators/<family>/cuda_*.py) look `_runtime` up on this module, so
tests can swap it for a fake in one place.
"""
import numpy as np

from caffe2py.errors import Caffe2Error

_BITS_BY_ITEMSIZE = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}


# --------------------------------------------------------------------------- runtime

class _Runtime:
    """What one CUDA op needs at run time: its device, programs, scratch buffers."""

    def __init__(self, ctx):
        from caffe2py.cuda import adapter, allocator, context, launch, program  # noqa: PLC0415
        self.ctx = ctx
        self.device_id = ctx.device_id
        self.adapter, self.allocator, self.context, self.launch, self.program = (
            adapter, allocator, context, launch, program)
        self.stream = context.stream(self.device_id)
        self._programs = {}
        self._status = None

    def fn(self, source, function, arg_format):
        key = (source, function)
        p = self._programs.get(key)
        if p is None:
            p = self._programs[key] = self.program.Program(source, function, arg_format, self.device_id)
        return p

    def empty(self, shape, dtype):
        return self.adapter.tag(self.allocator.empty(shape, dtype, self.device_id), self.device_id)

    def zero(self, array):
        """Fill with zero bytes on the op's stream."""
        return self.allocator.memset(array, 0, self.device_id)

    def status(self):
        if self._status is None:
            self._status = self.program.ErrorStatus(self.device_id)
        return self._status

    def expect(self, index, value, dtypes=None, what=None):
        """value must be a contiguous device array on this op's device (of dtypes)."""
        ctx = self.ctx
        if not self.adapter.is_device_array(value):
            raise ctx.input_error(index, "expected a CUDA tensor on device %d, got %s; copy it with "
                                  "CopyCPUToGPU or feed it with a CUDA device_option"
                                  % (self.device_id, type(value).__name__))
        if self.adapter.device_id_of(value) != self.device_id:
            raise ctx.input_error(index, "is on CUDA device %d but the op runs on device %d"
                                  % (self.adapter.device_id_of(value), self.device_id))
        if not value.flags.c_contiguous:
            raise ctx.input_error(index, "CUDA kernels need contiguous tensors")
        if dtypes is not None and value.dtype not in dtypes:
            raise ctx.input_error(index, "%s must be %s, got %s" % (
                what or "input", " or ".join(np.dtype(d).name for d in dtypes), value.dtype))
        return value


def _runtime(ctx):
    """The op's runtime; a clear Caffe2Error when PyCUDA or the GPU is missing."""
    try:
        from caffe2py.cuda import context  # noqa: PLC0415
        context.require(ctx.device_id)
    except ImportError as exc:
        raise ctx.error("CUDA kernels need PyCUDA (pip install caffe2py[cuda]): %s" % exc) from None
    except Caffe2Error as exc:
        raise ctx.error("cannot create a CUDA kernel: %s" % exc) from None
    return _Runtime(ctx)


def _ptr(a):
    """A device array's address (0 for None or an empty array, which has no buffer)."""
    return int(a.gpudata) if a is not None and a.gpudata is not None else 0


def _prod(shape):
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _padded(values, n=6, fill=0):
    return list(values) + [fill] * (n - len(values))


def _elementwise_launch(rt, n, per_thread=1):
    return rt.launch.elementwise(n, per_thread)


def _bits(rt, ctx, x, index=0):
    bits = _BITS_BY_ITEMSIZE.get(x.dtype.itemsize)
    if bits is None:
        raise ctx.input_error(index, "dtype %s is not supported on CUDA" % x.dtype)
    return bits


def _gemm(rt, a, b, c, m, n, k, batch=1, trans_a=False, trans_b=False):
    from caffe2py.cuda import cublas  # noqa: PLC0415
    cublas.sgemm_batched(_ptr(a), _ptr(b), _ptr(c), m, n, k, batch, trans_a, trans_b,
                         m * k, k * n, m * n, device_id=rt.device_id)
