"""`caffe2py score --ray`: the same job on a local Ray instance (ray.init(num_cpus=2))
gives the local run's outputs row for row, ids included; malformed shards are
reported by name and the others finish. Skipped without ray (pip install
'caffe2py[ray]'); Ray's start-up makes this module take about a minute."""
import os

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pq = pytest.importorskip("pyarrow.parquet")

from _scoring_data import demo_dataset, images, read_output, write_parquet  # noqa: E402

from caffe2py.scoring import ModelSpec, run_job  # noqa: E402
from caffe2py.scoring.ray_job import ray_init_options  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **ray_init_options())
    yield ray
    if started:
        ray.shutdown()


def test_ray_run_equals_local_run(tmp_path, local_ray):
    data = tmp_path / "data"
    made = demo_dataset(data, shards=3, rows=40)
    write_parquet(data / "no_ids.parquet", None, images(30, 7))         # ids are row numbers
    np.savez(data / "bad.npz", data=images(2, 1))                        # Ray reads Parquet only
    write_parquet(data / "bad_shape.parquet", np.arange(3), images(3, 2)[:, :, :20, :].copy())
    local = run_job(ModelSpec(), [str(data)], str(tmp_path / "local"), batch_size=16, progress=False)
    on_ray = run_job(ModelSpec(), [str(data)], str(tmp_path / "ray"), batch_size=16, workers=2,
                     ray_address="auto", progress=False)
    assert sorted(r.shard for r in on_ray.failed) == ["bad.npz", "bad_shape.parquet"]
    errors = {r.shard: r.error for r in on_ray.failed}
    assert "Parquet" in errors["bad.npz"]
    assert "'data'" in errors["bad_shape.parquet"] and "[1, 28, 28]" in errors["bad_shape.parquet"]
    assert sorted(r.shard for r in local.failed) == ["bad_shape.parquet"]
    good = sorted(list(made) + ["no_ids.parquet"])
    assert sorted(os.listdir(tmp_path / "ray")) == good
    for name in good:
        ids_local, local_out = read_output(str(tmp_path / "local" / name))
        ids_ray, ray_out = read_output(str(tmp_path / "ray" / name))
        assert ids_ray == ids_local                         # same rows, same order, same ids
        np.testing.assert_allclose(ray_out, local_out, rtol=1e-5, atol=1e-6)
        assert pq.read_schema(str(tmp_path / "ray" / name)).equals(
            pq.read_schema(str(tmp_path / "local" / name)), check_metadata=False)
    assert read_output(str(tmp_path / "ray" / "no_ids.parquet"))[0] == list(range(30))
    # the Ray run's outputs are complete: a rerun (local or Ray) skips them all
    again = run_job(ModelSpec(), [str(data)], str(tmp_path / "ray"), progress=False)
    assert sorted(again.skipped) == good
