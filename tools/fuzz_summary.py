"""Sum the chunk tallies tools/fuzz_chunks.sh saved: python tools/fuzz_summary.py OUT_DIR
prints the markdown table per family and class (as in docs/reliability.md) and every
finding's case id and message, grouped by class."""
import glob
import json
import os
import re
import sys
from collections import Counter, defaultdict

from caffe2py.tools.fuzz.outcomes import CLASSES


def main(out_dir):
    counts, chunks = defaultdict(Counter), 0
    for path in sorted(glob.glob(os.path.join(out_dir, "chunk_*.json")),
                       key=lambda p: int(re.search(r"chunk_(\d+)", p).group(1))):
        with open(path) as f:
            data = json.load(f)
        chunks += 1
        for family, c in data["counts"].items():
            counts[family].update(c)
    total = Counter()
    for c in counts.values():
        total.update(c)
    classes = [k for k in CLASSES + ("skipped", "harness_error") if total[k] or k in CLASSES]
    print("%d chunks, %d cases\n" % (chunks, sum(total.values())))
    print("| family | cases | " + " | ".join(classes) + " |")
    print("|---|---:|" + "---:|" * len(classes))
    for family in sorted(counts):
        c = counts[family]
        print("| %s | %d | %s |" % (family, sum(c.values()), " | ".join(str(c[k]) for k in classes)))
    print("| **all** | **%d** | %s |" % (sum(total.values()), " | ".join("**%d**" % total[k] for k in classes)))
    for outcome in sorted(glob.glob(os.path.join(out_dir, "findings", "*", "*", "outcome.json"))):
        with open(outcome) as f:
            r = json.load(f)
        print("%s  %s  %s" % (r["class"], r["case"], r.get("message", "").replace("\n", " ")[:240]))


if __name__ == "__main__":
    main(sys.argv[1])
