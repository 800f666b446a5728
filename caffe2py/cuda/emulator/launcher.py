"""Launching an emulated kernel: the host's argument format checked against the
kernel's own parameter list, pointer arguments checked to be device memory, the
launch run in several thread orders whose results must agree, and every failure
turned into a Caffe2Error naming the kernel, the thread and the buffer.

Settings (environment, read once; `configure` overrides them):
  CAFFE2PY_CUDA_EMU_ORDERS   thread orders per launch, comma-separated from forward,
                             reversed, shuffled (default: all three)
  CAFFE2PY_CUDA_EMU_SEED     seed of the shuffled order (default: random per process;
                             every order error prints it)
  CAFFE2PY_CUDA_EMU_TIMEOUT  seconds a launch may run (default 300)
"""
import functools
import os
import struct
from dataclasses import dataclass

import numpy as np

from ...errors import Caffe2Error
from . import memory, runtime

ORDER_BY_NAME = {"forward": runtime.ORDER_FORWARD, "reversed": runtime.ORDER_REVERSE,
                 "reverse": runtime.ORDER_REVERSE, "shuffled": runtime.ORDER_SHUFFLE,
                 "shuffle": runtime.ORDER_SHUFFLE}


class EmulatorError(Caffe2Error):
    """A kernel failed under the emulator's checks. `kind` is the runtime's error code
    (runtime.ERR_*), `kernel` the kernel's name, `argument` the parameter whose buffer
    was involved (or None)."""

    def __init__(self, message, kind=None, kernel=None, argument=None):
        super().__init__(message)
        self.kind, self.kernel, self.argument = kind, kernel, argument


@dataclass
class Settings:
    orders: tuple
    seed: int
    timeout_s: float


_settings = []


def _from_environment(environ=None):
    environ = os.environ if environ is None else environ
    text = environ.get("CAFFE2PY_CUDA_EMU_ORDERS") or "forward,reversed,shuffled"
    orders = []
    for word in text.replace(" ", "").split(","):
        if word not in ORDER_BY_NAME:
            raise Caffe2Error("CAFFE2PY_CUDA_EMU_ORDERS: unknown order %r (forward, reversed, shuffled)" % word)
        orders.append(ORDER_BY_NAME[word])
    seed_text = environ.get("CAFFE2PY_CUDA_EMU_SEED")
    seed = int(seed_text) if seed_text else int.from_bytes(os.urandom(4), "little")
    return Settings(tuple(orders), seed, float(environ.get("CAFFE2PY_CUDA_EMU_TIMEOUT") or 300))


def settings():
    if not _settings:
        _settings.append(_from_environment())
    return _settings[0]


def configure(orders=None, seed=None, timeout_s=None):
    """Change the emulator's checks for this process; returns the previous Settings."""
    old = settings()
    new = Settings(tuple(ORDER_BY_NAME[o] if isinstance(o, str) else o for o in orders) if orders else old.orders,
                   old.seed if seed is None else int(seed), old.timeout_s if timeout_s is None else float(timeout_s))
    _settings[0] = new
    return old


def restore(saved):
    _settings[0] = saved


# ----------------------------------------------------------------------------- argument formats

_INT_CHARS = {1: "bBc?", 2: "hH", 4: "iI", 8: "qQlLnN"}


@functools.lru_cache(maxsize=512)
def format_items(fmt):
    """[(offset, size, char)] of a struct format packed with native alignment (what
    PyCUDA's prepared calls do), and its total size."""
    chars = []
    count = ""
    for ch in fmt:
        if ch.isdigit():
            count += ch
            continue
        if ch in "@=<>! ":
            continue
        chars += [ch] * (int(count) if count else 1)
        count = ""
    items = []
    for i, ch in enumerate(chars):
        end = struct.calcsize("".join(chars[:i + 1]))
        size = struct.calcsize(ch)
        items.append((end - size, size, ch))
    return items, struct.calcsize(fmt)


