"""Queue ops: BlobsQueue (CreateBlobsQueue, EnqueueBlobs, DequeueBlobs, the Safe
variants with a status output, WeightedSampleDequeueBlobs, CloseBlobsQueue,
CreateBlobsQueueDB) and RebatchingQueue (Create/Enqueue/Dequeue/CloseRebatchingQueue).

The queue objects live in caffe2py/queues.py; reads and writes block the calling
thread, so a producer net and a consumer net run on different threads (or in
concurrent substeps of a plan). EnqueueBlobs/DequeueBlobs fail once the queue is
closed (and, for reads, drained): a net built on them stops with an error. The Safe
variants instead set their last output, a bool scalar, to true: an execution step
uses it as its should_stop_blob to end cleanly.
"""
import numpy as np

from caffe2py import db as dbs
from caffe2py.db.queue_db import QueueDB
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.queues import BlobsQueue, QueueError, RebatchingQueue
from caffe2py.registry import (UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema,
                               takes_blobs)

BOOL = caffe2_pb2.TensorProto.BOOL


def _unknown(ctx, ins):
    return [UNKNOWN] * ctx.n_outputs


def _with_status(ctx, ins):
    return [UNKNOWN] * (ctx.n_outputs - 1) + [TensorType((), BOOL)]


def _queue(ctx, value, index=0, cls=BlobsQueue):
    if not isinstance(value, cls):
        raise ctx.input_error(index, "must be a %s (made by %s), got %s" % (
            cls.__name__, "CreateBlobsQueue" if cls is BlobsQueue else "CreateRebatchingQueue", type(value).__name__))
    return value


def _check_blobs(ctx, queue, given):
    if given != queue.num_blobs:
        raise ctx.error("queue '%s' holds records of %d blobs; the op moves %d" % (queue.name, queue.num_blobs, given))


def _status(failed):
    return np.array(bool(failed), dtype=np.bool_)


def _tuple(values):
    values = list(values)
    return values[0] if len(values) == 1 else tuple(values)


# ----------------------------------------------------------------- BlobsQueue

register_schema(OpSchema(
    "CreateBlobsQueue", num_inputs=0, num_outputs=1,
    args=(Arg("capacity", "int", 1), Arg("num_blobs", "int", 1),
          Arg("enforce_unique_name", "bool", False), Arg("field_names", "strings", None)),
    inference=_unknown,
    doc="A queue of at most `capacity` records of `num_blobs` blobs, named after its output."))


@register_kernel("CreateBlobsQueue")
def create_blobs_queue(ctx):
    capacity, num_blobs = ctx.int("capacity", 1), ctx.int("num_blobs", 1)
    names = [f.decode() if isinstance(f, bytes) else f for f in (ctx.strings("field_names") or [])]
    if capacity < 1 or num_blobs < 1:
        raise ctx.error("capacity and num_blobs must be >= 1, got %d and %d" % (capacity, num_blobs))
    if names and len(names) != num_blobs:
        raise ctx.error("wrong number of field_names: %d for %d blobs" % (len(names), num_blobs))
    return lambda: BlobsQueue(ctx.outputs[0], capacity, num_blobs, names)


register_schema(OpSchema(
    "EnqueueBlobs", num_inputs=(2, None), num_outputs=(1, None),
    inputs_outputs_check=lambda i, o: i == o + 1, enforce_inplace=lambda i, o: i == o + 1,
    inference=lambda ctx, ins: list(ins[1:]),
    doc="Write the blobs (inputs 1..n, also the outputs) as one record; blocks while the queue "
        "is full; fails if it is closed while full."))


@register_kernel("EnqueueBlobs")
def enqueue_blobs(ctx):
    def run(queue, *blobs):
        queue = _queue(ctx, queue)
        _check_blobs(ctx, queue, len(blobs))
        if not queue.blocking_write(blobs):
            raise QueueError("%s: queue '%s' is closed" % (ctx.label, queue.name))
        return _tuple(blobs)
    return run


register_schema(OpSchema(
    "DequeueBlobs", num_inputs=1, num_outputs=(1, None),
    args=(Arg("timeout_secs", "float", 0.0, doc="give up after this long (0: wait for ever)"),),
    inference=_unknown,
    doc="Read one record into the outputs; blocks while the queue is empty; fails when it is "
        "closed and empty or the wait times out."))


@register_kernel("DequeueBlobs")
def dequeue_blobs(ctx):
    timeout = ctx.float("timeout_secs", 0.0)

    def run(queue):
        queue = _queue(ctx, queue)
        _check_blobs(ctx, queue, ctx.n_outputs)
        record = queue.blocking_read(timeout)
        if record is None:
            why = "timed out after %g s" % timeout if timeout > 0 and not queue.closed else "is closed and empty"
            raise QueueError("%s: queue '%s' %s" % (ctx.label, queue.name, why))
        return _tuple(record)
    return run


