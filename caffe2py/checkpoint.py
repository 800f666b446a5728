"""Caffe2's caffe2.python.checkpoint: jobs that train epoch by epoch, saving and
restoring the workspace of each node at epoch boundaries.

A Job holds four TaskGroups: `init_group` (run once, on the global workspace:
parameters, readers), `epoch_group` (run again and again until one of the stop
conditions is true after an epoch), `download_group` (run once after the epochs)
and `exit_group` (run last). Inside `with Job():` new tasks join the epoch group.

    with Job() as job:
        with job.init_group, Task():
            ...                                   # model parameters, dataset
        reader = ReaderWithLimit(dataset.reader(), num_iter=100)
        pipe(reader, processor=train_step)
        job.add_stop_condition(reader.data_finished())
    JobRunner(job, MultiNodeCheckpointManager("/tmp/ckpt", "minidb")).train(LocalSession())

JobRunner.train runs the groups; with a checkpoint manager it saves every blob of
each node's workspace (the names GetAllBlobNames found right after the init
group) to `<db_prefix>/<node>.<epoch>` after the init group (epoch 0) and after
every epoch, and with resume_from_epoch it loads that checkpoint instead of
running the init group and continues from the next epoch. It returns the number
of the last epoch run.
"""
import logging
import os

from . import context, core
from .net_builder import ops
from .task import Node, Task, TaskGroup, TaskOutput, WorkspaceType, final_output

logger = logging.getLogger(__name__)


@context.define_context()
class Job:
    """See the module doc."""

    def __init__(self, init_group=None, epoch_group=None, download_group=None, exit_group=None,
                 stop_conditions=None, nodes_to_checkpoint=None):
        self.init_group = init_group or TaskGroup(workspace_type=WorkspaceType.GLOBAL)
        self.epoch_group = epoch_group or TaskGroup()
        self.download_group = download_group or TaskGroup()
        self.exit_group = exit_group or TaskGroup()
        self.stop_conditions = stop_conditions or []
        self._nodes_to_checkpoint = nodes_to_checkpoint

    def nodes_to_checkpoint(self):
        """The nodes whose workspaces are saved: given, else those of the init group."""
        return self._nodes_to_checkpoint or self.init_group.used_nodes()

    def compile(self, session_class):
        """Compile the four groups for session_class (then they can no longer change)."""
        self._nodes_to_checkpoint = self.nodes_to_checkpoint()
        self.init_group = session_class.compile(self.init_group)
        self.epoch_group = session_class.compile(self.epoch_group)
        self.download_group = session_class.compile(self.download_group)
        self.exit_group = session_class.compile(self.exit_group)

    def __enter__(self):
        self.epoch_group.__enter__()
        return self

    def __exit__(self, *args):
        self.epoch_group.__exit__(*args)

    def add_stop_condition(self, output):
        """Stop after an epoch at whose end this (a TaskOutput, or a bool blob of
        the epoch group) is true."""
        if isinstance(output, core.BlobReference):
            output = Task(outputs=[output], group=self.epoch_group).outputs()[0]
        assert isinstance(output, TaskOutput), "a stop condition is a blob or a TaskOutput"
        self.stop_conditions.append(output)


def get_ckpt_filename(node_name, epoch):
    """'<node>.<epoch>'."""
    return node_name + "." + str(epoch)


def db_name(epoch, node_name, db_prefix, path_prefix=None):
    """Where a node's checkpoint of an epoch is saved: path_prefix + file name when
    a path prefix is given, else the file name in the db_prefix folder."""
    if path_prefix:
        return path_prefix + get_ckpt_filename(node_name, epoch)
    return os.path.join(db_prefix, get_ckpt_filename(node_name, epoch))


