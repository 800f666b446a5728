"""Weights re-laid out for the kernels that read them, held once where their owner allows.

A convolution kernel reads its weights in a layout of its own (blocks of output
channels side by side, transformed filters), made on its first call and kept per
weight array. The original array stays where the net keeps it, so a prepared model
holds every such weight twice (light_resnet50: 97 MB of weights, 96 MB of packed
copies). A holder that owns its weights (the ONNX backend's prepared model: no one
else can read or edit them) may let the packed copy stand in for the original, as
onnxruntime's pre-packing frees an initializer its kernel has packed.

    DerivedWeights(make, layout=None, unpack=None)
        callable w -> make(w), kept per weight array and made again when the array
        is not the one seen or ~61 sampled values of it changed (a cheap guard
        against in-place edits between runs); past `max_entries` arrays the cache
        starts over. layout: a name for make's result shared by every plan making
        the same one (("channel blocks", 32)); unpack(made, shape) -> the weights
        back, bit for bit. Only such layouts can stand in for weights.
    stand_in(w) -> a stand-in for w, or None
        when every packed form made of w (unchanged since) has a layout that
        rebuilds it: a read-only array of w's shape and dtype that holds no values
        (one NaN, zero strides). DerivedWeights gives a stand-in the forms made of
        w; w itself is no longer referenced here, and its owner may drop it.
    is_stand_in(w), values_of(w)
        values_of gives w itself, or the weights a stand-in stands for (rebuilt
        from a packed form once, then kept): what a reader that does not pack
        must call (conv.conv_nchw does for every path whose compute does not
        declare `takes_stand_ins`).
"""
import threading
import weakref

import numpy as np

_SAMPLES = 61
_instances = weakref.WeakSet()   # every DerivedWeights: stand_in looks through their caches
_records = {}                    # id(stand-in) -> (weakref to it, _StandIn)
_lock = threading.RLock()   # re-entrant: a stand-in's weakref callback may run inside stand_in


def _sample(w):
    # the sample's bytes: cheaper to compare than np.array_equal (~4 us a call), and
    # weights holding NaN still match themselves
    return w.reshape(-1)[::max(1, w.size // _SAMPLES)].tobytes()


class DerivedWeights:
    """See the module docstring."""

    def __init__(self, make, max_entries=32, layout=None, unpack=None):
        self._make = make
        self._max_entries = max_entries
        self.layout = layout
        self.unpack = unpack if layout is not None else None
        self._hits = {}          # id(w) -> (w, sampled values or None for a stand-in, make(w))
        _instances.add(self)

    def __call__(self, w):
        hit = self._hits.get(id(w))
        if hit is not None and hit[0] is w and (hit[1] is None or hit[1] == _sample(w)):
            return hit[2]
        record = _record(w)
        if record is None:
            sample, made = _sample(w), self._make(w)
        else:
            sample, made = None, record.form(self)
        if len(self._hits) >= self._max_entries:
            self._hits.clear()
        self._hits[id(w)] = (w, sample, made)
        return made


class _StandIn:
    """What a stand-in stands for: its packed forms by layout, and how to get the
    weights back."""

    def __init__(self, shape, dtype, forms):
        self.shape, self.dtype = shape, dtype
        self.forms = forms       # layout -> (made, unpack)
        self._values = None

    def values(self):
        if self._values is None:
            made, unpack = next(iter(self.forms.values()))
            values = np.ascontiguousarray(unpack(made, self.shape), dtype=self.dtype)
            values.flags.writeable = False
            self._values = values
        return self._values

    def form(self, derived):
        found = self.forms.get(derived.layout) if derived.layout is not None else None
        if found is not None:
            return found[0]
        made = derived._make(self.values())
        if derived.unpack is not None:
            self.forms[derived.layout] = (made, derived.unpack)
        return made


def _record(w):
    entry = _records.get(id(w))
    if entry is None or entry[0]() is not w:
        return None
    return entry[1]


def is_stand_in(w):
    return _record(w) is not None


def values_of(w):
    record = _record(w)
    return w if record is None else record.values()


def _forget(key):
    with _lock:
        _records.pop(key, None)


def stand_in(w):
    """See the module docstring."""
    if not isinstance(w, np.ndarray) or w.size == 0 or is_stand_in(w):
        return None
    with _lock:
        holders = []
        sample = None
        for derived in list(_instances):
            hit = derived._hits.get(id(w))
            if hit is None or hit[0] is not w:
                continue
            if derived.unpack is None:
                return None          # a form that does not rebuild w (transformed filters)
            if sample is None:
                sample = _sample(w)
            if hit[1] != sample:
                return None          # edited since it was packed
            holders.append((derived, hit[2]))
        if not holders:
            return None
        forms = {derived.layout: (made, derived.unpack) for derived, made in holders}
        standing = np.broadcast_to(np.array(np.nan, dtype=w.dtype), w.shape)
        _records[id(standing)] = (weakref.ref(standing, lambda _ref, key=id(standing): _forget(key)),
                                  _StandIn(w.shape, w.dtype, forms))
        for derived, made in holders:
            derived._hits.pop(id(w), None)
            derived._hits[id(standing)] = (standing, None, made)
        return standing
