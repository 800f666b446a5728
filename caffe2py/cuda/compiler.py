"""kernels/cuda/<family>/<name>.cu -> a loaded module of the device's arch.

Sources are named by their file stem (unique across the family folders); shared
headers (*.cuh) sit in kernels/cuda itself and sources include them as "../common.cuh".

Compilation goes through pycuda.compiler.compile (what SourceModule does before
loading) with `arch` set explicitly from the device's compute capability (PyCUDA
would otherwise fall back to nvcc's default arch) and options ["-O3"]. Cubins are
cached on disk under a key hashing the source, the shared headers, the options and
the arch, so a second process loads them without running nvcc.
"""
import hashlib
import os

from ..errors import Caffe2Error
from . import backend, context
from .cache_root import user_cache_root  # noqa: F401  (the emulator's build shares it)

OPTIONS = ("-O3",)
_modules = {}   # (name, device id) -> pycuda Module
_functions = {}  # (name, function, device id) -> prepared Function


def _forget():
    _modules.clear()
    _functions.clear()


backend.on_select(_forget)   # a new backend loads its own modules


def kernel_dir():
    import caffe2py.kernels.cuda as pkg  # noqa: PLC0415
    return os.path.dirname(os.path.abspath(pkg.__file__))


def source_paths():
    """{name: path} of every kernel source, kernels/cuda/<family>/<name>.cu."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(kernel_dir()):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fname in sorted(filenames):
            if fname.endswith(".cu"):
                found[fname[:-3]] = os.path.join(dirpath, fname)
    return found


def source_path(name):
    path = source_paths().get(name)
    if path is None:
        raise Caffe2Error("CUDA kernel source %s.cu is missing from %s" % (name, kernel_dir()))
    return path


def read_source(name):
    path = source_path(name)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise Caffe2Error("CUDA kernel source %s is missing: %s" % (path, exc)) from None


def headers_text():
    """Every shared header's text: part of each cache key, since sources include them."""
    folder = kernel_dir()
    parts = []
    for fname in sorted(os.listdir(folder)):
        if fname.endswith(".cuh"):
            with open(os.path.join(folder, fname), encoding="utf-8") as f:
                parts.append(fname + "\n" + f.read())
    return "\n".join(parts)


def arch_for(compute_capability):
    """(8, 0) -> 'sm_80'."""
    major, minor = compute_capability
    return "sm_%d%d" % (major, minor)


def cache_key(source, options, arch, headers=""):
    h = hashlib.sha256()
    for part in (source, "\0".join(options), arch, headers):
        h.update(part.encode("utf-8"))
        h.update(b"\x1f")
    return h.hexdigest()


def cache_dir():
    """Where cubins are kept: $CAFFE2PY_CUDA_CACHE, else <user cache root>/cuda."""
    root = os.environ.get("CAFFE2PY_CUDA_CACHE") or os.path.join(user_cache_root(), "cuda")
    os.makedirs(root, exist_ok=True)
    return root


def find_nvcc(environ=None):
    """nvcc from PATH, else from $CUDA_HOME / $CUDA_PATH / /usr/local/cuda (a GPU
    machine's Python often runs without the toolkit's bin/ on PATH)."""
    import shutil  # noqa: PLC0415
    environ = os.environ if environ is None else environ
    found = shutil.which("nvcc", path=environ.get("PATH"))
    if found:
        return found
    for root in (environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return "nvcc"


def compile_cubin(source, arch, options=OPTIONS, headers="", include_dir=None):
    """The cubin for source, from the disk cache or nvcc (through PyCUDA); include_dir is
    the source's own folder, against which its "../common.cuh" resolves."""
    key = cache_key(source, options, arch, headers)
    path = os.path.join(cache_dir(), key + ".cubin")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    from pycuda.compiler import compile as nvcc_compile  # noqa: PLC0415
    try:
        cubin = nvcc_compile(source, nvcc=find_nvcc(), options=list(options), arch=arch, no_extern_c=True,
                             include_dirs=[include_dir or kernel_dir()], cache_dir=False)
    except Exception as exc:  # noqa: BLE001 - CompileError carries nvcc's text
        raise Caffe2Error("nvcc failed for a CUDA kernel (%s): %s" % (arch, exc)) from None
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(cubin)
    os.replace(tmp, path)  # atomic: concurrent processes never read half a file
    return cubin


def module(name, device_id=0):
    """The loaded module for kernels/cuda/<family>/<name>.cu on device_id (a cubin through PyCUDA,
    or a host library through the emulator)."""
    mod = _modules.get((name, device_id))
    if mod is None:
        context.activate(device_id)
        if backend.is_emulator():
            from .emulator import driver as emu  # noqa: PLC0415
            mod = _modules[(name, device_id)] = emu.module_from_file(source_path(name))
            return mod
        import pycuda.driver as drv  # noqa: PLC0415
        arch = arch_for(context.compute_capability(device_id))
        mod = _modules[(name, device_id)] = drv.module_from_buffer(
            compile_cubin(read_source(name), arch, OPTIONS, headers_text(), os.path.dirname(source_path(name))))
    return mod


def generated_source_path(source):
    """Where generated CUDA text (fused elementwise chains, caffe2py/cuda/fused.py) is
    kept: <cache>/generated/<sha256 of the text>.cu, written once, atomically."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:32]
    folder = os.path.join(cache_dir(), "generated")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "chain_%s.cu" % digest)
    if not os.path.exists(path):
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)   # concurrent processes write the same bytes
    return path


def module_from_source(source, device_id=0):
    """The loaded module for generated CUDA source text on device_id, cached per process
    by the text's hash; on disk the cubin is cached by compile_cubin's key (the text,
    options, arch) and the emulator's library by its build key, so a chain compiled
    once loads without nvcc / g++ in later processes. The text must be self-contained
    (it may include only the toolkit's headers)."""
    path = generated_source_path(source)
    key = ("generated:" + os.path.basename(path), device_id)
    mod = _modules.get(key)
    if mod is None:
        context.activate(device_id)
        if backend.is_emulator():
            from .emulator import driver as emu  # noqa: PLC0415
            mod = emu.module_from_file(path)
        else:
            import pycuda.driver as drv  # noqa: PLC0415
            arch = arch_for(context.compute_capability(device_id))
            mod = drv.module_from_buffer(compile_cubin(source, arch, OPTIONS, "", os.path.dirname(path)))
        _modules[key] = mod
    return mod


def function(name, func, arg_format, device_id=0):
    """A prepared kernel function: arg_format is PyCUDA's struct-style type string."""
    key = (name, func, device_id)
    fn = _functions.get(key)
    if fn is None:
        fn = module(name, device_id).get_function(func)
        fn.prepare(arg_format)
        _functions[key] = fn
    return fn
