"""caffe2.python.experiment_util: ModelTrainerLog, the CSV training log the example
trainers write (`<experiment>_<YYYYmmdd_HHMMSS>.log` in the working folder): a comment
line with the run's arguments, a header line, then one row per log() call with the
time and input counts since the previous call and the values the trainer passes."""
import datetime
import logging
import time
from collections import OrderedDict

log = logging.getLogger("experiment_logger")


class ModelTrainerLog:
    def __init__(self, expname, runtime_args, external_loggers=None):
        now = datetime.datetime.fromtimestamp(time.time())
        self.experiment_id = "{}_{}".format(expname, now.strftime("%Y%m%d_%H%M%S"))
        self.filename = "{}.log".format(self.experiment_id)
        self.headers = None
        self.start_time = self.last_time = time.time()
        self.last_input_count = 0
        self.external_loggers = list(external_loggers or [])
        self.logstr("# %s" % str(runtime_args))

    def logstr(self, text):
        with open(self.filename, "a") as f:
            f.write(text + "\n")
        log.info(text)

    def log(self, input_count, batch_count, additional_values):
        now = time.time()
        delta_t, delta_count = now - self.last_time, input_count - self.last_input_count
        self.last_time, self.last_input_count = now, input_count
        row = OrderedDict()
        row["time_spent"] = delta_t
        row["cumulative_time_spent"] = now - self.start_time
        row["input_count"] = delta_count
        row["cumulative_input_count"] = input_count
        row["cumulative_batch_count"] = batch_count
        row["inputs_per_sec"] = delta_count / delta_t if delta_t > 0 else 0.0
        for key in sorted(additional_values):
            row[key] = additional_values[key]
        if self.headers is None:
            self.headers = list(row)
            self.logstr(",".join(self.headers))
        self.logstr(",".join(str(v) for v in row.values()))
        for logger in self.external_loggers:
            try:
                logger.log(row)
            except Exception as exc:  # noqa: BLE001 - a logger's failure must not stop training
                log.warning("external logger %r failed: %s", logger, exc)
