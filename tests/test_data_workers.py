"""caffe2py.data_workers (Caffe2's caffe2.python.data_workers): fetcher threads
feeding a net batches of exactly batch_size through Caffe2 queues."""
import time

import numpy as np
import pytest

from caffe2py import data_workers, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.model_helper import ModelHelper


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    yield
    data_workers.global_coordinator.stop()
    workspace.ResetWorkspace()


def _fetcher(fetcher_id, batch_size):
    """Chunks of 1..9 rows; each row's values all equal its label (so batches can be checked)."""
    rng = np.random.default_rng()
    n = int(rng.integers(1, 10))
    labels = rng.integers(0, 1000, n).astype(np.float32)
    return [np.repeat(labels[:, None], 3, axis=1), labels]


def test_every_run_gets_one_full_consistent_batch():
    model = ModelHelper(name="fed")
    before = data_workers.global_coordinator._fetcher_id_seq
    coordinator = data_workers.init_data_input_workers(model, ["data", "label"], _fetcher, 16, 3,
                                                       input_source_name="fed_train")
    assert data_workers.global_coordinator._fetcher_id_seq == before + 3
    dequeues = [op for op in model.net.Proto().op if op.type == "DequeueBlobs"]
    assert [list(op.output) for op in dequeues] == [["data"], ["label"]]
    coordinator.start()
    workspace.CreateNet(model.net)
    for _ in range(20):
        workspace.RunNet(model.net.Name())
        data, label = workspace.FetchBlob("data"), workspace.FetchBlob("label")
        assert data.shape == (16, 3) and label.shape == (16,)
        np.testing.assert_array_equal(data, np.repeat(label[:, None], 3, axis=1))
    assert coordinator.stop()


def test_without_rebatching_chunks_pass_as_fetched_and_stop_unblocks_the_net():
    sizes = iter(range(1, 1000))

    def sized(fetcher_id, batch_size):
        n = next(sizes) % 5 + 1
        return [np.full((n, 2), float(n), np.float32)]

    model = ModelHelper(name="direct")
    coordinator = data_workers.init_data_input_workers(model, ["chunk"], sized, 100, 1, dont_rebatch=True,
                                                       input_source_name="direct_src", timeout=5)
    coordinator.start()
    workspace.CreateNet(model.net)
    for _ in range(5):
        workspace.RunNet(model.net.Name())
        chunk = workspace.FetchBlob("chunk")
        assert 1 <= chunk.shape[0] <= 5 and np.all(chunk == chunk.shape[0])
    assert coordinator.stop()
    # the queues are closed: once the batches already queued are used up, a net
    # waiting for data fails instead of hanging
    with pytest.raises(Caffe2Error):
        for _ in range(data_workers.C2_QUEUE_CAPACITY + 2):
            workspace.RunNet(model.net.Name())


def test_mismatched_sample_counts_stop_the_input():
    def bad(fetcher_id, batch_size):
        return [np.zeros((3, 2), np.float32), np.zeros(2, np.float32)]

    model = ModelHelper(name="bad_input")
    coordinator = data_workers.init_data_input_workers(model, ["a", "b"], bad, 4, 1, input_source_name="bad_src")
    coordinator.start()
    deadline = time.time() + 10
    while coordinator._coordinators[-1].is_active() and time.time() < deadline:
        time.sleep(0.01)
    assert not coordinator._coordinators[-1].is_active()