register_schema(OpSchema("CloseBlobsQueue", num_inputs=1, num_outputs=0,
                         doc="Close the queue: blocked readers and writers wake up."))


@register_kernel("CloseBlobsQueue")
def close_blobs_queue(ctx):
    def run(queue):
        _queue(ctx, queue).close()
    return run


register_schema(OpSchema(
    "SafeEnqueueBlobs", num_inputs=(2, None), num_outputs=(2, None),
    inputs_outputs_check=lambda i, o: i == o, enforce_inplace=lambda i, o: i == o + 1,
    inference=lambda ctx, ins: list(ins[1:]) + [TensorType((), BOOL)],
    doc="EnqueueBlobs with a last output, a bool scalar set when the queue was closed and "
        "full (the record was not written), instead of failing."))


@register_kernel("SafeEnqueueBlobs")
def safe_enqueue_blobs(ctx):
    def run(queue, *blobs):
        queue = _queue(ctx, queue)
        _check_blobs(ctx, queue, len(blobs))
        return tuple(blobs) + (_status(not queue.blocking_write(blobs)),)
    return run


register_schema(OpSchema(
    "SafeDequeueBlobs", num_inputs=1, num_outputs=(2, None),
    args=(Arg("num_records", "int", 1, doc="read up to this many records, concatenated along "
                                            "the first dimension"),),
    inference=_with_status,
    doc="DequeueBlobs with a last output, a bool scalar set when the queue is closed and empty "
        "(the data outputs then keep what they held), instead of failing."))


def _concat_records(ctx, records):
    outs = []
    for col in range(len(records[0])):
        parts = [np.asarray(r[col]) for r in records]
        for k, p in enumerate(parts):
            if p.ndim == 0:
                raise ctx.error("empty tensor to dequeue at column %d within %d total columns"
                                % (col, len(records[0])))
            if p.shape[1:] != parts[0].shape[1:] or p.dtype != parts[0].dtype:
                raise ctx.error("record %d column %d is %s %s; record 0's is %s %s"
                                % (k, col, p.dtype, list(p.shape), parts[0].dtype, list(parts[0].shape)))
        outs.append(np.concatenate(parts))
    return outs


@register_kernel("SafeDequeueBlobs")
def safe_dequeue_blobs(ctx):
    num_records = ctx.int("num_records", 1)
    if num_records < 1:
        raise ctx.error("num_records must be > 0, got %d" % num_records)
    data_outputs = ctx.outputs[:-1]

    @takes_blobs
    def run(blobs, queue):
        queue = _queue(ctx, queue)
        _check_blobs(ctx, queue, ctx.n_outputs - 1)
        records = []
        for _ in range(num_records):
            record = queue.blocking_read()
            if record is None:
                break
            records.append(record)
        if not records:      # closed and empty: the data outputs keep their values
            return tuple(blobs.get(name) for name in data_outputs) + (_status(True),)
        values = records[0] if num_records == 1 else _concat_records(ctx, records)
        return tuple(values) + (_status(False),)
    return run


register_schema(OpSchema(
    "WeightedSampleDequeueBlobs", num_inputs=(1, None), num_outputs=(2, None),
    args=(Arg("weights", "floats", None, doc="sampling weight per input queue (default: equal)"),
          Arg("table_idx_blob", "int", -1, doc="index of the output that receives the chosen queue's "
                                                "index (int32 [1]) instead of its blob")),
    inference=_with_status,
    doc="Pick one of the input queues at random by weight and dequeue one record from it; the last "
        "output is the status (true when that queue is closed and empty)."))


@register_kernel("WeightedSampleDequeueBlobs")
def weighted_sample_dequeue_blobs(ctx):
    table_idx = ctx.int("table_idx_blob", -1)
    if table_idx >= ctx.n_outputs - 1:
        raise ctx.error("table_idx_blob %d must be below the number of data outputs (%d)"
                        % (table_idx, ctx.n_outputs - 1))
    weights = list(ctx.floats("weights") or [1.0] * ctx.n_inputs)
    if len(weights) != ctx.n_inputs:
        raise ctx.error("%d weights for %d queues" % (len(weights), ctx.n_inputs))
    weights = np.asarray(weights, dtype=np.float32)
    if np.any(weights < 0):
        raise ctx.error("each weight must be non-negative, got %s" % weights.tolist())
    if not weights.sum() > 0:
        raise ctx.error("the sum of weights must be positive")
    cumulative = np.cumsum(weights / weights.sum(), dtype=np.float32)
    cumulative[-1] = 1.0001          # never miss the last queue to rounding
    seed = ctx.op_def.device_option.random_seed if ctx.op_def.device_option.HasField("random_seed") else None
    rng = np.random.default_rng(seed)
    data_outputs = ctx.outputs[:-1]

    @takes_blobs
    def run(blobs, *queues):
        queues = [_queue(ctx, q, i) for i, q in enumerate(queues)]
        r = np.float32(rng.random())
        idx = int(np.searchsorted(cumulative, r, side="left"))
        queue = queues[idx]
        _check_blobs(ctx, queue, ctx.n_outputs - 1)
        record = queue.blocking_read()
        values = list(record) if record is not None else [blobs.get(n) for n in data_outputs]
        if table_idx >= 0:
            values[table_idx] = np.array([idx], dtype=np.int32)
        return tuple(values) + (_status(record is None),)
    return run


