"""ctypes binding to the emulator runtime (csrc/c2emu_runtime.cpp): its structures
(mirrors of include/c2emu_abi.h), device memory calls and the launch call. The
library is built and loaded once per process, on first use."""
import ctypes
import os
import threading

from ...errors import Caffe2Error
from . import build

ABI_VERSION = 3
MAX_DYNAMIC_SHARED = 227 * 1024
DEFAULT_MEMORY = 8 << 30   # virtual bytes reserved for device memory; pages are committed on use

ORDER_FORWARD, ORDER_REVERSE, ORDER_SHUFFLE = 0, 1, 2
ORDER_NAMES = {ORDER_FORWARD: "forward", ORDER_REVERSE: "reversed", ORDER_SHUFFLE: "shuffled"}

(OK, ERR_OUT_OF_BOUNDS, ERR_FREED, ERR_UNALLOCATED, ERR_WILD, ERR_NULL, ERR_SHARED, ERR_GLOBAL, ERR_MISALIGNED,
 ERR_DEADLOCK, ERR_WARP, ERR_CRASH, ERR_TIMEOUT, ERR_TRAP, ERR_LAUNCH, ERR_OUT_OF_MEMORY) = range(16)


class Uint3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class Param(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint), ("size", ctypes.c_uint), ("align", ctypes.c_uint),
                ("kind", ctypes.c_char)]


DESCRIBE = ctypes.CFUNCTYPE(None, ctypes.POINTER(Param))


class KernelEntry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("call", ctypes.c_void_p), ("n_params", ctypes.c_uint),
                ("describe", DESCRIBE), ("params_size", ctypes.c_uint)]


class LaunchDesc(ctypes.Structure):
    _fields_ = [("kernel_name", ctypes.c_char_p), ("call", ctypes.c_void_p),
                ("params", ctypes.c_void_p), ("params_size", ctypes.c_size_t),
                ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_lo", ctypes.c_size_t), ("shared_len", ctypes.c_size_t),
                ("dynamic_lo", ctypes.c_size_t), ("dynamic_len", ctypes.c_size_t),
                ("dynamic_capacity", ctypes.c_size_t),
                ("order", ctypes.c_int), ("seed", ctypes.c_ulonglong), ("timeout_s", ctypes.c_double)]


class Error(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("is_write", ctypes.c_int), ("address", ctypes.c_size_t),
                ("size", ctypes.c_size_t), ("in_kernel", ctypes.c_int),
                ("block", ctypes.c_uint * 3), ("thread", ctypes.c_uint * 3), ("detail", ctypes.c_char * 512)]


_state = {}
_lock = threading.RLock()


def library():
    """The loaded runtime (built on first use), its device memory reserved."""
    lib = _state.get("lib")
    if lib is not None:
        return lib
    with _lock:
        if "lib" in _state:
            return _state["lib"]
        path = build.runtime_library()
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        _declare(lib)
        if lib.c2emu_abi_version() != ABI_VERSION:
            raise Caffe2Error("CUDA emulator: runtime %s has ABI %d, expected %d"
                              % (path, lib.c2emu_abi_version(), ABI_VERSION))
        size = memory_size()
        if lib.c2emu_arena_init(size) != 0:
            raise Caffe2Error("CUDA emulator: cannot reserve %d bytes of address space for device memory "
                              "(set CAFFE2PY_CUDA_EMU_MEMORY to fewer bytes)" % size)
        _state["lib"] = lib
        return lib


