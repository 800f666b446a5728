"""Builds the emulator's shared libraries with the host C++ compiler (g++ 12 or newer),
cached on disk by content hash in the user cache folder (see `cache_dir`).

- The runtime: csrc/c2emu_runtime.cpp (fibers, scheduler, device memory and checks).
- One library per kernel source: the .cu file, unchanged, force-included with
  include/c2emu.h and compiled together with a generated wrapper that lists its
  kernels (found by a first preprocessing pass in which the header leaves markers for
  `__global__` and `__shared__`). Kernel code is instrumented with GCC's
  kernel-address sanitizer in outline mode: every load and store calls a check in the
  runtime (bounds, alignment, shared memory, globals), and no shadow memory of
  GCC's own is involved.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from ...errors import Caffe2Error
from ..cache_root import user_cache_root

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "include")
RUNTIME_SOURCE = os.path.join(HERE, "csrc", "c2emu_runtime.cpp")

COMMON_FLAGS = ("-std=c++20", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
                "-fno-strict-aliasing",       # kernels reinterpret buffers freely, as nvcc allows
                "-ffp-contract=off",          # a * b + c rounds twice unless the source says fmaf
                "-fno-fast-math", "-U_FORTIFY_SOURCE", "-Wno-unknown-pragmas")
# Keep each access of the source an access of the library, so that the checks judge
# the kernel's own accesses: no host vectorisation, no loads merged into wider ones
# (GCC's bswap pass, an "expensive optimization", turns four byte loads into one
# unaligned word load), no merged stores, no loops turned into memset/memcpy calls the
# checks would not see, no vector loads split into scalar ones (SRA: a float4 load
# stays one 16-byte access, so its alignment is checked as a GPU checks it). Then call
# the runtime's check on every load and store.
KERNEL_FLAGS = ("-O1", "-fno-expensive-optimizations", "-fno-tree-vectorize", "-fno-tree-slp-vectorize",
                "-fno-tree-loop-distribute-patterns", "-fno-store-merging", "-fno-tree-sra", "-fno-common",
                "-Wno-attributes",
                "-fsanitize=kernel-address", "--param", "asan-instrumentation-with-call-threshold=0",
                "--param", "asan-stack=0", "--param", "asan-globals=1")
_BUILD_VERSION = "2"   # bump when the wrapper or the flags change meaning


def find_compiler(environ=None):
    """The C++ compiler: $CXX when it is g++, else g++ on PATH; None when there is none."""
    environ = os.environ if environ is None else environ
    for cand in (environ.get("CXX"), "g++"):
        if cand:
            path = shutil.which(cand, path=environ.get("PATH"))
            if path:
                return path
    return None


def compiler_identity(cxx):
    """(version tuple, one-line description) of a GCC; raises Caffe2Error for others."""
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
        full = subprocess.run([cxx, "-dumpfullversion"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise Caffe2Error("CUDA emulator: cannot run the C++ compiler %s: %s" % (cxx, exc)) from None
    first = out.splitlines()[0] if out else cxx
    if "clang" in out.lower() or not re.match(r"\d+", full):
        raise Caffe2Error("CUDA emulator: needs GCC (g++ 12 or newer); %s is %s" % (cxx, first))
    version = tuple(int(v) for v in re.findall(r"\d+", full)[:3])
    if version < (12,):
        raise Caffe2Error("CUDA emulator: needs g++ 12 or newer (C++ _Float16); %s is %s" % (cxx, first))
    return version, first


def cache_dir():
    root = os.path.join(user_cache_root(), "cuda-emulator")
    os.makedirs(root, exist_ok=True)
    return root


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _headers_text(folder):
    parts = []
    for name in sorted(os.listdir(folder)):
        if name.endswith((".h", ".cuh", ".hpp")):
            parts.append(name + "\n" + _read(os.path.join(folder, name)))
    return "\n".join(parts)


def _key(*parts):
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8") if isinstance(part, str) else part)
        h.update(b"\x1f")
    return h.hexdigest()[:32]


def _compile(cxx, args, out_path, what):
    tmp = "%s.%d.tmp" % (out_path, os.getpid())
    proc = subprocess.run([cxx] + list(args) + ["-o", tmp], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        text = (proc.stderr or proc.stdout).strip()
        raise Caffe2Error("CUDA emulator: %s failed to compile %s:\n%s" % (os.path.basename(cxx), what,
                                                                           text[-6000:]))
    os.replace(tmp, out_path)  # atomic: a concurrent process never loads half a library


@dataclass
class KernelSignature:
    name: str
    params: list = field(default_factory=list)   # parameter names, in order


@dataclass
class Scan:
    kernels: list                  # [KernelSignature]
    extern_shared: list            # [(type text, name)]


def toolchain():
    """(compiler path, identity line); Caffe2Error when no usable g++ is found."""
    cxx = find_compiler()
    if cxx is None:
        raise Caffe2Error("CUDA emulator: no C++ compiler found (install g++ 12 or newer, or set $CXX)")
    _, ident = compiler_identity(cxx)
    return cxx, ident


def runtime_library():
    """Path of the runtime library, built on first use."""
    cxx, ident = toolchain()
    src = _read(RUNTIME_SOURCE)
    key = _key(_BUILD_VERSION, ident, " ".join(COMMON_FLAGS), src, _read(os.path.join(INCLUDE, "c2emu_abi.h")))
    path = os.path.join(cache_dir(), "c2emu-runtime-%s.so" % key)
    if not os.path.exists(path):
        _compile(cxx, list(COMMON_FLAGS) + ["-I", INCLUDE, RUNTIME_SOURCE, "-ldl"], path, "the emulator runtime")
    return path


# ----------------------------------------------------------------------------- scanning

_MARK_GLOBAL = "C2EMU_GLOBAL_MARK"
_MARK_SHARED = "C2EMU_SHARED_MARK"
_IDENT = re.compile(r"[A-Za-z_]\w*")


def _skip_attributes(text, i):
    """Index after any __attribute__((...)) / [[...]] groups and whitespace from i."""
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if text.startswith("__attribute__", i):
            j = text.index("(", i)
            i = _matching(text, j) + 1
        elif text.startswith("[[", i):
            i = text.index("]]", i) + 2
        else:
            return i


def _matching(text, open_index):
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    close = pairs[text[open_index]]
    depth = 0
    for k in range(open_index, len(text)):
        if text[k] == text[open_index]:
            depth += 1
        elif text[k] == close:
            depth -= 1
            if depth == 0:
                return k
    raise ValueError("unbalanced %s" % text[open_index])


def _split_params(text):
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([<{":
            depth += 1
        elif ch in ")]>}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _param_name(decl, index):
    decl = decl.split("=")[0].strip()
    decl = re.sub(r"\[[^\]]*\]\s*$", "", decl).strip()
    names = _IDENT.findall(decl)
    keywords = {"const", "volatile", "unsigned", "signed", "int", "long", "short", "char", "float", "double",
                "bool", "void", "__restrict__", "__restrict", "restrict", "struct"}
    if len(names) >= 2 and names[-1] not in keywords:
        return names[-1]
    return "arg%d" % index


def _is_template(text, mark_index):
    start = max(text.rfind(";", 0, mark_index), text.rfind("}", 0, mark_index), text.rfind("{", 0, mark_index))
    return re.search(r"\btemplate\b", text[start + 1:mark_index]) is not None


def parse_preprocessed(text):
    """Kernels (names and parameter names) and extern __shared__ arrays of a source,
    from its preprocessed text with the header's markers left in."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    kernels, seen = [], set()
    for m in re.finditer(r"\b%s\b" % _MARK_GLOBAL, text):
        if _is_template(text, m.start()):
            continue
        i = _skip_attributes(text, m.end())
        if not text.startswith("void", i):
            continue
        i = _skip_attributes(text, i + 4)
        name_match = _IDENT.match(text, i)
        if not name_match:
            continue
        name = name_match.group(0)
        i = _skip_attributes(text, name_match.end())
        if i >= len(text) or text[i] != "(":
            continue
        close = _matching(text, i)
        params = _split_params(text[i + 1:close])
        if params == ["void"]:
            params = []
        if name not in seen:
            seen.add(name)
            kernels.append(KernelSignature(name, [_param_name(p, k) for k, p in enumerate(params)]))
    shared = []
    for m in re.finditer(r"\bextern\s+%s\s+([^;]*?)\b([A-Za-z_]\w*)\s*\[\s*\]\s*;" % _MARK_SHARED, text):
        if m.group(2) not in [n for _, n in shared]:
            shared.append((m.group(1).strip(), m.group(2)))
    return Scan(kernels, shared)


