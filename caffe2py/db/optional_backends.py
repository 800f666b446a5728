"""lmdb and leveldb dbs through their PyPI bindings (`lmdb`, `plyvel`).

Both are optional: the extras `caffe2py[lmdb]` and `caffe2py[leveldb]` install
them. Opening such a db without its binding raises MissingBackendError saying
which package to install. The settings follow Caffe2's backends: lmdb with a 1 TB
map (address space only; the file grows as needed) in a directory that NEW mode
creates and refuses to reuse; leveldb with 64 KB blocks, a 256 MB write buffer,
create_if_missing unless reading and error_if_exists in NEW mode.
"""
import os
import shutil
import threading
import weakref

from .base import NEW, READ, CorruptDBError, Cursor, DB, DBError, MissingBackendError, Transaction, register_db

LMDB_MAP_SIZE = 1 << 40


def _import(module, db_type, extra):
    try:
        return __import__(module)
    except ImportError:
        raise MissingBackendError(
            "db type '%s' needs the Python package '%s', which is not installed: "
            "pip install 'caffe2py[%s]' (or pip install %s)"
            % (db_type, "plyvel" if module == "plyvel" else module, extra, module)) from None


# ----------------------------------------------------------------- lmdb

class _LMDBCursor(Cursor):
    def __init__(self, env, source):
        self._source = source
        self._txn = env.begin(write=False)
        self._cursor = self._txn.cursor()
        self._valid = self._cursor.first()

    def supports_seek(self):
        return True

    def seek(self, key):
        key = key.encode() if isinstance(key, str) else bytes(key)
        self._valid = self._cursor.first() if not key else self._cursor.set_range(key)

    def seek_to_first(self):
        self._valid = self._cursor.first()

    def next(self):
        self._valid = self._cursor.next()

    def key(self):
        if not self._valid:
            raise DBError("lmdb '%s': the cursor is past the last record" % self._source)
        return bytes(self._cursor.key())

    def value(self):
        if not self._valid:
            raise DBError("lmdb '%s': the cursor is past the last record" % self._source)
        return bytes(self._cursor.value())

    def valid(self):
        return self._valid

    def close(self):
        self._txn.abort()


class _LMDBTransaction(Transaction):
    def __init__(self, env):
        self._env = env
        self._txn = env.begin(write=True)

    def put(self, key, value):
        key = key.encode() if isinstance(key, str) else bytes(key)
        self._txn.put(key, bytes(value))

    def commit(self):
        self._txn.commit()
        self._txn = self._env.begin(write=True)

    def abort(self):
        self._txn.abort()


# lmdb allows one environment per path and process: readers of one path share it
# (two CreateDB readers of one db, a reader still held by an input op's prefetch)
_read_envs = {}          # real path -> [environment, users]
_read_envs_lock = threading.Lock()


def _open_read_env(lmdb, source):
    key = os.path.realpath(source)
    with _read_envs_lock:
        entry = _read_envs.get(key)
        if entry is None:
            env = lmdb.open(source, map_size=LMDB_MAP_SIZE, readonly=True, create=False, subdir=True, lock=False)
            entry = _read_envs[key] = [env, 0]
        entry[1] += 1
        return entry[0]


def _close_read_env(source):
    key = os.path.realpath(source)
    with _read_envs_lock:
        entry = _read_envs.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _read_envs[key]
            entry[0].close()


