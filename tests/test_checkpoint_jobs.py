"""caffe2py.checkpoint and caffe2py.net_printer (Caffe2's modules of those names):
jobs run epoch by epoch with checkpoints saved, resumed and reloaded; the
printed and analyzed form of a job. Expected totals are computed in Python."""
import os

import numpy as np
import pytest

from caffe2py import core, net_printer, schema, workspace
from caffe2py.checkpoint import (CheckpointManager, Job, JobRunner, MultiNodeCheckpointManager,
                                 UploadTaskGroupBuilder, db_name, epoch_limiter)
from caffe2py.dataio import ReaderWithLimit
from caffe2py.dataset import Dataset
from caffe2py.net_builder import ops
from caffe2py.pipeline import pipe
from caffe2py.session import LocalSession
from caffe2py.task import Cluster, Node, Task, TaskGroup, WorkspaceType, final_output

VALUES = [5, 1, 4, 2, 8, 3, 7]
PER_EPOCH = 2


def _expected_totals(start=10):
    totals, total = [], start
    for i in range(0, len(VALUES), PER_EPOCH):
        total += sum(VALUES[i:i + PER_EPOCH])
        totals.append(total)
    return totals


def _build(node="trainer"):
    """A job summing VALUES into `total`, PER_EPOCH values per epoch."""
    with Node(node):
        with Job.current().init_group, Task():
            data = schema.ConstRecord(ops, schema.Struct(("val", np.array(VALUES, dtype=np.int64))))
            reader = Dataset(data, name="values").reader(ops)
            total = ops.Const(np.array([10], dtype=np.int64))

        def add_to_total(rec):
            ops.Add([total, rec.val()], [total])

        limited = ReaderWithLimit(reader, num_iter=PER_EPOCH)
        pipe(limited, processor=add_to_total)
        Job.current().add_stop_condition(limited.data_finished())
    return total


def _fetcher(total):
    fetch = Task(step=core.Net("fetch_total"), outputs=[total])

    def value(session):
        session.run(fetch)
        return int(fetch.outputs()[0].fetch()[0])
    return value


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def test_job_runs_epochs_saves_resumes_and_loads(tmp_path):
    expected = _expected_totals()
    with Cluster():
        with Job() as job:
            total = _build()
        fetch_total = _fetcher(total)
        job.compile(LocalSession)

        session = LocalSession(workspace.Workspace("run"))
        manager = MultiNodeCheckpointManager(str(tmp_path), "minidb")
        assert JobRunner(job, manager).train(session) == len(expected)
        assert fetch_total(session) == expected[-1]
        for epoch in range(len(expected) + 1):
            assert os.path.exists(db_name(epoch, "trainer", str(tmp_path)))
        assert manager.get_ckpt_db_name("trainer", 3) == os.path.join(str(tmp_path), "trainer.3")

        # resuming after any epoch ends where the whole run ended
        for resume in range(1, len(expected) + 1):
            session = LocalSession(workspace.Workspace("resume_%d" % resume))
            manager = MultiNodeCheckpointManager(str(tmp_path), "minidb")
            JobRunner(job, manager, resume_from_epoch=resume).train(session)
            assert fetch_total(session) == expected[-1]

        # each epoch's checkpoint holds that epoch's total
        for epoch in range(1, len(expected) + 1):
            session.run(manager.load(epoch))
            assert fetch_total(session) == expected[epoch - 1]


def test_single_node_manager_and_partial_loads(tmp_path):
    expected = _expected_totals()
    with Cluster():
        with Job() as job:
            total = _build(node="solo")
        job.compile(LocalSession)
        session = LocalSession(workspace.Workspace("solo_run"))
        JobRunner(job, CheckpointManager(str(tmp_path), "solo", "minidb")).train(session)

        target = workspace.Workspace("loaded")
        runner = JobRunner(job, MultiNodeCheckpointManager(str(tmp_path), "minidb"))
        load_session = LocalSession(target)
        for epoch in range(1, len(expected) + 1):
            assert runner.load_blobs_from_checkpoints([str(total)], epoch, load_session)
            assert target.fetch_blob(str(total)).tolist() == [expected[epoch - 1]]
        assert not runner.load_blobs_from_checkpoints([str(total)], len(expected) + 1, load_session)


