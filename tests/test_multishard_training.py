"""data_parallel_model across processes: shards started by `caffe2py launch` (or by
hand) train through Parallelize(rendezvous=...) on a file store or a real Redis
server; after k steps every shard holds the same parameters, optimizer state,
iteration counter and learning rate, equal to one process training on the
concatenated batches. A shard that dies makes the others stop with an error naming
it; a job resumes from a checkpoint that only shard 0 loads.

Every subprocess runs under a timeout (the shards also end with this process)."""
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from caffe2py import child_processes, optimizer, workspace

pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_multishard_worker.py")
sys.path.insert(0, HERE)
import _multishard_worker as worker  # noqa: E402

STEPS = 3
RUN_TIMEOUT_S = 420          # a whole launch on a loaded 2-core machine
SHARD_TIMEOUT_S = 15         # rendezvous / collective timeout inside the shards


def _run(cmd, timeout=RUN_TIMEOUT_S):
    """(exit status, stdout, stderr, seconds) of a command that may not outlive `timeout`."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_processes.child_env(),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child_processes.stop([proc], grace=2.0)
        out, err = proc.communicate()
        pytest.fail("%s did not finish within %d s:\n%s\n%s" % (cmd, timeout, out.decode()[-3000:],
                                                                 err.decode()[-3000:]))
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - start


def _launch(tmp_path, num_shards, *worker_args):
    cmd = [sys.executable, "-m", "caffe2py", "launch", "-n", str(num_shards), WORKER,
           "--out", str(tmp_path / "out{shard_id}.npz"), "--timeout_sec", str(SHARD_TIMEOUT_S)] + list(worker_args)
    return _run(cmd)


def _reference(model_name, steps=STEPS, combine_spatial_bn=False):
    """One process, one device, the whole global batch, shard 0's initial values."""
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()
    try:
        return worker.snapshot(worker.train(model_name, steps, combine_spatial_bn=combine_spatial_bn))
    finally:
        workspace.ResetWorkspace()


