"""`caffe2py conformance`: Caffe2-style test files written here (passing, failing,
not importing, crashing, hanging, importing a sibling through Caffe2's package path,
using hypothesis_test_util), each run in a pytest child of its own; the per-file
counts in the JSON report and the summary line are checked against what each file
was written to do."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from caffe2py.cli import main

FILES = {
    "pass_test.py": """
        import unittest
        import hypothesis

        class TestPlain(unittest.TestCase):
            def test_a(self):
                self.assertEqual(1 + 1, 2)

            def test_b(self):
                pass

            @unittest.skip("not on caffe2py")
            def test_skipped(self):
                raise AssertionError("must not run")

        def test_profile_is_caffe2_dev():
            # hypothesis's own default is 100 examples with a 200 ms deadline; Caffe2's "dev"
            # profile (loaded by the runner although this file never imports hu) is 10 and none
            assert hypothesis.settings.default.max_examples == 10
            assert hypothesis.settings.default.deadline is None
    """,
    "failing_test.py": """
        import pytest

        def test_ok():
            pass

        def test_bad():
            assert 1 == 2, "one is not two"

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_setup_error(broken):
            pass
    """,
    "import_error_test.py": """
        import caffe2_no_such_module_anywhere

        def test_never():
            pass
    """,
    "skip_module_test.py": """
        import pytest
        pytest.importorskip("caffe2_optional_extra_not_installed")

        def test_never():
            pass
    """,
    "crash_test.py": """
        import ctypes

        def test_before():
            pass

        def test_segfault():
            ctypes.string_at(0)

        def test_after():
            pass
    """,
    "hang_test.py": """
        import time

        def test_quick():
            pass

        def test_hang():
            time.sleep(600)
    """,
    "foo_helper.py": """
        VALUE = 42
    """,
    "helper_test.py": """
        from caffe2.python.operator_test.foo_helper import VALUE

        def test_sibling_through_caffe2_path():
            assert VALUE == 42
    """,
    "hu_test.py": """
        import numpy as np
        from hypothesis import given

        from caffe2.python import core, workspace
        import caffe2.python.hypothesis_test_util as hu

        CALLS = []

        class TestOps(hu.HypothesisTestCase):
            @given(X=hu.tensor(), **hu.gcs)
            def test_relu(self, X, gc, dc):
                CALLS.append(1)
                op = core.CreateOperator("Relu", ["X"], ["Y"])
                self.assertReferenceChecks(gc, op, [X], lambda X: (np.maximum(X, 0),))

            def test_workspace(self):
                workspace.FeedBlob("x", np.arange(4, dtype=np.float32))
                workspace.RunOperatorOnce(core.CreateOperator("Relu", ["x"], ["y"]))
                np.testing.assert_array_equal(workspace.FetchBlob("y"), np.arange(4, dtype=np.float32))

            def test_z_examples_drawn(self):
                # test_relu ran first (unittest orders by name) under the dev profile
                assert 1 <= len(CALLS) <= 10, len(CALLS)
    """,
}

# what each file was written to do: (status, imported, collected, passed, failed, errors, skipped,
# first failure's test, a piece of its message)
EXPECTED = {
    "pass_test.py": ("ran", True, 4, 3, 0, 0, 1, None, None),
    "failing_test.py": ("ran", True, 3, 1, 1, 1, 0, "test_bad", "one is not two"),
    "import_error_test.py": ("ran", False, 0, 0, 0, 1, 0, "(import)",
                             "No module named 'caffe2_no_such_module_anywhere'"),
    "skip_module_test.py": ("ran", True, 0, 0, 0, 0, 1, None, None),
    "crash_test.py": ("crashed", True, 3, 1, 0, 1, 0, "test_segfault", "SIGSEGV"),
    "hang_test.py": ("timeout", True, 2, 1, 0, 1, 0, "test_hang", "timed out after 60 s"),
    "helper_test.py": ("ran", True, 1, 1, 0, 0, 0, None, None),
    "hu_test.py": ("ran", True, 3, 3, 0, 0, 0, None, None),
}


def write_files(folder, names):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(textwrap.dedent(FILES[name]).lstrip())
    return folder


def tree(folder):
    return sorted(os.path.relpath(os.path.join(here, n), folder)
                  for here, dirs, files in os.walk(folder) for n in dirs + files)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """Caffe2's default profile, and a current directory that must stay empty."""
    for name in ("CAFFE2_HYPOTHESIS_PROFILE", "SANDCASTLE", "TW_JOB_USER"):
        monkeypatch.delenv(name, raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_suite_counts_per_file_and_totals(tmp_path, capsys, clean_env):
    suite = write_files(tmp_path / "caffe2" / "python" / "operator_test", FILES)
    before = tree(tmp_path / "caffe2")
    report = tmp_path / "report.json"
    began = time.monotonic()
    # 60 s: a limit no file but the hanging one reaches even on a loaded 2-CPU machine (the
    # 2-second limit is test_hang_past_a_two_second_timeout_via_subprocess's)
    code = main(["conformance", str(tmp_path / "caffe2"), "--jobs", "2", "--timeout", "60",
                 "--json", str(report)])
    wall = time.monotonic() - began
    out = capsys.readouterr().out
    assert code == 0                       # every file ran; failures alone do not fail the run
    data = json.loads(report.read_text())
    by_name = {os.path.basename(f["file"]): f for f in data["files"]}
    assert set(by_name) == set(EXPECTED)   # foo_helper.py is no test file
    for name, (status, imported, collected, passed, failed, errors, skipped, test, message) in EXPECTED.items():
        got = by_name[name]
        assert (got["status"], got["imported"], got["collected"], got["passed"], got["failed"], got["errors"],
                got["skipped"]) == (status, imported, collected, passed, failed, errors, skipped), (name, got)
        if test is None:
            assert got["first_failure"] is None, (name, got)
        else:
            assert got["first_failure"]["test"] == test and message in got["first_failure"]["message"], got
        # the row: name, imported, the four counts, then the first failure
        line = next(li for li in out.splitlines() if li.split() and li.split()[0] == got["name"])
        assert line.split()[1:6] == ["yes" if imported else "no", str(passed), str(failed), str(errors),
                                     str(skipped)]
        if test is not None:
            assert (test + ": ") in line
    assert by_name["crash_test.py"]["exit_code"] == -11
    assert 60 <= by_name["hang_test.py"]["seconds"] < 60 + 5
    assert wall < 60 + 120
    t = data["totals"]
    assert (t["files"], t["imported"], t["collected"], t["passed"], t["failed"], t["errors"], t["skipped"],
            t["timed_out"], t["crashed"]) == (8, 7, 16, 10, 1, 4, 2, 1, 1)
    assert t["percent"] == {"files_imported": 87.5, "tests_passed": 62.5}
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("8 file(s): 7 imported (87.5%); 16 test(s) collected: 10 passed (62.5%), "
                              "1 failed, 4 errors, 2 skipped; files: 1 timed out, 1 crashed; "), summary
    # nothing written into the test folders or the current directory
    assert tree(tmp_path / "caffe2") == before and not any("pycache" in p for p in before)
    assert os.listdir(clean_env) == []
    assert suite.exists()


def test_strict_keyword_and_no_caffe2_layout(tmp_path, capsys, clean_env):
    folder = write_files(tmp_path / "t", ["failing_test.py", "helper_test.py", "foo_helper.py"])
    target = str(folder / "failing_test.py")
    report = tmp_path / "all.json"
    assert main(["conformance", str(folder), "--json", str(report)]) == 0
    helper = next(f for f in json.loads(report.read_text())["files"] if f["name"] == "helper_test.py")
    # outside a caffe2/python/ folder, Caffe2's package path does not lead to the sibling
    assert not helper["imported"] and "caffe2.python.operator_test" in helper["first_failure"]["message"]
    assert main(["conformance", target, "--strict"]) == 1
    report = tmp_path / "k.json"
    assert main(["conformance", target, "-k", "test_ok", "--strict", "--json", str(report)]) == 0
    only = json.loads(report.read_text())["files"][0]
    assert (only["collected"], only["passed"], only["failed"], only["errors"]) == (1, 1, 0, 0)
    capsys.readouterr()


def test_hang_past_a_two_second_timeout_via_subprocess(tmp_path, clean_env):
    folder = write_files(tmp_path / "h", ["hang_test.py"])
    report = tmp_path / "h.json"
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "caffe2py", "conformance", str(folder), "--timeout", "2",
                           "--json", str(report)], cwd=str(clean_env), capture_output=True, text=True,
                          timeout=120)
    wall = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    hang = next(f for f in data["files"] if f["name"] == "hang_test.py")
    assert hang["status"] == "timeout" and hang["errors"] >= 1 and hang["exit_code"] < 0
    assert "timed out after 2 s" in hang["first_failure"]["message"]
    assert 2 <= hang["seconds"] < 2 + 3
    # a loaded machine may not even finish importing caffe2py in 2 s (test_suite_... checks
    # the stop inside a test with a 20 s limit)
    if hang["imported"]:
        assert hang["first_failure"]["test"] == "test_hang" and hang["passed"] == 1
    else:
        assert hang["first_failure"]["message"] == "timed out after 2 s while importing"
    assert "1 timed out" in proc.stdout.strip().splitlines()[-1]
    assert wall < 60
    assert os.listdir(clean_env) == []


