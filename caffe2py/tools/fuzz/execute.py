"""Generating and running one case by id, in whatever process calls it (a pool
worker, or `--replay` in the foreground)."""
import os

from . import gen_files, gen_hostile, gen_onnx, gen_ops, gen_trust
from .cases import Case, case_rng, parse_id
from .outcomes import outcome

# family -> (generator, share of a campaign's budget)
FAMILIES = {
    "op": (gen_ops.generate, 0.45),
    "onnx": (gen_onnx.generate, 0.25),
    "mutate": (gen_files.generate_mutate, 0.14),
    "netdef": (gen_files.generate_netdef, 0.10),
    "external": (gen_hostile.generate_external, 0.03),
    "api": (gen_hostile.generate_api, 0.03),
    "trust": (gen_trust.generate, 0.03),
}


# Cases that misbehave on purpose, so tests can check that the pool catches what a
# case can do to its process; never part of a campaign (not in FAMILIES).
_SELFTEST = {0: "crash", 1: "hang", 2: "bare_exception", 3: "ran"}


def generate(case_id):
    """The Case for an id (None when the generator drew something it cannot build)."""
    family, seed, index = parse_id(case_id)
    if family == "selftest":
        return Case(case_id, family, {"behaviour": _SELFTEST[index]}, "selftest: " + _SELFTEST[index])
    return FAMILIES[family][0](case_id, case_rng(family, seed, index))


def run(case, send=None, workdir=None):
    """The outcome dict of one case. ONNX cases hand caffe2py's own outcome to `send`
    before running the reference, so a reference that kills the process cannot hide it."""
    workdir = workdir or os.getcwd()
    family = case.family
    if family == "op":
        return gen_ops.run(case)
    if family == "netdef" or (family == "mutate" and "predict_net" in case.data):
        return gen_files.run_caffe2_files(case, workdir)
    if family in ("onnx", "mutate"):
        return _run_onnx(case, send)
    if family == "external":
        return gen_hostile.run_external(case, workdir)
    if family == "api":
        return gen_hostile.run_api(case, workdir)
    if family == "trust":
        return gen_trust.run(case, workdir)
    if family == "selftest":
        return _run_selftest(case.data["behaviour"])
    raise ValueError(family)


def _run_selftest(behaviour):
    if behaviour == "crash":
        os.abort()
    if behaviour == "hang":
        import time
        time.sleep(3600)
    if behaviour == "bare_exception":
        return outcome("bare_exception", "ValueError: raised on purpose")
    return outcome("ran")


def _run_onnx(case, send):
    model, feeds = case.data["model_onnx"], case.data["inputs"]
    ours, outputs = gen_onnx.run_ours(model, feeds)
    if send is not None:
        send(dict(ours, phase="ours"))
    if outputs is None and ours["class"] != "our_error":
        return ours
    ref = gen_onnx.run_reference(model, feeds)
    if ref is None:
        return dict(ours, note="no_reference")
    if outputs is None:
        return dict(ours, note="reference_ran")          # we refuse what onnxruntime runs
    random = case.data.get("random", False) or gen_onnx.uses_random_ops(model)
    problem = gen_onnx.compare(outputs, ref, random=random, nonfinite=gen_onnx.holds_nonfinite(model, feeds))
    if problem:
        return outcome("wrong_result", problem)
    return dict(ours, note="matches_reference_shapes" if random else "matches_reference")
