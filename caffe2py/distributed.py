"""Store handlers and common worlds for Caffe2's distributed ops.

- FileStoreHandler: Caffe2's file store (FileStoreHandlerCreate): one file per key
  in a directory shared by the processes, written to a temporary name and renamed
  so readers never see half a value; `wait` polls. File names are a SHA-1 of the
  key (Caffe2 used MurmurHash3, so the directories are not interchangeable with
  Caffe2's). Unlike Caffe2's, `add` works (under an fcntl lock on POSIX).
- RedisStoreHandler: Caffe2's Redis store (RedisStoreHandlerCreate): keys under
  `prefix` on a Redis server, `add` by INCRBY, `wait` polls (the `redis` client:
  pip install "caffe2py[redis]").
- CommonWorld: a group of processes for the collective ops (CreateCommonWorld,
  engine GLOO), backed by torch.distributed's ProcessGroupGloo. Its rendezvous
  goes through the store handler's torch store (`torch_store(size, rank, timeout)`:
  a torch FileStore in the file handler's directory; for Redis, a TCPStore that
  rank 0 serves and announces in Redis), under a prefix made of the creating op's
  name and how many worlds that op made before, so the ranks of one job meet
  without any global process group.
- Heartbeats: every rank of a common world bumps a counter in the store handler
  about once a second; when a collective fails (a peer's connection closed, or the
  timeout), the ranks whose counters stopped are named as missing (see
  `missing_ranks`), so the error says which shard went away.

torch is needed only for common worlds (pip install "caffe2py[distributed]").
"""
import atexit
import datetime
import gc
import hashlib
import os
import socket
import tempfile
import threading
import time
import weakref

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

    def torch_store(self, world_size, rank=0, timeout_s=DEFAULT_TIMEOUT_S):  # noqa: ARG002
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


def _redis_module():
    try:
        import redis
    except ImportError:
        raise Caffe2Error("RedisStoreHandlerCreate needs the redis client: pip install caffe2py[redis]") from None
    return redis


