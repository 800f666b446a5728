"""One rank of the two-process test of the distributed ops (test_distributed_ops.py).
Usage: python _distributed_worker.py RANK SIZE STORE_DIR OUT.npz"""
import sys

import numpy as np

from caffe2py import child_processes, core, workspace


def main(rank, size, store_dir, out_path):
    child_processes.protect_from_env()     # a killed test run leaves no rank behind
    def op(op_type, inputs, outputs, **kwargs):
        workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, engine="GLOO", **kwargs))

    workspace.RunOperatorOnce(core.CreateOperator("FileStoreHandlerCreate", [], ["store"], path=store_dir))
    op("CreateCommonWorld", ["store"], ["world"], size=size, rank=rank, interface="lo", timeout_ms=60000)
    base = np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * rank
    results = {}
    workspace.FeedBlob("x", base)
    op("Allreduce", ["world", "x"], ["x"])
    results["allreduce"] = workspace.FetchBlob("x")
    workspace.FeedBlob("b", base)
    op("Broadcast", ["world", "b"], ["b"], root=1)
    results["broadcast"] = workspace.FetchBlob("b")
    workspace.FeedBlob("r", base)
    op("Reduce", ["world", "r"], ["r_out"], root=0)
    results["reduce"] = workspace.FetchBlob("r_out")
    workspace.FeedBlob("g", base)
    workspace.FeedBlob("g2", base[:1] * -1)
    op("Allgather", ["world", "g", "g2"], ["gathered"])
    results["allgather"] = workspace.FetchBlob("gathered")
    workspace.FeedBlob("rs", np.arange(5, dtype=np.float32) + rank)
    op("ReduceScatter", ["world", "rs"], ["rs"])
    results["reduce_scatter"] = workspace.FetchBlob("rs")
    op("Barrier", ["world"], [])
    if rank == 0:
        workspace.FeedBlob("msg", np.arange(12, dtype=np.int64).reshape(3, 4))
        op("SendTensor", ["world", "msg"], [], dst=1, tag=7)
    else:
        workspace.FeedBlob("inbox", np.zeros(1, np.float32))
        op("ReceiveTensor", ["world", "inbox"], ["inbox", "src", "tag"], src=0, tag=7)
        results["received"] = workspace.FetchBlob("inbox")
        results["received_from"] = workspace.FetchBlob("src")
    op("CloneCommonWorld", ["world"], ["world2"])
    workspace.FeedBlob("y", np.full(3, rank + 1, np.int32))
    op("Allreduce", ["world2", "y"], ["y"])
    results["clone_allreduce"] = workspace.FetchBlob("y")
    # The store ops, between the two processes.
    workspace.FeedBlob("value_from_%d" % rank, base * 2)
    workspace.RunOperatorOnce(core.CreateOperator("StoreSet", ["store", "value_from_%d" % rank], []))
    other = "value_from_%d" % (1 - rank)
    workspace.RunOperatorOnce(core.CreateOperator("StoreWait", ["store"], [], blob_names=[other]))
    workspace.RunOperatorOnce(core.CreateOperator("StoreGet", ["store"], [other]))
    results["store_get"] = workspace.FetchBlob(other)
    workspace.RunOperatorOnce(core.CreateOperator("StoreAdd", ["store"], ["count"], blob_name="hits",
                                                  add_value=rank + 1))
    op("Barrier", ["world"], [])
    workspace.RunOperatorOnce(core.CreateOperator("StoreAdd", ["store"], ["count"], blob_name="hits",
                                                  add_value=0))
    results["store_add_total"] = workspace.FetchBlob("count")
    op("DestroyCommonWorld", ["world"], ["world"])
    try:
        op("Barrier", ["world"], [])
        results["destroyed_error"] = np.array("")
    except Exception as exc:  # noqa: BLE001
        results["destroyed_error"] = np.array(str(exc))
    np.savez(out_path, **results)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