def memory_size(environ=None):
    """Bytes of emulated device memory: $CAFFE2PY_CUDA_EMU_MEMORY (bytes, or with a K/M/G
    suffix), default 8 GiB of address space (committed only where written)."""
    environ = os.environ if environ is None else environ
    text = (environ.get("CAFFE2PY_CUDA_EMU_MEMORY") or "").strip().upper()
    if not text:
        return DEFAULT_MEMORY
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        value = int(float(text.rstrip("KMGB") or "x") * scale)
    except ValueError:
        raise Caffe2Error("CAFFE2PY_CUDA_EMU_MEMORY must be a byte count such as 2G, got %r"
                          % environ["CAFFE2PY_CUDA_EMU_MEMORY"]) from None
    return max(1 << 20, value // 4096 * 4096)


def _declare(lib):
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.c2emu_abi_version.restype = ctypes.c_int
    lib.c2emu_arena_init.argtypes = [sz]
    lib.c2emu_arena_init.restype = ctypes.c_int
    lib.c2emu_arena_base.restype = sz
    lib.c2emu_arena_size.restype = sz
    lib.c2emu_alloc.argtypes = [sz]
    lib.c2emu_alloc.restype = sz
    lib.c2emu_free.argtypes = [sz, sz]
    lib.c2emu_mark_live.argtypes = [sz, sz, sz]
    lib.c2emu_mark_freed.argtypes = [sz, sz]
    lib.c2emu_module_tls.argtypes = [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]
    lib.c2emu_module_tls.restype = ctypes.c_int
    lib.c2emu_launch.argtypes = [ctypes.POINTER(LaunchDesc), ctypes.POINTER(Error)]
    lib.c2emu_launch.restype = ctypes.c_int
    lib.c2emu_global_count.restype = sz
    lib.c2emu_global_at.argtypes = [sz, ctypes.POINTER(sz), ctypes.POINTER(sz)]
    lib.c2emu_global_at.restype = ctypes.c_char_p


class KernelLibrary:
    """One kernel source's library: its kernels by name, with their parameter layouts
    and the parameter names the scan found."""

    def __init__(self, source_path):
        library()  # the runtime first: the kernel library links against it
        self.source = source_path
        path, scan = build.kernel_library(source_path)
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.c2emu_kernels.argtypes = [ctypes.POINTER(ctypes.c_uint)]
        self.lib.c2emu_kernels.restype = ctypes.POINTER(KernelEntry)
        self.lib.c2emu_dynamic_shared.restype = ctypes.c_void_p
        self.touch = ctypes.cast(self.lib.c2emu_touch_tls, ctypes.c_void_p).value
        names = {k.name: k.params for k in scan.kernels}
        count = ctypes.c_uint()
        table = self.lib.c2emu_kernels(ctypes.byref(count))
        self.kernels = {}
        for i in range(count.value):
            entry = table[i]
            name = entry.name.decode()
            params = (Param * max(entry.n_params, 1))()
            if entry.n_params:
                entry.describe(params)
            layout = [(p.offset, p.size, p.align, p.kind.decode()) for p in params[:entry.n_params]]
            self.kernels[name] = KernelInfo(name, entry.call, layout, entry.params_size,
                                            names.get(name) or ["arg%d" % k for k in range(entry.n_params)], self)

    def shared_memory(self):
        """(lo, len, dynamic window lo or 0) of this library's shared memory for the
        calling thread (its thread-local block; the extern __shared__ window inside it)."""
        lo, length = ctypes.c_size_t(), ctypes.c_size_t()
        if library().c2emu_module_tls(self.touch, ctypes.byref(lo), ctypes.byref(length)) != 0:
            raise Caffe2Error("CUDA emulator: cannot find the shared memory of %s" % self.path)
        return lo.value, length.value, self.lib.c2emu_dynamic_shared() or 0


_variables = {}


def device_variables():
    """[(name, address, size)] of the kernel libraries' own globals (__device__ and
    __constant__ variables), without compiler-made constants (".LC...") and the
    emulator's tables; recomputed when a library is loaded."""
    lib = library()
    count = lib.c2emu_global_count()
    if _variables.get("count") != count:
        out, beg, size = [], ctypes.c_size_t(), ctypes.c_size_t()
        for i in range(count):
            name = (lib.c2emu_global_at(i, ctypes.byref(beg), ctypes.byref(size)) or b"?").decode(errors="replace")
            if not name.startswith(("*.", "c2emu_")):
                out.append((name, beg.value, size.value))
        _variables.update(count=count, list=out)
    return _variables["list"]


class KernelInfo:
    def __init__(self, name, call, layout, params_size, param_names, library):
        self.name, self.call, self.layout, self.params_size = name, call, layout, params_size
        self.param_names, self.library = param_names, library


def launch(kernel, params, grid, block, shared_bytes, order, seed, timeout_s):
    """Runs one launch; returns the runtime's Error (kind OK when it went well)."""
    lib = library()
    shared_lo, shared_len, dynamic_lo = kernel.library.shared_memory()
    buf = ctypes.create_string_buffer(bytes(params), max(len(params), 1))
    desc = LaunchDesc()
    desc.kernel_name = kernel.name.encode()
    desc.call = kernel.call
    desc.params = ctypes.cast(buf, ctypes.c_void_p).value
    desc.params_size = len(params)
    desc.grid[:] = [int(g) for g in grid]
    desc.block[:] = [int(b) for b in block]
    desc.shared_lo, desc.shared_len = shared_lo, shared_len
    desc.dynamic_lo = dynamic_lo
    desc.dynamic_len = int(shared_bytes)
    desc.dynamic_capacity = MAX_DYNAMIC_SHARED if dynamic_lo else 0
    desc.order, desc.seed, desc.timeout_s = order, seed & (2 ** 64 - 1), float(timeout_s)
    err = Error()
    with _lock:
        lib.c2emu_launch(ctypes.byref(desc), ctypes.byref(err))
    return err
