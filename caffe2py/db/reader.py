"""DBReader: the blob CreateDB makes, a shared, thread-safe cursor over a db.

read() returns the current record and moves on; at the end it starts over from
the first record, so several input ops can read one db for ever. With num_shards
> 1 each reader starts at record shard_id and skips num_shards records per read.
"""
import threading

from .base import READ, DBError, create_db


class DBReader:
    def __init__(self, db_type=None, source=None, num_shards=1, shard_id=0, db=None):
        self._lock = threading.Lock()
        self.db_type = db_type or "<memory-type>"
        self.source = source or "<memory-source>"
        if num_shards < 1 or not 0 <= shard_id < num_shards:
            raise DBError("DBReader: need num_shards >= 1 and 0 <= shard_id < num_shards, got %d and %d"
                          % (num_shards, shard_id))
        self.num_shards, self.shard_id = int(num_shards), int(shard_id)
        self._db = db if db is not None else create_db(db_type, source, READ)
        self._cursor = self._db.new_cursor()
        self._move_to_beginning()

    def _move_to_beginning(self):
        self._cursor.seek_to_first()
        for s in range(self.shard_id):
            self._cursor.next()
            if not self._cursor.valid():
                raise DBError("db '%s' has fewer rows (%d) than shard id %d" % (self.source, s + 1, self.shard_id))

    def read(self):
        """(key, value) of the current record; then advance, wrapping around."""
        with self._lock:
            if not self._cursor.valid():
                raise DBError("db '%s' (%s) has no records to read" % (self.source, self.db_type))
            key, value = self._cursor.key(), self._cursor.value()
            if getattr(self._cursor, "streaming", False):
                self._cursor.next()     # a stream (queue db) does not start over
                return key, value
            for _ in range(self.num_shards):
                self._cursor.next()
                if not self._cursor.valid():
                    self._move_to_beginning()
                    break
            return key, value

    def seek_to_first(self):
        with self._lock:
            self._move_to_beginning()

    def cursor(self):
        """The underlying cursor (not thread safe: Load reads from it to the end)."""
        return self._cursor

    @property
    def lock(self):
        return self._lock

    def close(self):
        self._cursor.close()
        self._db.close()

    def __repr__(self):
        return "DBReader(db_type=%r, source=%r)" % (self.db_type, self.source)
