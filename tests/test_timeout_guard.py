"""caffe2py.timeout_guard (Caffe2's caffe2.python.timeout_guard): a block that
overruns its time gets SIGINT (then os._exit(1)); one that finishes, or raises,
leaves the process alone. The overrunning cases run in child processes."""
import signal
import subprocess
import sys
import textwrap
import threading
import time

from caffe2py import timeout_guard


def _run_child(tmp_path, body, timeout=60):
    script = tmp_path / "child.py"      # a file, so the stack dump shows source lines
    script.write_text(textwrap.dedent("""
        import time
        from caffe2py import timeout_guard
        """) + textwrap.dedent(body))
    # the child starts with Ctrl-C's default action even when the suite itself runs with
    # SIGINT ignored (a shell's background job): Python then raises KeyboardInterrupt
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_block_that_finishes_in_time_is_left_alone():
    before = threading.active_count()
    with timeout_guard.CompleteInTimeOrDie(5.0):
        value = sum(range(10))
    assert value == 45
    # the watcher is told at once and ends
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before


def test_an_overrunning_block_is_interrupted_with_a_stack_dump(tmp_path):
    result = _run_child(tmp_path, """
        try:
            with timeout_guard.CompleteInTimeOrDie(0.3):
                time.sleep(30)
            print("NOT INTERRUPTED")
        except KeyboardInterrupt:
            print("INTERRUPTED")
        """)
    assert "INTERRUPTED" in result.stdout and "NOT INTERRUPTED" not in result.stdout
    assert "-----Before forcing------" in result.stdout
    assert "time.sleep(30)" in result.stdout          # the stuck caller's line is in the dump
    assert "Call did not finish in time" in result.stderr


def test_a_process_that_ignores_the_interrupt_is_ended_after_the_grace_period(tmp_path):
    result = _run_child(tmp_path, """
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        timeout_guard.GRACE_SECS = 0.3
        with timeout_guard.CompleteInTimeOrDie(0.2):
            time.sleep(30)
        print("SURVIVED")
        """)
    assert result.returncode == 1
    assert "SURVIVED" not in result.stdout
    assert "-----After force------" in result.stdout
    assert "did not terminate cleanly" in result.stderr


def test_a_block_that_raises_reports_its_own_error_not_a_timeout(tmp_path):
    result = _run_child(tmp_path, """
        try:
            with timeout_guard.CompleteInTimeOrDie(0.3):
                raise ValueError("boom")
        except ValueError:
            pass
        time.sleep(1.0)
        print("ALIVE")
        """)
    assert result.returncode == 0 and "ALIVE" in result.stdout
    assert "Call did not finish" not in result.stderr


def test_euthanize_if_necessary_ends_a_hanging_process(tmp_path):
    result = _run_child(tmp_path, """
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        timeout_guard.GRACE_SECS = 0.2
        timeout_guard.EuthanizeIfNecessary(0.2)
        time.sleep(30)
        print("SURVIVED")
        """)
    assert result.returncode == 1 and "SURVIVED" not in result.stdout
