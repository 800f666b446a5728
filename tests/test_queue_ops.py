"""Blocking queues across threads: BlobsQueue ops, rebatching queues, the queue db,
and plans with concurrent substeps. Every wait is bounded, so a bug fails the test
instead of hanging it."""
import threading
import time

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error, OperatorError
from caffe2py.queues import QueueError

WAIT = 20.0     # seconds: generous bound for a thread that should finish


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def run(op, inputs, outputs, **kwargs):
    return workspace.RunOperatorOnce(core.CreateOperator(op, inputs, outputs, **kwargs))


def in_thread(fn):
    """Start fn on a thread; returns (thread, errors list)."""
    errors = []

    def body():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, errors


def test_producer_thread_feeds_a_net_that_stops_when_the_queue_closes():
    """The issue's scenario: a producer thread enqueues batches and closes the queue;
    the consumer plan reads until SafeDequeueBlobs reports the closed, drained queue."""
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(25)]
    run("CreateBlobsQueue", [], ["queue"], capacity=3, num_blobs=2)
    workspace.FeedBlob("total", np.zeros((4, 3), np.float32))
    workspace.FeedBlob("count", np.zeros(1, np.int64))

    produce = core.Net("produce")
    produce.EnqueueBlobs(["queue", "x", "k"], ["x", "k"])
    close = core.Net("close")
    close.CloseBlobsQueue(["queue"], [])
    workspace.FeedBlob("x", batches[0])
    workspace.FeedBlob("k", np.zeros(1, np.int64))
    workspace.CreateNet(produce)
    workspace.CreateNet(close)

    def producer():
        for i, b in enumerate(batches):
            workspace.FeedBlob("x", b)
            workspace.FeedBlob("k", np.array([i], np.int64))
            workspace.RunNet(produce.Name())
        workspace.RunNet(close.Name())

    read = core.Net("read")
    read.SafeDequeueBlobs(["queue"], ["xb", "kb", "done"])
    consume = core.Net("consume")
    consume.Add(["total", "xb"], "total")
    consume.Iter(["count"], ["count"])
    workspace.FeedBlob("xb", np.zeros((4, 3), np.float32))
    plan = core.Plan("consumer")
    # the stop blob is checked after each net: the consume net does not see the last, stale read
    plan.AddStep(core.execution_step("read", [read, consume], should_stop_blob="done"))

    thread, errors = in_thread(producer)
    finished, _ = in_thread(lambda: workspace.RunPlan(plan))
    finished.join(WAIT)
    thread.join(WAIT)
    assert not thread.is_alive() and not finished.is_alive() and not errors
    np.testing.assert_allclose(workspace.FetchBlob("total"), np.sum(batches, axis=0), rtol=1e-5)
    assert workspace.FetchBlob("count").tolist() == [25]
    assert bool(workspace.FetchBlob("done"))


def test_writes_block_while_full_and_reads_while_empty():
    run("CreateBlobsQueue", [], ["q"], capacity=2, num_blobs=1)
    net = core.Net("put")
    net.EnqueueBlobs(["q", "v"], ["v"])
    workspace.FeedBlob("v", np.array([1.0], np.float32))
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    workspace.RunNet(net.Name())
    blocked, errors = in_thread(lambda: workspace.RunNet(net.Name()))
    time.sleep(0.3)
    assert blocked.is_alive()                       # the third write waits for room
    run("DequeueBlobs", ["q"], ["out"])
    blocked.join(WAIT)
    assert not blocked.is_alive() and not errors
    reader, errors = in_thread(lambda: [run("DequeueBlobs", ["q"], ["out"]) for _ in range(3)])
    time.sleep(0.3)
    assert reader.is_alive()                        # two records, then it waits
    workspace.FeedBlob("v", np.array([7.0], np.float32))
    workspace.RunNet(net.Name())
    reader.join(WAIT)
    assert not reader.is_alive() and not errors
    assert workspace.FetchBlob("out").tolist() == [7.0]


