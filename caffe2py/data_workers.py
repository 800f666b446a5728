"""Caffe2's caffe2.python.data_workers: Python threads that feed a net with batches.

    coordinator = data_workers.init_data_input_workers(
        model, ["data", "label"], fetch_fun, batch_size=32, num_worker_threads=2)
    coordinator.start()
    ... workspace.RunNet(model.net)      # each run dequeues one batch into data, label
    coordinator.stop()

fetch_fun(worker_id, batch_size) returns one array per input blob, holding any
number of samples (along axis batch_columns[i], 0 by default). Fetcher threads
put these chunks on a Python queue (max_buffered_batches per input source); an
enqueuer thread cuts them into batches of exactly batch_size (leftovers go back
on the queue; with dont_rebatch chunks pass as they are) and enqueues each input
on a Caffe2 BlobsQueue of its own (capacity 4). The net gets one DequeueBlobs op
per input (waiting up to `timeout` seconds). stop() closes the Caffe2 queues, so
a net waiting for data fails instead of hanging, and ends the threads.

init_data_input_workers returns this module's process-wide GlobalCoordinator (a
parallel_workers.GlobalWorkerCoordinator that also keeps the Python-side queue
of each input source), which starts and stops every data input registered.
"""
import itertools
import logging
import queue
import threading
import time

import numpy as np

from . import core, scope, workspace
from .parallel_workers import GlobalWorkerCoordinator, Metrics, State, Worker, WorkerCoordinator, run_worker
from .proto import caffe2_pb2

log = logging.getLogger("data_workers")
log.setLevel(logging.INFO)
LOG_INT_SECS = 60

# Batches each Caffe2-side queue holds.
C2_QUEUE_CAPACITY = 4


def get_worker_ids(num_workers):
    return list(range(0, num_workers))


def init_data_input_workers(net, input_blob_names, fetch_fun, batch_size, num_worker_threads=2,
                            input_source_name="train", max_buffered_batches=800, init_fun=None,
                            external_loggers=None, dont_rebatch=False, batch_columns=None, timeout=600):
    device_option = scope.CurrentDeviceScope() or caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CPU)
    metrics = Metrics(external_loggers)
    feeder = BatchFeeder(net, input_blob_names, batch_size, device_option, scope.CurrentNameScope(),
                         input_source_name, global_coordinator.get_queue(input_source_name, max_buffered_batches),
                         metrics, dont_rebatch, batch_columns, timeout=timeout)
    worker_ids = [global_coordinator.get_new_worker_id() for _ in range(num_worker_threads)]
    coordinator = DataInputCoordinator(input_source_name, worker_ids, init_fun, feeder)
    threads = [threading.Thread(target=run_worker, name="data_workers fetcher id {}".format(worker_id),
                                args=[coordinator, DataWorker(coordinator, worker_id, fetch_fun, metrics,
                                                              batch_size, feeder)])
               for worker_id in worker_ids]
    threads.append(threading.Thread(target=enqueuer, args=[coordinator, feeder],
                                    name="Enqueuer {} {}".format(input_source_name, scope.CurrentNameScope())))
    coordinator._workers = threads
    global_coordinator.add(coordinator)
    return global_coordinator


class DataInputCoordinator(WorkerCoordinator):
    """A WorkerCoordinator whose state is a BatchFeeder; `_inputs` is the number of
    samples fetched since the feeder last logged its rate (Caffe2's tests poll it)."""

    @property
    def _inputs(self):
        return self._state._inputs


