"""First contact: how long the first run takes on a machine whose kernel cache is
empty, next to the same run once the cache is warm. Each run is a fresh process.

    python benchmarks/cold_start.py [--cases demo,mnist,resnet50,lookup,adagrad] [--modes background,inline]

For every case the kernel cache is a new empty folder (CAFFE2PY_CACHE), so "cold" is a
first run after installing; then the background compile workers are left to finish
and the same command runs again ("warm"). Modes: background (the default: first calls
run NumPy twins while detached workers compile) and inline (compile on the first call
and wait: what every first run did before). Prints seconds from process start to exit
(the whole command: interpreter start, imports, loading, the run, printing) and the
issue's target: cold at most 2 x warm + 2 s."""
import argparse
import os
import resource
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, os.pardir, "shared", "models")

LOOKUP = """
import numpy as np
from caffe2py import workspace, core
rng = np.random.default_rng(0)
workspace.FeedBlob("table", rng.random((100000, 64), dtype=np.float32))
workspace.FeedBlob("indices", rng.integers(0, 100000, 20480).astype(np.int64))
workspace.FeedBlob("lengths", np.full(256, 80, np.int32))
net = core.Net("lookup")
net.SparseLengthsSum(["table", "indices", "lengths"], "out")
workspace.RunNetOnce(net)
print(workspace.FetchBlob("out").shape)
"""

ADAGRAD = """
import numpy as np
from caffe2py import workspace, core
rng = np.random.default_rng(0)
workspace.FeedBlob("param", rng.random((100000, 64), dtype=np.float32))
workspace.FeedBlob("moment", np.zeros((100000, 64), np.float32))
workspace.FeedBlob("indices", rng.integers(0, 100000, 20480).astype(np.int64))
workspace.FeedBlob("grad", rng.random((20480, 64), dtype=np.float32))
workspace.FeedBlob("lr", np.array([-0.01], np.float32))
net = core.Net("adagrad")
net.SparseAdagrad(["param", "moment", "indices", "grad", "lr"], ["param", "moment"], epsilon=1e-5)
workspace.RunNetOnce(net)
print(workspace.FetchBlob("param").shape)
"""


def light_model(name):
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_%s.onnx" % name)


def commands():
    cli = [sys.executable, "-m", "caffe2py", "--quiet"]
    cases = {"demo": cli + ["run"], "lookup": [sys.executable, "-c", LOOKUP],
             "adagrad": [sys.executable, "-c", ADAGRAD],
             "resnet50": cli + ["run", light_model("resnet50")]}
    init = os.path.join(MODELS, "caffe2_mnist_init_net.pb")
    if os.path.exists(init):
        import numpy as np
        image = os.path.join(tempfile.mkdtemp(), "digit.npy")
        np.save(image, np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32))
        cases["mnist"] = cli + ["run", "--init-net", init, "--predict-net",
                                os.path.join(MODELS, "caffe2_mnist_predict_net.pb"), "--input", "1=" + image]
    return cases


def timed(cmd, env):
    """(wall seconds, CPU seconds) of the command; CPU time is the steadier figure on a
    shared machine (the background workers it starts are not counted: they detach)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), done.stderr))
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def background_idle(cache, timeout=600):
    """Wait until the background workers of this cache have compiled every job."""
    jobs = os.path.join(cache, "jobs")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        names = os.listdir(jobs) if os.path.isdir(jobs) else []
        if not any(n.endswith(".job") or ".claimed-" in n for n in names):
            return True
        time.sleep(0.5)
    return False


def byte_compile_package():
    """Write caffe2py's .pyc files, as `pip install .` does at install time. An editable
    install run under PYTHONDONTWRITEBYTECODE=1 has none, and every process would then
    spend ~0.7 s recompiling ~230 modules: a cost no installed user pays."""
    import caffe2py
    folders = list(caffe2py.__path__) + list(caffe2py.operators.__path__)
    import caffe2py.kernels
    folders += list(caffe2py.kernels.__path__)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q"] + folders, env=env, check=False,
                   stdout=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="demo,mnist,resnet50,lookup,adagrad")
    parser.add_argument("--modes", default="background,inline")
    parser.add_argument("--warm-runs", type=int, default=3, help="warm runs (median reported)")
    args = parser.parse_args()
    available = commands()
    byte_compile_package()
    print("machine: %s, %d CPUs, Python %s, %s" % (platform.machine(), os.cpu_count(), platform.python_version(),
                                                   time.strftime("%Y-%m-%d")))
    print("seconds from process start to exit (CPU seconds of that process in brackets)")
    print("%-9s %-10s %16s %16s %11s  %s" % ("case", "mode", "cold", "warm", "2*warm+2", "within"))
    for case in args.cases.split(","):
        if case not in available:
            print("%-9s skipped (its files are not here)" % case)
            continue
        for mode in args.modes.split(","):
            cache = tempfile.mkdtemp(prefix="caffe2py-cold-")
            env = dict(os.environ, CAFFE2PY_CACHE=cache, CAFFE2PY_JIT=mode)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            try:
                cold = timed(available[case], env)
                background_idle(cache)
                warm = sorted(timed(available[case], env) for _ in range(args.warm_runs))[args.warm_runs // 2]
            finally:
                background_idle(cache)
                shutil.rmtree(cache, ignore_errors=True)
            bound = 2 * warm[0] + 2
            print("%-9s %-10s %7.2f (%6.2f) %7.2f (%6.2f) %11.2f  %s" % (
                case, mode, cold[0], cold[1], warm[0], warm[1], bound, "yes" if cold[0] <= bound else "NO"))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
