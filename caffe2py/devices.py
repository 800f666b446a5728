"""Where blobs live. CPU blobs are numpy arrays; other devices register a small
adapter (the CUDA one lives in caffe2py.cuda, above this module: caffe2py's package
__init__ registers a loader that imports it on first use)."""
import numpy as np

from .errors import Caffe2Error
from .registry import CPU, CUDA, device_name


class DeviceAdapter:
    """Moves values between the host and one device type."""
    device_type = None

    def available(self):
        return False

    def count(self):
        return 0

    def to_device(self, array, device_id):
        raise NotImplementedError

    def owns(self, value):
        return False

    def to_host(self, value):
        raise NotImplementedError

    def device_id_of(self, value):
        """The device id an owned value lives on."""
        return 0


_adapters = {}
_adapter_loaders = {}    # device type -> imports the module that registers its adapter
_change_listeners = []


def register_adapter(adapter):
    _adapters[adapter.device_type] = adapter


def register_adapter_loader(device_type, load):
    """load() imports the device's module, which registers its adapter; adapter()
    calls it the first time the device is asked for."""
    _adapter_loaders[device_type] = load


def adapter(device_type):
    load = _adapter_loaders.get(device_type)
    if device_type not in _adapters and load is not None:
        try:  # the device registers itself on import; PyCUDA is optional
            load()
        except ImportError:
            pass
    return _adapters.get(device_type)


def on_devices_changed(listener):
    """listener() runs when a device's availability may have changed (the CUDA
    backend switched): modules above this one keep their constants true with it."""
    _change_listeners.append(listener)


def devices_changed():
    for listener in _change_listeners:
        listener()


def to_device(array, device_option):
    """Place a host array on the device device_option names (CPU: as is)."""
    device_type = device_option.device_type if device_option is not None else CPU
    if device_type == CPU:
        return array
    dev = adapter(device_type)
    if dev is None or not dev.available():
        raise Caffe2Error("cannot place a blob on %s: no such device is available (%s)"
                          % (device_name(device_type),
                             "caffe2py was installed without the [cuda] extra or no GPU was found"
                             if device_type == CUDA else "unsupported device type"))
    return dev.to_device(array, device_option.device_id)


def to_host(value):
    """A host copy of a blob's value, wherever it lives."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, np.generic):       # a NumPy scalar an op returned: a 0-d tensor
        return np.array(value)
    for dev in _adapters.values():
        if dev.owns(value):
            return dev.to_host(value)
    return value


def gpu_count():
    dev = adapter(CUDA)
    return dev.count() if dev is not None and dev.available() else 0


def placement_of(value):
    """(device type, device id) of a blob value, or None when it is not a tensor
    (None, strings, other Python objects): those are not placement-checked."""
    if isinstance(value, np.ndarray):
        return (CPU, 0)
    for dev in _adapters.values():
        if dev.owns(value):
            return (dev.device_type, dev.device_id_of(value))
    return None


def placement_text(placement):
    device_type, device_id = placement
    return device_name(device_type) if device_type == CPU else "%s:%d" % (device_name(device_type), device_id)


def cpu_run_context():
    """The context CPU plans run in: caffe2py's compiled kernels and GEMMs share one
    thread team, with NumPy's OpenBLAS on one thread meanwhile (kernels/cpu/runtime/jit.py)."""
    if not _team:           # imported on first use, then held (~2 us a net run)
        from .kernels.cpu.runtime.jit import team
        _team.append(team)
    return _team[0]()


_team = []


def wait_for_compiled_kernels(timeout=None):
    """Block until the CPU kernels that earlier runs handed to background compilers run
    machine code (benchmarks call this after their warmup runs, so they time compiled
    kernels, not NumPy twins). True when all are ready."""
    from .kernels.cpu.runtime.jit import wait_for_kernels
    return wait_for_kernels(timeout)
