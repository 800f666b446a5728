"""Caffe2's caffe2.python.queue_util: BlobsQueues as dataio Pipes.

    q = Queue(capacity=10, schema=record_schema)   # created by the tasks' local setup
    writer, reader = q.writer(), q.reader()

A Queue is created (CreateBlobsQueue) by the local setup of the TaskGroup that
first reads or writes it, with one blob per field of its schema (the schema may
come from the first writer). Writers enqueue records (SafeEnqueueBlobs) and
close the queue when their task ends; readers dequeue `num_dequeue_records`
records at a time and stop once the queue is closed and empty.

enqueue / dequeue / close_queue are the same steps as free functions.
"""
import logging

from . import core, dataio
from .task import TaskGroup

log = logging.getLogger(__name__)


class _QueueReader(dataio.Reader):
    def __init__(self, wrapper, num_dequeue_records=1):
        assert wrapper.schema() is not None, "Queue needs a schema in order to be read from."
        super().__init__(wrapper.schema())
        self._wrapper = wrapper
        self._num_dequeue_records = num_dequeue_records

    def setup_ex(self, init_net, exit_net):
        exit_net.CloseBlobsQueue([self._wrapper.queue()], 0)

    def read_ex(self, local_init_net, local_finish_net):
        self._wrapper._new_reader(local_init_net)
        dequeue_net = core.Net("dequeue")
        fields, status = dequeue(dequeue_net, self._wrapper.queue(), len(self.schema().field_names()),
                                 field_names=self.schema().field_names(),
                                 num_records=self._num_dequeue_records)
        return [dequeue_net], status, fields

    def read(self, net):
        _, status, fields = self.read_ex(net, None)
        return status, fields


class _QueueWriter(dataio.Writer):
    def __init__(self, wrapper):
        self._wrapper = wrapper

    def setup_ex(self, init_net, exit_net):
        exit_net.CloseBlobsQueue([self._wrapper.queue()], 0)

    def write_ex(self, fields, local_init_net, local_finish_net, status):
        self._wrapper._new_writer(self.schema(), local_init_net)
        enqueue_net = core.Net("enqueue")
        enqueue(enqueue_net, self._wrapper.queue(), fields, status)
        return [enqueue_net]


class QueueWrapper(dataio.Pipe):
    """A Pipe over an existing queue blob."""

    def __init__(self, handler, schema=None, num_dequeue_records=1):
        super().__init__(schema, TaskGroup.LOCAL_SETUP)
        self._queue = handler
        self._num_dequeue_records = num_dequeue_records

    def reader(self):
        return _QueueReader(self, num_dequeue_records=self._num_dequeue_records)

    def writer(self):
        return _QueueWriter(self)

    def queue(self):
        return self._queue


class Queue(QueueWrapper):
    """A Pipe over a new BlobsQueue of `capacity` records."""

    def __init__(self, capacity, schema=None, name="queue", num_dequeue_records=1):
        net = core.Net(name)          # only to give the queue blob a unique name
        handler = net.AddExternalInput(net.NextName("handler"))
        super().__init__(handler, schema, num_dequeue_records=num_dequeue_records)
        self.capacity = capacity
        self._setup_done = False

    def setup(self, global_init_net):
        assert self._schema, "This queue does not have a schema."
        self._setup_done = True
        global_init_net.CreateBlobsQueue(
            [], [self._queue], capacity=self.capacity, num_blobs=len(self._schema.field_names()),
            field_names=self._schema.field_names())


def enqueue(net, queue, data_blobs, status=None):
    """Add a SafeEnqueueBlobs of data_blobs to net; returns its status blob.
    Enqueueing moves a blob into the queue, so a blob named twice is copied."""
    if status is None:
        status = net.NextName("status")
    queue_blobs = []
    for blob in data_blobs:
        if blob not in queue_blobs:
            queue_blobs.append(blob)
        else:
            log.warning("Need to copy blob %s to enqueue", blob)
            queue_blobs.append(net.Copy(blob))
    results = net.SafeEnqueueBlobs([queue] + queue_blobs, queue_blobs + [status])
    return results[-1]


def dequeue(net, queue, num_blobs, status=None, field_names=None, num_records=1):
    """Add a SafeDequeueBlobs to net; returns (data blobs, status blob)."""
    if field_names is not None:
        assert len(field_names) == num_blobs, "one field name per blob"
        data_names = [net.NextName(name) for name in field_names]
    else:
        data_names = [net.NextName("data", i) for i in range(num_blobs)]
    if status is None:
        status = net.NextName("status")
    results = list(net.SafeDequeueBlobs(queue, data_names + [status], num_records=num_records))
    status_blob = results.pop(-1)
    return results, status_blob


def close_queue(step, *queues):
    """A step running `step`, then closing the queues."""
    close_net = core.Net("close_queue_net")
    for queue in queues:
        close_net.CloseBlobsQueue([queue], 0)
    close_step = core.execution_step("%s_step" % str(close_net), close_net)
    return core.execution_step("%s_wraper_step" % step.Proto().name, [step, close_step])
