"""caffe2py.experiment_util (Caffe2's caffe2.python.experiment_util): the CSV
training log and external loggers."""
import argparse

import pytest

from caffe2py import experiment_util


class Recorder(experiment_util.ExternalLogger):
    def __init__(self):
        self.args, self.rows = None, []

    def set_runtime_args(self, runtime_args):
        self.args = runtime_args

    def log(self, log_dict):
        self.rows.append(dict(log_dict))


class Broken(Recorder):
    def log(self, log_dict):
        raise RuntimeError("down")


def test_the_log_file_has_args_header_and_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recorder = Recorder()
    log = experiment_util.ModelTrainerLog("exp", argparse.Namespace(lr=0.1), [recorder, Broken()])
    assert log.experiment_id.startswith("exp_") and log.filename == log.experiment_id + ".log"
    log.log(100, 2, {"zeta": 1.5, "alpha": 0.25})
    log.log(250, 5, {"zeta": 1.0, "alpha": 0.5})
    lines = (tmp_path / log.filename).read_text().splitlines()
    assert lines[0] == "# Namespace(lr=0.1)"
    assert lines[1].split(",") == ["time_spent", "cumulative_time_spent", "input_count", "cumulative_input_count",
                                   "cumulative_batch_count", "inputs_per_sec", "alpha", "zeta"]
    second = lines[3].split(",")
    assert second[2:5] == ["150", "250", "5"] and second[6:] == ["0.5", "1.0"]
    assert recorder.args["lr"] == 0.1 and recorder.args["experiment_id"] == log.experiment_id
    assert "hostname" in recorder.args
    assert [r["input_count"] for r in recorder.rows] == [100, 150]
    rate = recorder.rows[1]["inputs_per_sec"]
    assert rate == pytest.approx(150 / recorder.rows[1]["time_spent"]) or recorder.rows[1]["time_spent"] == 0


def test_loggers_must_implement_both_methods():
    class Half(experiment_util.ExternalLogger):
        def log(self, log_dict):
            pass
    with pytest.raises(TypeError):
        Half()
