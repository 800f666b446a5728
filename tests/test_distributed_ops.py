"""The distributed ops: two local processes run every collective through
torch.distributed's gloo backend (engine GLOO) and the store ops; results are
compared with NumPy. Also: the ops have no default engine, store handler errors."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error



pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


@pytest.mark.slow      # two processes import torch (~30 s on the shared 2-core VM)
def test_two_processes_run_every_collective(tmp_path):
    import importlib.util
    if importlib.util.find_spec("torch") is None:      # the workers import it; this process need not
        pytest.skip("the GLOO engine needs torch")
    worker = Path(__file__).with_name("_distributed_worker.py")
    from caffe2py import child_processes
    # the workers end with this process (child_processes.protect_from_env in the worker)
    env = child_processes.child_env(dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1])]
                                                                              + sys.path), CAFFE2PY_NUM_THREADS="1"))
    procs = [subprocess.Popen([sys.executable, str(worker), str(rank), "2", str(tmp_path),
                               str(tmp_path / ("rank%d.npz" % rank))], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for rank in range(2)]
    try:
        for p in procs:
            out, _ = p.communicate(timeout=240)
            assert p.returncode == 0, out.decode(errors="replace")[-3000:]
    finally:
        child_processes.stop(procs, grace=5)
    r0, r1 = (np.load(tmp_path / ("rank%d.npz" % rank)) for rank in range(2))
    base = [np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * rank for rank in range(2)]
    for r in (r0, r1):
        np.testing.assert_array_equal(r["allreduce"], base[0] + base[1])
        np.testing.assert_array_equal(r["broadcast"], base[1])
        expect_gather = np.concatenate([np.concatenate([b.reshape(-1), -b[:1].reshape(-1)]) for b in base])
        np.testing.assert_array_equal(r["allgather"], expect_gather)
        np.testing.assert_array_equal(r["clone_allreduce"], np.full(3, 3, np.int32))
        assert int(r["store_add_total"][0]) == 3
        assert "destroyed" in str(r["destroyed_error"])
    np.testing.assert_array_equal(r0["reduce"], base[0] + base[1])
    np.testing.assert_array_equal(r1["reduce"], base[1])            # non-root keeps its input
    summed = 2 * np.arange(5, dtype=np.float32) + 1
    # 5 values over 2 ranks: rank 0 owns [0, 3), rank 1 owns [3, 5)
    np.testing.assert_array_equal(r0["reduce_scatter"][:3], summed[:3])
    np.testing.assert_array_equal(r1["reduce_scatter"][3:], summed[3:])
    np.testing.assert_array_equal(r1["received"], np.arange(12, dtype=np.int64).reshape(3, 4))
    assert r1["received_from"].tolist() == [0]
    np.testing.assert_array_equal(r0["store_get"], base[1] * 2)
    np.testing.assert_array_equal(r1["store_get"], base[0] * 2)


def test_collectives_need_an_engine_and_a_common_world(tmp_path):
    workspace.FeedBlob("x", np.ones(2, np.float32))
    workspace.FeedBlob("w", np.ones(1, np.float32))
    with pytest.raises(Caffe2Error, match="does not have a default engine.*GLOO"):
        workspace.RunOperatorOnce(core.CreateOperator("Allreduce", ["w", "x"], ["x"]))
    with pytest.raises(Caffe2Error, match="expected a common world"):
        workspace.RunOperatorOnce(core.CreateOperator("Allreduce", ["w", "x"], ["x"], engine="GLOO"))
    with pytest.raises(Caffe2Error, match="rank' 2 is outside"):
        workspace.RunOperatorOnce(core.CreateOperator("CreateCommonWorld", [], ["w"], size=2, rank=2,
                                                      engine="GLOO"))


def test_store_ops_in_one_process(tmp_path):
    workspace.RunOperatorOnce(core.CreateOperator("FileStoreHandlerCreate", [], ["store"], path=str(tmp_path),
                                                  prefix="job"))
    workspace.FeedBlob("t", np.arange(3, dtype=np.int32))
    workspace.RunOperatorOnce(core.CreateOperator("StoreSet", ["store", "t"], [], blob_name="key"))
    workspace.RunOperatorOnce(core.CreateOperator("StoreGet", ["store"], ["back"], blob_name="key"))
    np.testing.assert_array_equal(workspace.FetchBlob("back"), np.arange(3, dtype=np.int32))
    for expect in (5, 10):
        workspace.RunOperatorOnce(core.CreateOperator("StoreAdd", ["store"], ["n"], blob_name="c", add_value=5))
        assert workspace.FetchBlob("n").tolist() == [expect]
    from caffe2py import distributed
    handler = workspace.FetchBlob("store")
    with pytest.raises(distributed.StoreTimeout, match="missing"):
        handler.wait(["missing"], timeout=0.05)
