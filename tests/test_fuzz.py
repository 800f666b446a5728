"""The fuzzing harness (caffe2py.tools.fuzz): outcome classes, reproducible case ids,
a pool that survives crashing and hanging cases, reproducers that replay, and a
fixed-seed slice of the campaign that must find nothing (the CI slice; the long
campaign's counts are in docs/reliability.md)."""
import json
import os

import pytest

from caffe2py.errors import Caffe2Error
from caffe2py.tools import fuzz
from caffe2py.tools.fuzz import campaign, execute, gen_ops
from caffe2py.tools.fuzz.outcomes import classify_exception

# A fixed slice: every family, and enough op/onnx cases to reach many schemas.
SLICE_SEED = 20261125
SLICE_BUDGET = 160


def test_classify_exception_separates_ours_raw_text_and_bare():
    assert classify_exception(Caffe2Error("Conv #0 'y': group must be >= 1, got 0"))[0] == "our_error"
    assert classify_exception(Caffe2Error("Conv #0 'y' failed: ZeroDivisionError: division by zero"))[0] \
        == "raw_text"
    assert classify_exception(Caffe2Error("Sum #0 's': operands could not be broadcast together"))[0] \
        == "raw_text"
    assert classify_exception(ValueError("boom"))[0] == "bare_exception"


def test_case_ids_are_reproducible_cover_every_family_and_chunks_do_not_overlap():
    ids = campaign.case_ids(200, seed=3)
    assert ids == campaign.case_ids(200, seed=3)
    assert {i.split(":")[0] for i in ids} == set(execute.FAMILIES)
    # chunks as tools/fuzz_chunks.sh runs them: --start k * size
    chunk0, chunk1 = campaign.case_ids(200, 3, start=0), campaign.case_ids(200, 3, start=200)
    assert not set(chunk0) & set(chunk1)
    assert len(set(chunk0)) == 200


@pytest.mark.parametrize("family", sorted(execute.FAMILIES))
def test_a_case_id_regenerates_the_same_case(family):
    for index in range(3):
        case_id = "%s:5:%d" % (family, index)
        a, b = execute.generate(case_id), execute.generate(case_id)
        if a is None:
            assert b is None
            continue
        assert a.files() == b.files()


def test_op_family_draws_over_every_registered_op():
    from caffe2py import registry
    types = gen_ops.op_types()
    registered = set(registry.op_types(""))
    assert set(gen_ops.SKIPPED) | set(types) >= {t for t in registered
                                                 if ("", t, registry.CPU) in registry._kernels}
    assert len(types) > 300


def test_pool_catches_crash_and_hang_and_goes_on(tmp_path):
    ids = ["selftest:0:0", "selftest:0:1", "selftest:0:2", "selftest:0:3", "selftest:0:3"]
    results = []
    from caffe2py.tools.fuzz.pool import run_pool
    run_pool(ids, jobs=2, timeout=4.0, workdir=str(tmp_path), on_result=results.append)
    by_case = {}
    for r in results:
        by_case.setdefault(r["case"], []).append(r["class"])
    assert by_case["selftest:0:0"] == ["crash"]
    assert by_case["selftest:0:1"] == ["hang"]
    assert by_case["selftest:0:2"] == ["bare_exception"]
    assert by_case["selftest:0:3"] == ["ran", "ran"]      # the pool went on after both


def test_findings_get_a_reproducer_folder_that_replays(tmp_path):
    tally = campaign.Tally(out_dir=str(tmp_path))
    tally.add({"case": "selftest:0:2", "class": "bare_exception", "message": "ValueError: raised on purpose"})
    folder = tmp_path / "bare_exception" / "selftest_0_2"
    assert json.loads((folder / "outcome.json").read_text())["class"] == "bare_exception"
    assert (folder / "repro.sh").exists() and (folder / "case.json").exists()
    assert fuzz.replay(str(folder))["class"] == "bare_exception"
    assert tally.bad() == 1


def test_a_real_case_replays_from_its_folder(tmp_path):
    case = execute.generate("op:1:4")
    for name, data in case.files().items():
        (tmp_path / name).write_bytes(data)
    assert fuzz.replay(str(tmp_path))["class"] == fuzz.replay("op:1:4")["class"]


def test_fixed_seed_slice_finds_nothing(tmp_path):
    """CI's slice of the campaign: no crash, hang, bare exception, raw library text,
    wrong result, silent accept, changed workspace or modified input."""
    env = os.environ.get("CAFFE2PY_SHARED_MODELS")
    tally = campaign.run_campaign(SLICE_BUDGET, seed=SLICE_SEED, jobs=2, timeout=120.0, out_dir=str(tmp_path))
    totals = tally.totals()
    assert sum(totals.values()) == SLICE_BUDGET
    assert tally.bad() == 0, "%s\n%s\nreproducers under %s (shared models: %s)" % (
        tally.table(), dict(tally.examples), tmp_path, env)
    assert totals["ran"] > 0 and totals["our_error"] > 0
