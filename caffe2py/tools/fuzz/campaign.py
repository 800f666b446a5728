"""A campaign: a budget of case ids split over the families, run on the pool,
tallied per family and class; every finding gets a reproducer folder."""
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict

from .execute import FAMILIES, generate
from .outcomes import CLASSES, FINDINGS


def case_ids(budget, seed, families=None, start=0):
    """Case ids for a budget: each family gets its share, interleaved so that any
    prefix of the list (a chunk) samples every family."""
    families = families or list(FAMILIES)
    weights = {f: FAMILIES[f][1] for f in families}
    total = sum(weights.values())
    ids, counts = [], Counter()
    for k in range(budget):
        # the family furthest behind its share goes next
        family = min(families, key=lambda f: (counts[f] + 1) / (weights[f] / total))
        ids.append("%s:%d:%d" % (family, seed, start + counts[family]))
        counts[family] += 1
    return ids


class Tally:
    def __init__(self, out_dir=None, keep_examples=5):
        self.counts = defaultdict(Counter)          # family -> class -> n
        self.notes = defaultdict(Counter)           # family -> note -> n
        self.examples = defaultdict(list)           # class -> [(case id, message)]
        self.seconds = 0.0
        self.out_dir = out_dir
        self.keep = keep_examples
        self.findings = []

    def add(self, result):
        family = result["case"].split(":", 1)[0]
        cls = result["class"]
        self.counts[family][cls] += 1
        self.seconds += result.get("seconds", 0.0)
        if result.get("note"):
            self.notes[family][result["note"]] += 1
        if cls in FINDINGS or cls == "harness_error":
            self.findings.append(result)
            if len(self.examples[cls]) < self.keep:
                self.examples[cls].append((result["case"], result.get("message", "")[:400]))
            if self.out_dir:
                write_reproducer(self.out_dir, result)

    def totals(self):
        out = Counter()
        for c in self.counts.values():
            out.update(c)
        return out

    def bad(self):
        t = self.totals()
        return sum(t[c] for c in FINDINGS) + t["harness_error"]

    def table(self):
        classes = [c for c in CLASSES + ("skipped", "harness_error") if self.totals()[c] or c in CLASSES]
        lines = ["| family | cases | " + " | ".join(classes) + " |",
                 "|---|---:|" + "---:|" * len(classes)]
        for family in sorted(self.counts):
            c = self.counts[family]
            lines.append("| %s | %d | %s |" % (family, sum(c.values()), " | ".join(str(c[k]) for k in classes)))
        t = self.totals()
        lines.append("| **all** | **%d** | %s |" % (sum(t.values()), " | ".join("**%d**" % t[k] for k in classes)))
        return "\n".join(lines)

    def to_json(self):
        return {"counts": {f: dict(c) for f, c in self.counts.items()},
                "notes": {f: dict(c) for f, c in self.notes.items()},
                "examples": {k: v for k, v in self.examples.items()},
                "case_seconds": round(self.seconds, 1)}


def write_reproducer(out_dir, result):
    """out_dir/<class>/<case id>/: outcome.json, the case's files, and repro.sh."""
    case_id = result["case"]
    folder = os.path.join(out_dir, result["class"], case_id.replace(":", "_"))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "outcome.json"), "w") as f:
        json.dump(result, f, indent=1)
    try:
        case = generate(case_id)
    except Exception:  # noqa: BLE001 - the outcome alone still tells what happened
        case = None
    if case is not None:
        for name, data in case.files().items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
    with open(os.path.join(folder, "repro.sh"), "w") as f:
        f.write("#!/bin/sh\n# re-run the case in the foreground from the files beside this script\n"
                "python -m caffe2py.tools.fuzz --replay \"$(dirname \"$0\")\"\n")


def run_campaign(budget, seed=0, jobs=2, timeout=60.0, families=None, out_dir=None, start=0,
                 progress=None):
    """Run `budget` cases; returns the Tally."""
    from .pool import run_pool
    ids = case_ids(budget, seed, families, start)
    tally = Tally(out_dir)
    begun = time.monotonic()
    done = [0]

    def on_result(result):
        tally.add(result)
        done[0] += 1
        if progress and (done[0] % progress == 0 or done[0] == len(ids)):
            t = tally.totals()
            print("%d/%d cases, %.0f s: %s" % (done[0], len(ids), time.monotonic() - begun,
                                                ", ".join("%s %d" % (k, v) for k, v in sorted(t.items()))),
                  file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="caffe2py-fuzz-") as workdir:
        run_pool(ids, jobs, timeout, workdir, on_result)
    tally.wall_seconds = time.monotonic() - begun
    return tally


def replay(case_id):
    """Run one case in this process and return its outcome (tracebacks visible). The
    id may also be a reproducer folder written by a campaign."""
    from . import execute
    if os.path.isdir(case_id):
        from .cases import case_from_folder
        case = case_from_folder(case_id)
    else:
        case = execute.generate(case_id)
    if case is None:
        return {"class": "skipped", "case": case_id}
    print("case %s: %s" % (case_id, case.summary), file=sys.stderr)
    # in a scratch folder, as the pool's workers run: ops that write files (stores,
    # DBs) must not litter the caller's checkout, nor find its files in their way
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="caffe2py-replay-") as scratch:
        os.chdir(scratch)
        try:
            result = execute.run(case, workdir=scratch)
        finally:
            os.chdir(here)
    result["case"] = case_id
    return result
