"""`caffe2py ops --where OP`: every registered op's pieces are found at paths that exist,
on the lines where they are defined (issue: any op found in a minute)."""
import os
import re
import subprocess
import sys

import pytest

import caffe2py  # noqa: F401 - registers every op
from caffe2py import op_locations, registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _lines(path, cache={}):  # noqa: B006 - a per-process file cache
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            cache[path] = f.read().splitlines()
    return cache[path]


def _defines(site):
    """True when site's line (or the few lines after its decorators) defines site.name."""
    lines = _lines(site.path)
    if not 1 <= site.line <= len(lines):
        return False
    window = "\n".join(lines[site.line - 1:site.line + 6])
    if site.what.strip() == "source":
        return True
    if site.what.strip() == "kernel":
        return re.search(r"__global__ void (?:__launch_bounds__\(\d+\) )?%s\(" % site.name, lines[site.line - 1])
    if site.name == "<lambda>":
        return "lambda" in lines[site.line - 1]
    return re.search(r"def %s\(" % re.escape(site.name), window) is not None


@pytest.fixture(scope="module")
def every_location():
    """(domain, op type, OpLocation) of every registered op, computed once."""
    ops = sorted({(s.domain, s.name) for s in registry.all_schemas()})
    return [(domain, op_type, op_locations.locate(op_type, domain)) for domain, op_type in ops]


def test_every_registered_op_is_found_where_it_is_defined(every_location):
    problems = []
    tests_folder = os.path.join(ROOT, "tests") + os.sep
    for domain, op_type, loc in every_location:
        if any(s.what.startswith("schema") and s.path.startswith(tests_folder) for s in loc.sites):
            continue            # an op another test of this run registered for itself
        kinds = [s.what for s in loc.sites]
        if not any(k.startswith("schema") for k in kinds):
            problems.append("%s: no schema site" % op_type)
        devices = {dev for (dom, t, dev) in registry._kernels if dom == domain and t == op_type}
        for dev in devices:
            if not any(k.startswith(registry.device_name(dev) + " kernel") for k in kinds):
                problems.append("%s: no %s kernel site" % (op_type, registry.device_name(dev)))
        for site in loc.sites:
            if not os.path.isfile(site.path):
                problems.append("%s: %s at a missing file %s" % (op_type, site.what, site.path))
            elif site.name and not _defines(site):
                problems.append("%s: %s %s is not defined at %s:%d" % (op_type, site.what, site.name,
                                                                      site.path, site.line))
            elif not site.name and not _lines(site.path)[site.line - 1].strip():
                problems.append("%s: %s points at an empty line %s:%d" % (op_type, site.what, site.path, site.line))
    assert not problems, "\n".join(problems[:40])


def test_schema_sites_are_in_the_ops_family_folder(every_location):
    """A schema registered by an op module is shown in operators/<family>/, never in the
    registry or a shared helper (the walk past helpers such as onnx_base's decorator).
    Ops that other tests of this run register themselves (their site is a test file)
    are not caffe2py's and are left out."""
    outside = []
    tests_folder = os.path.join(ROOT, "tests") + os.sep
    for _, op_type, loc in every_location:
        for site in loc.sites:
            if site.what.startswith("schema") and not site.path.startswith(tests_folder):
                family_root = os.path.dirname(os.path.dirname(site.path))
                if os.path.basename(family_root) != "operators":
                    outside.append("%s: %s" % (op_type, site.path))
    assert not outside, outside[:20]


def test_where_sparse_lengths_sum_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "caffe2py", "ops", "--where", "SparseLengthsSum"],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    rows = proc.stdout.splitlines()
    assert rows[0] == "SparseLengthsSum (domain caffe2)"
    located = {}
    for row in rows[1:]:
        m = re.match(r"\s+(\S.*?)\s{2,}(\S+):(\d+)(?:\s+(\S+))?$", row)
        if m:
            located.setdefault(m.group(1), []).append((m.group(2), int(m.group(3)), m.group(4)))
    # the lookup family: schema, CPU factory and its compiled loops, CUDA kernel, gradient, translator
    assert located["schema"][0][0].startswith("operators/recsys/")
    assert located["CPU kernel"][0][0].startswith("operators/recsys/")
    assert any(p.startswith("kernels/cpu/recsys/") for p, _, _ in located["calls"])
    assert any(p.startswith("kernels/cuda/recsys/") for p, _, _ in located["kernel"])
    assert located["gradient maker"][0][0].startswith("operators/recsys/")
    assert located["ONNX translator"][0][0].startswith("operators/recsys/")
    for entries in located.values():
        for path, line, _ in entries:
            assert os.path.isfile(os.path.join(ROOT, path)) and line >= 1
    tests_row = next(r for r in rows if r.strip().startswith("tests"))
    assert "tests/test_sparse_lengths.py:" in tests_row


def test_an_unknown_op_is_a_named_error_with_suggestions(capsys):
    from caffe2py import cli
    assert cli.main(["ops", "--where", "SparseLengthSum"]) != 0
    assert "no op 'SparseLengthSum' is registered; did you mean SparseLengthsSum" in capsys.readouterr().err


def test_no_module_is_left_directly_in_operators_but_shared_helpers():
    """operators/ holds family folders and shared helpers; every op module sits in a family."""
    import caffe2py.operators as ops
    folder = os.path.dirname(ops.__file__)
    modules = [f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"]
    registering = []
    for name in modules:
        with open(os.path.join(folder, name + ".py"), encoding="utf-8") as f:
            text = f.read()
        if re.search(r"^(@register_kernel|register_schema\(|@register_gradient|@register_exporter)", text, re.M):
            registering.append(name)
    assert registering == []
    # every other module is a helper: named with a leading underscore, or the ONNX registration helper
    assert all(m.startswith("_") or m == "onnx_base" for m in modules), modules
