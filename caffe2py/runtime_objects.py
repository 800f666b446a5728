"""Objects that live in blobs rather than tensors: counters, atomic bools, mutexes,
timers, stat registries, indexes and maps (the values of Caffe2's
`unique_ptr<Counter>`, `unique_ptr<std::mutex>`, ... blobs).

They change in place when an op acts on them, as in Caffe2, so they do not
follow a net run's all-or-nothing commit of tensors: a counter counted up by
an op stays counted up if a later op of the same run fails. Every one is safe
to use from several threads.
"""
import threading
import time


class Counter:
    """Caffe2's Counter<int64_t>."""

    def __init__(self, count):
        self._count = int(count)
        self._lock = threading.Lock()

    def count_down(self):
        """True when the count was already <= 0; otherwise decrements it."""
        with self._lock:
            done = self._count <= 0
            self._count -= 1
            return done

    def count_up(self):
        with self._lock:
            previous = self._count
            self._count += 1
            return previous

    def retrieve(self):
        return self._count

    def check_if_done(self):
        return self._count <= 0

    def reset(self, count):
        with self._lock:
            previous, self._count = self._count, int(count)
            return previous

    def __repr__(self):
        return "Counter(%d)" % self._count


class AtomicBool:
    def __init__(self, value=False):
        self.value = bool(value)

    def __repr__(self):
        return "AtomicBool(%s)" % self.value


class Mutex:
    """A lock held in a blob (CreateMutex); `with mutex:` locks it."""

    def __init__(self):
        self._lock = threading.Lock()

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *args):
        self._lock.release()

    def __repr__(self):
        return "Mutex()"


class StatRegistry:
    """Named int64 counters (Caffe2's StatRegistry): update adds, publish reads
    (and with reset, zeroes) every counter."""

    def __init__(self):
        self._stats = {}
        self._lock = threading.Lock()

    def update(self, key, value):
        with self._lock:
            self._stats[key] = self._stats.get(key, 0) + int(value)

    def publish(self, reset=True):
        """[(key, value, timestamp ns)] sorted by key."""
        now = time.time_ns()
        with self._lock:
            items = sorted(self._stats.items())
            if reset:
                for key in self._stats:
                    self._stats[key] = 0
        return [(key, value, now) for key, value in items]

    def get(self, key):
        return self._stats.get(key, 0)


_global_stats = StatRegistry()


def global_stat_registry():
    """The process-wide registry (StatRegistry::get())."""
    return _global_stats


class TimerInstance:
    """A wall-clock timer; end() records '<name>/time_ns' (sum) and
    '<name>/time_ns/count' in the global stat registry."""

    def __init__(self, name):
        self.name = name
        self._start = None

    def begin(self):
        self._start = time.perf_counter_ns()

    @property
    def running(self):
        return self._start is not None

    def get_ns(self):
        if self._start is None:
            raise RuntimeError("Called TimerGet on a stopped timer.")
        return time.perf_counter_ns() - self._start

    def end(self):
        elapsed = self.get_ns()
        self._start = None
        _global_stats.update(self.name + "/time_ns", elapsed)
        _global_stats.update(self.name + "/time_ns/count", 1)
        return elapsed

    def __repr__(self):
        return "TimerInstance(%r, running=%s)" % (self.name, self.running)


class Index:
    """Caffe2's Index<T>: keys -> consecutive ids from 1 (0 = unknown key).
    `size` counts the reserved 0 entry, as Caffe2's IndexSize does."""

    def __init__(self, key_kind, max_elements):
        self.key_kind = key_kind           # "int32", "int64" or "string"
        self.max_elements = int(max_elements)
        self.frozen = False
        self._ids = {}
        self._lock = threading.Lock()

    @property
    def size(self):
        return len(self._ids) + 1

    def get(self, keys):
        """Ids of keys (a list); adds unknown keys unless frozen (then they get 0)."""
        if self.frozen:
            return [self._ids.get(k, 0) for k in keys]
        out = []
        with self._lock:
            for k in keys:
                value = self._ids.get(k)
                if value is None:
                    if len(self._ids) + 1 >= self.max_elements:
                        raise ValueError("Dict max size reached")
                    value = self._ids[k] = len(self._ids) + 1
                out.append(value)
        return out

    def load(self, keys):
        if len(keys) > self.max_elements:
            raise ValueError("Cannot load index: Tensor is larger than max_elements.")
        ids = {}
        for i, k in enumerate(keys):
            if k in ids:
                raise ValueError("Repeated elements found: cannot load into dictionary.")
            ids[k] = i + 1
        with self._lock:
            self._ids = ids

    def keys(self):
        """Keys in id order (id 1 first)."""
        with self._lock:
            ordered = [None] * len(self._ids)
            for k, v in self._ids.items():
                ordered[v - 1] = k
            return ordered

    def __repr__(self):
        return "Index(%s, %d entries%s)" % (self.key_kind, len(self._ids), ", frozen" if self.frozen else "")


class TypedMap(dict):
    """The value of a CreateMap blob: a dict with its key and value dtypes."""

    def __init__(self, key_dtype, value_dtype, items=()):
        super().__init__(items)
        self.key_dtype = key_dtype
        self.value_dtype = value_dtype
