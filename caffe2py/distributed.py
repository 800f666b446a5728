"""Store handlers and common worlds for Caffe2's distributed ops.

- FileStoreHandler: Caffe2's file store (FileStoreHandlerCreate): one file per key
  in a directory shared by the processes, written to a temporary name and renamed
  so readers never see half a value; `wait` polls. File names are a SHA-1 of the
  key (Caffe2 used MurmurHash3, so the directories are not interchangeable with
  Caffe2's). Unlike Caffe2's, `add` works (under an fcntl lock on POSIX).
- CommonWorld: a group of processes for the collective ops (CreateCommonWorld,
  engine GLOO), backed by torch.distributed's ProcessGroupGloo. Its rendezvous
  goes through a torch FileStore in the store handler's directory, under a prefix
  made of the creating op's name and how many worlds that op made before, so the
  ranks of one job meet without any global process group.

torch is needed only for common worlds (pip install "caffe2py[distributed]").
"""
import datetime
import hashlib
import os
import tempfile
import threading
import time

from .errors import Caffe2Error

DEFAULT_TIMEOUT_S = 30.0


class StoreTimeout(Caffe2Error):
    """A store wait ran out of time."""


def store_dir_problem(path):
    """None when `path` is a directory or one can be made there, else why not: the
    first part of the path that exists but is not a directory."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent
    if not os.path.isdir(probe):
        return ("expected a directory (or a path where one can be made), but '%s' is a file, not a "
                "directory" % probe)
    return None


class FileStoreHandler:
    def __init__(self, path, prefix=""):
        if not path:
            raise Caffe2Error("FileStoreHandler needs a path")
        base = os.path.realpath(path)
        if prefix:
            base = os.path.join(base, self._encode(prefix))
        problem = store_dir_problem(base)
        if problem:
            raise Caffe2Error("FileStoreHandler path '%s': %s" % (path, problem))
        os.makedirs(base, exist_ok=True)
        self.base_path = base
        self._torch_stores = {}
        self._lock = threading.Lock()

    @staticmethod
    def _encode(name):
        return hashlib.sha1(name.encode("utf-8")).hexdigest()

    def _path(self, name):
        return os.path.join(self.base_path, self._encode(name))

    def set(self, name, data):
        fd, tmp = tempfile.mkstemp(dir=self.base_path, prefix=".")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, self._path(name))

    def check(self, names):
        return all(os.path.exists(self._path(n)) for n in names)

    def wait(self, names, timeout=DEFAULT_TIMEOUT_S):
        start = time.monotonic()
        while not self.check(names):
            if timeout is not None and time.monotonic() - start > timeout:
                raise StoreTimeout("Wait timeout for name(s): %s" % " ".join(names))
            time.sleep(0.01)

    def get(self, name, timeout=DEFAULT_TIMEOUT_S):
        self.wait([name], timeout)
        with open(self._path(name), "rb") as f:
            return f.read()

    def add(self, name, value):
        import fcntl
        with open(os.path.join(self.base_path, ".add.lock"), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                current = int(self.get(name, timeout=0)) if self.check([name]) else 0
                current += int(value)
                self.set(name, str(current).encode())
                return current
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def torch_store(self, world_size):
        """A torch FileStore in this directory (shared by the common worlds)."""
        from torch import distributed as dist
        with self._lock:
            store = self._torch_stores.get(world_size)
            if store is None:
                path = os.path.join(self.base_path, ".torch_filestore_%d" % world_size)
                store = self._torch_stores[world_size] = dist.FileStore(path, world_size)
            return store

    def __repr__(self):
        return "FileStoreHandler(%r)" % self.base_path


def _torch_distributed():
    try:
        from torch import distributed as dist
    except ImportError:
        raise Caffe2Error("the distributed ops need torch (pip install \"caffe2py[distributed]\")") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise Caffe2Error("this torch build has no gloo backend for torch.distributed")
    return dist


class CommonWorld:
    """rank, size and the gloo process group of one common world."""

    def __init__(self, store_handler, prefix, rank, size, timeout_s=DEFAULT_TIMEOUT_S, interface=""):
        dist = _torch_distributed()
        if not 0 <= rank < size:
            raise Caffe2Error("common world: rank %d is outside [0, %d)" % (rank, size))
        self.store_handler, self.rank, self.size = store_handler, rank, size
        self.timeout_s, self.interface = timeout_s, interface
        self.prefix = prefix
        store = dist.PrefixStore(prefix, store_handler.torch_store(size))
        options = dist.ProcessGroupGloo._Options()
        options._timeout = datetime.timedelta(seconds=timeout_s)
        options._devices = [dist.ProcessGroupGloo.create_device(interface=interface) if interface
                            else dist.ProcessGroupGloo.create_default_device()]
        self.group = dist.ProcessGroupGloo(store, rank, size, options)
        self.destroyed = False

    def check(self):
        if self.destroyed:
            raise Caffe2Error("the common world (%s) was destroyed" % self.prefix)
        return self.group

    def destroy(self):
        self.destroyed = True
        self.group = None

    def __repr__(self):
        return "CommonWorld(%s, rank %d of %d%s)" % (self.prefix, self.rank, self.size,
                                                      ", destroyed" if self.destroyed else "")
