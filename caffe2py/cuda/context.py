"""Lazy PyCUDA contexts: one per device id (the device's primary context, which
the CUDA runtime and so cuBLAS share), one stream per device for all launches and
copies. Nothing here runs at import time. With the emulator backend
(caffe2py.cuda.backend) the same calls go to caffe2py.cuda.emulator.driver."""
import atexit
import threading

from ..errors import Caffe2Error
from . import backend

_lock = threading.RLock()
_probe = {}          # "ok": bool, "reason": str, "count": int
_contexts = {}       # device id -> pycuda Context
_streams = {}        # device id -> pycuda Stream
_current = [None]    # device id whose context is on top of the stack


def _driver():
    return backend.driver()     # PyCUDA is optional: the backend imports it on first use


_EMULATOR_HINT = "; CAFFE2PY_CUDA_BACKEND=emulator runs the CUDA kernels on the CPU emulator"


def probe():
    """Can a GPU (or the emulator, when selected) be used? Returns (ok, reason, count);
    cached after the first call."""
    with _lock:
        if not _probe:
            if backend.is_emulator():
                from . import emulator  # noqa: PLC0415
                ok, reason = emulator.available()
                _probe.update(ok=ok, reason=reason, count=1 if ok else 0)
                return _probe["ok"], _probe["reason"], _probe["count"]
            try:
                drv = _driver()
                drv.init()
                count = drv.Device.count()
                ok, reason = count > 0, "" if count > 0 else "no CUDA device was found"
            except ImportError as exc:
                ok, reason, count = False, "PyCUDA is not installed (pip install caffe2py[cuda]): %s" % exc, 0
            except Exception as exc:  # noqa: BLE001 - cuInit failures: no driver, no device
                ok, reason, count = False, "the CUDA driver could not be initialised: %s" % exc, 0
            _probe.update(ok=ok, reason=reason + ("" if ok else _EMULATOR_HINT), count=count)
        return _probe["ok"], _probe["reason"], _probe["count"]


def forget():
    """Drop the probe's answer, contexts and streams (the backend changed)."""
    with _lock:
        if _current[0] is not None:
            try:
                _driver().Context.pop()
            except Exception:  # noqa: BLE001 - best effort
                pass
        _probe.clear()
        _contexts.clear()
        _streams.clear()
        _current[0] = None


backend.on_select(forget)


def available():
    return probe()[0]


def device_count():
    return probe()[2]


def unavailable_reason():
    return probe()[1]


def require(device_id=0):
    """Raise a clear Caffe2Error unless device_id can be used."""
    ok, reason, count = probe()
    if not ok:
        raise Caffe2Error("CUDA is not available: %s" % reason)
    if not 0 <= device_id < count:
        raise Caffe2Error("CUDA device %d does not exist (%d device(s) found)" % (device_id, count))


def activate(device_id=0):
    """Make device_id's context current (created on first use) and return it."""
    with _lock:
        require(device_id)
        drv = _driver()
        ctx = _contexts.get(device_id)
        if ctx is None:
            ctx = _contexts[device_id] = drv.Device(device_id).retain_primary_context()
        if _current[0] != device_id:
            if _current[0] is not None:
                drv.Context.pop()
            ctx.push()
            _current[0] = device_id
        return ctx


def stream(device_id=0):
    """The stream every launch and copy on device_id goes to."""
    with _lock:
        s = _streams.get(device_id)
        if s is None:
            activate(device_id)
            s = _streams[device_id] = _driver().Stream()
        return s


def synchronize(device_id=0):
    stream(device_id).synchronize()


def compute_capability(device_id=0):
    activate(device_id)
    return _driver().Device(device_id).compute_capability()


def device_name(device_id=0):
    activate(device_id)
    return _driver().Device(device_id).name()


@atexit.register
def _release():
    # Pop our context so PyCUDA's own exit check finds a clean stack.
    with _lock:
        if _current[0] is not None:
            try:
                _streams.clear()
                _driver().Context.pop()
            except Exception:  # noqa: BLE001 - best effort at interpreter exit
                pass
            _current[0] = None