def test_close_wakes_readers_and_drains_first():
    run("CreateBlobsQueue", [], ["q"], capacity=4, num_blobs=1)
    workspace.FeedBlob("v", np.array([5], np.int32))
    run("EnqueueBlobs", ["q", "v"], ["v"])
    run("CloseBlobsQueue", ["q"], [])
    run("DequeueBlobs", ["q"], ["out"])             # queued before the close: still read
    assert workspace.FetchBlob("out").tolist() == [5]
    with pytest.raises(OperatorError) as info:
        run("DequeueBlobs", ["q"], ["out"])
    assert isinstance(info.value.cause, QueueError) and "closed and empty" in str(info.value)
    run("CreateBlobsQueue", [], ["q2"], capacity=1, num_blobs=1)
    waiting, errors = in_thread(lambda: run("DequeueBlobs", ["q2"], ["o2"]))
    time.sleep(0.2)
    assert waiting.is_alive()
    run("CloseBlobsQueue", ["q2"], [])
    waiting.join(WAIT)
    assert not waiting.is_alive() and isinstance(errors[0].cause, QueueError)


def test_dequeue_timeout():
    run("CreateBlobsQueue", [], ["q"], capacity=1, num_blobs=1)
    start = time.monotonic()
    with pytest.raises(OperatorError, match="timed out after 0.2 s"):
        run("DequeueBlobs", ["q"], ["out"], timeout_secs=0.2)
    assert time.monotonic() - start >= 0.19


def test_enqueue_after_close():
    run("CreateBlobsQueue", [], ["q"], capacity=1, num_blobs=1)
    workspace.FeedBlob("v", np.array([1], np.int32))
    run("CloseBlobsQueue", ["q"], [])
    run("EnqueueBlobs", ["q", "v"], ["v"])          # Caffe2 still fills a free slot after close
    with pytest.raises(OperatorError, match="closed"):
        run("EnqueueBlobs", ["q", "v"], ["v"])
    run("SafeEnqueueBlobs", ["q", "v"], ["v", "status"])
    assert workspace.FetchBlob("status").shape == () and bool(workspace.FetchBlob("status"))


def test_safe_dequeue_many_concatenates_and_reports_the_end():
    run("CreateBlobsQueue", [], ["q"], capacity=5, num_blobs=2)
    rows = []
    for i in range(3):
        a = np.full((i + 1, 2), i, np.float32)
        b = np.arange(i + 1, dtype=np.int64)
        rows.append((a, b))
        workspace.FeedBlob("a", a)
        workspace.FeedBlob("b", b)
        run("SafeEnqueueBlobs", ["q", "a", "b"], ["a", "b", "status"])
        assert not bool(workspace.FetchBlob("status"))
    run("CloseBlobsQueue", ["q"], [])
    run("SafeDequeueBlobs", ["q"], ["x", "y", "done"], num_records=2)
    np.testing.assert_array_equal(workspace.FetchBlob("x"), np.concatenate([rows[0][0], rows[1][0]]))
    np.testing.assert_array_equal(workspace.FetchBlob("y"), np.concatenate([rows[0][1], rows[1][1]]))
    run("SafeDequeueBlobs", ["q"], ["x", "y", "done"], num_records=2)   # one left: still a success
    np.testing.assert_array_equal(workspace.FetchBlob("x"), rows[2][0])
    assert not bool(workspace.FetchBlob("done"))
    run("SafeDequeueBlobs", ["q"], ["x", "y", "done"], num_records=2)
    assert bool(workspace.FetchBlob("done"))
    np.testing.assert_array_equal(workspace.FetchBlob("x"), rows[2][0])   # kept


