import numpy as np

from . import driver


class GPUArray:
    def __init__(self, shape, dtype, allocator=None, gpudata=None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.ndim = len(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        self.flags = np.empty(0).flags
        if gpudata is not None:
            self.gpudata = gpudata
        else:
            self.gpudata = allocator(self.nbytes) if self.size else None

    def set(self, ary):
        if self.size:
            driver.memcpy_htod(self.gpudata, ary)

    def set_async(self, ary, stream=None):
        self.set(ary)

    def get(self, ary=None):
        ary = np.empty(self.shape, self.dtype) if ary is None else ary
        if self.size:
            driver.memcpy_dtoh(ary, self.gpudata)
        return ary

    def get_async(self, stream=None, ary=None):
        return self.get(ary)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        new = np.empty(self.shape, np.uint8).reshape(shape).shape
        return GPUArray(new, self.dtype, gpudata=self.gpudata)

    def __getitem__(self, key):
        assert self.ndim == 1 and isinstance(key, slice)
        start, stop, _ = key.indices(self.size)
        return GPUArray((stop - start,), self.dtype,
                        gpudata=int(self.gpudata) + start * self.dtype.itemsize)
