#!/usr/bin/env python3
"""Compile every kernels/**/*.cu with nvcc for sm_80 and sm_90 (no GPU needed).

Prints one line per source and arch; exits 1 if any compile fails, 0 when all
pass, and 0 with a message when nvcc is not on PATH (nothing to check with).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHS = ("sm_80", "sm_90")


def sources(root=ROOT):
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "kernels")):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        found += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".cu")]
    return found


def compile_one(nvcc, path, arch, out_dir):
    out = os.path.join(out_dir, "%s.%s.cubin" % (os.path.basename(path), arch))
    cmd = [nvcc, "--cubin", "-arch=%s" % arch, "-O3", "-I", os.path.dirname(path), "-o", out, path]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", help="arch to compile for (default: sm_80 and sm_90)")
    args = parser.parse_args(argv)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("check_cuda_sources: nvcc is not on PATH; CUDA sources were not compiled")
        return 0
    failures = 0
    files = sources()
    with tempfile.TemporaryDirectory(prefix="caffe2py-cubin-") as out_dir:
        for path in files:
            for arch in args.arch or ARCHS:
                t0 = time.perf_counter()
                rc, text = compile_one(nvcc, path, arch, out_dir)
                rel = os.path.relpath(path, ROOT)
                status = "ok" if rc == 0 else "FAILED"
                print("%-36s %-6s %-6s %.1fs" % (rel, arch, status, time.perf_counter() - t0))
                if rc != 0:
                    failures += 1
                    print(text)
    print("%d source(s), %d failure(s)" % (len(files), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
