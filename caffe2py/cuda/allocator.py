"""Device memory: one caching pool per device (PyCUDA's DeviceMemoryPool, or the
emulator's pool with the same interface) so a net run allocates nothing from the
driver after its first run: freed blocks go back to the pool and the next request
of the same size class reuses them."""
import numpy as np

from . import backend, context

_pools = {}


def _forget():
    _pools.clear()


backend.on_select(_forget)   # a new backend: the old one's pools are no use


def pool(device_id=0):
    p = _pools.get(device_id)
    if p is None:
        context.activate(device_id)
        if backend.is_emulator():
            from .emulator.memory import DeviceMemoryPool  # noqa: PLC0415
        else:
            from pycuda.tools import DeviceMemoryPool  # noqa: PLC0415
        p = _pools[device_id] = DeviceMemoryPool()
    return p


def empty(shape, dtype, device_id=0):
    """An uninitialised device array from the pool (the emulator's are 0xFF bytes)."""
    context.activate(device_id)
    array_type = backend.device_array_type()
    return array_type(tuple(int(d) for d in shape), np.dtype(dtype), allocator=pool(device_id).allocate)


def memset(array, byte, device_id=0):
    """Fill a device array's bytes with `byte` on the device's stream."""
    if array.nbytes:
        backend.driver().memset_d8_async(array.gpudata, byte, array.nbytes, context.stream(device_id))
    return array


def copy(dst, src, device_id=0):
    """Device-to-device copy of src's bytes into dst on the device's stream."""
    if src.nbytes:
        backend.driver().memcpy_dtod_async(dst.gpudata, src.gpudata, src.nbytes, context.stream(device_id))
    return dst


def to_device(array, device_id=0):
    """Copy a host array to a new pooled device array (on the device's stream)."""
    array = np.ascontiguousarray(array)
    out = empty(array.shape, array.dtype, device_id)
    if array.size:
        out.set_async(array, stream=context.stream(device_id))
        context.synchronize(device_id)  # the host array may be freed right after
    return out


def to_host(value, device_id=0):
    context.activate(device_id)
    out = np.empty(value.shape, value.dtype)
    if value.size:
        value.get_async(stream=context.stream(device_id), ary=out)
        context.synchronize(device_id)
    return out


def stats(device_id=0):
    """(blocks in use, blocks held for reuse) of the device's pool."""
    p = _pools.get(device_id)
    return (0, 0) if p is None else (p.active_blocks, p.held_blocks)