def scan_source(cxx, path):
    args = [cxx, "-E", "-std=c++20", "-DC2EMU_SCAN", "-include", os.path.join(INCLUDE, "c2emu.h"),
            "-I", INCLUDE, "-I", os.path.dirname(os.path.abspath(path)), "-x", "c++", path]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise Caffe2Error("CUDA emulator: preprocessing %s failed:\n%s" % (path, proc.stderr.strip()[-6000:]))
    return parse_preprocessed(proc.stdout)


def wrapper_source(path, scan):
    """The C++ that turns a kernel source into an emulator library."""
    lines = ["// generated by caffe2py.cuda.emulator.build for %s" % os.path.basename(path),
             '#include "%s"' % os.path.abspath(path).replace("\\", "\\\\").replace('"', '\\"'),
             '#include "c2emu_kernels.h"',
             "thread_local volatile unsigned char c2emu_tls_anchor;",
             "C2EMU_EXPORT void c2emu_touch_tls(void) { c2emu_tls_anchor = 0; }"]
    if scan.extern_shared:
        # One window for every extern __shared__ array (CUDA's rule: they all start at
        # the same address), bound to each array's symbol by the assembler so that the
        # source's own declarations (C linkage inside extern "C" kernels) stay as they are.
        lines.append("__attribute__((used, aligned(256))) thread_local unsigned char "
                     "c2emu_dynamic_window[C2EMU_MAX_DYNAMIC_SHARED];")
        directives = "".join(".globl %s\\n.type %s, @tls_object\\n.set %s, c2emu_dynamic_window\\n" % (n, n, n)
                             for _, n in scan.extern_shared)
        lines.append('asm("%s");' % directives)
        lines.append("C2EMU_EXPORT void* c2emu_dynamic_shared(void) { return (void*)c2emu_dynamic_window; }")
    else:
        lines.append("C2EMU_EXPORT void* c2emu_dynamic_shared(void) { return nullptr; }")
    lines.append("static const c2emu_kernel c2emu_table[] = {")
    lines += ["    C2EMU_ENTRY(%s)" % k.name for k in scan.kernels]
    lines.append("    {nullptr, nullptr, 0, nullptr, 0}};")
    lines.append("C2EMU_EXPORT const c2emu_kernel* c2emu_kernels(unsigned* n) { *n = %d; return c2emu_table; }"
                 % len(scan.kernels))
    lines.append("C2EMU_EXPORT int c2emu_library_abi(void) { return C2EMU_ABI_VERSION; }")
    return "\n".join(lines) + "\n"


