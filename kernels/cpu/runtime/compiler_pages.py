"""Hand the compiler's resident pages back once compiled kernels are linked.

numba links every kernel's machine code with LLVM (libllvmlite.so), also when the
kernel comes from the disk cache. Linking touches 65-75 MB of the library's code and
read-only data, and those pages then stay in the process's resident set although no
run executes them again: a kernel runs its own machine code, which lives in anonymous
memory. (Warm light_resnet50 runs: 435 MB resident, 66 MB of it LLVM's pages.)

    release()      drop the library's clean, read-only pages from this process
    note_linked()  a kernel was just linked: the next `release_if_linked()` releases
    release_if_linked()

`release()` calls madvise(MADV_DONTNEED) on each mapping of libllvmlite.so that is not
writable and holds no page the process changed (no private dirty or anonymous pages:
relocated data is never touched). Such a page is an unchanged copy of the file: it
leaves the resident set, and a later compile that runs LLVM again faults it back in
from the page cache, as after any eviction. jit.team's outermost exit calls
`release_if_linked()`, so a net run that loaded kernels ends with the compiler's pages
handed back; runs that load nothing cost nothing.

Linux only (it reads /proc/self/smaps); elsewhere, or with
CAFFE2PY_KEEP_COMPILER_PAGES=1, nothing is released.
"""
import os
import sys
import threading

LIBRARY = "libllvmlite"
MADV_DONTNEED = 4
_pending = [False]
_lock = threading.Lock()
_madvise = []
# the library's clean mappings, found once: it is never unloaded, and a read-only
# mapping cannot gain changed pages (reading smaps costs ~4-40 ms, 500-4,000 mappings)
_regions = []


def note_linked():
    _pending[0] = True


def release_if_linked():
    if _pending[0]:
        _pending[0] = False
        release()


def clean_library_mappings(smaps_text, library=LIBRARY):
    """(start, end) of each mapping of `library` in an smaps text that is not writable
    and has no private dirty or anonymous pages."""
    found = []
    current = None
    for line in smaps_text.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and not head[0].endswith(":"):
            current = None
            if len(head) == 6 and library in head[5] and "w" not in head[1]:
                start, end = (int(v, 16) for v in head[0].split("-"))
                current = [start, end, True]
                found.append(current)
        elif current is not None and head and head[0] in ("Private_Dirty:", "Anonymous:") and int(head[1]):
            current[2] = False
    return [(start, end) for start, end, clean in found if clean]


def _madvise_function():
    if not _madvise:
        import ctypes
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.madvise
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _madvise.append(fn)
    return _madvise[0]


def release():
    """Drop libllvmlite's clean read-only pages from the resident set; returns the
    bytes of mappings advised (0 where none is mapped, off Linux, or switched off)."""
    if not sys.platform.startswith("linux") or os.environ.get("CAFFE2PY_KEEP_COMPILER_PAGES", "0") not in ("", "0"):
        return 0
    madvise = _madvise_function()
    if madvise is None:
        return 0
    with _lock:
        if not _regions:
            try:
                with open("/proc/self/smaps") as f:
                    text = f.read()
            except OSError:
                return 0
            _regions.extend(clean_library_mappings(text))
        advised = 0
        for start, end in _regions:
            if madvise(start, end - start, MADV_DONTNEED) == 0:
                advised += end - start
        return advised
