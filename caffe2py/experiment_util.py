"""Caffe2's caffe2.python.experiment_util: a CSV log of a training run.

    log = ModelTrainerLog("resnet", args)          # writes <resnet_YYYYmmdd_HHMMSS>.log
    log.log(input_count=12800, batch_count=100, additional_values={"loss": 0.42})

The file starts with `# <runtime args>`; the first log() writes the header line.
Each row holds time_spent, cumulative_time_spent, input_count (since the last
row), cumulative_input_count, cumulative_batch_count, inputs_per_sec and the
additional values in key order. ExternalLoggers (set_runtime_args once, then
log(dict) per row) receive the same values, plus experiment_id and hostname in
the runtime args; a logger that fails is reported and skipped.
"""
import abc
import datetime
import logging
import socket
import time
from collections import OrderedDict


class ExternalLogger(abc.ABC):

    @abc.abstractmethod
    def set_runtime_args(self, runtime_args):
        """Receive the run's arguments (a dict) once."""
        raise NotImplementedError("Must define set_runtime_args function to use this base class")

    @abc.abstractmethod
    def log(self, log_dict):
        """Receive one row of values."""
        raise NotImplementedError("Must define log function to use this base class")


class ModelTrainerLog:

    def __init__(self, expname, runtime_args, external_loggers=None):
        now = datetime.datetime.fromtimestamp(time.time())
        self.experiment_id = "{}_{}".format(expname, now.strftime("%Y%m%d_%H%M%S"))
        self.filename = "{}.log".format(self.experiment_id)
        self.logstr("# %s" % str(runtime_args))
        self.headers = None
        self.start_time = time.time()
        self.last_time = self.start_time
        self.last_input_count = 0
        self.external_loggers = list(external_loggers or [])
        if self.external_loggers:
            args = dict(runtime_args) if isinstance(runtime_args, dict) else dict(vars(runtime_args))
            args["experiment_id"] = self.experiment_id
            args["hostname"] = socket.gethostname()
            for logger in self.external_loggers:
                logger.set_runtime_args(args)

    def logstr(self, text):
        with open(self.filename, "a") as f:
            f.write(text + "\n")
        logging.getLogger("experiment_logger").info(text)

    def log(self, input_count, batch_count, additional_values):
        now = time.time()
        elapsed = now - self.last_time
        new_inputs = input_count - self.last_input_count
        self.last_time, self.last_input_count = now, input_count
        row = OrderedDict()
        row["time_spent"] = elapsed
        row["cumulative_time_spent"] = now - self.start_time
        row["input_count"] = new_inputs
        row["cumulative_input_count"] = input_count
        row["cumulative_batch_count"] = batch_count
        row["inputs_per_sec"] = new_inputs / elapsed if elapsed > 0 else 0.0
        for key in sorted(additional_values):
            row[key] = additional_values[key]
        if self.headers is None:
            self.headers = list(row)
            self.logstr(",".join(self.headers))
        self.logstr(",".join(str(v) for v in row.values()))
        for logger in self.external_loggers:
            try:
                logger.log(row)
            except Exception as exc:  # noqa: BLE001 - one broken logger must not stop training
                logging.warning("Failed to call ExternalLogger: %s", exc)
