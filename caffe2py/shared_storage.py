"""Host buffers that several blobs share, as Caffe2 tensors share storage.

Caffe2's UnsafeCoalesce leaves its inputs as views of one coalesced buffer, and
Caffe2's FeedBlob into a CPU tensor of the same type and size writes into the
tensor's existing storage, so feeding any one of those blobs changes them all.
caffe2py's FeedBlob normally stores a fresh copy (so blobs never alias by
accident); it writes in place only into the buffers registered here."""
import weakref

import numpy as np

# id -> weak reference of each root buffer (ndarrays are unhashable, so no WeakSet);
# an entry leaves when no blob holds its buffer any more
_shared = {}


def mark_shared(buffer):
    """Register a root ndarray (one that owns its memory) whose views are blobs."""
    key = id(buffer)
    _shared[key] = weakref.ref(buffer, lambda _ref, key=key: _shared.pop(key, None))


def _root(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def is_shared(value):
    if not isinstance(value, np.ndarray):
        return False
    root = _root(value)
    ref = _shared.get(id(root))
    return ref is not None and ref() is root


def write_in_place(existing, new, device_option=None):
    """`existing` (a shared buffer or a view of it) holding `new`'s values in
    `new`'s shape, with the same memory, or None where Caffe2 would reallocate
    (another type or element count, or a feed to another device than the CPU) or
    the view cannot take the shape."""
    if device_option is not None and device_option.device_type != 0:     # PROTO_CPU
        return None
    if not is_shared(existing) or not isinstance(new, np.ndarray):
        return None
    if existing.dtype != new.dtype or existing.size != new.size:
        return None
    try:
        target = existing.view()
        target.shape = new.shape        # raises rather than copying
    except (AttributeError, ValueError):
        return None
    np.copyto(target, new)
    return target
