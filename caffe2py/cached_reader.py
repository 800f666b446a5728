"""Caffe2's caffe2.python.cached_reader: a reader that copies another reader's data
into a DB file once, and from then on reads the file.

    cached = CachedReader(reader, db_path="/tmp/cache.db", db_type="LevelDB")
    session.run(cached.build_cache_step())     # reads `reader` only if the file is missing
    ... pipe(cached, ...)                      # reads the file

The earlier Caffe2 form, CachedReader(reader) and then build_cache(db_path),
works too. The build step pipes the original reader (16 threads) into a Dataset
and saves its columns to the file; with the file already there it does nothing
(unless overwrite), so the original reader is never read again.
"""
import os

from . import core
from .db_file_reader import DBFileReader
from .pipeline import pipe
from .task import Cluster, TaskGroup


class CachedReader(DBFileReader):

    default_name_suffix = "cached_reader"

    def __init__(self, original_reader, db_path=None, db_type="LevelDB", name=None, batch_size=100,
                 loop_over=False):
        assert original_reader is not None, "original_reader can't be None"
        self.original_reader = original_reader
        self._path_given = db_path is not None
        # without a path yet (the build_cache form) the name cannot come from it
        super().__init__(db_path if db_path is not None else "", db_type,
                         name or (None if db_path is not None else self.default_name_suffix),
                         batch_size, loop_over)

    def _init_reader_schema(self, *args, **kwargs):
        """The original reader's schema."""
        return self.original_reader._schema

    def build_cache(self, cache_path, overwrite=False):
        """build_cache_step() for the file `cache_path` (Caffe2's earlier API)."""
        self.db_path = os.path.expanduser(cache_path)
        self._path_given = True
        return self.build_cache_step(overwrite)

    def build_cache_step(self, overwrite=False):
        """A step filling the cache file from the original reader; an empty step if
        the file exists (and not overwrite)."""
        assert self._path_given, "no db_path: give one to CachedReader or call build_cache(db_path)"
        if os.path.exists(self.db_path) and not overwrite:
            return core.execution_step("build_step", [])
        init_net = core.Net("init")
        self._init_field_blobs_as_empty(init_net)
        with Cluster(), core.NameScope(self.name), TaskGroup() as copy_group:
            pipe(self.original_reader, self.ds.writer(), num_threads=16)
            copy_step = copy_group.to_task().get_step()
        save_net = core.Net("save")
        self._save_field_blobs_to_db_file(save_net)
        return core.execution_step("build_cache", [init_net, copy_step, save_net])

    def _save_field_blobs_to_db_file(self, net):
        net.Save(self.ds.get_blobs(), [], db=self.db_path, db_type=self.db_type,
                 blob_name_overrides=self.ds.field_names(), absolute_path=True)
