"""Caffe2's caffe2.python.db_file_reader: a Reader of the blobs saved in a DB file.

    reader = DBFileReader(db_path="/tmp/data.db", db_type="LevelDB", batch_size=100)

The file holds one blob per column of the schema (as Save wrote it, under the
column names). Without field_names the schema is rebuilt from the blob names
found in the file (so, as in Caffe2, its columns come in alphabetical order: pass
field_names when they should not). Each task's setup loads the columns into a
Dataset named `<name>_dataset` and reads it in batches of batch_size (looping
forever in random order with loop_over).
"""
import os

from . import core, scope, workspace
from .dataio import Reader
from .dataset import Dataset
from .db import db_types
from .schema import from_column_list


class DBFileReader(Reader):

    default_name_suffix = "db_file_reader"

    def __init__(self, db_path, db_type, name=None, batch_size=100, loop_over=False, field_names=None):
        assert db_path is not None, "db_path can't be None."
        assert db_type in db_types(), "db_type [{}] is not available. \nChoose one of these: {}.".format(
            db_type, db_types())
        self.db_path = os.path.expanduser(db_path)
        self.db_type = db_type
        self.name = name or "{}_{}".format(self._extract_db_name_from_db_path(), self.default_name_suffix)
        self.batch_size = batch_size
        self.loop_over = loop_over
        # the schema may come from the file: db_path and db_type are set first
        super().__init__(self._init_reader_schema(field_names))
        self.ds = Dataset(self._schema, self.name + "_dataset")
        self.ds_reader = None

    def _init_reader_schema(self, field_names=None):
        """The schema: from field_names, else from the names of the blobs in the file
        (loaded into the current workspace under this reader's name scope)."""
        if field_names:
            return from_column_list(field_names)
        with core.NameScope(self.name):
            prefix = scope.CurrentNameScope()
        workspace.RunOperatorOnce(core.CreateOperator(
            "Load", [], [], absolute_path=True, db=self.db_path, db_type=self.db_type, load_all=True,
            add_prefix=prefix))
        columns = [name[len(prefix):] for name in sorted(workspace.Blobs()) if name.startswith(prefix)]
        return from_column_list(columns)

    def setup_ex(self, init_net, finish_net):
        """The first call makes the dataset's blobs, loads them from the file and
        sets up the dataset reader; later calls only set up the reader again."""
        if self.ds_reader:
            self.ds_reader.setup_ex(init_net, finish_net)
            return
        self._init_field_blobs_as_empty(init_net)
        self._feed_field_blobs_from_db_file(init_net)
        self.ds_reader = self.ds.random_reader(init_net, batch_size=self.batch_size, loop_over=self.loop_over)
        self.ds_reader.sort_and_shuffle(init_net)
        self.ds_reader.computeoffset(init_net)

    def read(self, read_net):
        assert self.ds_reader, "setup_ex must be called first"
        return self.ds_reader.read(read_net)

    def _init_field_blobs_as_empty(self, init_net):
        with core.NameScope(self.name):
            self.ds.init_empty(init_net)

    def _feed_field_blobs_from_db_file(self, net):
        net.Load([], self.ds.get_blobs(), db=self.db_path, db_type=self.db_type, absolute_path=True,
                 source_blob_names=self.ds.field_names())

    def _extract_db_name_from_db_path(self):
        """'/tmp/sample.db' -> 'sample'."""
        return os.path.basename(self.db_path).rsplit(".", 1)[0]
