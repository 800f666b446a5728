"""`caffe2py conformance PATH...`: run Caffe2-style test files on caffe2py, each in
a pytest child process of its own (with the `caffe2.python` aliases and Caffe2's
hypothesis profile), and print per-file counts and totals."""
import json
import sys
import time

from caffe2py.errors import Caffe2Error

NAME = "conformance"
HELP = "run Caffe2-style test files (files or folders) on caffe2py, one process per file, and count results"


def add_arguments(parser):
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="test files, or folders searched for *_test.py and test_*.py")
    parser.add_argument("--jobs", "-j", type=int, default=1, help="files run in parallel (default 1)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one file may take before it is stopped (default 600)")
    parser.add_argument("--json", metavar="FILE", help="write per-file results and totals as JSON here")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest's -k: only tests matching EXPR")
    parser.add_argument("--legacy-numpy", action="store_true",
                        help="put back the NumPy names Caffe2-era tests use and NumPy removed (np.float, "
                             "np.asscalar, ...) in each child, as `python -m caffe2py.compat --legacy-numpy`")
    parser.add_argument("--legacy-hypothesis", action="store_true",
                        help="accept the hypothesis keywords Caffe2-era tests pass and hypothesis removed "
                             "(settings(timeout=...), average_size=, positional arrays(elements)) in each child, "
                             "as `python -m caffe2py.compat --legacy-hypothesis`")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when any test failed or errored or any file did not import, hung or crashed")


def run(args):
    from caffe2py.conformance.discover import find_test_files
    from caffe2py.conformance.report import header, row, summary_line, to_json, totals
    from caffe2py.conformance.runner import run_files
    if args.jobs < 1:
        raise Caffe2Error("--jobs must be at least 1 (got %d)" % args.jobs)
    if not args.timeout > 0:
        raise Caffe2Error("--timeout must be a positive number of seconds (got %g)" % args.timeout)
    files = find_test_files(args.paths)
    width = min(max(len(f.name) for f in files), 60)
    print(header(width))
    sys.stdout.flush()

    def show(result):
        print(row(result, width))
        sys.stdout.flush()
    began = time.monotonic()
    results = run_files(files, jobs=args.jobs, timeout=args.timeout, keyword=args.keyword, on_result=show,
                        legacy_numpy=args.legacy_numpy, legacy_hypothesis=args.legacy_hypothesis)
    t = totals(results, time.monotonic() - began)
    print(summary_line(t))
    if args.json:
        options = {"paths": args.paths, "jobs": args.jobs, "timeout": args.timeout, "keyword": args.keyword,
                   "legacy_numpy": args.legacy_numpy, "legacy_hypothesis": args.legacy_hypothesis}
        try:
            with open(args.json, "w") as fh:
                json.dump(to_json(results, t, options), fh, indent=1)
        except OSError as exc:
            raise Caffe2Error("cannot write '%s': %s" % (args.json, exc.strerror or exc)) from None
    if args.strict and not all(r.clean for r in results):
        return 1
    return 0