def test_weighted_sample_dequeue():
    for q in ("q0", "q1"):
        run("CreateBlobsQueue", [], [q], capacity=1000, num_blobs=2)
    for i in range(400):
        for k, q in enumerate(("q0", "q1")):
            workspace.FeedBlob("v", np.array([k], np.int32))
            workspace.FeedBlob("w", np.array([i], np.int32))
            run("EnqueueBlobs", [q, "v", "w"], ["v", "w"])
    op = core.CreateOperator("WeightedSampleDequeueBlobs", ["q0", "q1"], ["v", "table", "status"],
                             weights=[3.0, 1.0], table_idx_blob=1)
    op.device_option.random_seed = 11
    net = core.Net("sample")
    net.Proto().op.extend([op])
    workspace.CreateNet(net)
    picks = []
    for _ in range(400):
        workspace.RunNet(net.Name())
        picks.append(int(workspace.FetchBlob("table")[0]))
        assert int(workspace.FetchBlob("v")[0]) == picks[-1]       # the record came from that queue
        assert workspace.FetchBlob("table").dtype == np.int32
    assert 0.70 < picks.count(0) / 400 < 0.80                       # weights 3:1
    with pytest.raises(Caffe2Error, match="sum of weights must be positive"):
        run("WeightedSampleDequeueBlobs", ["q0", "q1"], ["v", "t", "s"], weights=[0.0, 0.0])
    with pytest.raises(Caffe2Error, match="2 weights for 1 queues"):
        run("WeightedSampleDequeueBlobs", ["q0"], ["v", "t", "s"], weights=[1.0, 1.0])


def test_queue_op_errors():
    run("CreateBlobsQueue", [], ["q"], capacity=1, num_blobs=2)
    workspace.FeedBlob("a", np.zeros(1))
    with pytest.raises(OperatorError, match="records of 2 blobs; the op moves 1"):
        run("EnqueueBlobs", ["q", "a"], ["a"])
    with pytest.raises(OperatorError, match="must be a BlobsQueue"):
        run("DequeueBlobs", ["a"], ["x"])
    with pytest.raises(Caffe2Error, match="capacity and num_blobs must be >= 1"):
        run("CreateBlobsQueue", [], ["bad"], capacity=0)


def test_rebatching_queue():
    run("CreateRebatchingQueue", [], ["rq"], capacity=10, num_blobs=2)
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.int64)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("y", y)
    run("EnqueueRebatchingQueue", ["rq", "x", "y"], [], enqueue_batch=True)      # 6 elements
    workspace.FeedBlob("x1", np.array([100.0, 101.0], np.float32))
    workspace.FeedBlob("y1", np.array(99, np.int64))
    run("EnqueueRebatchingQueue", ["rq", "x1", "y1"], [])                         # 1 element
    run("DequeueRebatchingQueue", ["rq"], ["bx", "by"], num_elements=4)
    np.testing.assert_array_equal(workspace.FetchBlob("bx"), x[:4])
    np.testing.assert_array_equal(workspace.FetchBlob("by"), y[:4])
    run("CloseRebatchingQueue", ["rq"], [])
    run("DequeueRebatchingQueue", ["rq"], ["bx", "by"], num_elements=4)          # closed: the 3 left
    np.testing.assert_array_equal(workspace.FetchBlob("bx"), np.vstack([x[4:], [[100.0, 101.0]]]))
    assert workspace.FetchBlob("by").tolist() == [4, 5, 99]
    with pytest.raises(OperatorError, match="closed and empty"):
        run("DequeueRebatchingQueue", ["rq"], ["bx", "by"], num_elements=4)
    with pytest.raises(OperatorError, match="closed"):
        run("EnqueueRebatchingQueue", ["rq", "x", "y"], [], enqueue_batch=True)


