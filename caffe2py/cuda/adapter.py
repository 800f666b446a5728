"""The CUDA DeviceAdapter: FeedBlob with a CUDA device_option puts a pooled
device array (PyCUDA's, or the emulator's) in the workspace; FetchBlob copies it back."""
from ..devices import DeviceAdapter
from ..registry import CUDA
from . import allocator, backend, context

DEVICE_ATTR = "_caffe2py_device_id"


_gpu_array_class = []      # [GPUArray or None], looked up once: a failing import costs ~1 ms


def is_device_array(value):
    array_type = backend.device_array_type()
    return array_type is not None and isinstance(value, array_type)


def device_id_of(value):
    return getattr(value, DEVICE_ATTR, 0)


def tag(array, device_id):
    """Remember which device a device array lives on (GPUArray does not say)."""
    try:
        setattr(array, DEVICE_ATTR, device_id)
    except AttributeError:  # an array type without a __dict__: treated as device 0
        pass
    return array


class CudaAdapter(DeviceAdapter):
    device_type = CUDA

    def available(self):
        return context.available()

    def count(self):
        return context.device_count()

    def to_device(self, array, device_id):
        context.require(device_id)
        return tag(allocator.to_device(array, device_id), device_id)

    def owns(self, value):
        return is_device_array(value)

    def device_id_of(self, value):
        return device_id_of(value)

    def to_host(self, value):
        return allocator.to_host(value, device_id_of(value))


_instance = CudaAdapter()


def adapter_instance():
    return _instance
