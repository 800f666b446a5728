"""caffe2py.parallel_workers (Caffe2's caffe2.python.parallel_workers): worker
threads feeding a queue, init and shutdown functions, stopping on errors."""
import threading
import time

import numpy as np
import pytest

from caffe2py import core, parallel_workers, workspace


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    yield
    parallel_workers.global_coordinator.stop()
    workspace.ResetWorkspace()


def _queue():
    workspace.RunOperatorOnce(core.CreateOperator("CreateBlobsQueue", [], ["queue"], num_blobs=1, capacity=100))


def _enqueuer(make_value):
    def worker(worker_id):
        ws = workspace.current_workspace()
        blob = "blob_%d" % worker_id
        ws.feed_blob(blob, make_value(worker_id))
        ws.run_operator_once(core.CreateOperator("SafeEnqueueBlobs", ["queue", blob],
                                                 [blob, "status_%d" % worker_id]))
    return worker


def _dequeue():
    workspace.RunOperatorOnce(core.CreateOperator("SafeDequeueBlobs", ["queue"], ["out", "status"]))
    return int(workspace.FetchBlob("out")[0])


def test_workers_run_until_stopped_with_their_own_ids():
    _queue()
    coordinator = parallel_workers.init_workers(_enqueuer(lambda wid: np.array([wid], np.int64)),
                                                num_worker_threads=3)
    ids = coordinator._coordinators[-1].get_worker_ids()
    assert len(ids) == 3 and len(set(ids)) == 3
    coordinator.start()
    # one thread may fill the queue before the others are scheduled: read until
    # every worker has been seen (or a generous deadline passes)
    seen, deadline = set(), time.monotonic() + 30
    while seen != set(ids) and time.monotonic() < deadline:
        seen.add(_dequeue())
    assert seen == set(ids)
    workspace.RunOperatorOnce(core.CreateOperator("CloseBlobsQueue", ["queue"], []))   # unblock writers
    assert coordinator.stop()


def test_init_runs_before_the_threads_and_shutdown_at_stop():
    _queue()
    order = []

    def init_fun(worker_coordinator, global_coordinator):
        order.append("init")
        assert global_coordinator is parallel_workers.global_coordinator
        workspace.FeedBlob("base", np.array([100], np.int64))

    def worker(worker_id):
        if len(order) < 2:
            order.append("work")
        _enqueuer(lambda wid: workspace.FetchBlob("base") + wid)(worker_id)

    coordinator = parallel_workers.init_workers(worker, num_worker_threads=1, init_fun=init_fun,
                                                shutdown_fun=lambda: order.append("shutdown"))
    coordinator.start()
    assert _dequeue() >= 100
    workspace.RunOperatorOnce(core.CreateOperator("CloseBlobsQueue", ["queue"], []))
    assert coordinator.stop()
    assert order[0] == "init" and order[1] == "work" and order[-1] == "shutdown"


def test_an_exception_stops_the_coordinator_and_metrics_reach_loggers():
    calls, logged = [], []

    class Logger:
        def log(self, metrics):
            logged.append(dict(metrics))

    def failing(worker_id):
        calls.append(worker_id)
        raise ValueError("broken worker")

    coordinator = parallel_workers.init_workers(failing, num_worker_threads=1, external_loggers=[Logger()])
    coordinator.start()
    deadline = time.time() + 10
    while coordinator._coordinators[-1].is_active() and time.time() < deadline:
        time.sleep(0.01)
    assert not coordinator._coordinators[-1].is_active()
    assert coordinator.stop()
    assert len(calls) == 1
    assert logged and logged[-1]["worker_time_count"] == 1


def test_stop_coordinator_stops_only_that_one():
    stop = threading.Event()
    a = parallel_workers.init_workers(lambda wid: stop.wait(0.01), num_worker_threads=1, worker_name="a")
    parallel_workers.init_workers(lambda wid: stop.wait(0.01), num_worker_threads=1, worker_name="b")
    a.start()
    a.stop_coordinator("a")
    assert [c._worker_name for c in a._coordinators] == ["b"]
    stop.set()
    assert a.stop()
