"""The emulator's stand-in for the parts of pycuda.driver that caffe2py uses: one
device, streams that run everything in order at call time (so synchronising is a
no-op), events, copies and memsets on emulated device memory (bounds-checked), page-
locked host arrays (plain NumPy arrays), and modules of kernels compiled from .cu
sources (caffe2py.cuda.emulator.build) whose prepared calls run on the emulator."""
import threading
import time

import numpy as np

from ...errors import Caffe2Error
from . import launcher, memory, runtime

DEVICE_NAME = "caffe2py CUDA emulator (CPU)"
COMPUTE_CAPABILITY = (9, 0)   # what the emulated device reports; kernels see __CUDA_ARCH__ 800


def init(flags=0):
    runtime.library()


def get_version():
    return (12, 0, 0)


def get_driver_version():
    return 12000


class Device:
    def __init__(self, ordinal=0):
        if ordinal != 0:
            raise Caffe2Error("CUDA emulator: device %d does not exist (the emulator has one)" % ordinal)
        self.ordinal = ordinal

    @staticmethod
    def count():
        return 1

    def name(self):
        return DEVICE_NAME

    def compute_capability(self):
        return COMPUTE_CAPABILITY

    def total_memory(self):
        return runtime.library().c2emu_arena_size()

    def retain_primary_context(self):
        return Context()


class Context:
    def push(self):
        pass

    @staticmethod
    def pop():
        pass

    @staticmethod
    def synchronize():
        pass


class Stream:
    """Work runs when it is queued, in order; there is nothing to wait for."""
    handle = 0

    def __init__(self, flags=0):
        pass

    def synchronize(self):
        pass

    def is_done(self):
        return True


class Event:
    def __init__(self, flags=0):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()
        return self

    def synchronize(self):
        return self

    def query(self):
        return True

    def time_since(self, other):
        """Milliseconds between other's record and this one's."""
        return (self.t - other.t) * 1e3

    def time_till(self, other):
        return other.time_since(self)


def _host_bytes(ary):
    return np.ascontiguousarray(ary).reshape(-1).view(np.uint8)


def memcpy_htod(dest, src):
    data = _host_bytes(src)
    memory.checked_range(dest, data.size, "a host-to-device copy")
    memory.host_view(dest, data.size)[:] = data


def memcpy_htod_async(dest, src, stream=None):
    memcpy_htod(dest, src)


def memcpy_dtoh(dest, src):
    out = dest.reshape(-1).view(np.uint8)
    memory.checked_range(src, out.size, "a device-to-host copy")
    out[:] = memory.host_view(src, out.size)


def memcpy_dtoh_async(dest, src, stream=None):
    memcpy_dtoh(dest, src)


def memcpy_dtod(dest, src, size):
    if size:
        memory.checked_range(src, size, "a device-to-device copy (source)")
        memory.checked_range(dest, size, "a device-to-device copy (destination)")
        memory.host_view(dest, size)[:] = memory.host_view(src, size).copy()


def memcpy_dtod_async(dest, src, size, stream=None):
    memcpy_dtod(dest, src, size)


def memset_d8(dest, data, size):
    if size:
        memory.checked_range(dest, size, "a memset")
        memory.host_view(dest, size)[:] = data & 0xFF


def memset_d8_async(dest, data, size, stream=None):
    memset_d8(dest, data, size)


def memset_d32(dest, data, count):
    if count:
        memory.checked_range(dest, 4 * count, "a memset")
        memory.host_view(dest, 4 * count).view(np.uint32)[:] = data & 0xFFFFFFFF


def memset_d32_async(dest, data, count, stream=None):
    memset_d32(dest, data, count)


def pagelocked_empty(shape, dtype, order="C", mem_flags=0):
    return np.empty(shape, dtype, order=order)


_default_pool = []


def mem_alloc(nbytes):
    if not _default_pool:
        _default_pool.append(memory.DeviceMemoryPool())
    return _default_pool[0].allocate(nbytes)


# ----------------------------------------------------------------------------- modules

class Function:
    """A kernel of an emulated module, with PyCUDA's prepare / prepared(_async)_call."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.arg_format = None
        self._per_param = None

    def prepare(self, arg_types):
        fmt = arg_types if isinstance(arg_types, str) else "".join(
            np.dtype(t).char if not isinstance(t, str) else t for t in arg_types)
        self._per_param = launcher.check_format(self.kernel, fmt)
        self.arg_format = fmt
        return self

    def prepared_call(self, grid, block, *args, shared_size=0):
        self.prepared_async_call(grid, block, None, *args, shared_size=shared_size)

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
        if self.arg_format is None:
            raise Caffe2Error("CUDA emulator: kernel %s was launched before prepare()" % self.kernel.name)
        launcher.run(self.kernel, self.arg_format, self._per_param, grid, block, args, shared_size)

    def prepared_timed_call(self, grid, block, *args, shared_size=0):
        start = time.perf_counter()
        self.prepared_async_call(grid, block, None, *args, shared_size=shared_size)
        elapsed = time.perf_counter() - start
        return lambda: elapsed


class Module:
    """The kernels of one .cu source, compiled for the emulator."""

    def __init__(self, source_path):
        self.library = runtime.KernelLibrary(source_path)

    def get_function(self, name):
        kernel = self.library.kernels.get(name)
        if kernel is None:
            raise Caffe2Error("CUDA emulator: %s has no kernel named %s (it has: %s)"
                              % (self.library.source, name, ", ".join(sorted(self.library.kernels)) or "none"))
        return Function(kernel)


_modules = {}
_modules_lock = threading.Lock()


def module_from_file(source_path):
    """The emulated module of a .cu source (built and loaded once per process)."""
    import os  # noqa: PLC0415
    path = os.path.abspath(source_path)
    stat = os.stat(path)
    key = (path, stat.st_mtime_ns, stat.st_size)   # an edited source is rebuilt
    with _modules_lock:
        mod = _modules.get(key)
        if mod is None:
            mod = _modules[key] = Module(path)
        return mod