class RedisStoreHandler:
    """Keys under `prefix` on a Redis server (Caffe2's RedisStoreHandler)."""

    def __init__(self, host, port, prefix="", timeout_s=DEFAULT_TIMEOUT_S):
        redis = _redis_module()
        self.host, self.port, self.prefix = host, int(port), prefix
        self.timeout_s = timeout_s
        self._client = redis.Redis(host=host, port=self.port, socket_connect_timeout=timeout_s,
                                   socket_timeout=timeout_s)
        try:
            self._client.ping()
        except redis.RedisError as exc:
            raise Caffe2Error("cannot reach the Redis server at %s:%d: %s" % (host, self.port, exc)) from None
        self._torch_stores = {}
        self._lock = threading.Lock()

    def _key(self, name):
        return "%s/%s" % (self.prefix, name) if self.prefix else name

    def set(self, name, data):
        # Caffe2's handler refuses to overwrite; the heartbeats and the TCPStore address do overwrite
        self._client.set(self._key(name), data)

    def check(self, names):
        return self._client.exists(*[self._key(n) for n in names]) == len(names) if names else True

    def wait(self, names, timeout=None):
        timeout = self.timeout_s if timeout is None else timeout
        start = time.monotonic()
        while not self.check(names):
            if timeout is not None and time.monotonic() - start > timeout:
                raise StoreTimeout("Wait timeout for name(s): %s" % " ".join(names))
            time.sleep(0.01)

    def get(self, name, timeout=None):
        self.wait([name], timeout)
        return self._client.get(self._key(name))

    def add(self, name, value):
        return int(self._client.incrby(self._key(name), int(value)))

    def torch_store(self, world_size, rank=0, timeout_s=DEFAULT_TIMEOUT_S):
        """Rank 0 serves a torch TCPStore and writes its address here; the others
        read the address and connect (one store per world size, as for files)."""
        from torch import distributed as dist
        with self._lock:
            store = self._torch_stores.get(world_size)
            if store is not None:
                return store
            key = "caffe2py/torch_store/%d" % world_size
            timeout = datetime.timedelta(seconds=timeout_s)
            if rank == 0:
                store = dist.TCPStore("0.0.0.0", 0, None, True, timeout, wait_for_workers=False)
                self.set(key, ("%s:%d" % (self._own_address(), store.port)).encode())
            else:
                host, port = self.get(key, timeout_s).decode().rsplit(":", 1)
                store = dist.TCPStore(host, int(port), None, False, timeout)
            self._torch_stores[world_size] = store
            return store

    def _own_address(self):
        """The address of this host on the route to the Redis server (reachable by the
        other hosts that reach Redis)."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(self.host), self.port))
            return probe.getsockname()[0]

    def __repr__(self):
        return "RedisStoreHandler(%s:%d, prefix=%r)" % (self.host, self.port, self.prefix)


HEARTBEAT_S = 0.5
_live_worlds = weakref.WeakSet()


@atexit.register
def _close_worlds():
    """Drop every process group while the interpreter is whole: left to its
    finalisation, gloo's threads can meet a half-torn-down process and abort it
    ("terminate called without an active exception")."""
    for world in list(_live_worlds):
        world.destroy()
    gc.collect()


class _Heartbeat:
    """A daemon thread bumping `caffe2py/heartbeat/<size>/<rank>` in a store handler."""

    _running = {}
    _lock = threading.Lock()

    @classmethod
    def start(cls, handler, rank, size):
        with cls._lock:
            key = (id(handler), rank, size)
            if key not in cls._running:
                cls._running[key] = handler
                threading.Thread(target=cls._beat, args=(handler, rank, size), daemon=True,
                                 name="caffe2py-heartbeat-%d" % rank).start()

    @staticmethod
    def _beat(handler, rank, size):
        count = 0
        while True:
            count += 1
            try:
                handler.set(heartbeat_key(rank, size), str(count).encode())
            except Exception:  # noqa: BLE001 - the store went away: the collectives will say so
                return
            time.sleep(HEARTBEAT_S)


def heartbeat_key(rank, size):
    return "caffe2py/heartbeat/%d/%d" % (size, rank)


def _read_beats(handler, size):
    beats = {}
    for r in range(size):
        key = heartbeat_key(r, size)
        try:
            beats[r] = handler.get(key, timeout=0) if handler.check([key]) else None
        except Exception:  # noqa: BLE001
            beats[r] = None
    return beats


def missing_ranks(handler, size, rank, watch_s=4 * HEARTBEAT_S):
    """The ranks (other than `rank`) whose heartbeat is absent or did not move
    within `watch_s` seconds."""
    before = _read_beats(handler, size)
    time.sleep(watch_s)
    after = _read_beats(handler, size)
    return [r for r in range(size) if r != rank and (after[r] is None or after[r] == before[r])]


class CommonWorld:
    """rank, size and the gloo process group of one common world."""

    def __init__(self, store_handler, prefix, rank, size, timeout_s=DEFAULT_TIMEOUT_S, interface=""):
        dist = _torch_distributed()
        if not 0 <= rank < size:
            raise Caffe2Error("common world: rank %d is outside [0, %d)" % (rank, size))
        self.store_handler, self.rank, self.size = store_handler, rank, size
        self.timeout_s, self.interface = timeout_s, interface
        self.prefix = prefix
        _Heartbeat.start(store_handler, rank, size)
        store = dist.PrefixStore(prefix, store_handler.torch_store(size, rank, timeout_s))
        options = dist.ProcessGroupGloo._Options()
        options._timeout = datetime.timedelta(seconds=timeout_s)
        options._devices = [dist.ProcessGroupGloo.create_device(interface=interface) if interface
                            else dist.ProcessGroupGloo.create_default_device()]
        self.group = dist.ProcessGroupGloo(store, rank, size, options)
        self.destroyed = False
        _live_worlds.add(self)

    def explain_failure(self):
        """' (shard(s) ... stopped: ...)' naming the ranks that went missing, or ''."""
        try:
            gone = missing_ranks(self.store_handler, self.size, self.rank)
        except Exception:  # noqa: BLE001 - the store itself is gone: say nothing more
            return ""
        if not gone:
            return ""
        return ("; shard(s) %s of %d went missing (no heartbeat in the store: the process ended or hangs)"
                % (", ".join(map(str, gone)), self.size))

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
