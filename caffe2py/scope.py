"""Thread-local name and device scopes (caffe2.python.scope)."""
import contextlib
import threading

from .proto import caffe2_pb2

_NAMESCOPE_SEPARATOR = "/"
_local = threading.local()


def CurrentNameScope():
    return getattr(_local, "namescope", "")


def CurrentDeviceScope():
    return getattr(_local, "devicescope", None)


@contextlib.contextmanager
def NameScope(prefix, reset=False):
    if prefix is None:
        prefix = ""
    prefix = str(prefix)
    if prefix and not prefix.endswith(_NAMESCOPE_SEPARATOR):
        prefix += _NAMESCOPE_SEPARATOR
    old = CurrentNameScope()
    _local.namescope = prefix if reset else old + prefix
    try:
        yield
    finally:
        _local.namescope = old


@contextlib.contextmanager
def DeviceScope(scope, node_name=None):
    old = CurrentDeviceScope()
    new = caffe2_pb2.DeviceOption()
    if scope is not None:
        new.CopyFrom(scope)
    if node_name:
        new.node_name = node_name
    elif old is not None and old.node_name and not new.node_name:
        new.node_name = old.node_name
    if old is not None and old.extra_info:
        # a nested scope keeps the outer scope's extra_info too, sorted (Caffe2's merge)
        new.extra_info.extend(old.extra_info)
        new.extra_info.sort()
    _local.devicescope = new if scope is not None or node_name else None
    try:
        yield
    finally:
        _local.devicescope = old


@contextlib.contextmanager
def EmptyDeviceScope():
    old = CurrentDeviceScope()
    _local.devicescope = None
    try:
        yield
    finally:
        _local.devicescope = old