class BatchFeeder(State):
    """Collects fetched chunks into batches and enqueues them for the net's DequeueBlobs."""

    def __init__(self, net, input_blob_names, batch_size, device_option, namescope, input_source_name, queue_,
                 metrics, dont_rebatch, batch_columns, timeout=600):
        self._counter = 0
        self._input_blob_names = input_blob_names
        self._batch_size = batch_size
        self._internal_queue = queue_
        self._queues = []
        self._device_option = device_option
        self._namescope = namescope
        self._timeout = timeout
        self._input_source_name = input_source_name
        self._c2_queue_capacity = C2_QUEUE_CAPACITY
        self._create_caffe2_queues(net)
        self._create_caffe2_ops(net)
        self._inputs = 0
        self._prev_seconds = 0
        self._last_warning = time.time()
        self._dont_rebatch = dont_rebatch
        self._init_scratch()
        self._metrics = metrics
        self._batch_columns = batch_columns if batch_columns is not None else [0] * len(input_blob_names)

    def start(self):
        self._inputs = 0
        self._prev_seconds = time.time()

    def stop(self):
        try:
            for q in self._queues:
                workspace.RunOperatorOnce(core.CreateOperator("CloseBlobsQueue", [q], []))
        finally:
            self._log_inputs_per_interval(0, force=True)

    def cleanup(self):
        for blob in itertools.chain(self._scratch_blob.values(), self._scratch_status.values()):
            workspace.FeedBlob(blob, np.zeros(0, np.float32), device_option=self._device_option)

    def _get(self, coordinator):
        start = last_warning = time.time()
        while coordinator.is_active():
            try:
                return self._internal_queue.get(block=True, timeout=0.5)
            except queue.Empty:
                if time.time() - last_warning > 10.0:
                    log.warning("** Data input is slow: (still) no data in %s secs.", time.time() - start)
                    last_warning = time.time()
        return None

    def _validate_chunk(self, chunk):
        if chunk is None:
            log.warning("Fetcher function returned None")
            return False
        assert len(chunk) == len(self._input_blob_names), "Expecting data blob for each input"
        for part in chunk:
            assert isinstance(part, np.ndarray), "Fetcher function must return a numpy array"
        if not self._dont_rebatch:
            first = chunk[0].shape[self._batch_columns[0]]
            for j, part in enumerate(chunk[1:], start=1):
                assert part.shape[self._batch_columns[j]] == first, \
                    "Each returned input must have equal number of samples"
        if len(chunk) == 0:
            log.warning("Worker provided zero length input")
            return False
        return True

    def put(self, chunk, coordinator):
        """Queue a fetched chunk (waiting while the queue is full and the input runs)."""
        if not self._validate_chunk(chunk):
            return
        while coordinator.is_active():
            try:
                size = self._internal_queue.qsize()
                if size < 2 and time.time() - self._last_warning > LOG_INT_SECS:
                    log.warning("Warning, data loading lagging behind: queue size=%d, name=%s",
                                size, self._input_source_name)
                    self._last_warning = time.time()
                self._counter += 1
                self._internal_queue.put(chunk, block=True, timeout=0.5)
                self._log_inputs_per_interval(chunk[0].shape[0])
                return
            except queue.Full:
                log.debug("Queue full: stalling fetchers...")

    def _enqueue_batch_direct(self, coordinator):
        data = self._get(coordinator)
        if data is not None and coordinator.is_active():
            for name, q, part in zip(self._input_blob_names, self._queues, data):
                self._enqueue(name, q, part)

    def _enqueue_batch(self, coordinator):
        """Gather chunks into one batch of batch_size samples and enqueue it."""
        if self._dont_rebatch:
            self._enqueue_batch_direct(coordinator)
            return
        axis0 = self._batch_columns[0]
        batch = [np.array([]) for _ in self._input_blob_names]
        while (batch[0].shape[0] == 0 or batch[0].shape[axis0] < self._batch_size) and coordinator.is_active():
            chunk = self._get(coordinator)
            if chunk is None:
                continue
            for j, part in enumerate(chunk):
                batch[j] = part.copy() if batch[j].shape[0] == 0 else np.append(
                    batch[j], part, axis=self._batch_columns[j])
        start = time.time()
        try:
            if batch[0].shape[0] > 0 and batch[0].shape[axis0] > self._batch_size:
                leftover, trimmed = [], []
                for j, part in enumerate(batch):
                    head, tail = np.split(part, [self._batch_size], axis=self._batch_columns[j])
                    trimmed.append(head)
                    leftover.append(tail)
                batch = trimmed
                try:
                    self._internal_queue.put(leftover, block=False)
                except queue.Full:
                    pass
                assert batch[0].shape[axis0] == self._batch_size
            if coordinator.is_active():
                for name, q, part in zip(self._input_blob_names, self._queues, batch):
                    self._enqueue(name, q, part)
        finally:
            self._metrics.put_metric("enqueue_time", time.time() - start)

    def _init_scratch(self):
        self._scratch_blob, self._scratch_status = {}, {}
        for name in self._input_blob_names:
            scratch = self._namescope + name + "_scratch_" + self._input_source_name
            self._scratch_blob[name] = core.BlobReference(scratch)
            self._scratch_status[name] = core.BlobReference(scratch + "_status")
        # created here, so the enqueuer thread only ever writes existing blobs
        for blob in itertools.chain(self._scratch_blob.values(), self._scratch_status.values()):
            workspace.FeedBlob(blob, np.array([]).astype(np.float32), device_option=self._device_option)

    def _enqueue(self, blob_name, queue_blob, data):
        scratch = self._scratch_blob[blob_name]
        workspace.FeedBlob(scratch, data, device_option=self._device_option)
        workspace.RunOperatorOnce(core.CreateOperator(
            "SafeEnqueueBlobs", [queue_blob, scratch], [scratch, self._scratch_status[blob_name]],
            device_option=self._device_option))

    def _create_caffe2_queues(self, net):
        for name in self._input_blob_names:
            queue_name = name + "_c2queue" + "_" + self._input_source_name
            workspace.RunOperatorOnce(core.CreateOperator(
                "CreateBlobsQueue", [], [queue_name], num_blobs=1, capacity=self._c2_queue_capacity))
            self._queues.append(core.ScopedBlobReference(queue_name))

    def _create_caffe2_ops(self, net):
        for q, name in zip(self._queues, self._input_blob_names):
            net.DequeueBlobs(q, name, timeout_secs=float(self._timeout))

    def _log_inputs_per_interval(self, inputs, force=False):
        self._inputs += inputs
        now = time.time()
        elapsed = now - self._prev_seconds
        if elapsed >= LOG_INT_SECS or force:
            per_sec = int(self._inputs / elapsed) if elapsed > 0 else 0
            size = self._internal_queue.qsize()
            log.info("%s/%s: %d inputs/sec", self._input_source_name, self._namescope, per_sec)
            log.info("-- queue: %d batches", size)
            self._metrics.put_metric("inputs_per_sec", per_sec, False)
            self._metrics.put_metric("queue_size", size, False)
            self._metrics.put_metric("time_elapsed", elapsed, False)
            self._metrics.log_metrics()
            self._metrics.reset_metrics()
            self._inputs = 0
            self._prev_seconds = now


