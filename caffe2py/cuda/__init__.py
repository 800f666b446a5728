"""The CUDA device, on PyCUDA: small modules in the style of a tinygrad runtime.

    context    lazy PyCUDA context (the device's primary context) and stream per device id
    allocator  caching memory pool per device, device arrays
    compiler   kernels/cuda/*.cu -> cubin for the device's arch, cached on disk by hash
    launch     launch geometry from shapes (pure functions, tested without a GPU)
    cublas     ctypes binding to cuBLAS, with a fallback GEMM kernel
    adapter    moves blobs between host and device; registered with caffe2py.devices

Importing this package never needs PyCUDA or a GPU; whether the device is usable is
a run-time question (`available()`), answered once and cached.
"""
from .adapter import CudaAdapter, adapter_instance
from .context import available, device_count, unavailable_reason

from .. import devices as _devices

_devices.register_adapter(adapter_instance())

__all__ = ["CudaAdapter", "available", "device_count", "unavailable_reason"]
