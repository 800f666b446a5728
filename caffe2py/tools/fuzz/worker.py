"""A pool worker: reads case ids on stdin, answers one JSON line per phase on the
protocol pipe. Anything the cases print goes to a log file, not the pipe.

Started by pool.py as `python -m caffe2py.tools.fuzz.worker PROTOCOL_FD LOG`."""
import faulthandler
import json
import os
import sys
import time


def _limit_memory():
    """Cap the address space so a case that asks for absurd amounts of memory gets a
    MemoryError instead of taking the machine's memory (CAFFE2PY_FUZZ_MEMORY_MB)."""
    mb = int(os.environ.get("CAFFE2PY_FUZZ_MEMORY_MB", "0") or 0)
    if mb > 0:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))


def main():
    from caffe2py.child_processes import protect_from_env
    protect_from_env()            # end with the pool's process, even when it is SIGKILLed
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    log = open(sys.argv[1] if len(sys.argv) > 1 else os.devnull, "a", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    faulthandler.enable(log)
    import logging
    logging.disable(logging.CRITICAL)
    import warnings
    warnings.simplefilter("ignore")
    from . import execute
    import caffe2py.operators  # noqa: F401 - import before the memory cap and the first case
    _limit_memory()
    workdir = os.getcwd()

    def send(message):
        proto.write(json.dumps(message) + "\n")

    send({"ready": os.getpid()})
    for line in sys.stdin:
        case_id = line.strip()
        if not case_id:
            continue
        log.write("case %s\n" % case_id)
        start = time.perf_counter()
        try:
            case = execute.generate(case_id)
            if case is None:
                result = {"class": "skipped", "message": "generator drew nothing runnable"}
            else:
                result = execute.run(case, send=lambda m: send(dict(m, case=case_id)), workdir=workdir)
        except BaseException as exc:  # noqa: BLE001 - a harness bug must not look like a finding
            result = {"class": "harness_error", "message": "%s: %s" % (type(exc).__name__, exc)}
        os.chdir(workdir)
        result["case"] = case_id
        result["seconds"] = round(time.perf_counter() - start, 4)
        result["phase"] = "done"
        send(result)


if __name__ == "__main__":
    main()