def check_format(kernel, fmt):
    """Raise an EmulatorError unless fmt packs exactly the kernel's parameters.
    Returns, per parameter, the indices of the format items (= arguments) it takes."""
    items, total = format_items(fmt)
    per_param, i = [], 0
    for k, (offset, size, align, kind) in enumerate(kernel.layout):
        name = kernel.param_names[k] if k < len(kernel.param_names) else "arg%d" % k

        def mismatch(why):
            return EmulatorError("CUDA emulator: kernel %s parameter %d '%s' (%s, %d bytes at offset %d): %s "
                                 "(argument format '%s')" % (kernel.name, k, name, _KIND_TEXT.get(kind, kind), size,
                                                             offset, why, fmt), runtime.ERR_LAUNCH, kernel.name, name)
        taken = []
        if kind == "s":
            while i < len(items) and items[i][0] < offset + size:
                if items[i][0] < offset:
                    raise mismatch("the host's item %d overlaps it" % i)
                taken.append(i)
                i += 1
            if not taken or items[taken[0]][0] != offset or \
                    not offset + size - align < items[taken[-1]][0] + items[taken[-1]][1] <= offset + size:
                raise mismatch("the host's items do not cover the struct")
        else:
            if i >= len(items):
                raise mismatch("the host packs no argument for it")
            off, isize, ch = items[i]
            ok = off == offset and isize == size and (
                (kind == "P" and ch == "P") or (kind == "f" and ch == "f") or (kind == "d" and ch == "d")
                or (kind == "h" and ch in "eHh") or (kind in "iub" and ch in _INT_CHARS.get(size, "")))
            if not ok:
                raise mismatch("the host packs '%s' (%d bytes) at offset %d" % (ch, isize, off))
            taken.append(i)
            i += 1
        per_param.append(taken)
    if i != len(items) or total != kernel.params_size:
        raise EmulatorError("CUDA emulator: kernel %s takes %d bytes of parameters, the host packs %d ('%s')"
                            % (kernel.name, kernel.params_size, total, fmt), runtime.ERR_LAUNCH, kernel.name)
    return per_param


_KIND_TEXT = {"P": "pointer", "i": "signed integer", "u": "unsigned integer", "b": "bool", "f": "float",
              "d": "double", "h": "__half", "s": "struct"}


# ----------------------------------------------------------------------------- launching

class Launch:
    """One call of a kernel: its pointer arguments resolved to device blocks."""

    def __init__(self, kernel, fmt, per_param, args):
        self.kernel = kernel
        items, _ = format_items(fmt)
        self.params = struct.pack(fmt, *args)
        self.pointers = []   # (parameter name, address, block)
        for k, taken in enumerate(per_param):
            name = kernel.param_names[k] if k < len(kernel.param_names) else "arg%d" % k
            for j, i in enumerate(taken):
                if items[i][2] != "P":
                    continue
                address = int(args[i] or 0)
                label = name if len(taken) == 1 else "%s (pointer %d of the struct)" % (name, j)
                if address == 0:
                    continue
                block = memory.registry.containing(address)
                if block is None or not block.live or address > block.base + block.nbytes:
                    state = ("is not device memory (a host pointer?)" if block is None else
                             "points into a freed device buffer" if not block.live else
                             "points past the end of a %s" % block.describe())
                    raise EmulatorError("CUDA emulator: kernel %s argument '%s' = 0x%x %s"
                                        % (kernel.name, label, address, state), runtime.ERR_WILD, kernel.name, label)
                self.pointers.append((label, address, block))

    def blocks(self):
        seen = {}
        for _, _, block in self.pointers:
            seen[block.base] = block
        return list(seen.values())

    def names_of(self, block):
        return [name for name, _, b in self.pointers if b is block]


def run(kernel, fmt, per_param, grid, block, args, shared_size=0):
    """Launch the kernel in every configured thread order; raise EmulatorError when a
    run fails a check or when the orders' results differ."""
    cfg = settings()
    launch = Launch(kernel, fmt, per_param, args)
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
    blocks = launch.blocks() if len(cfg.orders) > 1 else []
    before = [memory.host_view(b.base, b.nbytes).copy() for b in blocks]
    # __device__ variables too: each order starts from the same state, and must end in it
    variables = runtime.device_variables() if len(cfg.orders) > 1 else []
    vars_before = [memory.host_view(a, n).copy() for _, a, n in variables]
    first = None
    for n, order in enumerate(cfg.orders):
        if n:
            for b, saved in zip(blocks, before):
                memory.host_view(b.base, b.nbytes)[:] = saved
            for (_, address, size), saved in zip(variables, vars_before):
                view = memory.host_view(address, size)
                if not np.array_equal(view, saved):  # only written ones: others may be read-only
                    view[:] = saved
        err = runtime.launch(kernel, launch.params, grid, block, shared_size, order, cfg.seed, cfg.timeout_s)
        if err.kind != runtime.OK:
            raise _error(launch, err, order, cfg, grid, block)
        if len(cfg.orders) == 1:
            return
        after = [memory.host_view(b.base, b.nbytes).copy() for b in blocks]
        vars_after = [memory.host_view(a, size).copy() for _, a, size in variables]
        if first is None:
            first = (order, after, vars_after)
            continue
        for b, a, f in zip(blocks, after, first[1]):
            if not np.array_equal(a, f):
                raise _order_error(launch, b, f, a, first[0], order, cfg)
        for (name, _, _), a, f in zip(variables, vars_after, first[2]):
            if not np.array_equal(a, f):
                raise EmulatorError("CUDA emulator: kernel %s (%s) leaves __device__ variable '%s' different when the "
                                    "threads run in %s and in %s order (seed %d): a race on it?"
                                    % (kernel.name, os.path.basename(kernel.library.source), name,
                                       runtime.ORDER_NAMES[first[0]], runtime.ORDER_NAMES[order], cfg.seed),
                                    "order", kernel.name, name)


# ----------------------------------------------------------------------------- messages

