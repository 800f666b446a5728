"""Emulated device memory: blocks of the runtime's arena, a caching pool per device with
PyCUDA's DeviceMemoryPool interface, and DeviceArray, the part of PyCUDA's GPUArray
that caffe2py uses.

Every block is 256-byte aligned and followed by never-allocated bytes; the runtime's
shadow map marks exactly a buffer's bytes addressable, the rest of its block as
redzone, and blocks held by the pool as freed, so a kernel that reads or writes past
a buffer, or a buffer that was given back, is stopped at that access. Fresh buffers
are filled with 0xFF bytes (NaN as float32 / float16, -1 as a signed integer) so that
reads of memory nobody wrote show in results.
"""
import bisect
import ctypes
import threading

import numpy as np

from ...errors import Caffe2Error
from . import runtime

GAP = 256   # never-allocated bytes after every block (the runtime's c2emu_alloc)


class Block:
    """A stretch of the arena: [base, base + capacity) plus GAP bytes after it."""
    __slots__ = ("base", "capacity", "nbytes", "live", "label")

    def __init__(self, base, capacity):
        self.base, self.capacity, self.nbytes, self.live, self.label = base, capacity, 0, False, ""

    def describe(self):
        what = "%d-byte buffer" % self.nbytes
        return "%s, %s" % (what, self.label) if self.label else what


class _Registry:
    """Every block the pools hold or lend, by base address."""

    def __init__(self):
        self.bases, self.blocks = [], {}
        self.lock = threading.Lock()

    def add(self, block):
        with self.lock:
            bisect.insort(self.bases, block.base)
            self.blocks[block.base] = block

    def remove(self, block):
        with self.lock:
            i = bisect.bisect_left(self.bases, block.base)
            del self.bases[i]
            del self.blocks[block.base]

    def around(self, address):
        """(block at or before address, block after it), either may be None."""
        with self.lock:
            i = bisect.bisect_right(self.bases, address)
            before = self.blocks[self.bases[i - 1]] if i else None
            after = self.blocks[self.bases[i]] if i < len(self.bases) else None
            return before, after

    def containing(self, address):
        """The block whose capacity (or trailing gap) holds address, or None."""
        before, _ = self.around(address)
        if before is not None and address < before.base + before.capacity + GAP:
            return before
        return None


registry = _Registry()


