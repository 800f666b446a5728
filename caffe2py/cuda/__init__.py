"""The CUDA device, on PyCUDA or on caffe2py's CPU emulator: small modules in the style
of a tinygrad runtime.

    backend    which implementation fills the seams: PyCUDA, or emulator/ (the kernels
               compiled with g++ and run on the CPU with bounds and thread-order checks)
    context    lazy PyCUDA context (the device's primary context) and stream per device id
    allocator  caching memory pool per device, device arrays
    compiler   kernels/cuda/*.cu -> cubin for the device's arch, cached on disk by hash
    launch     launch geometry from shapes (pure functions, tested without a GPU)
    cublas     ctypes binding to cuBLAS, with a fallback GEMM kernel
    adapter    moves blobs between host and device; registered with caffe2py.devices

Importing this package never needs PyCUDA, a GPU or a compiler; whether the device is
usable is a run-time question (`available()`), answered once and cached.
"""
from .adapter import CudaAdapter, adapter_instance
from .context import available, device_count, unavailable_reason

from .. import devices as _devices

_devices.register_adapter(adapter_instance())

__all__ = ["CudaAdapter", "available", "device_count", "unavailable_reason"]
