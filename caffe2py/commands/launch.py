"""`caffe2py launch -n N script.py args...`: N shards of a training script on this
machine, meeting through a file store in a fresh folder.

Each shard runs `python script.py args... --shard_id I --num_shards N --run_id R
--file_store_path DIR` (`python -m caffe2py.compat script.py ...` with --compat),
the flags Caffe2's resnet50_trainer.py takes; its output lines are prefixed with
`[shard I]`. When a shard fails, the others are stopped
(SIGTERM, then SIGKILL) and the exit status is non-zero, naming the shard. The
shards end with the launcher (caffe2py/child_processes.py). docs/cli.md.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from caffe2py import child_processes
from caffe2py.errors import Caffe2Error

NAME = "launch"
HELP = "run N shards of a training script on this machine (--shard_id/--num_shards/--run_id/--file_store_path)"
POLL_S = 0.1


def add_arguments(parser):
    parser.add_argument("-n", "--num-shards", type=int, required=True, metavar="N", help="how many shards")
    parser.add_argument("--file-store-path", default=None, metavar="DIR",
                        help="the store folder the shards meet in (default: a fresh temporary folder, removed "
                             "at the end)")
    parser.add_argument("--run-id", default=None, help="the run id passed on (default: a fresh one)")
    parser.add_argument("--grace", type=float, default=5.0,
                        help="seconds a stopped shard gets between SIGTERM and SIGKILL (default 5)")
    parser.add_argument("--compat", action="store_true",
                        help="run the script through `python -m caffe2py.compat` (for scripts importing caffe2.python)")
    parser.add_argument("script", help="the training script (run with this Python)")
    parser.add_argument("script_args", nargs="...", help="its arguments (the shard flags are appended)")


def shard_command(args, shard_id, store_path, run_id):
    python = [sys.executable, "-m", "caffe2py.compat"] if args.compat else [sys.executable]
    return python + [args.script] + list(args.script_args) + [
        "--shard_id", str(shard_id), "--num_shards", str(args.num_shards),
        "--run_id", run_id, "--file_store_path", store_path]


def _relay(stream, label, out):
    """Copy a shard's output lines to `out`, each prefixed with its label."""
    for line in iter(stream.readline, b""):
        out.write(label + line.decode("utf-8", "replace"))
        out.flush()
    stream.close()


def describe_status(code):
    if code < 0:
        try:
            return "was killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "was killed by signal %d" % -code
    return "exited with status %d" % code


def run(args):
    if args.num_shards < 1:
        raise Caffe2Error("-n must be >= 1, got %d" % args.num_shards)
    if not os.path.isfile(args.script):
        raise Caffe2Error("no such script: %s" % args.script)
    made_store = args.file_store_path is None
    store_path = tempfile.mkdtemp(prefix="caffe2py-launch-") if made_store else args.file_store_path
    run_id = args.run_id or "launch-" + uuid.uuid4().hex[:12]
    shards, relays = [], []
    try:
        with child_processes.terminate_unwinds():
            for shard_id in range(args.num_shards):
                proc = subprocess.Popen(shard_command(args, shard_id, store_path, run_id),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        env=child_processes.child_env(), start_new_session=True,
                                        preexec_fn=child_processes.death_signal_preexec())
                shards.append(proc)
                relay = threading.Thread(target=_relay, args=(proc.stdout, "[shard %d] " % shard_id, sys.stdout),
                                         daemon=True)
                relay.start()
                relays.append(relay)
            return _watch(args, shards, relays)
    finally:
        child_processes.stop(shards, grace=args.grace)
        if made_store:
            shutil.rmtree(store_path, ignore_errors=True)


def _watch(args, shards, relays):
    """0 once every shard succeeded; at the first failure, stop the rest and name it."""
    while True:
        codes = [p.poll() for p in shards]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            shard_id, code = failed[0]
            others = [i for i, c in enumerate(codes) if c is None]
            child_processes.stop([shards[i] for i in others], grace=args.grace)
            for relay in relays:
                relay.join(timeout=2.0)
            sys.stderr.write("caffe2py launch: shard %d of %d (pid %d) %s%s\n" % (
                shard_id, args.num_shards, shards[shard_id].pid, describe_status(code),
                "; stopped shard(s) %s" % ", ".join(map(str, others)) if others else ""))
            return code if 0 < code < 256 else 128 + (-code if code < 0 else 1)
        if all(c == 0 for c in codes):
            for relay in relays:
                relay.join(timeout=2.0)
            return 0
        time.sleep(POLL_S)
