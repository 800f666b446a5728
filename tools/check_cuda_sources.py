#!/usr/bin/env python3
"""Compile every kernels/**/*.cu with nvcc for sm_80 and sm_90 (no GPU needed).

Prints one line per source and arch, then ptxas's resource usage per kernel with the
occupancy it allows (tools/cuda_resources.py; --markdown prints only that table).
Exits 1 if any compile fails or a lookup or LSTM kernel (embedding.cu, lstm.cu)
spills to local memory, 0 when all pass, and 0 with a message when nvcc is not on
PATH (nothing to check with).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_resources  # noqa: E402 - the sibling module

ARCHS = ("sm_80", "sm_90")


def sources(root=ROOT):
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "kernels")):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        found += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".cu")]
    return found


def compile_one(nvcc, path, arch, out_dir):
    out = os.path.join(out_dir, "%s.%s.cubin" % (os.path.basename(path), arch))
    cmd = [nvcc, "--cubin", "-arch=%s" % arch, "-O3", "--resource-usage", "-I", os.path.dirname(path), "-o", out, path]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", help="arch to compile for (default: sm_80 and sm_90)")
    parser.add_argument("--markdown", action="store_true", help="print only the resource table (for docs/cuda.md)")
    args = parser.parse_args(argv)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("check_cuda_sources: nvcc is not on PATH; CUDA sources were not compiled")
        return 0
    failures, spills, rows = 0, [], []
    files = sources()
    say = (lambda *a: None) if args.markdown else print
    with tempfile.TemporaryDirectory(prefix="caffe2py-cubin-") as out_dir:
        for path in files:
            for arch in args.arch or ARCHS:
                t0 = time.perf_counter()
                rc, text = compile_one(nvcc, path, arch, out_dir)
                rel = os.path.relpath(path, ROOT)
                status = "ok" if rc == 0 else "FAILED"
                say("%-36s %-6s %-6s %.1fs" % (rel, arch, status, time.perf_counter() - t0))
                if rc != 0:
                    failures += 1
                    say(text)
                    continue
                found = cuda_resources.parse(text)
                rows += [(os.path.basename(path), r) for r in found]
                spills += cuda_resources.spill_failures(os.path.basename(path), found)
    if args.markdown:
        print(cuda_resources.table(rows))
        return 1 if failures or spills else 0
    print("\nResources per kernel (ptxas), occupancy at the largest block each kernel is launched with:")
    print(cuda_resources.table(rows))
    for line in spills:
        print("SPILL: " + line)
    print("%d source(s), %d failure(s), %d spilling lookup/LSTM kernel(s)" % (len(files), failures, len(spills)))
    return 1 if failures or spills else 0


if __name__ == "__main__":
    sys.exit(main())
