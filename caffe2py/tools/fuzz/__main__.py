"""python -m caffe2py.tools.fuzz --budget N --seed S [--jobs J] [--out DIR]

Runs a fuzz campaign (see caffe2py/tools/fuzz/__init__.py and docs/reliability.md)
and prints the counts per family and outcome class. Exit status 1 when any case
is a finding (crash, hang, bare exception, raw library text, wrong result, silent
accept, changed workspace or modified input)."""
import argparse
import json
import sys

from .campaign import replay, run_campaign
from .execute import FAMILIES


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m caffe2py.tools.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1000, help="number of cases")
    parser.add_argument("--seed", type=int, default=0, help="campaign seed (cases are reproducible from it)")
    parser.add_argument("--start", type=int, default=0, help="first case index per family (to run in chunks)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case is a hang")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES),
                        help="only these families (repeatable)")
    parser.add_argument("--out", help="folder for reproducers of findings")
    parser.add_argument("--json", help="write the tally as JSON here")
    parser.add_argument("--progress", type=int, default=0, help="print a line every N cases")
    parser.add_argument("--replay", metavar="CASE_ID", help="run one case in the foreground and print its outcome")
    args = parser.parse_args(argv)
    if args.replay:
        result = replay(args.replay)
        print(json.dumps(result, indent=1))
        return 0 if result["class"] in ("ran", "our_error", "skipped") else 1
    tally = run_campaign(args.budget, args.seed, args.jobs, args.timeout, args.family, args.out, args.start,
                         args.progress)
    print(tally.table())
    for cls, examples in sorted(tally.examples.items()):
        print("\n%s:" % cls)
        for case_id, message in examples:
            print("  %s  %s" % (case_id, message.replace("\n", " ")[:300]))
    if args.json:
        data = tally.to_json()
        data.update(budget=args.budget, seed=args.seed, start=args.start, wall_seconds=round(tally.wall_seconds, 1))
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    return 1 if tally.bad() else 0


if __name__ == "__main__":
    sys.exit(main())
