"""caffe2.python.dataio: the Reader and Writer interfaces datasets implement.

A Reader adds ops to a net that read the next batch (`read(net)` returns the
should_stop blob and the field blobs); a Writer adds ops that append a batch
(`write(net, fields)`) and, at the end, ops that signal that no more data comes
(`commit(net)`).
"""
from . import core
from .schema import Field, from_blob_list


class Reader:
    def __init__(self, schema=None):
        if schema is not None:
            assert isinstance(schema, Field)
        self._schema = schema

    def schema(self):
        assert self._schema is not None, "Schema not provided for this reader."
        return self._schema

    def _set_schema(self, schema):
        self._schema = schema

    def setup_ex(self, init_net, finish_net):
        """Nets to run once before and after reading (none by default)."""

    def read_ex(self, local_init_net, local_finish_net):
        read_net = core.Net("reader_body")
        return ([read_net],) + self.read(read_net)

    def read_record_ex(self, local_init_net, local_finish_net):
        nets, should_stop, fields = self.read_ex(local_init_net, local_finish_net)
        if self._schema:
            fields = from_blob_list(self._schema, fields)
        return nets, should_stop, fields

    def read(self, read_net):
        """Add ops to read_net that read a batch: returns (should_stop blob, field blobs)."""
        raise NotImplementedError("Readers must implement `read`.")

    def reset(self, net):
        """Add ops to net that rewind the reader."""
        raise NotImplementedError("This reader cannot be resetted.")

    def read_record(self, read_net):
        should_stop, fields = self.read(read_net)
        if self._schema:
            fields = from_blob_list(self._schema, fields)
        return should_stop, fields

    def execution_step(self, reader_net_name=None, external_should_stop=None):
        """(step running a read net until should_stop, the fields it reads)."""
        reader_net = core.Net(reader_net_name or "reader")
        should_stop, fields = self.read_record(reader_net)
        if external_should_stop is not None:
            should_stop = reader_net.Or([external_should_stop, should_stop])
        read_step = core.execution_step("{}_step".format(reader_net_name), reader_net,
                                        should_stop_blob=should_stop)
        return read_step, fields


class Writer:
    _schema = None

    def schema(self):
        return self._schema

    def write(self, writer_net, fields):
        """Add ops to writer_net that write the batch in `fields`."""
        raise NotImplementedError("Writers must implement write.")

    def write_record(self, writer_net, fields):
        if isinstance(fields, Field):
            self._schema = fields
            fields = fields.field_blobs()
        self.write(writer_net, fields)

    def setup_ex(self, init_net, finish_net):
        self.commit(finish_net)

    def write_ex(self, fields, local_init_net, local_finish_net, stop_blob):
        write_net = core.Net("write_net")
        self.write(write_net, fields)
        return [write_net]

    def write_record_ex(self, fields, local_init_net, local_finish_net, stop_blob=None):
        if isinstance(fields, Field):
            self._schema = fields
            fields = fields.field_blobs()
        if stop_blob is None:
            stop_blob = local_init_net.NextName("dequeue_status")
        return self.write_ex(fields, local_init_net, local_finish_net, stop_blob), stop_blob

    def commit(self, finish_net):
        """Add ops to finish_net that signal the end of the data (none by default)."""
