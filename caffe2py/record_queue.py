"""Caffe2's caffe2.python.record_queue: a BlobsQueue of schema records, filled by
producer steps that read (and optionally process) records from a Reader.

    queue = RecordQueue(schema_or_field_names, capacity=1, num_threads=1)
    reader, producer_step, exit_step, schema = queue.build(source_reader, process)

The queue is created in the current workspace when RecordQueue is built.
`producer_step` runs num_threads producers concurrently, each reading from
source_reader until it stops, passing the record through process(net, record)
(which returns a record of new blobs) and enqueueing it; run `exit_step` after
the producers to close the queue. `reader` reads records from the queue and
stops once it is closed and drained.
"""
from . import core
from .dataio import Reader, Writer
from .schema import Field, Struct, from_column_list


class _QueueReader(Reader):
    def __init__(self, blobs_queue, schema, name=None):
        super().__init__(schema)
        self.blobs_queue = blobs_queue
        self.name = name

    def read(self, read_net):
        # A fresh name scope per read keeps the dequeued blobs of several readers apart.
        with core.NameScope(read_net.NextName(self.name)):
            status = read_net.NextName()
            blobs = read_net.SafeDequeueBlobs(self.blobs_queue, self._schema.field_names() + [status])
            return blobs[-1], list(blobs[:-1])


class _QueueWriter(Writer):
    def __init__(self, blobs_queue, schema):
        self.blobs_queue = blobs_queue
        self._schema = schema

    @property
    def schema(self):
        return self._schema

    def write(self, writer_net, fields):
        if isinstance(fields, Field):
            fields = fields.field_blobs()
        fields = list(fields)
        writer_net.CheckDatasetConsistency(fields, [], fields=self._schema.field_names())
        status = writer_net.NextName()
        writer_net.SafeEnqueueBlobs([self.blobs_queue] + fields, fields + [status])
        return status


class RecordQueue:
    def __init__(self, fields, name=None, capacity=1, enforce_unique_name=False, num_threads=1):
        if not isinstance(fields, (list, Struct)):
            raise TypeError("fields must be either a Struct or a list of raw field names.")
        if isinstance(fields, list):
            fields = from_column_list(fields)
        self.schema = fields
        self.name = name or "queue"
        self.num_threads = num_threads
        init_net = core.Net(self.name + "/init_net")
        self.blobs_queue = init_net.CreateBlobsQueue(
            [], 1, capacity=capacity, num_blobs=len(self.schema.field_names()),
            enforce_unique_name=enforce_unique_name)
        core.workspace.RunNetOnce(init_net)

        self.writer = _QueueWriter(self.blobs_queue, self.schema)
        self.reader = _QueueReader(self.blobs_queue, self.schema, self.name + "_reader")
        exit_net = core.Net(self.name + "/exit_net")
        exit_net.CloseBlobsQueue(self.blobs_queue, 0)
        self.exit_step = core.execution_step("{}_close_step".format(exit_net), exit_net)

    def build(self, reader, process=None):
        """(queue reader, producer step, exit step, schema); see the module doc."""
        producers = []
        for i in range(self.num_threads):
            read_net = core.Net("reader_" + str(i))
            should_stop, record = reader.read_record(read_net)
            enqueue_net = core.Net("queue_writer" + str(i))
            blobs = record.field_blobs() if process is None else process(enqueue_net, record).field_blobs()
            self.writer.write(enqueue_net, blobs)
            producers.append(core.execution_step(
                "producer_" + str(i),
                [core.execution_step(read_net.Name(), read_net),
                 core.execution_step(enqueue_net.Name(), enqueue_net)],
                should_stop_blob=should_stop))
        producer_step = core.execution_step("producers", producers, concurrent_substeps=True)
        return self.reader, producer_step, self.exit_step, self.schema