def test_bad_requests_are_errors(tmp_path, capsys):
    assert main(["conformance", str(tmp_path / "missing")]) == 1
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["conformance", str(tmp_path / "empty")]) == 1
    assert "no test files" in capsys.readouterr().err
    assert main(["conformance", str(tmp_path), "--jobs", "0"]) == 1
    assert "--jobs must be at least 1" in capsys.readouterr().err


def test_legacy_numpy_for_caffe2_era_tests(tmp_path, capsys, clean_env):
    """--legacy-numpy: a Caffe2-era test using np.float passes; without it NumPy's own
    AttributeError is the test's first failure."""
    folder = tmp_path / "legacy"
    folder.mkdir()
    (folder / "old_numpy_test.py").write_text(textwrap.dedent("""
        import numpy as np

        def test_old_names():
            assert np.zeros(2, dtype=np.float).dtype == np.float64 and np.asscalar(np.array([3])) == 3
    """).lstrip())
    report = tmp_path / "plain.json"
    assert main(["conformance", str(folder), "--json", str(report)]) == 0
    plain = json.loads(report.read_text())["files"][0]
    assert (plain["passed"], plain["failed"]) == (0, 1)
    assert "has no attribute 'float'" in plain["first_failure"]["message"]
    report = tmp_path / "legacy.json"
    assert main(["conformance", str(folder), "--legacy-numpy", "--json", str(report)]) == 0
    legacy = json.loads(report.read_text())
    assert (legacy["files"][0]["passed"], legacy["files"][0]["failed"]) == (1, 0)
    assert legacy["options"]["legacy_numpy"] is True
    capsys.readouterr()
