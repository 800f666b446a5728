"""Which implementation fills the CUDA device's seams (context, allocator, compiler,
program, adapter, cuBLAS): PyCUDA on a GPU, or caffe2py's CPU emulator
(caffe2py.cuda.emulator).

CAFFE2PY_CUDA_BACKEND (read when the device is first probed):
  auto      PyCUDA when it is installed and finds a GPU; otherwise no CUDA device (default)
  pycuda    PyCUDA only
  emulator  the CPU emulator: every kernels/cuda/*.cu source compiled with g++ and run
            with bounds and thread-order checks (slow: for tests and debugging)

`select(name)` switches in-process (tests' conftest selects the emulator when no GPU
is present); it forgets every cached context, stream, pool and module.
"""
import os

from .. import devices
from ..errors import Caffe2Error

NAMES = ("auto", "pycuda", "emulator")
_selected = []


def requested(environ=None):
    environ = os.environ if environ is None else environ
    name = (environ.get("CAFFE2PY_CUDA_BACKEND") or "auto").strip().lower()
    if name not in NAMES:
        raise Caffe2Error("CAFFE2PY_CUDA_BACKEND must be one of %s, got %r" % (", ".join(NAMES), name))
    return name


def name():
    """'emulator' or 'pycuda' ('auto' resolves to PyCUDA; whether it works is the probe's answer)."""
    if not _selected:
        _selected.append(requested())
    return "emulator" if _selected[0] == "emulator" else "pycuda"


def is_emulator():
    return name() == "emulator"


_forgetters = []    # what the modules above this one cache per backend, dropped by select()


def on_select(forget):
    """Run forget() whenever select() switches backends: context, allocator, compiler
    and cublas register theirs at import (this module imports none of them)."""
    _forgetters.append(forget)


def select(backend):
    """Use backend ('auto', 'pycuda' or 'emulator') from now on in this process."""
    if backend not in NAMES:
        raise Caffe2Error("CUDA backend must be one of %s, got %r" % (", ".join(NAMES), backend))
    _selected[:] = [backend]
    for forget in _forgetters:  # context first: the others import it before registering
        forget()
    devices.devices_changed()   # e.g. workspace.has_gpu_support follows the device in use


def driver():
    """pycuda.driver, or the emulator's module with the same functions."""
    if is_emulator():
        from .emulator import driver as emu  # noqa: PLC0415
        return emu
    import pycuda.driver as drv  # noqa: PLC0415
    return drv


def device_array_type():
    """The device array class in use (None when PyCUDA is selected but missing)."""
    if is_emulator():
        from .emulator.memory import DeviceArray  # noqa: PLC0415
        return DeviceArray
    if not _pycuda_array:
        # looked up once: a failing import costs ~0.2 ms, and this runs per blob
        # (a net compiled in a workspace of 200 non-tensor blobs once took 45 s)
        try:
            from pycuda.gpuarray import GPUArray  # noqa: PLC0415
        except ImportError:
            GPUArray = None
        _pycuda_array.append(GPUArray)
    return _pycuda_array[0]


_pycuda_array = []