class CheckpointManager:
    """Saves and loads the workspace of one node at epoch boundaries. init(),
    load(epoch), save(epoch) build the Tasks JobRunner runs; metadata_handler
    (optional) records which epochs were saved and where to resume."""

    def __init__(self, db_prefix, node_name, db_type, metadata_handler=None):
        self._db_prefix = db_prefix
        self._node_name = node_name
        self._db_type = db_type
        self._metadata_handler = metadata_handler
        # this blob is saved first in every checkpoint: the names of the others
        self._net = core.Net("!!checkpoint_mngr")
        self._blob_names = self._net.AddExternalInput("blob_names")
        self._names_output = None
        self._path_prefix = None
        self._path_type = None
        self._current_db_name = None
        self._current_checkpoint_duration = None

    def init(self, nodes=None, retrieve_from_epoch=None, path_prefix=None, path_type=None):
        """A Task finding the blobs to checkpoint: every blob of the workspace (run
        it after the init group), or the list saved in the checkpoint of
        retrieve_from_epoch."""
        assert nodes is None or len(nodes) == 1, "CheckpointManager only supports single node."
        with Task(outputs=[self._blob_names]) as task:
            if retrieve_from_epoch is None:
                ops.GetAllBlobNames([], self._blob_names, include_shared=False)
            else:
                full_db_name = db_name(retrieve_from_epoch, self._node_name, self._db_prefix, path_prefix)
                logger.info("Initializing checkpoints from = %s", full_db_name)
                ops.Load([], self._blob_names, db=full_db_name, db_type=path_type or self._db_type,
                         absolute_path=True, keep_device=True)
        self._names_output = task.outputs()[0]
        return task

    def blob_list(self):
        assert self._names_output, "init must run first"
        return self._names_output.fetch().tolist()

    def _timed_task(self, cp_op_name, add_op):
        """A Task running add_op's ops, timed: the time is collect_checkpoint_stats's."""
        with Task(name=cp_op_name) as task:
            with ops.task_init():
                timer = ops.TimerBegin([], counter_name=self._node_name)
            add_op()
            with ops.task_exit():
                time_span = ops.TimerGetAndEnd(timer)
            self._current_checkpoint_duration = final_output(time_span)
        return task

    def collect_checkpoint_stats(self, stats):
        if self._current_db_name and self._current_checkpoint_duration:
            stats[self._current_db_name] = self._current_checkpoint_duration.fetch()[0]
        else:
            logger.info("Failed to collect checkpoint stats: %s", self._current_db_name)

    def load(self, epoch, path_prefix=None, path_type=None):
        """A Task loading every checkpointed blob from the checkpoint of `epoch`."""
        self._current_db_name = db_name(epoch, self._node_name, self._db_prefix, path_prefix)
        db_type = path_type or self._db_type
        logger.info("Loading checkpoints from = %s", self._current_db_name)

        def add_op():
            ops.Load([], self.blob_list(), db=self._current_db_name, db_type=db_type, absolute_path=True,
                     keep_device=True)

        return self._timed_task("checkpoint_load", add_op)

    def load_blobs_from_checkpoint(self, blob_names, epoch):
        """A Task loading only blob_names from the checkpoint of `epoch`."""
        self._current_db_name = db_name(epoch, self._node_name, self._db_prefix)
        logger.info("Load from %s", self._current_db_name)

        def add_op():
            ops.Load([], blob_names, db=self._current_db_name, db_type=self._db_type, absolute_path=True,
                     allow_incomplete=True)

        return self._timed_task("checkpoint_partial_load", add_op)

    def check_db_exists(self, epoch):
        """A Task whose output says whether the checkpoint of `epoch` exists."""
        name = db_name(epoch, self._node_name, self._db_prefix)
        logger.info("Check existence of %s", name)
        with Task() as task:
            existence = ops.Const(False)
            ops.DBExists([], [existence], db_name=name, db_type=self._db_type, absolute_path=True)
            task.add_output(existence)
        return task

    def report_checkpoint_stats(self, action_name):
        stats = {}
        self.collect_checkpoint_stats(stats)
        if self._metadata_handler:
            self._metadata_handler.report(action_name, stats)

    def save(self, epoch):
        """A Task saving every checkpointed blob as the checkpoint of `epoch`."""
        self._current_db_name = db_name(epoch, self._node_name, self._db_prefix)
        logger.info("Saving to %s", self._current_db_name)

        def add_op():
            ops.Save(self.blob_list(), [], db=self._current_db_name, db_type=self._db_type, absolute_path=True)

        return self._timed_task("checkpoint_save", add_op)

    def write_checkpoint_metadata(self, epoch):
        if self._metadata_handler is not None:
            self._metadata_handler.write(epoch=epoch)

    def get_resume_from_epoch_id(self, user_epoch=None):
        """The epoch to resume from: the metadata handler's answer, else user_epoch."""
        if self._metadata_handler is not None:
            return self._metadata_handler.last_epoch(user_epoch=user_epoch)
        return user_epoch

    def set_params(self, nodes, path_prefix=None, path_type=None):
        if path_prefix:
            self._path_prefix = path_prefix
        if path_type:
            self._path_type = path_type
        if self._metadata_handler:
            self._metadata_handler.set_params(db_prefix=self._db_prefix, db_type=self._db_type,
                                              node_names=[str(self._node_name)], path_prefix=self._path_prefix,
                                              path_type=self._path_type)

    def cp_accessible(self, epoch=None):
        if self._metadata_handler is not None:
            return self._metadata_handler.cp_accessible(epoch)
        return True


