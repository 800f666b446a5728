"""How the CUDA emulator runs the threads of a block: OS threads with a barrier,
fibers switched by swapcontext, or fibers switched by hand-written assembly (the
emulator's choice). Builds benchmarks/emulator_scheduling.cpp with g++ and prints the
cost of one __syncthreads crossing per CUDA thread for blocks of 32, 256 and 1024
threads. All three designs run in the same process, one after another.

Usage: python benchmarks/emulator_scheduling.py [--phases 2000]
"""
import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phases", type=int, default=2000)
    args = p.parse_args(argv)
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None or platform.machine() != "x86_64":
        print("needs g++ on x86-64; nothing measured")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "sched")
        subprocess.run([cxx, "-std=c++20", "-O2", "-pthread", os.path.join(HERE, "emulator_scheduling.cpp"), "-o", exe],
                       check=True)
        for n in (32, 256, 1024):
            print(subprocess.run([exe, str(n), str(args.phases)], capture_output=True, text=True, check=True).stdout,
                  end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
