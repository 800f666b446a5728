"""Launching kernels and reading back their error status.

A Program is one prepared kernel function of one source on one device; calling
it with a Launch (grid, block) and the arguments queues it on the device's stream.
An ErrorStatus is the two int64 words kernels report bad input through (see
kernels/cuda/common.cuh); reading it synchronises the stream.
"""
import numpy as np

from . import allocator, compiler, context

NO_ERROR = np.iinfo(np.int64).max


def ptr(array):
    """A device array's address as an int (what prepared calls pack as 'P')."""
    return int(array.gpudata) if array is not None and array.gpudata is not None else 0


class Program:
    def __init__(self, source, function, arg_format, device_id=0):
        self.device_id = device_id
        self.function = compiler.function(source, function, arg_format, device_id)
        self.stream = context.stream(device_id)

    def __call__(self, geometry, *args):
        self.function.prepared_async_call(geometry.grid, geometry.block, self.stream, *args)


class ErrorStatus:
    """[smallest bad position, malformed-segments code], initialised to [NO_ERROR, 0]
    once; kernels only ever lower the first word and raise the second, so a run
    without errors leaves it untouched and no per-run reset is needed."""

    def __init__(self, device_id=0):
        from . import backend  # noqa: PLC0415
        drv = backend.driver()
        self.device_id = device_id
        self.device = allocator.empty((2,), np.int64, device_id)
        self.host = drv.pagelocked_empty(2, np.int64)
        self.reset()

    def reset(self):
        self.host[:] = (NO_ERROR, 0)
        self.device.set(self.host)

    def read(self):
        """(bad position or None, segment code); resets the words if either is set."""
        self.device.get_async(stream=context.stream(self.device_id), ary=self.host)
        context.synchronize(self.device_id)
        pos, code = int(self.host[0]), int(self.host[1])
        if pos != NO_ERROR or code:
            self.reset()
        return (None if pos == NO_ERROR else pos), code
