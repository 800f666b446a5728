"""caffe2.python.dataset: an in-memory dataset with a nested schema.

The data lives in one blob per column of the schema (see caffe2py.schema); readers
walk it with a TreeCursor (ReadNextBatch, or ReadRandomBatch in a given order) and
writers append to it (CheckDatasetConsistency + AtomicAppend under a mutex).
"""
import numpy as np

from . import core, workspace
from .dataio import Reader, Writer
from .schema import Field, Struct, from_blob_list, from_column_list


class _DatasetReader(Reader):
    def __init__(self, content, cursor, name, batch_size=1, enforce_batch_size=False):
        """Made by Dataset.reader(); setup_ex (or the reader's init_net) makes its cursor."""
        assert isinstance(content, Field)
        Reader.__init__(self, content)
        self._content = content
        self.cursor = cursor
        self.name = name
        self.batch_size = batch_size
        self.enforce_batch_size = enforce_batch_size

    def setup_ex(self, init_net, exit_net):
        if self.cursor is None:
            self.cursor = init_net.CreateTreeCursor([], init_net.NextScopedBlob(self.name),
                                                    fields=self._content.field_names())

    def read(self, read_net):
        assert self.cursor, "setup not called."
        with core.NameScope(read_net.NextName(self.name)):
            fields = read_net.ReadNextBatch(
                [self.cursor] + self._content.field_blobs(), self._content.field_names(),
                batch_size=self.batch_size, enforce_batch_size=self.enforce_batch_size)
            fields = [fields] if isinstance(fields, core.BlobReference) else list(fields)
            return read_net.IsEmpty([fields[0]]), fields

    def reset(self, net):
        net.ResetCursor([self.cursor], [])


class _DatasetRandomReader(Reader):
    def __init__(self, content, cursor, name, indices, batch_size=1, loop_over=False,
                 enforce_batch_size=False):
        """Made by Dataset.random_reader(); call computeoffset() before reading."""
        Reader.__init__(self, content)
        self._content = content
        self.cursor = cursor
        self.name = name
        self.indices = indices
        self.batch_size = batch_size
        self.loop_over = loop_over
        self.enforce_batch_size = enforce_batch_size

    def setup_ex(self, init_net, exit_net):
        if self.cursor is None:
            self.cursor = init_net.CreateTreeCursor([], init_net.NextScopedBlob(self.name),
                                                    fields=self._content.field_names())

    def reset(self, net):
        net.ResetCursor([self.cursor], [])

    def computeoffset(self, net):
        self.reset(net)
        self.offsets = net.ComputeOffset([self.cursor] + self._content.field_blobs(), "offsets")

    def sort_and_shuffle(self, net, sort_by_field=None, shuffle_size=1, batch_size=1):
        sort_by_field_idx = -1
        if sort_by_field:
            assert sort_by_field in self._content.field_names(), "Must be valid field."
            sort_by_field_idx = self._content.field_names().index(sort_by_field)
        self.reset(net)
        self.indices = net.SortAndShuffle(
            [self.cursor] + self._content.field_blobs(), "indices",
            sort_by_field_idx=sort_by_field_idx, shuffle_size=shuffle_size, batch_size=batch_size)

    sortAndShuffle = sort_and_shuffle       # Caffe2's first name of the method

    def read(self, read_net):
        with core.NameScope(read_net.NextName(self.name)):
            fields = read_net.ReadRandomBatch(
                [self.cursor, self.indices, self.offsets] + self._content.field_blobs(),
                self._content.field_names(), batch_size=self.batch_size,
                enforce_batch_size=self.enforce_batch_size, loop_over=self.loop_over)
            fields = [fields] if isinstance(fields, core.BlobReference) else list(fields)
            return read_net.IsEmpty([fields[0]]), fields


