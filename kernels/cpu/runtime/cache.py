"""Where compiled kernels live: a user cache folder, never the install tree.

    cache_root()          $CAFFE2PY_CACHE, else the platform's user cache folder
                          (~/.cache/caffe2py, $XDG_CACHE_HOME/caffe2py,
                          ~/Library/Caches/caffe2py, %LOCALAPPDATA%/caffe2py/Cache)
    numba_cache_dir()     cache_root()/numba: machine code of the compiled CPU kernels
    install_locator()     makes numba cache caffe2py's kernels there (once per process)
    clear(), summary()    what `caffe2py cache clear|info` do

Why not numba's default (a __pycache__ beside the module): inside site-packages that
writes into the install tree, and pip leaves the files behind on uninstall, so the
package folder survives as a namespace package that shadows a later install.

Layout: one folder per kernel module and source content,
`numba/<module>-<sha256 of the source, 16 hex>/`, so two installs of the same
source share their kernels (a reinstall finds them), two different sources (an
edited checkout beside an installed release) never overwrite each other's index,
and an edit simply starts a new folder. numba's own index keys each entry by
signature, CPU name and CPU features, so one home folder shared by machines is safe.
Concurrent compiles of one kernel are safe: numba writes every file under a
temporary name and renames it into place.
"""
import hashlib
import os
import shutil
import sys

_ENV = "CAFFE2PY_CACHE"
_PACKAGE_PREFIX = "caffe2py.kernels."


def cache_root():
    """The folder every cache of caffe2py lives under (created on first use)."""
    env = os.environ.get(_ENV)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~")
        return os.path.join(base, "caffe2py", "Cache")
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Caches/caffe2py")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "caffe2py")


def numba_cache_dir():
    return os.path.join(cache_root(), "numba")


_source_digests = {}


def source_digest(path):
    """sha256 of a source file's bytes, 16 hex digits (cached per path, size and mtime)."""
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    digest = _source_digests.get(key)
    if digest is None:
        with open(path, "rb") as fh:
            digest = _source_digests[key] = hashlib.sha256(fh.read()).hexdigest()[:16]
    return digest


_CPU_KERNELS_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_tree_digest = []


def kernels_tree_digest():
    """sha256 over every CPU kernel module's source (once per process). numba checks
    only the calling module's file, but a kernel inlines jitted helpers of other
    modules (qgemm_simd's micro-kernels in int8_conv, ...): an edit there must not
    reuse machine code compiled against the old helper."""
    if not _tree_digest:
        h = hashlib.sha256()
        for folder, dirs, files in os.walk(_CPU_KERNELS_ROOT):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, _CPU_KERNELS_ROOT).encode())
                with open(path, "rb") as fh:
                    h.update(fh.read())
        _tree_digest.append(h.hexdigest()[:12])
    return _tree_digest[0]


def kernel_cache_dir(module_name, source_path):
    return os.path.join(numba_cache_dir(), "%s-%s-%s" % (module_name, source_digest(source_path),
                                                       kernels_tree_digest()))


_installed = []


def install_locator():
    """Put caffe2py's kernels' numba cache in the user cache folder (imports numba)."""
    if _installed:
        return
    from numba.core import caching

    class Caffe2pyCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        """numba's cache for functions of caffe2py.kernels.* modules: see the module docstring."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = kernel_cache_dir(py_func.__module__, py_file)

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            if not getattr(py_func, "__module__", "").startswith(_PACKAGE_PREFIX):
                return None
            return super().from_function(py_func, py_file)

    caching.CacheImpl._locator_classes.insert(0, Caffe2pyCacheLocator)
    _installed.append(Caffe2pyCacheLocator)


def _folder_size(path):
    total = files = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(folder, name))
                files += 1
            except OSError:
                pass
    return total, files


def summary():
    """(root, bytes, files, kernel source folders) of the cache."""
    root = cache_root()
    size, files = _folder_size(root) if os.path.isdir(root) else (0, 0)
    numba_dir = numba_cache_dir()
    folders = sorted(os.listdir(numba_dir)) if os.path.isdir(numba_dir) else []
    return root, size, files, folders


def clear():
    """Delete every cache of caffe2py; returns the bytes freed. The next run compiles
    its kernels again."""
    root = cache_root()
    if not os.path.isdir(root):
        return 0
    size, _ = _folder_size(root)
    shutil.rmtree(root, ignore_errors=True)
    return size