def bin_capacity(nbytes):
    """Block size for a request: a multiple of 256, rounded up to 1, 1.25, 1.5 or 1.75
    times a power of two so that freed blocks serve requests of similar size."""
    n = max(int(nbytes), 1)
    if n <= 4096:
        return (n + 255) // 256 * 256
    top = 1 << (n.bit_length() - 1)
    for step in (top, top + top // 4, top + top // 2, top + 3 * top // 4, 2 * top):
        if step >= n:
            return (step + 255) // 256 * 256
    raise AssertionError("unreachable")


class Allocation:
    """What DeviceMemoryPool.allocate returns: int() is the address; dropping the last
    reference gives the block back to the pool."""
    __slots__ = ("block", "pool", "__weakref__")

    def __init__(self, block, pool):
        self.block, self.pool = block, pool

    def __int__(self):
        return self.block.base

    __index__ = __int__

    def __del__(self):
        try:
            self.pool._release(self.block)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class DeviceMemoryPool:
    """PyCUDA's DeviceMemoryPool interface on the emulator's arena."""

    def __init__(self):
        self.active_blocks = 0
        self.held_blocks = 0
        self._held = {}   # capacity -> [Block]
        self._lock = threading.Lock()

    def allocate(self, nbytes):
        lib = runtime.library()
        cap = bin_capacity(nbytes)
        with self._lock:
            held = self._held.get(cap)
            block = held.pop() if held else None
            if block is not None:
                self.held_blocks -= 1
        if block is None:
            base = lib.c2emu_alloc(cap)
            if not base:
                self.free_held()
                base = lib.c2emu_alloc(cap)
            if not base:
                raise Caffe2Error("CUDA emulator: out of device memory allocating %d bytes (the emulated device "
                                  "has %d bytes; set CAFFE2PY_CUDA_EMU_MEMORY for more)"
                                  % (nbytes, lib.c2emu_arena_size()))
            block = Block(base, cap)
            registry.add(block)
        block.nbytes, block.live, block.label = int(nbytes), True, ""
        lib.c2emu_mark_live(block.base, block.nbytes, cap)
        with self._lock:
            self.active_blocks += 1
        return Allocation(block, self)

    def _release(self, block):
        runtime.library().c2emu_mark_freed(block.base, block.capacity)
        block.live = False
        with self._lock:
            self._held.setdefault(block.capacity, []).append(block)
            self.active_blocks -= 1
            self.held_blocks += 1

    def free_held(self):
        """Give every held block back to the arena."""
        lib = runtime.library()
        with self._lock:
            blocks = [b for bs in self._held.values() for b in bs]
            self._held.clear()
            self.held_blocks = 0
        for b in blocks:
            registry.remove(b)
            lib.c2emu_free(b.base, b.capacity)

    stop_holding = free_held


# ----------------------------------------------------------------------------- host access

def host_view(address, nbytes):
    """A writable uint8 NumPy view of device bytes (the arena is host memory)."""
    if nbytes == 0:
        return np.zeros(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(int(address)))


def checked_range(address, nbytes, what):
    """The live block holding [address, address + nbytes); Caffe2Error otherwise (a GPU
    would report an invalid argument or corrupt a neighbour)."""
    address = int(address)
    block = registry.containing(address)
    if block is None or not block.live or address + nbytes > block.base + block.nbytes:
        if block is None:
            state = "which is not device memory"
        elif not block.live:
            state = "in a freed device buffer"
        else:
            state = "past the end of a %s at byte %d" % (block.describe(), address - block.base)
        raise Caffe2Error("CUDA emulator: %s of %d bytes at 0x%x, %s" % (what, nbytes, address, state))
    return block


# ----------------------------------------------------------------------------- arrays

_C_FLAGS = np.empty(0).flags   # a contiguous array's flags: c_contiguous, f_contiguous, ...


def _shape_tuple(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


class DeviceArray:
    """A C-contiguous array in emulated device memory: the part of
    pycuda.gpuarray.GPUArray caffe2py uses (shape, dtype, gpudata, get/set and their
    async forms, reshape, 1-D slices, fill)."""

    def __init__(self, shape, dtype, allocator=None, gpudata=None, base=None):
        self.shape = _shape_tuple(shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        self.ndim = len(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        self.strides = _c_strides(self.shape, self.dtype.itemsize)
        self.flags = _C_FLAGS
        self.base = base
        if gpudata is None:
            gpudata = allocator(self.nbytes) if self.size and allocator is not None else None
            if isinstance(gpudata, Allocation):
                gpudata.block.label = "%s%s" % (self.dtype.name, list(self.shape))
        self.gpudata = gpudata

    @property
    def ptr(self):
        return int(self.gpudata) if self.gpudata is not None else 0

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d device array")
        return self.shape[0]

    def __repr__(self):
        return "DeviceArray(shape=%s, dtype=%s) on the CUDA emulator" % (self.shape, self.dtype)

    def set(self, ary, async_=False, stream=None):
        ary = np.ascontiguousarray(ary)
        if ary.nbytes != self.nbytes:
            raise ValueError("cannot copy %d bytes into a %d-byte device array" % (ary.nbytes, self.nbytes))
        if self.nbytes:
            checked_range(self.gpudata, self.nbytes, "a host-to-device copy")
            host_view(self.gpudata, self.nbytes)[:] = ary.reshape(-1).view(np.uint8)

    def set_async(self, ary, stream=None):
        self.set(ary)

    def get(self, ary=None, pagelocked=False, async_=False, stream=None):
        if ary is None:
            ary = np.empty(self.shape, self.dtype)
        elif ary.nbytes != self.nbytes or not ary.flags.c_contiguous:
            raise ValueError("get() needs a contiguous host array of %d bytes" % self.nbytes)
        if self.nbytes:
            checked_range(self.gpudata, self.nbytes, "a device-to-host copy")
            ary.reshape(-1).view(np.uint8)[:] = host_view(self.gpudata, self.nbytes)
        return ary

    def get_async(self, stream=None, ary=None):
        return self.get(ary)

    def reshape(self, *shape, order="C"):
        if order != "C":
            raise NotImplementedError("device arrays are C-ordered")
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return DeviceArray(_reshaped(self.shape, self.size, _shape_tuple(shape)), self.dtype, gpudata=self.gpudata,
                           base=self)

    def ravel(self):
        return self.reshape(self.size)

    def __getitem__(self, key):
        if not isinstance(key, slice) or self.ndim == 0:
            raise NotImplementedError("device arrays support slices of their first axis only")
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise NotImplementedError("device array slices must have step 1")
        stop = max(stop, start)
        row = self.nbytes // self.shape[0] if self.shape[0] else 0
        gpudata = self.ptr + start * row if self.gpudata is not None else None
        return DeviceArray((stop - start,) + self.shape[1:], self.dtype, gpudata=gpudata, base=self)

    def fill(self, value, stream=None):
        self.set(np.full(self.shape, value, self.dtype))
        return self


def _reshaped(old, size, new):
    """new with its -1 resolved, as NumPy's reshape does; ValueError when it does not fit."""
    new = list(new)
    if new.count(-1) > 1:
        raise ValueError("can only specify one unknown dimension")
    if -1 in new:
        known = int(np.prod([d for d in new if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError("cannot reshape array of size %d into shape %s" % (size, tuple(new)))
        new[new.index(-1)] = size // known
    if int(np.prod(new, dtype=np.int64)) != size or any(d < 0 for d in new):
        raise ValueError("cannot reshape array of shape %s into shape %s" % (old, tuple(new)))
    return tuple(new)


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))