def test_rebatching_queue_blocks_and_rejects_mixed_shapes():
    run("CreateRebatchingQueue", [], ["rq"], capacity=2, num_blobs=1)
    workspace.FeedBlob("x", np.zeros((5, 3), np.float32))
    writer, errors = in_thread(lambda: run("EnqueueRebatchingQueue", ["rq", "x"], [], enqueue_batch=True))
    time.sleep(0.3)
    assert writer.is_alive()            # 5 elements through a queue of 2: waits for readers
    run("DequeueRebatchingQueue", ["rq"], ["b"], num_elements=5)
    writer.join(WAIT)
    assert not writer.is_alive() and not errors and workspace.FetchBlob("b").shape == (5, 3)
    workspace.FeedBlob("u", np.zeros(2, np.float32))
    workspace.FeedBlob("v", np.zeros(3, np.float32))
    run("EnqueueRebatchingQueue", ["rq", "u"], [])
    run("EnqueueRebatchingQueue", ["rq", "v"], [])
    with pytest.raises(OperatorError, match="component 0 of element 1"):
        run("DequeueRebatchingQueue", ["rq"], ["b"], num_elements=2)


def test_queue_db_reads_records_as_they_arrive(tmp_path):
    """CreateBlobsQueueDB: TensorProtosDBInput reads serialized TensorProtos a producer queues."""
    from caffe2py.proto import caffe2_pb2
    from caffe2py.utils import NumpyArrayToCaffe2Tensor
    run("CreateBlobsQueue", [], ["q"], capacity=2, num_blobs=2)
    run("CreateBlobsQueueDB", ["q"], ["reader"], key_blob_index=0, value_blob_index=1)
    items = [np.full(3, i, np.float32) for i in range(5)]

    def producer():
        for i, item in enumerate(items):
            protos = caffe2_pb2.TensorProtos()
            protos.protos.extend([NumpyArrayToCaffe2Tensor(item)])
            workspace.FeedBlob("k%d" % i, b"key%d" % i)
            workspace.FeedBlob("v%d" % i, protos.SerializeToString())
            run("EnqueueBlobs", ["q", "k%d" % i, "v%d" % i], ["k%d" % i, "v%d" % i])
        run("CloseBlobsQueue", ["q"], [])
    thread, errors = in_thread(producer)
    run("TensorProtosDBInput", ["reader"], ["batch"], batch_size=5)
    thread.join(WAIT)
    assert not errors
    np.testing.assert_array_equal(workspace.FetchBlob("batch"), np.stack(items))
    with pytest.raises(OperatorError, match="no records|closed"):
        run("TensorProtosDBInput", ["reader"], ["batch"])


def test_plan_with_concurrent_producer_and_consumer_substeps():
    """A Caffe2-style pipeline in one plan: the producer and consumer substeps run on their
    own threads; the consumer stops on SafeDequeueBlobs' status after the producer closes."""
    workspace.FeedBlob("one", np.ones(2, np.float32))
    workspace.FeedBlob("x", np.zeros(2, np.float32))
    workspace.FeedBlob("acc", np.zeros(2, np.float32))
    run("CreateBlobsQueue", [], ["q"], capacity=1, num_blobs=1)
    produce = core.Net("produce")
    produce.Add(["x", "one"], "x")
    produce.EnqueueBlobs(["q", "x"], ["x"])
    close = core.Net("close")
    close.CloseBlobsQueue(["q"], [])
    read = core.Net("read")
    read.SafeDequeueBlobs(["q"], ["got", "stop"])
    consume = core.Net("consume")
    consume.Add(["acc", "got"], "acc")
    workspace.FeedBlob("got", np.zeros(2, np.float32))
    producer = core.execution_step("producer", [core.execution_step("make", produce, num_iter=30),
                                                core.execution_step("close", close)])
    consumer = core.execution_step("consumer", [read, consume], should_stop_blob="stop")
    plan = core.Plan("pipeline")
    plan.AddStep(core.execution_step("both", [producer, consumer], concurrent_substeps=True))
    done, errors = in_thread(lambda: workspace.RunPlan(plan))
    done.join(WAIT)
    assert not done.is_alive() and not errors
    np.testing.assert_array_equal(workspace.FetchBlob("acc"), np.full(2, sum(range(1, 31)), np.float32))
