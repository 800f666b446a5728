"""`caffe2py score` on this machine: every shard format, outputs next to the ids and
equal to the model run directly, resumable runs, malformed shards reported by name
while the others finish, worker processes, and the named errors for missing extras."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from _scoring_data import demo_dataset, demo_reference, images, read_output, write_parquet  # noqa: E402

from caffe2py.cli import main  # noqa: E402
from caffe2py.scoring import ModelSpec, run_job  # noqa: E402
from caffe2py.scoring.outputs import TEMP_PREFIX  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def demo_model():
    """The demo net prepared once for the in-process runs of this module."""
    return ModelSpec().prepare()


def score(tmp_path, sources, model=None, **kwargs):
    out = str(tmp_path / "out")
    summary = run_job(ModelSpec(), [str(s) for s in sources], out, progress=False, model=model, **kwargs)
    return summary, out


def test_parquet_shards_scored_next_to_their_ids(tmp_path, demo_model):
    made = demo_dataset(tmp_path / "data", shards=2, rows=21)
    summary, out = score(tmp_path, [tmp_path / "data"], demo_model, batch_size=8)
    assert not summary.failed and summary.rows == 42
    for name, (ids, data) in made.items():
        got_ids, got = read_output(os.path.join(out, name))
        assert got_ids == ids.tolist()
        np.testing.assert_allclose(got, demo_reference(data), **TOL)
    schema = pq.read_schema(os.path.join(out, "part-0.parquet"))
    assert schema.names == ["id", "softmax"] and schema.field("softmax").type.list_size == 10


@pytest.mark.parametrize("form", ["nested", "list", "npy", "raw"])
def test_tensor_column_forms(tmp_path, demo_model, form):
    data = images(9, 5)
    write_parquet(tmp_path / "x.parquet", np.array(["a%d" % k for k in range(9)]), data, form=form)
    summary, out = score(tmp_path, [tmp_path / "x.parquet"], demo_model, batch_size=4)
    assert not summary.failed, summary.failed
    ids, got = read_output(os.path.join(out, "x.parquet"))
    assert ids == ["a%d" % k for k in range(9)]        # string ids keep their type
    np.testing.assert_allclose(got, demo_reference(data), **TOL)


def test_npz_and_npy_shards(tmp_path, demo_model):
    data_z, data_y = images(6, 1), images(5, 2)
    np.savez(tmp_path / "z.npz", data=data_z, id=np.arange(6) + 100)
    np.save(tmp_path / "y.npy", data_y.astype(np.float64))     # doubles: cast for the float32 net
    summary, out = score(tmp_path, [tmp_path / "*.np?"], demo_model, batch_size=4)
    assert not summary.failed, summary.failed
    ids, got = read_output(os.path.join(out, "z.parquet"))
    assert ids == list(range(100, 106))
    np.testing.assert_allclose(got, demo_reference(data_z), **TOL)
    ids, got = read_output(os.path.join(out, "y.parquet"))
    assert ids == list(range(5))                                # no ids: row numbers
    np.testing.assert_allclose(got, demo_reference(data_y), **TOL)


def test_keep_chooses_outputs(tmp_path, demo_model):
    demo_dataset(tmp_path / "data", shards=1, rows=5)
    spec = ModelSpec(outputs=("fc1", "softmax"))
    out = str(tmp_path / "out")
    summary = run_job(spec, [str(tmp_path / "data")], out, progress=False)
    assert not summary.failed
    table = pq.read_table(os.path.join(out, "part-0.parquet"))
    assert table.column_names == ["id", "fc1", "softmax"]
    assert table.schema.field("fc1").type.list_size == 64


def test_onnx_model_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    # Gemm takes 2-D input: flatten first
    graph.node.insert(0, helper.make_node("Flatten", ["x"], ["xf"], axis=1))
    graph.node[1].input[0] = "xf"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    x = rng.standard_normal((11, 2, 3)).astype(np.float32)
    # rows as flat lists of 6: the model's declared [2, 3] reshapes them
    table = pa.table({"id": pa.array(np.arange(11)),
                      "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 6)})
    pq.write_table(table, tmp_path / "rows.parquet")
    out = str(tmp_path / "out")
    summary = run_job(ModelSpec(onnx=str(path)), [str(tmp_path / "rows.parquet")], out, batch_size=4, progress=False)
    assert not summary.failed, summary.failed
    ids, got = read_output(os.path.join(out, "rows.parquet"), "y")
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert ids == list(range(11))
    np.testing.assert_allclose(got, expected[0], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ malformed shards

def _malformed(folder):
    """Bad shards, each with the words its error must contain."""
    import pyarrow as pa
    data = images(4, 9)
    bad = {}
    pq.write_table(pa.table({"id": pa.array(np.arange(4)),
                             "pixels": pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1)), 784)}),
                   folder / "wrong_column.parquet")
    bad["wrong_column.parquet"] = ["no column 'data'", "pixels"]
    pq.write_table(pa.table({"data": pa.FixedSizeListArray.from_arrays(
        pa.array(data.reshape(-1)[:4 * 700]), 700)}), folder / "wrong_shape.parquet")
    bad["wrong_shape.parquet"] = ["700", "[1, 28, 28]"]
    write_parquet(folder / "whole.parquet", None, data)
    blob = (folder / "whole.parquet").read_bytes()
    (folder / "truncated.parquet").write_bytes(blob[: len(blob) // 2])
    os.remove(folder / "whole.parquet")
    bad["truncated.parquet"] = ["cannot read"]
    np.save(folder / "cut.npy", data)
    blob = (folder / "cut.npy").read_bytes()
    (folder / "cut.npy").write_bytes(blob[: len(blob) - 1000])
    bad["cut.npy"] = ["cannot read"]
    np.savez(folder / "no_data.npz", images=data)
    bad["no_data.npz"] = ["no array 'data'", "images"]
    pq.write_table(pa.table({"data": pa.array([list(range(784)), list(range(700))], pa.list_(pa.float32()))}),
                   folder / "ragged.parquet")
    bad["ragged.parquet"] = ["different lengths"]
    return bad


def test_malformed_shards_reported_by_name_others_finish(tmp_path, demo_model):
    made = demo_dataset(tmp_path / "data", shards=2, rows=6)
    bad = _malformed(tmp_path / "data")
    summary, out = score(tmp_path, [tmp_path / "data"], demo_model)
    errors = {r.shard: r.error for r in summary.failed}
    assert set(errors) == set(bad)
    for name, words in bad.items():
        assert "shard '%s'" % name in errors[name]
        for word in words:
            assert word in errors[name], (name, errors[name])
    for name, (ids, data) in made.items():
        got_ids, got = read_output(os.path.join(out, name))
        assert got_ids == ids.tolist()
        np.testing.assert_allclose(got, demo_reference(data), **TOL)
    # no output and no temporary file for a failed shard
    assert sorted(os.listdir(out)) == sorted(made)


def test_cli_exit_status_and_messages(tmp_path, capsys):
    demo_dataset(tmp_path / "data", shards=1, rows=3)
    np.savez(tmp_path / "data" / "bad.npz", images=images(2, 0))
    code = main(["--quiet", "score", str(tmp_path / "data"), "-o", str(tmp_path / "out"), "--batch-size", "2"])
    captured = capsys.readouterr()
    assert code == 1
    assert "shard 'bad.npz'" in captured.err and "no array 'data'" in captured.err
    assert "scored 3 row(s) in 1 shard(s)" in captured.out and "1 shard(s) failed" in captured.out
    assert "\r" not in captured.err          # no progress bar off a terminal


# ------------------------------------------------------------------ resuming

def _all_outputs(out):
    return {name: read_output(os.path.join(out, name)) for name in sorted(os.listdir(out))}


def test_complete_outputs_skipped_changed_or_corrupt_redone(tmp_path, demo_model):
    made = demo_dataset(tmp_path / "data", shards=3, rows=5)
    first, out = score(tmp_path, [tmp_path / "data"], demo_model)
    assert len(first.results) == 3 and not first.failed
    stamps = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in made}
    # a changed input, a corrupt output, a temp file of a dead run
    ids, data = made["part-1.parquet"]
    write_parquet(tmp_path / "data" / "part-1.parquet", ids, data[::-1].copy())
    with open(os.path.join(out, "part-2.parquet"), "r+b") as f:
        f.truncate(100)
    stale = os.path.join(out, "%s999999999-dead-part-0.parquet" % TEMP_PREFIX)
    open(stale, "wb").close()
    second, _ = score(tmp_path, [tmp_path / "data"], demo_model)
    assert second.skipped == ["part-0.parquet"]
    assert sorted(r.shard for r in second.results) == ["part-1.parquet", "part-2.parquet"]
    assert os.stat(os.path.join(out, "part-0.parquet")).st_mtime_ns == stamps["part-0.parquet"]
    assert not os.path.exists(stale)
    _, got = read_output(os.path.join(out, "part-1.parquet"))
    np.testing.assert_allclose(got, demo_reference(data[::-1]), **TOL)
    # another model (other outputs kept) does not take these outputs as its own
    third = run_job(ModelSpec(outputs=("fc2",)), [str(tmp_path / "data")], out, progress=False)
    assert not third.skipped and len(third.results) == 3


def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
    demo_dataset(tmp_path / "data", shards=5, rows=48)
    whole = str(tmp_path / "whole")
    assert run_job(ModelSpec(), [str(tmp_path / "data")], whole, batch_size=4, progress=False).rows == 5 * 48
    out = str(tmp_path / "out")
    cmd = [sys.executable, "-m", "caffe2py", "--quiet", "score", str(tmp_path / "data"), "-o", out,
           "--batch-size", "4"]
    env = dict(os.environ, CAFFE2PY_JIT="inline")
    victim = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        # kill it once at least one shard is done and it is writing another
        while time.monotonic() < deadline and victim.poll() is None:
            names = os.listdir(out) if os.path.isdir(out) else []
            if any(n.endswith(".parquet") and not n.startswith(".") for n in names) and \
                    any(n.startswith(TEMP_PREFIX) for n in names):
                break
            time.sleep(0.02)
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.wait()
    finished = [n for n in os.listdir(out) if not n.startswith(".")]
    if len(finished) == 5:
        pytest.skip("the run finished before it could be killed (machine too fast for this test)")
    assert finished, "the run was killed before it finished any shard"
    # every output with a final name is whole and equal to the uninterrupted run's
    for name in finished:
        a, b = read_output(os.path.join(out, name)), read_output(os.path.join(whole, name))
        assert a[0] == b[0] and np.array_equal(a[1], b[1])
    resumed = run_job(ModelSpec(), [str(tmp_path / "data")], out, batch_size=4, progress=False)
    assert sorted(resumed.skipped) == sorted(finished)
    assert len(resumed.results) == 5 - len(finished) and not resumed.failed
    assert sorted(os.listdir(out)) == sorted(os.listdir(whole))     # temp files gone
    for name, (ids, values) in _all_outputs(whole).items():
        got_ids, got = read_output(os.path.join(out, name))
        assert got_ids == ids and np.array_equal(got, values)


# ---------------------------------------------------------- worker processes

def test_two_worker_processes_match_one(tmp_path, demo_model):
    made = demo_dataset(tmp_path / "data", shards=3, rows=10)
    summary = run_job(ModelSpec(), [str(tmp_path / "data")], str(tmp_path / "out2"), batch_size=4, workers=2,
                      progress=False)
    assert not summary.failed, summary.failed
    for name, (ids, data) in made.items():
        got_ids, got = read_output(str(tmp_path / "out2" / name))
        assert got_ids == ids.tolist()
        np.testing.assert_allclose(got, demo_reference(data), **TOL)


# -------------------------------------------------------------- bad requests

def test_bad_requests_are_named_errors(tmp_path):
    from caffe2py.errors import Caffe2Error
    with pytest.raises(Caffe2Error, match="does not exist"):
        ModelSpec(onnx=str(tmp_path / "missing.onnx"))
    with pytest.raises(Caffe2Error, match="holds no .parquet"):
        run_job(ModelSpec(), [str(tmp_path)], str(tmp_path / "out"), progress=False)
    demo_dataset(tmp_path / "a", shards=1, rows=2)
    demo_dataset(tmp_path / "b", shards=1, rows=2)
    with pytest.raises(Caffe2Error, match="would both write output 'part-0.parquet'"):
        run_job(ModelSpec(), [str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "out"), progress=False)
    with pytest.raises(Caffe2Error, match="no such blob"):
        ModelSpec(outputs=("nope",)).prepare()
    with pytest.raises(Caffe2Error, match="batch-size"):
        run_job(ModelSpec(), [str(tmp_path / "a")], str(tmp_path / "out"), batch_size=0, progress=False)


def test_missing_extras_say_how_to_get_them(monkeypatch, tmp_path):
    import builtins

    from caffe2py.scoring import deps
    real_import = builtins.__import__

    def no_ray_or_arrow(name, *args, **kwargs):
        if name.split(".")[0] in ("ray", "pyarrow"):
            raise ImportError("No module named %r" % name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray_or_arrow)
    with pytest.raises(deps.MissingDependency, match=r"caffe2py\[score\]"):
        deps.require_pyarrow()
    with pytest.raises(deps.MissingDependency, match=r"caffe2py\[ray\]"):
        deps.require_ray()


def test_unloadable_fsspec_http_is_marked_absent_before_a_ray_job(monkeypatch):
    # Ray Data treats only ModuleNotFoundError as "no HTTP file system"; a racing
    # half-import gave ImportError and failed the job
    import builtins

    from caffe2py.scoring.ray_job import settle_fsspec_http
    name = "fsspec.implementations.http"
    monkeypatch.setitem(sys.modules, name, None)      # records the entry, restored afterwards
    del sys.modules[name]
    real_import = builtins.__import__

    def no_aiohttp(module, *args, **kwargs):
        if module == name:
            raise ImportError("No module named 'aiohttp'")
        return real_import(module, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_aiohttp)
    settle_fsspec_http()
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert sys.modules[name] is None
    with pytest.raises(ModuleNotFoundError):
        __import__(name)