class GlobalCoordinator(GlobalWorkerCoordinator):
    """parallel_workers' global coordinator plus the Python-side queue of each input source."""

    def __init__(self):
        super().__init__()
        self._queues = {}

    def get_queue(self, queue_name, max_buffered_batches):
        assert isinstance(max_buffered_batches, int), "max_buffered_batches must be an int"
        if queue_name not in self._queues:
            self._queues[queue_name] = queue.Queue(maxsize=max_buffered_batches)
        return self._queues[queue_name]

    def reset_data_input(self, namescope, name, net, batch_size):
        """Point the input `name` (in namescope) at another net, with another batch size."""
        log.info("Reset data input %s, batch size %s: ", name, batch_size)
        for coordinator in self._coordinators:
            if coordinator._worker_name == name and coordinator._state._namescope == namescope:
                coordinator._state._batch_size = batch_size
                coordinator._state._create_caffe2_ops(net)


class DataWorker(Worker):
    def __init__(self, coordinator, worker_id, worker_fun, metrics, batch_size, batch_feeder):
        super().__init__(coordinator, worker_id, worker_fun=worker_fun, metrics=metrics)
        self._batch_size = batch_size
        self._batch_feeder = batch_feeder

    def run(self):
        self._batch_feeder.put(self._worker_fun(self._worker_id, self._batch_size), self._coordinator)

    def finish(self):
        self._metrics.put_metric("fetcher_time", time.time() - self._start_time)


global_coordinator = GlobalCoordinator()


def enqueuer(coordinator, batch_feeder):
    while coordinator.is_active():
        batch_feeder._enqueue_batch(coordinator)
