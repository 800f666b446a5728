"""Blocking queues between nets running on different threads (Caffe2's BlobsQueue and
RebatchingQueue). A queue is a blob value; the queue ops hold it as an input.

BlobsQueue: a ring of `capacity` records of `num_blobs` values. A write blocks
while the queue is full and a read while it is empty; close() wakes everybody.
After close, reads still drain what is queued and writes still fill free slots (as
in Caffe2), so a reader sees every record written before the close; then reads
fail. A read may time out.

RebatchingQueue: a ring of single elements (lists of tensors). A write can split a
batch into elements; a read takes up to n elements and stacks them into a batch,
returning fewer when the queue is closed. Writes fail once it is closed.
"""
import threading

import numpy as np

from .errors import Caffe2Error


class QueueError(Caffe2Error):
    """A queue operation did not happen: the queue is closed (or a read timed out)."""


class BlobsQueue:
    def __init__(self, name, capacity, num_blobs, field_names=None):
        if capacity < 1 or num_blobs < 1:
            raise Caffe2Error("queue '%s': capacity and num_blobs must be >= 1, got %d and %d"
                              % (name, capacity, num_blobs))
        field_names = list(field_names or [])
        if field_names and len(field_names) != num_blobs:
            raise Caffe2Error("queue '%s': %d field names for %d blobs" % (name, len(field_names), num_blobs))
        self.name = name
        self.capacity = int(capacity)
        self.num_blobs = int(num_blobs)
        self.field_names = field_names
        self._ring = [None] * self.capacity
        self._reader = 0        # records read so far
        self._writer = 0        # records written so far; reader <= writer <= reader + capacity
        self._closing = False
        self._cond = threading.Condition()

    def _can_read(self):
        return self._reader < self._writer

    def _can_write(self):
        return self._writer < self._reader + self.capacity

    def blocking_read(self, timeout_secs=0.0):
        """The next record (a list), or None if the queue is closed and empty or the
        wait took longer than timeout_secs (> 0)."""
        with self._cond:
            ready = lambda: self._closing or self._can_read()  # noqa: E731
            if timeout_secs and timeout_secs > 0:
                self._cond.wait_for(ready, timeout=timeout_secs)
            else:
                self._cond.wait_for(ready)
            if not self._can_read():
                return None
            slot = self._reader % self.capacity
            record, self._ring[slot] = self._ring[slot], None
            self._reader += 1
            self._cond.notify_all()
            return record

    def _write(self, values):
        self._ring[self._writer % self.capacity] = list(values)
        self._writer += 1
        self._cond.notify_all()

    def try_write(self, values):
        with self._cond:
            if not self._can_write():
                return False
            self._write(values)
            return True

    def blocking_write(self, values):
        """Queue a record; False if the queue was closed while full."""
        with self._cond:
            self._cond.wait_for(lambda: self._closing or self._can_write())
            if not self._can_write():
                return False
            self._write(values)
            return True

    def close(self):
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    @property
    def closed(self):
        return self._closing

    def __len__(self):
        with self._cond:
            return self._writer - self._reader

    def __repr__(self):
        return "BlobsQueue(%r, capacity=%d, num_blobs=%d, size=%d%s)" % (
            self.name, self.capacity, self.num_blobs, len(self), ", closed" if self._closing else "")


def stack_elements(elements):
    """Elements (lists of tensors) -> one tensor per component with a new first dim."""
    first = elements[0]
    for k, element in enumerate(elements):
        if len(element) != len(first):
            raise Caffe2Error("element %d has %d tensors, element 0 has %d" % (k, len(element), len(first)))
        for j, (t, t0) in enumerate(zip(element, first)):
            if t.dtype != t0.dtype or t.shape != t0.shape:
                raise Caffe2Error("component %d of element %d is %s %s; element 0's is %s %s"
                                  % (j, k, t.dtype, list(t.shape), t0.dtype, list(t0.shape)))
    return [np.stack([element[j] for element in elements]) for j in range(len(first))]


class RebatchingQueue:
    def __init__(self, capacity, num_blobs):
        if capacity < 1 or num_blobs < 1:
            raise Caffe2Error("rebatching queue: capacity and num_blobs must be >= 1, got %d and %d"
                              % (capacity, num_blobs))
        self.capacity = int(capacity)
        self.num_blobs = int(num_blobs)
        self._ring = [None] * self.capacity
        self._head = 0          # elements written
        self._tail = 0          # elements read
        self._closed = False
        self._cond = threading.Condition()

    def _can_read(self):
        return self._tail < self._head

    def _can_write(self):
        return self._tail + self.capacity > self._head

    def enqueue_one(self, tensors):
        return self._enqueue([[np.array(t, copy=True) for t in tensors]])

    def enqueue_many(self, tensors):
        """Split every tensor along its first dimension into elements."""
        tensors = [np.asarray(t) for t in tensors]
        for j, t in enumerate(tensors):
            if t.ndim == 0:
                raise Caffe2Error("tensor %d must have a first dimension to be split into elements" % j)
            if t.shape[0] != tensors[0].shape[0]:
                raise Caffe2Error("tensor %d has %d rows, tensor 0 has %d" % (j, t.shape[0], tensors[0].shape[0]))
        rows = tensors[0].shape[0] if tensors else 0
        return self._enqueue([[np.array(t[i]) for t in tensors] for i in range(rows)])

    def _enqueue(self, elements):
        i = 0
        while i < len(elements):
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._can_write())
                if self._closed:
                    return False        # closed in the middle of a batch: not a success
                while self._can_write() and i < len(elements):
                    self._ring[self._head % self.capacity] = elements[i]
                    self._head += 1
                    i += 1
                self._cond.notify_all()
        return True

    def dequeue(self, num_elements):
        """Up to num_elements stacked; None when closed and empty."""
        results = []
        while len(results) < num_elements:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._can_read())
                if not self._can_read() and self._closed:
                    break
                while self._can_read() and len(results) < num_elements:
                    slot = self._tail % self.capacity
                    results.append(self._ring[slot])
                    self._ring[slot] = None
                    self._tail += 1
                self._cond.notify_all()
        if not results:
            return None
        return stack_elements(results)

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self):
        return self._closed

    def __len__(self):
        with self._cond:
            return self._head - self._tail