def test_epoch_limiter_download_and_exit_groups_and_upload():
    ws = workspace.Workspace("limited")
    with Cluster():
        with Job() as job:
            with job.init_group, Task():
                count = ops.Const(np.array([0], dtype=np.int64))
            with Task():
                ops.Add([count, ops.Const(np.array([1], dtype=np.int64))], [count])
            # these groups are private: what they report comes back as outputs
            with job.download_group, Task():
                downloaded = final_output(ops.Copy(count))
            with job.exit_group, Task():
                exited = final_output(ops.Copy(count))
            epoch_limiter(job, 3)
        uploads = []

        class RecordUpload(UploadTaskGroupBuilder):
            def build(self, epoch, checkpoint_manager):
                uploads.append((epoch, checkpoint_manager))
                return TaskGroup(WorkspaceType.GLOBAL)

        assert JobRunner(job, upload_task_group_builder=RecordUpload()).train(LocalSession(ws)) == 3
    assert uploads == [(3, None)]
    assert downloaded.fetch().tolist() == [3] and exited.fetch().tolist() == [3]


def test_db_name_uses_the_path_prefix_when_given():
    assert db_name(4, "node", "/ckpt") == os.path.join("/ckpt", "node.4")
    assert db_name(4, "node", "/ckpt", path_prefix="hdfs://x/") == "hdfs://x/node.4"


def test_a_failed_save_is_logged_and_training_goes_on(tmp_path, caplog):
    with Cluster():
        with Job() as job:
            _build(node="failing")
        blocked = tmp_path / "not_a_dir"
        blocked.write_text("a file where the checkpoint folder should be")
        epochs = JobRunner(job, MultiNodeCheckpointManager(str(blocked), "minidb")).train(
            LocalSession(workspace.Workspace("fail")))
    assert epochs == len(_expected_totals())
    assert "Unable to write checkpoint" in caplog.text


def _loop_job():
    with Job() as job:
        with job.init_group, Task():
            total = ops.Const(0)
            with ops.loop(3):
                ops.Add([total, ops.Const(1)], [total])
        with Task():
            ops.Add([total, total], "twice")
    return job


def test_net_printer_renders_ops_steps_and_tasks():
    text = net_printer.to_string(_loop_job())
    assert text.startswith("with Job.current().init_group:")
    assert "with Job.current().epoch_group:" in text
    assert "with loop():" in text and "yield stop_if(" in text
    assert "twice = Add(" in text
    net = core.Net("printed")
    net.Scale("x", "y", scale=2.0)
    assert net_printer.to_string(net).splitlines() == ["# net: printed", "y = Scale(x, scale=2.0)"]


def test_net_printer_analysis_finds_undefined_and_doubly_defined_blobs():
    net_printer.analyze(_loop_job())
    job = _loop_job()
    with job, Task():
        ops.Add(["nowhere_a", "nowhere_b"])
    with pytest.raises(AssertionError, match="Blob undefined: nowhere_a"):
        net_printer.analyze(job)
    job = _loop_job()
    with job:
        with Task():
            ops.Copy(ops.Const(1), "clash")
        with Task():
            ops.Copy(ops.Const(2), "clash")
    with pytest.raises(AssertionError, match="multiple parallel steps: .*clash"):
        net_printer.analyze(job)


def test_debug_net_logs_each_op_before_it():
    net = core.Net("to_debug")
    net.Scale("x", "y", scale=3.0)
    logged = net_printer.debug_net(net)
    types = [op.type for op in logged.Proto().op]
    assert types[-1] == "Scale" and "Print" in types
