"""Render a `caffe2py conformance --json` result as the Markdown table of
docs/conformance.md, with the class of every file that did not pass cleanly.

Usage: python tools/conformance_table.py RUN.json [--update RERUN.json ...] [--classes CLASSES.txt]
       [--title TEXT]

--update: the files of a later run of some of the files (after fixes) replace their rows
of RUN.json, and the totals are recounted (the table then says which files it took from
which run, so a reader can tell a combined table from a single run).

CLASSES.txt holds one line per file: `file_test.py: class: note`, where class is
one of the classes below; files with failures and no line are printed as
"unclassified" so a reader sees what is left to look at.
"""
import argparse
import json
import sys

CLASSES = {
    "caffe2py": "caffe2py bug or missing feature (to fix)",
    "gpu": "needs a GPU / cuDNN / NCCL build",
    "mkl": "needs an MKL / MKL-DNN / ideep build",
    "mpi": "needs MPI",
    "fb": "Facebook-internal module (not in the public sources)",
    "drift": "the test's own drift from today's Python, NumPy or hypothesis",
    "copy": "the stored copy is broken or from another version than its helper",
    "design": "caffe2py differs on purpose where Caffe2 contradicts itself or where its blobs being C++ "
              "tensors shared with PyTorch cannot be had with NumPy arrays (the note says which)",
}


def read_classes(path):
    classes = {}
    if not path:
        return classes
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, cls, note = (part.strip() for part in (line.split(":", 2) + ["", ""])[:3])
            if cls not in CLASSES:
                raise SystemExit("%s: unknown class %r for %s (one of %s)" % (path, cls, name, ", ".join(CLASSES)))
            classes[name] = (cls, note)
    return classes


def cell(text, width=110):
    text = (text or "").replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= width else text[:width - 3] + "..."


def combine(run, reruns):
    """RUN's files with those of each rerun (matched by path) replacing theirs, totals
    recounted by the runner's own caffe2py.conformance.report.totals."""
    from dataclasses import asdict, fields
    from caffe2py.conformance.report import FileResult, totals
    by_path = {r["file"]: dict(r) for r in run["files"]}
    order = [r["file"] for r in run["files"]]
    for index, rerun in enumerate(reruns, 1):
        for r in rerun["files"]:
            if r["file"] not in by_path:
                order.append(r["file"])
            by_path[r["file"]] = dict(r, rerun=index)
    files = [by_path[path] for path in order]
    known = {f.name for f in fields(FileResult)}
    results = [FileResult(**{k: v for k, v in r.items() if k in known}) for r in files]
    t = totals(results, sum(r.seconds or 0 for r in results))
    return {"files": files, "totals": asdict(t), "options": run.get("options", {})}


def render(run, classes, title=""):
    t = run["totals"]
    pct = t["percent"]
    lines = []
    if title:
        lines += [title, ""]
    lines.append("%d files: %d imported (%.1f%%); %d tests collected: %d passed (%.1f%%), %d failed, %d errors, "
                 "%d skipped; %d timed out, %d crashed." % (
                     t["files"], t["imported"], pct["files_imported"] or 0, t["collected"], t["passed"],
                     pct["tests_passed"] or 0, t["failed"], t["errors"], t["skipped"], t["timed_out"],
                     t["crashed"]))
    ran = t["collected"] - t["skipped"]
    if ran:
        lines.append("Of the %d tests that ran (not skipped), %d passed (%.1f%%)." % (
            ran, t["passed"], 100.0 * t["passed"] / ran))
    reruns = sorted({r["rerun"] for r in run["files"] if r.get("rerun")})
    for index in reruns:
        names = sorted(r["name"] for r in run["files"] if r.get("rerun") == index)
        lines.append("Rows from rerun %d (%d files): %s." % (index, len(names), ", ".join(names)))
    lines += ["", "| file | imported | passed | failed | errors | skipped | first failure | class |",
              "|---|---|---:|---:|---:|---:|---|---|"]
    counts = {}
    for r in sorted(run["files"], key=lambda r: r["name"]):
        clean = r["status"] == "ran" and r["imported"] and not (r["failed"] or r["errors"])
        first = r.get("first_failure") or {}
        failure = "%s: %s" % (first.get("test", ""), first.get("message", "")) if first else ""
        if clean:
            cls_text = ""
        else:
            cls, note = classes.get(r["name"], ("unclassified", ""))
            counts[cls] = counts.get(cls, 0) + 1
            cls_text = cls + (": " + note if note else "")
        lines.append("| %s | %s | %d | %d | %d | %d | %s | %s |" % (
            r["name"], "yes" if r["imported"] else "no", r["passed"], r["failed"], r["errors"], r["skipped"],
            cell(failure), cell(cls_text, 160)))
    lines += ["", "Files with failures by class: " + ", ".join(
        "%s %d" % (cls, n) for cls, n in sorted(counts.items(), key=lambda kv: -kv[1])) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--update", action="append", default=[], metavar="RERUN.json")
    parser.add_argument("--classes")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)

    def load(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    run = load(args.run)
    if args.update:
        run = combine(run, [load(path) for path in args.update])
    sys.stdout.write(render(run, read_classes(args.classes), args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
