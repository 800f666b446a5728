"""Stand-ins for PyCUDA device arrays and kernel launches, so the CUDA ops' host
side (argument checks, output shapes, launch geometry, argument packing) runs
without a GPU. Kernels do not run: outputs stay unwritten."""
import struct

import numpy as np

from caffe2py.cuda import launch
from caffe2py.registry import OpContext, select_kernel

_next_address = [1 << 20]


class FakeDeviceArray:
    """The slice of pycuda.gpuarray.GPUArray the ops use, backed by a host array."""

    def __init__(self, host):
        self.host = np.ascontiguousarray(host)
        self.gpudata = _next_address[0]
        _next_address[0] += ((self.host.nbytes + 255) // 256 + 1) * 256  # 256-byte aligned, like the pool
        self.shape, self.dtype = self.host.shape, self.host.dtype
        self.size, self.ndim, self.nbytes = self.host.size, self.host.ndim, self.host.nbytes
        self.flags = self.host.flags

    def get(self):
        return self.host.copy()

    def __getitem__(self, key):
        return FakeDeviceArray(self.host[key])

    def reshape(self, *shape):
        return FakeDeviceArray(self.host.reshape(*shape))

    def fill(self, value, stream=None):
        self.host.fill(value)


class FakeProgram:
    def __init__(self, runtime, source, function, arg_format):
        self.runtime, self.source, self.function, self.arg_format = runtime, source, function, arg_format

    def __call__(self, geometry, *args):
        struct.pack(self.arg_format, *args)  # what PyCUDA's prepared call does; raises on a mismatch
        self.runtime.launches.append((self.source, self.function, self.arg_format, geometry, args))


class FakeStatus:
    def __init__(self):
        self.device = FakeDeviceArray(np.array([2 ** 63 - 1, 0], np.int64))
        self.result = (None, 0)

    def read(self):
        return self.result


class FakeAdapterModule:
    @staticmethod
    def is_device_array(value):
        return isinstance(value, FakeDeviceArray)

    @staticmethod
    def device_id_of(value):
        return 0

    @staticmethod
    def tag(array, device_id):
        return array


class FakeAllocator:
    @staticmethod
    def to_device(array, device_id=0):
        return FakeDeviceArray(array)

    @staticmethod
    def to_host(value, device_id=0):
        return value.get()


class FakeRuntime:
    """Duck-types operators._cuda_runtime._Runtime."""

    def __init__(self, ctx):
        from caffe2py.operators import _cuda_runtime  # noqa: PLC0415
        self.ctx, self.device_id, self.stream = ctx, 0, None
        self.adapter, self.allocator, self.launch = FakeAdapterModule, FakeAllocator, launch
        self.launches = []
        self._status = FakeStatus()
        self.expect = lambda *a, **k: _cuda_runtime._Runtime.expect(self, *a, **k)

    def fn(self, source, function, arg_format):
        return FakeProgram(self, source, function, arg_format)

    def empty(self, shape, dtype):
        return FakeDeviceArray(np.full(shape, 0xAB if np.dtype(dtype).kind in "iu" else np.nan, dtype))

    def status(self):
        return self._status

    def zero(self, array):
        array.host[...] = 0
        return array


def run_fake(monkeypatch, op_def, *inputs):
    """Create op_def's CUDA kernel on a FakeRuntime and run it on host arrays.
    Returns (outputs, runtime)."""
    from caffe2py.operators import _cuda_runtime  # noqa: PLC0415
    made = []

    def fake_runtime(ctx):
        made.append(FakeRuntime(ctx))
        return made[-1]
    monkeypatch.setattr(_cuda_runtime, "_runtime", fake_runtime)
    entry, _engine, schema = select_kernel(op_def)
    kernel = entry.factory(OpContext(op_def, schema, 0))
    out = kernel(*[FakeDeviceArray(x) for x in inputs])
    return out, made[0]