class LMDB(DB):
    def __init__(self, source, mode):
        super().__init__(source, mode)
        lmdb = _import("lmdb", "lmdb", "lmdb")
        if mode == NEW and os.path.exists(source):
            raise DBError("cannot create lmdb '%s': the path already exists (NEW mode makes a new "
                          "directory, as Caffe2 does)" % source)
        try:
            if mode == READ:
                self._env = _open_read_env(lmdb, source)
                # a reader dropped without close() gives its share back when collected
                self._finalizer = weakref.finalize(self, _close_read_env, source)
            else:
                self._env = lmdb.open(source, map_size=LMDB_MAP_SIZE, readonly=False, create=True, subdir=True,
                                      lock=True)
        except lmdb.Error as exc:
            raise DBError("cannot open lmdb '%s': %s" % (source, exc)) from None
        self._txns = []

    def _release_env(self):
        if self.mode == READ:
            self._finalizer()           # runs _close_read_env once
        else:
            self._env.close()
        self._env = None

    def new_cursor(self):
        return _LMDBCursor(self._env, self.source)

    def new_transaction(self):
        if self.mode == READ:
            raise DBError("lmdb '%s' was opened for reading" % self.source)
        txn = _LMDBTransaction(self._env)
        self._txns.append(txn)
        return txn

    def close(self):
        if self._env is not None:
            for txn in self._txns:
                txn.commit()
            self._txns = []
            self._release_env()

    def abort(self):
        if self._env is not None:
            for txn in self._txns:
                txn.abort()
            self._txns = []
            self._release_env()
            if self.mode == NEW:        # NEW made the directory: a failed save leaves nothing
                shutil.rmtree(self.source, ignore_errors=True)


def _open_lmdb(source, mode):
    return LMDB(source, mode)


_open_lmdb.exists = lambda source: os.path.isfile(os.path.join(source, "data.mdb"))
register_db(("lmdb", "LMDB"), _open_lmdb)


# ----------------------------------------------------------------- leveldb

class _LevelDBCursor(Cursor):
    def __init__(self, db, source):
        self._source = source
        self._it = db.raw_iterator()
        self._it.seek_to_first()

    def supports_seek(self):
        return True

    def seek(self, key):
        self._it.seek(key.encode() if isinstance(key, str) else bytes(key))

    def seek_to_first(self):
        self._it.seek_to_first()

    def next(self):
        self._it.next()

    def key(self):
        if not self._it.valid():
            raise DBError("leveldb '%s': the cursor is past the last record" % self._source)
        return self._it.key()

    def value(self):
        if not self._it.valid():
            raise DBError("leveldb '%s': the cursor is past the last record" % self._source)
        return self._it.value()

    def valid(self):
        return self._it.valid()

    def close(self):
        self._it.close()


class _LevelDBTransaction(Transaction):
    def __init__(self, db):
        self._db = db
        self._batch = db.write_batch()

    def put(self, key, value):
        self._batch.put(key.encode() if isinstance(key, str) else bytes(key), bytes(value))

    def commit(self):
        self._batch.write()
        self._batch = self._db.write_batch()


class LevelDB(DB):
    def __init__(self, source, mode):
        super().__init__(source, mode)
        plyvel = _import("plyvel", "leveldb", "leveldb")
        try:
            self._db = plyvel.DB(source, create_if_missing=(mode != READ), error_if_exists=(mode == NEW),
                                 block_size=65536, write_buffer_size=268435456, max_open_files=100)
        except plyvel.CorruptionError as exc:
            raise CorruptDBError("leveldb '%s' is corrupt: %s" % (source, exc)) from None
        except plyvel.Error as exc:
            raise DBError("cannot open leveldb '%s': %s" % (source, exc)) from None
        self._txns = []

    def new_cursor(self):
        return _LevelDBCursor(self._db, self.source)

    def new_transaction(self):
        if self.mode == READ:
            raise DBError("leveldb '%s' was opened for reading" % self.source)
        txn = _LevelDBTransaction(self._db)
        self._txns.append(txn)
        return txn

    def close(self):
        if self._db is not None:
            for txn in self._txns:
                txn.commit()
            self._txns = []
            self._db.close()
            self._db = None

    def abort(self):
        if self._db is not None:
            self._txns = []
            self._db.close()
            self._db = None
            if self.mode == NEW:
                shutil.rmtree(self.source, ignore_errors=True)


def _open_leveldb(source, mode):
    return LevelDB(source, mode)


_open_leveldb.exists = lambda source: os.path.isfile(os.path.join(source, "CURRENT"))
register_db(("leveldb", "LevelDB"), _open_leveldb)