class MultiNodeCheckpointManager:
    """One CheckpointManager per node: init/load/save build TaskGroups with one
    task on each node."""

    def __init__(self, db_prefix, db_type, metadata_handler=None):
        self._node_managers = None
        self._db_prefix = db_prefix
        self._db_type = db_type
        self._metadata_handler = metadata_handler
        self._path_prefix = None
        self._path_type = None
        self._node_names = None

    def _task_group(self, func, *args, **kwargs):
        assert self._node_managers is not None, "init must be called first."
        with TaskGroup(WorkspaceType.GLOBAL) as task_group:
            for node, manager in self._node_managers:
                with Node(node):
                    func(manager, *args, **kwargs)
            return task_group

    def _make_node_managers(self, nodes):
        self._node_managers = []
        for node in nodes:
            with Node(node):
                manager = CheckpointManager(db_prefix=self._db_prefix, node_name=str(node), db_type=self._db_type)
                self._node_managers.append((node, manager))

    def init(self, nodes, retrieve_from_epoch=None, path_prefix=None, path_type=None):
        if self._node_managers is not None:
            # a reused manager: its node managers already know their blobs
            assert [node for node, _ in self._node_managers] == nodes, "init with other nodes than before"
            return TaskGroup(WorkspaceType.GLOBAL)
        self._make_node_managers(nodes)
        return self._task_group(CheckpointManager.init, nodes=[nodes[0]] if nodes else None,
                                retrieve_from_epoch=retrieve_from_epoch, path_prefix=path_prefix,
                                path_type=path_type)

    def load(self, epoch, path_prefix=None, path_type=None):
        return self._task_group(CheckpointManager.load, epoch, path_prefix=path_prefix, path_type=path_type)

    def load_blobs_locally(self, nodes, blob_names, epoch, session):
        """Load blob_names from every node's checkpoint of `epoch` into the current
        workspace; False (loading nothing more) at the first checkpoint missing."""
        if self._node_managers is not None:
            assert [node for node, _ in self._node_managers] == nodes, "other nodes than before"
        else:
            self._make_node_managers(nodes)
        for _, manager in self._node_managers:
            existence_task = manager.check_db_exists(epoch)
            session.run(existence_task)
            if not existence_task.outputs()[0].fetch():
                logger.info("DB %s does not exist!", db_name(epoch, manager._node_name, manager._db_prefix))
                return False
            session.run(manager.load_blobs_from_checkpoint(blob_names, epoch))
        logger.info("Successfully loaded from checkpoints.")
        return True

    def get_ckpt_db_name(self, node_name, epoch):
        """The checkpoint path of node_name's checkpoint of `epoch`."""
        for node, manager in self._node_managers:
            if str(node) == node_name:
                return db_name(epoch, manager._node_name, manager._db_prefix)
        return None

    def report_checkpoint_stats(self, action_name):
        stats = {}
        for _, manager in self._node_managers:
            manager.collect_checkpoint_stats(stats)
        logger.debug("checkpoint stats: %s", stats)
        if self._metadata_handler:
            self._metadata_handler.report(action_name, stats)

    def save(self, epoch):
        return self._task_group(CheckpointManager.save, epoch)

    def write_checkpoint_metadata(self, epoch):
        if self._metadata_handler is not None:
            self._metadata_handler.write(epoch=epoch)

    def get_resume_from_epoch_id(self, user_epoch=None):
        if self._metadata_handler is not None:
            return self._metadata_handler.last_epoch(user_epoch=user_epoch)
        return user_epoch

    def set_params(self, nodes, path_prefix=None, path_type=None):
        self._node_names = [str(node) for node in nodes]
        if path_prefix:
            self._path_prefix = path_prefix
        if path_type:
            self._path_type = path_type
        if self._metadata_handler:
            self._metadata_handler.set_params(db_prefix=self._db_prefix, db_type=self._db_type,
                                              node_names=self._node_names, path_prefix=self._path_prefix,
                                              path_type=self._path_type)

    def cp_accessible(self, epoch=None):
        if self._metadata_handler is not None:
            return self._metadata_handler.cp_accessible(epoch)
        return True


