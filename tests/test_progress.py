"""caffe2py.progress: the bar's rate and ETA from a fake clock, silence before
`delay`, on a stream that is not a terminal and under --quiet (CAFFE2PY_QUIET);
`run_job` drawing it for a scoring run on a terminal."""
import io

import pytest

from caffe2py.progress import Progress, format_duration


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_rate_and_eta_from_the_clock(monkeypatch):
    monkeypatch.delenv("CAFFE2PY_QUIET", raising=False)
    clock, out = Clock(), Terminal()
    bar = Progress(1000, "scoring", unit="rows", stream=out, clock=clock)
    clock.now += 2.0
    bar.update(250)                                  # 125 rows/s, 750 left: 6 s
    text = out.getvalue()
    assert text.startswith("\rscoring") and "250/1000 rows" in text and "125 rows/s" in text
    assert "ETA 6s" in text and "[######" in text
    clock.now += 6.0
    bar.update(750)
    bar.close()
    last = out.getvalue().rstrip("\n").split("\r")[-1]
    assert "1000/1000 rows" in last and "ETA" not in last and out.getvalue().endswith("\n")


def test_silent_before_delay_and_between_redraws(monkeypatch):
    monkeypatch.delenv("CAFFE2PY_QUIET", raising=False)
    clock, out = Clock(), Terminal()
    bar = Progress(10, "bench", unit="runs", stream=out, delay=3.0, interval=0.5, clock=clock)
    clock.now += 1.0
    bar.update()
    assert out.getvalue() == ""                     # a run shorter than the delay prints nothing
    clock.now += 3.0
    bar.update()
    drawn = out.getvalue()
    clock.now += 0.1
    bar.update()
    assert drawn and out.getvalue() == drawn        # no redraw within the interval


def test_quiet_off_a_terminal_and_with_quiet(monkeypatch):
    monkeypatch.delenv("CAFFE2PY_QUIET", raising=False)
    piped = io.StringIO()
    bar = Progress(5, stream=piped)
    bar.update(5)
    bar.close()
    assert piped.getvalue() == ""
    monkeypatch.setenv("CAFFE2PY_QUIET", "1")
    out = Terminal()
    bar = Progress(5, stream=out)
    bar.update(5)
    bar.close()
    assert out.getvalue() == ""


def test_durations():
    assert [format_duration(s) for s in (4.4, 187, 3723)] == ["4s", "3:07", "1:02:03"]


def test_scoring_draws_the_bar_on_a_terminal(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow.parquet")
    from caffe2py.scoring import ModelSpec, run_job
    from caffe2py.scoring.demo_data import write_demo_shards
    monkeypatch.delenv("CAFFE2PY_QUIET", raising=False)
    write_demo_shards(str(tmp_path / "data"), shards=2, rows=20)
    err = Terminal()
    summary = run_job(ModelSpec(), [str(tmp_path / "data")], str(tmp_path / "out"), batch_size=8, err=err)
    assert summary.rows == 40 and not summary.failed
    last = err.getvalue().rstrip("\n").split("\r")[-1]
    assert last.startswith("scoring") and "40/40 rows" in last and "rows/s" in last
