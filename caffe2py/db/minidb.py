"""minidb: Caffe2's built-in db, a flat file of records.

Each record is a 4-byte key length, a 4-byte value length (both C `int`, which is
little-endian int32 on every platform Caffe2 ran on), the key bytes, then the value
bytes. Both lengths are positive. There is no header, index or footer: the file ends
after the last record. Records are read back in file order.

Reading checks every record against the file's size before reading it, so a
truncated or corrupt file gets a CorruptDBError naming the file and byte offset
instead of a giant allocation or a silent short read. Writing in NEW mode goes to a
temporary file beside the target that replaces it only when the db is closed: a
process killed while saving leaves the previous file intact.
"""
import itertools
import os
import struct
import threading

from .base import NEW, READ, WRITE, CorruptDBError, Cursor, DB, DBError, Transaction, register_db

_HEADER = struct.Struct("<ii")
_tmp_ids = itertools.count()


class MiniDBCursor(Cursor):
    def __init__(self, db):
        self._db = db
        self._file = db._file
        self._size = os.fstat(self._file.fileno()).st_size
        self._key = self._value = None
        self._valid = False
        self.seek_to_first()

    def seek_to_first(self):
        with self._db._lock:
            self._file.seek(0)
            self._read_record()

    def next(self):
        with self._db._lock:
            self._read_record()

    def _corrupt(self, offset, what):
        return CorruptDBError("minidb '%s' is corrupt at byte %d of %d: %s"
                              % (self._db.source, offset, self._size, what))

    def _read_record(self):
        offset = self._file.tell()
        header = self._file.read(_HEADER.size)
        if not header:
            self._valid = False
            self._key = self._value = None
            return
        self._valid = False
        if len(header) < _HEADER.size:
            raise self._corrupt(offset, "the file ends inside a record header (truncated)")
        key_len, value_len = _HEADER.unpack(header)
        if key_len <= 0 or value_len <= 0:
            raise self._corrupt(offset, "record lengths must be positive, got key %d and value %d"
                                % (key_len, value_len))
        remaining = self._size - offset - _HEADER.size
        if key_len + value_len > remaining:
            raise self._corrupt(offset, "the record needs %d bytes but only %d remain (truncated)"
                                % (key_len + value_len, remaining))
        key = self._file.read(key_len)
        value = self._file.read(value_len)
        if len(key) != key_len or len(value) != value_len:
            raise self._corrupt(offset, "short read (the file changed while being read)")
        self._key, self._value, self._valid = key, value, True

    def key(self):
        if not self._valid:
            raise DBError("minidb '%s': the cursor is past the last record" % self._db.source)
        return self._key

    def value(self):
        if not self._valid:
            raise DBError("minidb '%s': the cursor is past the last record" % self._db.source)
        return self._value

    def valid(self):
        return self._valid


class MiniDBTransaction(Transaction):
    def __init__(self, db):
        self._db = db

    def put(self, key, value):
        """value: bytes, or an object with .pieces (byte buffers written in turn)."""
        key = key.encode() if isinstance(key, str) else bytes(key)
        pieces = getattr(value, "pieces", None) or [bytes(value)]
        size = sum(len(p) for p in pieces)
        if not key or not size:
            raise DBError("minidb '%s': keys and values must be non-empty (key %r has %d value bytes)"
                          % (self._db.source, key[:64], size))
        if size >= 1 << 31 or len(key) >= 1 << 31:
            raise DBError("minidb '%s': record %r is %d bytes; minidb lengths are 32-bit (use a smaller "
                          "chunk_size)" % (self._db.source, key[:64], size))
        with self._db._lock:
            self._db._file.write(_HEADER.pack(len(key), size))
            self._db._file.write(key)
            for piece in pieces:
                self._db._file.write(piece)

    def commit(self):
        with self._db._lock:
            self._db._file.flush()


class MiniDB(DB):
    def __init__(self, source, mode):
        super().__init__(source, mode)
        self._lock = threading.RLock()
        self._tmp = None
        self._file = None          # __del__ / abort look at it even when opening fails
        try:
            if mode == READ:
                if os.path.isdir(source):
                    raise DBError("cannot open minidb '%s': it is a directory" % source)
                self._file = open(source, "rb")
            elif mode == WRITE:
                self._file = open(source, "ab")
            else:
                self._tmp = "%s.tmp-%d-%d" % (source, os.getpid(), next(_tmp_ids))
                self._file = open(self._tmp, "wb")
        except OSError as exc:
            raise DBError("cannot open minidb '%s' for %s: %s" % (source, mode, exc.strerror or exc)) from None

    def new_cursor(self):
        if self.mode != READ:
            raise DBError("minidb '%s' was opened for %s; cursors need READ" % (self.source, self.mode))
        return MiniDBCursor(self)

    def new_transaction(self):
        if self.mode == READ:
            raise DBError("minidb '%s' was opened for reading; transactions need WRITE or NEW" % self.source)
        return MiniDBTransaction(self)

    def close(self):
        with self._lock:
            if self._file is None:
                return
            f, self._file = self._file, None
            if self.mode == READ:
                f.close()
                return
            try:
                f.flush()
                os.fsync(f.fileno())
            finally:
                f.close()
            if self._tmp is not None:
                try:
                    os.replace(self._tmp, self.source)   # atomic: readers see old or new, never half
                except OSError as exc:                   # the target is a directory, or not writable
                    self.abort()
                    raise DBError("cannot write minidb '%s': %s" % (self.source, exc.strerror or exc)) from None
                self._tmp = None

    def abort(self):
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._tmp is not None:
                try:
                    os.remove(self._tmp)
                except OSError:
                    pass
                self._tmp = None

    def __del__(self):
        if getattr(self, "_tmp", None) is not None:
            self.abort()


def _open(source, mode):
    return MiniDB(source, mode)


_open.exists = os.path.isfile
register_db(("minidb", "MiniDB"), _open)


def write_records(path, records):
    """Write (key, value) pairs as a new minidb file (atomically)."""
    with MiniDB(path, NEW) as db:
        txn = db.new_transaction()
        for key, value in records:
            txn.put(key, value)
        txn.commit()


def read_records(path):
    """All (key, value) pairs of a minidb file, in order; CorruptDBError if malformed."""
    with MiniDB(path, READ) as db:
        cursor = db.new_cursor()
        out = []
        while cursor.valid():
            out.append((cursor.key(), cursor.value()))
            cursor.next()
        return out
