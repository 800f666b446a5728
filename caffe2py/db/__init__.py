"""Caffe2's key-value databases: the interface, the registry of db types, DBReader.

A db type names a backend ("minidb", "lmdb", "leveldb", ...). `create_db(type,
source, mode)` opens one in READ, WRITE (append) or NEW (create/overwrite) mode.
A DB hands out cursors (read, in key order for sorted backends, in file order for
minidb) and transactions (write). minidb is built in; lmdb and leveldb use their
PyPI bindings (the `[lmdb]` / `[leveldb]` extras) and say how to install them when
they are missing.
"""
from .base import (  # noqa: F401
    MODES, NEW, READ, WRITE, DB, CorruptDBError, Cursor, DBError, MissingBackendError, Transaction,
    check_db_type, create_db, db_exists, db_types, register_db)
from . import minidb, optional_backends  # noqa: F401,E402  (the built-in backends register themselves)
from .reader import DBReader  # noqa: E402

__all__ = ["READ", "WRITE", "NEW", "DB", "Cursor", "Transaction", "DBReader", "DBError",
           "CorruptDBError", "MissingBackendError", "check_db_type", "create_db", "db_exists", "db_types",
           "register_db"]
