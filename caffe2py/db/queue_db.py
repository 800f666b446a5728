"""A read-only db over a BlobsQueue (CreateBlobsQueueDB): each record is one queued
record, its key and value taken from two of its blobs (strings). Reading blocks
until a record is queued; the db ends when the queue is closed and drained, or a
read times out.

Unlike Caffe2's cursor, which reads the next record from the queue as soon as the
current one is returned, this one reads a record only when it is asked for, so a
reader never waits for a record beyond the one it returns.
"""
import numpy as np

from .base import READ, Cursor, DB, DBError


def _string_of(value, what):
    if isinstance(value, (bytes, str)):
        return value.encode() if isinstance(value, str) else value
    if isinstance(value, np.ndarray) and value.dtype == object and value.size >= 1:
        s = value.reshape(-1)[0]
        if isinstance(s, (bytes, str)):
            return s.encode() if isinstance(s, str) else s
    raise DBError("queue db: the %s blob must hold a string, got %s" % (what, type(value).__name__))


class QueueCursor(Cursor):
    streaming = True        # records are consumed: DBReader never starts over

    def __init__(self, queue, key_index, value_index, timeout_secs):
        self._queue = queue
        self._key_index, self._value_index = key_index, value_index
        self._timeout = timeout_secs
        self._record = None
        self._pending = True     # the current record has not been fetched yet
        self._valid = False

    def _fetch(self):
        if self._pending:
            self._pending = False
            record = self._queue.blocking_read(self._timeout)
            self._valid = record is not None
            if record is not None:
                for index in (self._key_index, self._value_index):
                    if index >= len(record):
                        raise DBError("queue db: blob index %d but the queue records hold %d blobs"
                                      % (index, len(record)))
                self._record = record

    def seek_to_first(self):
        pass                      # a queue has no beginning to return to

    def next(self):
        self._pending = True

    def valid(self):
        self._fetch()
        return self._valid

    def key(self):
        self._fetch()
        if not self._valid:
            raise DBError("queue db: the queue is closed (or the read timed out)")
        return b"" if self._key_index < 0 else _string_of(self._record[self._key_index], "key")

    def value(self):
        self._fetch()
        if not self._valid:
            raise DBError("queue db: the queue is closed (or the read timed out)")
        return _string_of(self._record[self._value_index], "value")


class QueueDB(DB):
    def __init__(self, queue, key_index=-1, value_index=0, timeout_secs=0.0):
        super().__init__("<queue %s>" % getattr(queue, "name", "?"), READ)
        if value_index < 0:
            raise DBError("queue db: value_blob_index must be >= 0, got %d" % value_index)
        self._args = (queue, key_index, value_index, timeout_secs)

    def new_cursor(self):
        return QueueCursor(*self._args)

    def new_transaction(self):
        raise DBError("a queue db is read-only")
