"""The db interface (modes, errors, DB / Cursor / Transaction) and the registry of db
types. Backends (minidb, optional_backends, queue_db) and DBReader import this
module; the package's __init__ imports them all and re-exports these names."""
from .. import model_trust
from ..errors import Caffe2Error

READ, WRITE, NEW = "read", "write", "new"
MODES = (READ, WRITE, NEW)


class DBError(Caffe2Error):
    """A database could not be opened, read or written."""


class CorruptDBError(DBError):
    """A database file is truncated or holds malformed records."""


class MissingBackendError(DBError):
    """The Python binding a db type needs is not installed."""


class Cursor:
    """Reads records in the db's order. After seek_to_first() or next(), valid()
    tells whether key()/value() name a record."""

    def supports_seek(self):
        return False

    def seek(self, key):
        raise DBError("%s cursors cannot seek to a key" % type(self).__name__)

    def seek_to_first(self):
        raise NotImplementedError

    def next(self):
        raise NotImplementedError

    def key(self):
        raise NotImplementedError

    def value(self):
        raise NotImplementedError

    def valid(self):
        raise NotImplementedError

    def close(self):
        pass


class Transaction:
    """Writes records; commit() makes them durable (backend's own sense)."""

    def put(self, key, value):
        raise NotImplementedError

    def commit(self):
        pass


class DB:
    """An open database."""

    def __init__(self, source, mode):
        if mode not in MODES:
            raise DBError("unknown db mode %r (one of %s)" % (mode, ", ".join(MODES)))
        self.source = source
        self.mode = mode

    def new_cursor(self):
        raise NotImplementedError

    def new_transaction(self):
        raise NotImplementedError

    def close(self):
        pass

    def abort(self):
        """Close after a failed write: backends that stage writes drop them."""
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


_backends = {}      # db type -> opener(source, mode) -> DB


def register_db(names, opener):
    """Register an opener under one or more db type names (Caffe2 registers
    'MiniDB' and 'minidb' for the same class)."""
    for name in ([names] if isinstance(names, str) else names):
        _backends[name] = opener


def db_types():
    return sorted(_backends)


def _opener(db_type):
    if not db_type:
        raise DBError("a db type must be given (one of %s)" % ", ".join(db_types()))
    try:
        return _backends[db_type]
    except KeyError:
        raise DBError("cannot find db implementation of type '%s' (known: %s)"
                      % (db_type, ", ".join(db_types()))) from None


def check_db_type(db_type):
    """Raise DBError unless db_type names a registered backend."""
    _opener(db_type)


def create_db(db_type, source, mode):
    """Open `source` as a db of `db_type` in `mode` (READ, WRITE or NEW)."""
    opener = _opener(db_type)
    _check_trust(db_type, source, mode)
    return opener(source, mode)


def _check_trust(db_type, source, mode):
    """Under a net from a model file, the db must lie in an allowed folder: the
    ops' arguments were checked at plan time; this also covers names only known
    when they run (a DBReader blob loaded from a db names its own source)."""
    if model_trust.active() is not None:
        model_trust.check_path(source, mode != READ, "a %s db opened to %s" % (db_type, mode))


def db_exists(db_type, source):
    """Caffe2's DBExists: whether opening the db for reading succeeds."""
    opener = _opener(db_type)
    _check_trust(db_type, source, READ)
    exists = getattr(opener, "exists", None)
    if exists is not None:
        return bool(exists(source))
    try:
        create_db(db_type, source, READ).close()
        return True
    except DBError:
        return False