class UploadTaskGroupBuilder:
    """Builds the TaskGroup that uploads the checkpoints after training: subclass
    and implement build(epoch, checkpoint_manager)."""

    def build(self, epoch, checkpoint_manager):
        raise NotImplementedError()


class JobRunner:
    """Runs a Job with a Session (see the module doc)."""

    def __init__(self, job, checkpoint_manager=None, resume_from_epoch=None, upload_task_group_builder=None):
        self.resume_from_epoch = resume_from_epoch
        self.checkpoint_manager = checkpoint_manager
        self.job = job
        self.upload_task_group_builder = upload_task_group_builder

    def train(self, session):
        """Run the job; returns the last epoch run."""
        manager = self.checkpoint_manager
        if manager:
            manager.set_params(nodes=self.job.nodes_to_checkpoint())
            self.resume_from_epoch = manager.get_resume_from_epoch_id(self.resume_from_epoch)
            if self.resume_from_epoch is not None:
                logger.info("Resuming from epoch %s", self.resume_from_epoch)

        from_scratch = self.resume_from_epoch is None
        if from_scratch:
            session.run(self.job.init_group)
        if manager:
            logger.info("Preparing checkpoints ...")
            session.run(manager.init(self.job.nodes_to_checkpoint(), retrieve_from_epoch=self.resume_from_epoch))
            if from_scratch:
                self.save_checkpoints(0, session)
            else:
                logger.info("Loading checkpoints for epoch %s ...", self.resume_from_epoch)
                session.run(manager.load(self.resume_from_epoch))
                manager.report_checkpoint_stats("checkpoint_load")
                logger.info("Checkpoint loaded")
        logger.info("Finished initializing")

        epoch = 1 if from_scratch else self.resume_from_epoch + 1
        while True:
            logger.info("Starting epoch %d", epoch)
            session.run(self.job.epoch_group)
            logger.info("Finished epoch %d", epoch)
            stop_conditions = [o.fetch() for o in self.job.stop_conditions]
            if manager:
                self.save_checkpoints(epoch, session)
            if any(stop_conditions):
                logger.info("Stopping")
                break
            epoch += 1
        logger.info("Finished training")
        if self.upload_task_group_builder:
            session.run(self.upload_task_group_builder.build(epoch, manager))
            logger.info("Finished uploading the checkpoints")
        session.run(self.job.download_group)
        logger.info("Finished downloading the parameters")
        session.run(self.job.exit_group)
        logger.info("Finished running the exit group")
        return epoch

    def load_blobs_from_checkpoints(self, blob_names, epoch, session):
        """Load blob_names from the checkpoints of `epoch` of every node."""
        if not self.checkpoint_manager:
            raise ValueError("Checkpoint manager is None")
        logger.info("Loading checkpoint for epoch %s ...", epoch)
        result = self.checkpoint_manager.load_blobs_locally(self.job.nodes_to_checkpoint(), blob_names, epoch, session)
        self.checkpoint_manager.report_checkpoint_stats("checkpoint_partial_load")
        return result

    def save_checkpoints(self, epoch, session):
        """Save the checkpoints of `epoch`. As in Caffe2, a failure to save is
        logged as a warning and training goes on."""
        if not self.checkpoint_manager:
            raise ValueError("Checkpoint manager is None")
        try:
            if self.checkpoint_manager.cp_accessible(epoch=None):
                logger.info("Saving checkpoints for epoch %s", epoch)
                session.run(self.checkpoint_manager.save(epoch))
                self.checkpoint_manager.write_checkpoint_metadata(epoch)
                logger.info("Checkpoints saved")
                self.checkpoint_manager.report_checkpoint_stats("checkpoint_save")
            else:
                logger.warning("Checkpoint files cannot be accessed!")
        except Exception as ex:  # noqa: BLE001 - Caffe2 keeps training when a checkpoint fails
            logger.warning("Unable to write checkpoint for epoch %s. Error=%s", epoch, ex)


def epoch_limiter(job, num_epochs):
    """Stop `job` after num_epochs epochs (a counter counted down every epoch)."""
    with job.init_group:
        init_net = core.Net("epoch_counter_init")
        counter = init_net.CreateCounter([], init_count=num_epochs - 1)
        Task(step=init_net)
    with job.epoch_group:
        epoch_net = core.Net("epoch_countdown")
        finished = epoch_net.CountDown(counter)
        output = Task(step=epoch_net, outputs=finished).outputs()[0]
    job.add_stop_condition(output)