def _check_shards_match_reference(tmp_path, num_shards, reference):
    results = [dict(np.load(tmp_path / ("out%d.npz" % s))) for s in range(num_shards)]
    assert sorted(results[0]) == sorted(reference)
    for shard, result in enumerate(results):
        for name, value in reference.items():
            np.testing.assert_array_equal(result[name], results[0][name], err_msg="shard %d: %s" % (shard, name))
            np.testing.assert_allclose(result[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
    assert int(results[0]["optimizer_iteration"][0]) == STEPS
    # step policy (stepsize 2, gamma 0.5): the third step ran at 0.1 * 0.5 (negated without momentum)
    assert abs(float(results[0]["lr:SgdOptimizer_0_lr_cpu"][0])) == pytest.approx(0.05)


@pytest.mark.parametrize("model_name, num_shards, devices, combine", [
    ("mlp", 2, 1, False),
    ("dlrm", 2, 2, False),          # sparse embedding gradients gathered across devices and shards
    ("resnet", 2, 2, True),         # SpatialBN statistics combined across devices and shards
    ("mlp", 4, 1, False),
    ("dlrm", 4, 1, False),
    ("resnet", 4, 1, True),
])
def test_shards_train_like_one_process_on_the_concatenated_batches(tmp_path, model_name, num_shards, devices,
                                                                   combine):
    extra = ["--combine_spatial_bn"] if combine else []
    code, out, err, _ = _launch(tmp_path, num_shards, "--model", model_name, "--devices", str(devices),
                                "--steps", str(STEPS), *extra)
    assert code == 0, out[-3000:] + err[-3000:]
    reference = _reference(model_name, combine_spatial_bn=combine)
    initial = _reference(model_name, steps=0, combine_spatial_bn=combine)
    moved = [n for n in reference if "/" in n and not np.array_equal(reference[n], initial[n])]
    assert len(moved) >= 4, "training left the parameters as they were"
    _check_shards_match_reference(tmp_path, num_shards, reference)


# ----------------------------------------------------------------- Redis

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server binary installed (CI installs it)")
    pytest.importorskip("redis", reason="the redis client (pip install caffe2py[redis]) is not installed")
    import redis
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=child_processes.death_signal_preexec())
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("redis-server did not start on port %d" % port)
                time.sleep(0.05)
        yield port
    finally:
        child_processes.stop([proc], grace=2.0)


def test_shards_meet_through_a_redis_server(tmp_path, redis_server):
    code, out, err, _ = _launch(tmp_path, 2, "--model", "dlrm", "--steps", str(STEPS),
                                "--redis_host", "127.0.0.1", "--redis_port", str(redis_server))
    assert code == 0, out[-3000:] + err[-3000:]
    _check_shards_match_reference(tmp_path, 2, _reference("dlrm"))


def test_redis_store_ops_in_one_process(redis_server):
    from caffe2py import core
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("RedisStoreHandlerCreate", [], ["h"], host="127.0.0.1",
                                                  port=redis_server, prefix="run1"))
    workspace.FeedBlob("value", np.arange(6, dtype=np.float32).reshape(2, 3))
    workspace.RunOperatorOnce(core.CreateOperator("StoreSet", ["h", "value"], []))
    workspace.RunOperatorOnce(core.CreateOperator("StoreWait", ["h"], [], blob_names=["value"]))
    workspace.RunOperatorOnce(core.CreateOperator("StoreGet", ["h"], ["copy"], blob_name="value"))
    np.testing.assert_array_equal(workspace.FetchBlob("copy"), np.arange(6, dtype=np.float32).reshape(2, 3))
    for amount in (2, 5):
        workspace.RunOperatorOnce(core.CreateOperator("StoreAdd", ["h"], ["count"], blob_name="n", add_value=amount))
    assert workspace.FetchBlob("count").tolist() == [7]
    import redis     # the keys live under the prefix on the server
    assert redis.Redis(host="127.0.0.1", port=redis_server).get("run1/n") == b"7"


def test_redis_handler_needs_host_and_port():
    from caffe2py import core
    from caffe2py.errors import Caffe2Error
    with pytest.raises(Caffe2Error, match="port is a required argument"):
        workspace.RunOperatorOnce(core.CreateOperator("RedisStoreHandlerCreate", [], ["h"], host="127.0.0.1"))
    with pytest.raises(Caffe2Error, match="host is a required argument"):
        workspace.RunOperatorOnce(core.CreateOperator("RedisStoreHandlerCreate", [], ["h"], port=6379))


# ----------------------------------------------------------------- failures

def test_a_killed_shard_is_named_by_the_others_within_the_timeout(tmp_path):
    """Shards started by hand (no launcher to stop them): shard 1 is SIGKILLed at step 1;
    shard 0 must fail with an error naming shard 1, well within the timeout."""
    store = str(tmp_path / "store")
    procs = []
    for shard in range(2):
        cmd = [sys.executable, WORKER, "--model", "mlp", "--shard_id", str(shard), "--num_shards", "2",
               "--file_store_path", store, "--timeout_sec", str(SHARD_TIMEOUT_S), "--steps", "4",
               "--die_at_step", "1", "--die_shard", "1"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=child_processes.child_env(), start_new_session=True))
    try:
        outputs = []
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=RUN_TIMEOUT_S))
            except subprocess.TimeoutExpired:
                pytest.fail("a shard hung after its peer was killed")
        killed_at = time.monotonic()      # shard 1 ended first; shard 0 must not wait much past the timeout
        assert procs[1].returncode == -9
        assert procs[0].returncode != 0
        err = outputs[0][1].decode()
        assert "shard(s) 1 of 2 went missing" in err, err[-3000:]
        assert time.monotonic() - killed_at < SHARD_TIMEOUT_S + 10
    finally:
        child_processes.stop(procs, grace=1.0)


