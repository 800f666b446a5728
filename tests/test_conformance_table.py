"""tools/conformance_table.py: the docs/conformance.md table from a `--json` run."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "conformance_table.py")


def _file(name, imported=True, passed=0, failed=0, errors=0, status="ran", first=None):
    return dict(name=name, file="/x/" + name, status=status, imported=imported, collected=passed + failed + errors,
                passed=passed, failed=failed, errors=errors, skipped=0, first_failure=first)


def test_table_rows_totals_and_classes(tmp_path):
    files = [_file("a_test.py", passed=3), _file("b_test.py", passed=1, failed=1, first={"test": "T::t", "message": "x|y"}),
             _file("c_test.py", imported=False, errors=1, first={"test": "(import)", "message": "No module named 'z'"})]
    run = {"files": files, "totals": dict(files=3, imported=2, collected=6, passed=4, failed=1, errors=1, skipped=0,
                                          timed_out=0, crashed=0, percent=dict(files_imported=66.7, tests_passed=66.7))}
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "classes.txt").write_text("# comment\nc_test.py: fb: an internal module\n")
    out = subprocess.run([sys.executable, TOOL, str(tmp_path / "run.json"), "--classes", str(tmp_path / "classes.txt")],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("3 files: 2 imported (66.7%); 6 tests collected: 4 passed (66.7%)")
    assert "| a_test.py | yes | 3 | 0 | 0 | 0 |  |  |" in lines
    assert "| b_test.py | yes | 1 | 1 | 0 | 0 | T::t: x\\|y | unclassified |" in lines
    assert "| c_test.py | no | 0 | 0 | 1 | 0 | (import): No module named 'z' | fb: an internal module |" in lines
    assert lines[-1] == "Files with failures by class: unclassified 1, fb 1." or \
        lines[-1] == "Files with failures by class: fb 1, unclassified 1."


def test_an_unknown_class_is_refused(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"files": [], "totals": {}}))
    (tmp_path / "classes.txt").write_text("a_test.py: whatever\n")
    proc = subprocess.run([sys.executable, TOOL, str(tmp_path / "run.json"), "--classes", str(tmp_path / "classes.txt")],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "unknown class 'whatever'" in proc.stderr


def test_reruns_replace_their_files_and_totals_are_recounted(tmp_path):
    first = [_file("a_test.py", passed=3), _file("b_test.py", passed=1, failed=1, first={"test": "T::t", "message": "m"}),
             _file("c_test.py", imported=False, errors=1, first={"test": "(import)", "message": "x"})]
    run = {"files": first, "totals": {}}
    rerun = {"files": [_file("b_test.py", passed=2)], "totals": {}}
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "rerun.json").write_text(json.dumps(rerun))
    out = subprocess.run([sys.executable, TOOL, str(tmp_path / "run.json"), "--update", str(tmp_path / "rerun.json")],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    # a: 3/3, b (rerun): 2/2, c: 0/1 -> 5 of 6 tests, 2 of 3 files
    assert lines[0].startswith("3 files: 2 imported (66.7%); 6 tests collected: 5 passed (83.3%), 0 failed, 1 errors")
    assert "Rows from rerun 1 (1 files): b_test.py." in lines
    assert "| b_test.py | yes | 2 | 0 | 0 | 0 |  |  |" in lines