def kernel_library(path):
    """(library path, Scan) for a .cu source, built on first use."""
    cxx, ident = toolchain()
    runtime = runtime_library()
    folder = os.path.dirname(os.path.abspath(path))
    key = _key(_BUILD_VERSION, ident, " ".join(COMMON_FLAGS + KERNEL_FLAGS), runtime,
               _headers_text(INCLUDE), _read(path), _headers_text(folder),
               _headers_text(os.path.dirname(folder)), os.path.abspath(path))  # "../common.cuh" too
    stem = os.path.join(cache_dir(), "%s-%s" % (os.path.splitext(os.path.basename(path))[0], key))
    lib, meta = stem + ".so", stem + ".json"
    if os.path.exists(lib) and os.path.exists(meta):
        with open(meta, encoding="utf-8") as f:
            data = json.load(f)
        return lib, Scan([KernelSignature(k["name"], k["params"]) for k in data["kernels"]],
                         [tuple(s) for s in data["extern_shared"]])
    scan = scan_source(cxx, path)
    wrapper = stem + ".%d.wrapper.cpp" % os.getpid()
    with open(wrapper, "w", encoding="utf-8") as f:
        f.write(wrapper_source(path, scan))
    try:
        args = list(COMMON_FLAGS) + list(KERNEL_FLAGS) + [
            "-include", os.path.join(INCLUDE, "c2emu.h"), "-I", INCLUDE, "-I", folder, wrapper,
            runtime, "-Wl,-z,defs", "-Wl,-rpath," + os.path.dirname(runtime)]
        _compile(cxx, args, lib, os.path.relpath(path) if not os.path.isabs(path) else path)
    finally:
        os.unlink(wrapper)
    tmp = "%s.%d.tmp" % (meta, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"kernels": [{"name": k.name, "params": k.params} for k in scan.kernels],
                   "extern_shared": scan.extern_shared, "source": os.path.abspath(path),
                   "python": sys.version.split()[0]}, f)
    os.replace(tmp, meta)
    return lib, scan


def prebuild(paths, workers=None):
    """Build the libraries of several .cu sources at once (g++ runs in parallel); the
    first error is raised after all have finished."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415
    runtime_library()
    workers = workers or max(1, min(len(paths), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = [pool.submit(kernel_library, p) for p in paths]
    for r in results:
        r.result()