register_schema(OpSchema(
    "CreateBlobsQueueDB", num_inputs=1, num_outputs=1,
    args=(Arg("key_blob_index", "int", -1, doc="blob of each record holding the key (-1: none)"),
          Arg("value_blob_index", "int", 0, doc="blob of each record holding the value"),
          Arg("timeout_secs", "float", 0.0)),
    inference=_unknown,
    doc="A DBReader whose records come from a BlobsQueue of string blobs."))


@register_kernel("CreateBlobsQueueDB")
def create_blobs_queue_db(ctx):
    key_index, value_index = ctx.int("key_blob_index", -1), ctx.int("value_blob_index", 0)
    timeout = ctx.float("timeout_secs", 0.0)
    if value_index < 0:
        raise ctx.error("value_blob_index must be >= 0, got %d" % value_index)

    def run(queue):
        queue = _queue(ctx, queue)
        for index in (key_index, value_index):
            if index >= queue.num_blobs:
                raise ctx.error("blob index %d but queue '%s' records hold %d blobs"
                                % (index, queue.name, queue.num_blobs))
        return dbs.DBReader(db=QueueDB(queue, key_index, value_index, timeout))
    return run


# ----------------------------------------------------------------- RebatchingQueue

register_schema(OpSchema(
    "CreateRebatchingQueue", num_inputs=0, num_outputs=1,
    args=(Arg("capacity", "int", 1, doc="most elements the queue holds"),
          Arg("num_blobs", "int", 1, doc="tensors per element")),
    inference=_unknown, doc="A queue of elements that dequeues them in batches."))


@register_kernel("CreateRebatchingQueue")
def create_rebatching_queue(ctx):
    capacity, num_blobs = ctx.int("capacity", 1), ctx.int("num_blobs", 1)
    if capacity < 1 or num_blobs < 1:
        raise ctx.error("capacity and num_blobs must be >= 1, got %d and %d" % (capacity, num_blobs))
    return lambda: RebatchingQueue(capacity, num_blobs)


register_schema(OpSchema(
    "EnqueueRebatchingQueue", num_inputs=(2, None), num_outputs=0,
    args=(Arg("enqueue_batch", "bool", False, doc="split the tensors along their first dimension "
                                                   "into one element per row"),),
    doc="Enqueue one element (the tensors), or with enqueue_batch one per row; blocks while "
        "full; fails if the queue is closed."))


@register_kernel("EnqueueRebatchingQueue")
def enqueue_rebatching_queue(ctx):
    many = ctx.bool("enqueue_batch", False)

    def run(queue, *tensors):
        queue = _queue(ctx, queue, cls=RebatchingQueue)
        if len(tensors) != queue.num_blobs:
            raise ctx.error("the queue's elements hold %d tensors; the op got %d" % (queue.num_blobs, len(tensors)))
        try:
            ok = queue.enqueue_many(tensors) if many else queue.enqueue_one(tensors)
        except QueueError:
            raise
        except Caffe2Error as exc:
            raise ctx.error(str(exc)) from None
        if not ok:
            raise QueueError("%s: the rebatching queue is closed" % ctx.label)
    return run


register_schema(OpSchema(
    "DequeueRebatchingQueue", num_inputs=1, num_outputs=(1, None),
    args=(Arg("num_elements", "int", 1, doc="elements per batch"),),
    inference=_unknown,
    doc="Dequeue num_elements elements stacked along a new first dimension (fewer when the queue "
        "is closed); fails when it is closed and empty."))


@register_kernel("DequeueRebatchingQueue")
def dequeue_rebatching_queue(ctx):
    n = ctx.int("num_elements", 1)
    if n < 1:
        raise ctx.error("num_elements must be >= 1, got %d" % n)

    def run(queue):
        queue = _queue(ctx, queue, cls=RebatchingQueue)
        if ctx.n_outputs != queue.num_blobs:
            raise ctx.error("the queue's elements hold %d tensors; the op has %d outputs"
                            % (queue.num_blobs, ctx.n_outputs))
        try:
            batch = queue.dequeue(n)
        except Caffe2Error as exc:
            raise ctx.error(str(exc)) from None
        if batch is None:
            raise QueueError("%s: the rebatching queue is closed and empty" % ctx.label)
        return _tuple(batch)
    return run


register_schema(OpSchema("CloseRebatchingQueue", num_inputs=1, num_outputs=0,
                         doc="Close the queue: blocked readers and writers wake up."))


@register_kernel("CloseRebatchingQueue")
def close_rebatching_queue(ctx):
    def run(queue):
        _queue(ctx, queue, cls=RebatchingQueue).close()
    return run