def test_launch_stops_the_other_shards_and_names_the_failed_one(tmp_path):
    code, out, err, _ = _launch(tmp_path, 2, "--model", "mlp", "--steps", "50", "--die_at_step", "1",
                                "--die_shard", "1")
    assert code != 0
    assert "shard 1 of 2" in err and "killed by SIGKILL" in err, err[-3000:]
    assert not (tmp_path / "out0.npz").exists()       # shard 0 was stopped before finishing 50 steps


def test_launch_refuses_a_missing_script():
    code, _, err, _ = _run([sys.executable, "-m", "caffe2py", "launch", "-n", "2", "/nonexistent/train.py"], 120)
    assert code == 1 and "no such script" in err


# ----------------------------------------------------------------- checkpoints

def test_a_restarted_job_resumes_from_shard_0s_checkpoint(tmp_path):
    """Two steps on two shards, a checkpoint (GetCheckpointParams), then a new job of
    four shards whose shard 0 alone loads it (FinalizeAfterCheckpoint spreads it to the
    others) and runs the third step: the same as three uninterrupted steps in one
    process (a checkpoint loads into any shard count)."""
    first = tmp_path / "first"
    first.mkdir()
    code, out, err, _ = _launch(first, 2, "--model", "mlp", "--steps", "2")
    assert code == 0, out[-3000:] + err[-3000:]
    code, out, err, _ = _launch(tmp_path, 4, "--model", "mlp", "--steps", "1", "--start_step", "2",
                                "--restore", str(first / "out0.npz"))
    assert code == 0, out[-3000:] + err[-3000:]
    _check_shards_match_reference(tmp_path, 4, _reference("mlp"))


# ----------------------------------------------------------------- the DLRM-style example

def test_the_dlrm_example_on_two_shards_prints_the_one_process_weights(tmp_path):
    """README's command: two shards of examples/dlrm_style_training.py (batch 6 each)
    end with the weights of one process on batches of 12."""
    example = os.path.join(os.path.dirname(HERE), "examples", "dlrm_style_training.py")
    code, out, err, _ = _run([sys.executable, "-m", "caffe2py", "launch", "-n", "2", "--compat", example,
                              "--steps", "3", "--timeout", str(SHARD_TIMEOUT_S)])
    assert code == 0, out[-3000:] + err[-3000:]
    code, single, err1, _ = _run([sys.executable, "-m", "caffe2py.compat", example, "--steps", "3",
                                  "--batch-size", "12"])
    assert code == 0, err1[-3000:]

    def weights(text, prefix=""):
        lines = [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]
        return {ln.split()[0]: np.array(ln.split()[1:], float) for ln in lines
                if ln.split() and ln.split()[0].endswith(("_w", "_b"))}
    sharded, whole = weights(out, "[shard 0] "), weights(single)
    assert sorted(sharded) == sorted(whole) and len(whole) == 11
    assert not any(line.startswith("[shard 1] emb") for line in out.splitlines())    # shard 1 prints none
    for name, value in whole.items():
        np.testing.assert_allclose(sharded[name], value, atol=2e-5, err_msg=name)


def _children(pid):
    found = []
    for task in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, task)) as f:
            found += [int(p) for p in f.read().split()]
    return found


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads the children from Linux's /proc")
def test_sigterm_to_launch_stops_every_shard(tmp_path):
    cmd = [sys.executable, "-m", "caffe2py", "launch", "-n", "2", "--grace", "2", WORKER, "--model", "mlp",
           "--steps", "100000", "--timeout_sec", str(SHARD_TIMEOUT_S)]
    launcher = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=child_processes.child_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        shards = []
        while len(shards) < 2 and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.2)
            shards = _children(launcher.pid)
        assert len(shards) == 2, "launch did not start two shards"
        time.sleep(2)
        launcher.terminate()
        _, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 143, err.decode()[-2000:]
        for pid in shards:       # stopped and reaped by the launcher
            assert not os.path.exists("/proc/%d" % pid), "shard %d outlived the launcher" % pid
    finally:
        child_processes.stop([launcher], grace=1.0)