class _DatasetWriter(Writer):
    def __init__(self, content):
        """Made by Dataset.writer(); setup_ex (or the writer's init_net) makes its mutex."""
        self._content = content
        self.mutex = None

    def setup_ex(self, init_net, exit_net):
        if self.mutex is None:
            self.mutex = init_net.CreateMutex([])

    def write(self, writer_net, fields):
        """Append the blobs in `fields` to the dataset, after checking that they form a
        consistent batch under the schema."""
        assert self.mutex is not None, "setup not called."
        field_blobs = self._content.field_blobs()
        assert len(fields) == len(field_blobs), "Expected %s fields, got %s." % (len(field_blobs), len(fields))
        writer_net.CheckDatasetConsistency(fields, [], fields=self._content.field_names())
        writer_net.AtomicAppend([self.mutex] + field_blobs + list(fields), field_blobs)

    def commit(self, finish_net):
        """Nothing to do for an in-memory dataset."""


def Const(net, value, dtype=None, name=None):
    """An external input of net holding `value`, fed into the current workspace now."""
    assert isinstance(net, core.Net), "net must be a core.Net instance."
    value = np.array(value, dtype=dtype)
    blob = net.AddExternalInput(net.NextName(prefix=name))
    workspace.FeedBlob(str(blob), value)
    return blob


def execution_step_with_progress(name, init_net, substeps, rows_read):
    report_net = core.Net("report_net")
    report_net.Print([rows_read], [])
    return core.execution_step(name, substeps, report_net=report_net, concurrent_substeps=True,
                               report_interval=5)


class Dataset:
    """An in-memory dataset with a fixed schema (a schema.Struct or a list of column names)."""

    def __init__(self, fields, name=None):
        assert isinstance(fields, (list, Struct)), "fields must be either a Struct or a list of raw field names."
        if isinstance(fields, list):
            fields = from_column_list(fields)
        self.schema = fields
        self.fields = fields.field_names()
        self.field_types = fields.field_types()
        self.name = name or "dataset"
        # a record of blobs is the dataset's content already
        self.field_blobs = fields.field_blobs() if fields.has_blobs() else None

    def trim(self, net, multiple_of):
        """Add a TrimDataset op: keep a multiple of `multiple_of` records."""
        net.TrimDataset(self.field_blobs, self.field_blobs, fields=self.fields, multiple_of=multiple_of)

    def init_empty(self, init_net):
        """Empty blobs for every column, made by init_net."""
        self.field_blobs = [init_net.ConstantFill([], shape=[0], run_once=False) for _ in self.fields]

    def init_from_dataframe(self, net, dataframe):
        """Columns from a pandas DataFrame, fed now as external inputs of net."""
        assert len(self.fields) == len(dataframe.columns)
        self.field_blobs = [Const(net, np.asarray(dataframe.iloc[:, col]).flatten(), name=field)
                            for col, field in enumerate(self.fields)]

    def get_blobs(self):
        return self.field_blobs

    def content(self):
        """The schema as a record of this dataset's blobs."""
        return from_blob_list(self.schema, self.field_blobs)

    def field_names(self):
        return self.fields

    def reader(self, init_net=None, cursor_name=None, batch_size=1, enforce_batch_size=False):
        """A reader walking the dataset in order; init_net (or the task's setup,
        without one) creates its TreeCursor."""
        assert self.field_blobs, "Dataset not initialized."
        reader = _DatasetReader(self.content(), None, cursor_name or (self.name + "_cursor"), batch_size,
                                enforce_batch_size)
        if init_net is not None:
            reader.setup_ex(init_net, None)
        return reader

    def random_reader(self, init_net=None, indices=None, cursor_name=None, batch_size=1,
                      loop_over=False, enforce_batch_size=False):
        """A reader walking the dataset in the order of the `indices` blob."""
        assert self.field_blobs, "Dataset not initialized."
        reader = _DatasetRandomReader(self.content(), None, cursor_name or (self.name + "_cursor"), indices,
                                      batch_size, loop_over, enforce_batch_size)
        if init_net is not None:
            reader.setup_ex(init_net, None)
        return reader

    def writer(self, init_net=None):
        """A writer appending batches (not safe while reading); init_net (or the
        task's setup, without one) creates its mutex."""
        assert self.field_blobs, "Dataset not initialized."
        writer = _DatasetWriter(self.content())
        if init_net is not None:
            writer.setup_ex(init_net, None)
        return writer