def _where(err):
    if not err.in_kernel:
        return ""
    return ", block (%d,%d,%d) thread (%d,%d,%d)" % (tuple(err.block) + tuple(err.thread))


def _head(launch, err, order, cfg):
    k = launch.kernel
    text = "CUDA emulator: kernel %s (%s)%s" % (k.name, os.path.basename(k.library.source), _where(err))
    if order != runtime.ORDER_FORWARD:
        text += " [%s thread order, seed %d]" % (runtime.ORDER_NAMES[order], cfg.seed)
    return text


def _error(launch, err, order, cfg, grid, block):
    head = _head(launch, err, order, cfg)
    detail = err.detail.decode(errors="replace")
    access = "%s of %d bytes at 0x%x" % ("write" if err.is_write else "read", err.size, err.address)
    kind, argument = err.kind, None
    if kind in (runtime.ERR_OUT_OF_BOUNDS, runtime.ERR_FREED, runtime.ERR_UNALLOCATED):
        place, argument = _place(launch, err.address)
        what = {runtime.ERR_FREED: "use after free"}.get(kind, "out-of-bounds access")
        msg = "%s: %s: %s, %s" % (head, what, access, place)
    elif kind == runtime.ERR_MISALIGNED:
        place, argument = _place(launch, err.address)
        msg = "%s: misaligned access: %s is not %d-byte aligned (%s)" % (head, access, err.size, place)
    elif kind == runtime.ERR_WILD:
        msg = "%s: %s, which is not device, shared, global or stack memory (a host pointer?)" % (head, access)
    elif kind == runtime.ERR_NULL:
        msg = "%s: %s: a null pointer access" % (head, access)
    elif kind in (runtime.ERR_SHARED, runtime.ERR_GLOBAL):
        what = "shared memory" if kind == runtime.ERR_SHARED else "a __device__/__constant__ variable"
        msg = "%s: out-of-bounds access to %s: %s (%s)" % (head, what, access, detail)
    elif kind == runtime.ERR_DEADLOCK:
        msg = "%s: deadlock: %s" % (head, detail)
    elif kind == runtime.ERR_WARP:
        msg = "%s: warp collective misuse: %s" % (head, detail)
    elif kind == runtime.ERR_CRASH:
        msg = "%s: %s at 0x%x" % (head, detail, err.address)
    elif kind == runtime.ERR_TIMEOUT:
        msg = "%s: %s" % (head, detail)
    elif kind == runtime.ERR_TRAP:
        msg = "%s: %s" % (head, detail)
    else:
        msg = "%s: bad launch (grid %s, block %s): %s" % (head, grid, block, detail)
    return EmulatorError(msg, kind, launch.kernel.name, argument)


def _place(launch, address):
    """'N bytes past the end of argument 'x' (a 320-byte buffer ...)', and the argument."""
    before, after = memory.registry.around(address)
    candidates = []
    if before is not None:
        if address < before.base + before.nbytes:
            candidates.append((0, before, "byte %d of" % (address - before.base)))
        else:
            candidates.append((address - before.base - before.nbytes,
                               before, "%d bytes past the end of" % (address - before.base - before.nbytes)))
    if after is not None:
        candidates.append((after.base - address, after, "%d bytes before the start of" % (after.base - address)))
    if not candidates:
        return "outside every device buffer", None
    # Prefer buffers the kernel was given, then the nearest one.
    candidates.sort(key=lambda c: (not launch.names_of(c[1]), c[0]))
    _, block, rel = candidates[0]
    names = launch.names_of(block)
    freed = "" if block.live else "freed "
    if names:
        return "%s argument '%s' (a %s%s)" % (rel, names[0], freed, block.describe()), names[0]
    return "%s a %s%s the kernel was not given" % (rel, freed, block.describe()), None


def _order_error(launch, block, first, other, first_order, order, cfg):
    diff = int(np.flatnonzero(first != other)[0])
    names = launch.names_of(block) or ["a buffer"]
    value = ""
    label = block.label
    if label:
        dtype = np.dtype(label.split("[")[0])
        i = diff // dtype.itemsize
        a = first[i * dtype.itemsize:(i + 1) * dtype.itemsize].view(dtype)
        b = other[i * dtype.itemsize:(i + 1) * dtype.itemsize].view(dtype)
        if a.size and b.size:
            value = " (%s element %d: %r vs %r)" % (dtype.name, i, a[0].item(), b[0].item())
    msg = ("CUDA emulator: kernel %s (%s) gives different results when the threads of a block run in %s and "
           "in %s order between barriers (seed %d): argument '%s' differs first at byte %d%s. A shared-memory "
           "race, a missing __syncthreads, or blocks writing the same output?"
           % (launch.kernel.name, os.path.basename(launch.kernel.library.source), runtime.ORDER_NAMES[first_order],
              runtime.ORDER_NAMES[order], cfg.seed, names[0], diff, value))
    return EmulatorError(msg, "order", launch.kernel.name, names[0])
