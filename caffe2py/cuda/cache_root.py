"""caffe2py's user cache folder, for the CUDA cubins (compiler) and the emulator's
libraries (emulator.build). Imports nothing of caffe2py.cuda: the lowest layer of
the device, so the emulator can use it without importing the compiler above it."""
import os
import sys


def user_cache_root(environ=None, platform=None):
    """caffe2py's cache folder, never inside the package: $CAFFE2PY_CACHE, else the
    platform's user cache folder (~/.cache/caffe2py or $XDG_CACHE_HOME/caffe2py on
    Linux, ~/Library/Caches/caffe2py on macOS, %LOCALAPPDATA%\\caffe2py on Windows)."""
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if environ.get("CAFFE2PY_CACHE"):
        return environ["CAFFE2PY_CACHE"]
    home = os.path.expanduser("~")
    if platform == "darwin":
        base = os.path.join(home, "Library", "Caches")
    elif platform.startswith("win"):
        base = environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    else:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "caffe2py")
