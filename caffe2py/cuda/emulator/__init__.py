"""caffe2py's CUDA emulator: the project's CUDA kernels, compiled unchanged with the
host C++ compiler, run on the CPU behind the same seams PyCUDA fills on a GPU, with
checks a GPU does not give.

- build     compiles the runtime and each .cu source (g++ -std=c++20 + include/c2emu.h),
            cached by content hash in the user cache folder
- runtime   ctypes binding: device memory, launches (a fiber per CUDA thread, blocks one
            after another; barriers and warp collectives complete when every thread
            they name has arrived)
- memory    the device memory pool and DeviceArray (PyCUDA's GPUArray surface)
- launcher  argument-format checks, thread-order runs, error messages
- driver    the pycuda.driver surface caffe2py uses (copies, streams, events, modules)

Select it with CAFFE2PY_CUDA_BACKEND=emulator (or caffe2py.cuda.backend.select);
see docs/cuda.md.
"""
import sys

from .launcher import EmulatorError, configure, restore, settings

_available = {}


def available():
    """(usable, reason): Linux with g++ 12 or newer."""
    if not _available:
        from ...errors import Caffe2Error  # noqa: PLC0415
        from . import build  # noqa: PLC0415
        if not sys.platform.startswith("linux"):
            _available.update(ok=False, reason="the CUDA emulator runs on Linux only")
        else:
            try:
                build.toolchain()
                _available.update(ok=True, reason="")
            except Caffe2Error as exc:
                _available.update(ok=False, reason=str(exc))
    return _available["ok"], _available["reason"]


def module_from_file(source_path):
    """The kernels of any .cu file, built for the emulator (tests, tools)."""
    from .driver import module_from_file as load  # noqa: PLC0415
    return load(source_path)


__all__ = ["EmulatorError", "available", "configure", "module_from_file", "restore", "settings"]
