"""caffe2py.pipeline, queue_util, dataio's readers, cached_reader and db_file_reader
(Caffe2's modules of the same names): data piped between datasets and queues on
several threads, through processors and limits. Expected rows come from the
input arrays, computed with NumPy in the test."""
import numpy as np
import pytest

from caffe2py import core, schema, workspace
from caffe2py.cached_reader import CachedReader
from caffe2py.dataio import (CompositeReader, CountUntil, ReaderWithDelay, ReaderWithLimit,
                             ReaderWithTimeLimit)
from caffe2py.dataset import Dataset
from caffe2py.db_file_reader import DBFileReader
from caffe2py.net_builder import ops
from caffe2py.pipeline import NetProcessor, pipe, pipe_and_output
from caffe2py.queue_util import Queue
from caffe2py.session import LocalSession
from caffe2py.task import TaskGroup, WorkspaceType, final_output


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _source(scope_name, **columns):
    """A Dataset holding the given columns (fed now)."""
    init = core.Net(scope_name + "_init")
    values = schema.Struct(*[(name, np.asarray(col)) for name, col in columns.items()])
    with core.NameScope(scope_name):
        record = schema.NewRecord(init, values)
    schema.FeedRecord(record, values)
    workspace.RunNetOnce(init)
    return Dataset(record)


def _sink(scope_name, field_schema):
    init = core.Net(scope_name + "_init")
    with core.NameScope(scope_name):
        sink = Dataset(field_schema.clone_schema())
        sink.init_empty(init)
    workspace.RunNetOnce(init)
    return sink


def _column(dataset, name):
    return workspace.FetchBlob(str(dataset.content()[name]()))


def _run(group):
    LocalSession().run(group)


@pytest.mark.parametrize("threads", [dict(num_runtime_threads=3), dict(num_threads=4)])
def test_pipe_through_a_queue_with_ops_processors(threads):
    uid = np.arange(23, dtype=np.int64)
    value = np.linspace(0, 2, 23).astype(np.float32)
    src = _source("src", uid=uid, value=value)
    dst = _sink("dst", src.content())

    # Outputs named after the current net (NextName): with static threads the
    # threads share one workspace, and each thread's nets have their own names.
    def double_uid(rec):
        doubled = ops.Add([rec.uid(), rec.uid()], [ops.net().NextName("uid")])
        return schema.from_blob_list(rec, [doubled, rec.value()])

    def negate_value(rec):
        negated = ops.Negative([rec.value()], [ops.net().NextName("value")])
        return schema.from_blob_list(rec, [rec.uid(), negated])

    with TaskGroup() as group:
        q1 = pipe(src.reader(), output=Queue(capacity=5, num_dequeue_records=3), processor=double_uid, **threads)
        q2 = pipe(q1, processor=negate_value, **threads)
        pipe(q2, dst.writer(), **threads)
    _run(group)
    got = sorted(zip(_column(dst, "uid").tolist(), _column(dst, "value").tolist()))
    expected = sorted(zip((2 * uid).tolist(), (-value).tolist()))
    assert [g[0] for g in got] == [e[0] for e in expected]
    np.testing.assert_allclose([g[1] for g in got], [e[1] for e in expected], rtol=1e-6)


@pytest.mark.parametrize("limit,expected_rows,finished", [(7, 7, False), (500, 40, True), (None, 40, True)])
def test_reader_with_limit_counts_batches_and_reports_exhaustion(limit, expected_rows, finished):
    src = _source("src", label=np.arange(40, dtype=np.int64))
    dst = _sink("dst", src.content())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        reader = ReaderWithLimit(src.reader(), num_iter=limit)
        pipe(reader, dst.writer(), num_runtime_threads=4)
    _run(group)
    labels = sorted(_column(dst, "label").tolist())
    assert len(labels) == expected_rows and len(set(labels)) == expected_rows
    assert set(labels) <= set(range(40))
    assert bool(workspace.FetchBlob(str(reader.data_finished()))) is finished


def test_count_until_reads_zero_to_n():
    def as_rows(rec):       # the counter's value is a scalar; dataset rows need a dimension
        return schema.from_blob_list(rec, [ops.ExpandDims([rec.iter()], dims=[0])])

    dst = _sink("counted", schema.Struct(("iter", np.int64)))
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        pipe(CountUntil(6), dst.writer(), processor=as_rows)
    _run(group)
    assert sorted(_column(dst, "iter").tolist()) == list(range(6))


def test_time_limit_stops_early_and_no_limit_reads_everything():
    src = _source("src", label=np.arange(30, dtype=np.int64))
    slow = _sink("slow", src.content())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        limited = ReaderWithTimeLimit(ReaderWithDelay(src.reader(), 0.05), duration=0.2)
        pipe(limited, slow.writer())
    _run(group)
    rows = len(_column(slow, "label"))
    assert 0 < rows < 30
    assert not bool(workspace.FetchBlob(str(limited.data_finished())))

    full = _sink("full", src.content())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        unlimited = ReaderWithTimeLimit(src.reader(), duration=None)
        pipe(unlimited, full.writer())
    _run(group)
    assert sorted(_column(full, "label").tolist()) == list(range(30))
    assert bool(workspace.FetchBlob(str(unlimited.data_finished())))


def test_composite_reader_reads_side_by_side_and_stops_with_the_shortest():
    a = _source("a", x=np.arange(5, dtype=np.int64))
    b = _source("b", y=np.arange(100, 108, dtype=np.int64))
    composite = CompositeReader(["left", "right"], [a.reader(), b.reader()])
    assert composite.schema().field_names() == ["left:x", "right:y"]
    dst = _sink("pairs", composite.schema())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        pipe(composite, dst.writer())
    _run(group)
    np.testing.assert_array_equal(_column(dst, "left:x"), np.arange(5))
    np.testing.assert_array_equal(_column(dst, "right:y"), np.arange(100, 105))


def test_a_processor_stop_blob_ends_the_pipe():
    src = _source("src", v=np.arange(20, dtype=np.int64))
    dst = _sink("dst", src.content())

    def until_ten(rec):
        # a scalar, like the reader's own stop blob it is or-ed into
        stop, _ = ops.Reshape([ops.GE([rec.v(), ops.Const(np.int64(10))])], 2, shape=[])
        return rec, stop

    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        pipe(src.reader(), dst.writer(), processor=until_ten)
    _run(group)
    # the row that triggers the stop is not written
    assert sorted(_column(dst, "v").tolist()) == list(range(10))


def test_a_net_with_input_and_output_records_is_a_processor():
    src = _source("src", v=np.arange(6, dtype=np.float32))
    proc = core.Net("square")
    inp = proc.set_input_record(schema.Struct(("v", schema.Scalar(np.float32))))
    squared = proc.Mul([inp.v(), inp.v()], proc.NextScopedBlob("squared"))
    proc.set_output_record(schema.Struct(("v", schema.Scalar(np.float32, blob=squared))))
    dst = _sink("dst", src.content())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        processor = NetProcessor(proc)
        pipe(src.reader(), dst.writer(), processor=processor, num_threads=2)
    _run(group)
    np.testing.assert_allclose(sorted(_column(dst, "v").tolist()), np.arange(6.0) ** 2)
    maps = processor.blob_maps()
    assert len(maps) == 2 and all(m[str(inp.v())] != str(inp.v()) for m in maps)


def test_pipe_and_output_returns_the_task_outputs_and_no_threads_returns_the_reader():
    src = _source("src", v=np.arange(4, dtype=np.int64))
    processed = pipe(src.reader(), num_runtime_threads=0, processor=lambda rec: rec)
    assert processed.__class__.__name__ == "ProcessingReader"
    dst = _sink("dst", src.content())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        total = ops_total = None
        with core.NameScope("outputs"):
            init = core.Net("total_init")
            total = init.ConstantFill([], "total", shape=[], value=7.0)
        workspace.RunNetOnce(init)
        _, ops_total = pipe_and_output(src.reader(), dst.writer(), final_outputs=total)
    _run(group)
    assert float(ops_total.fetch()) == 7.0
    assert sorted(_column(dst, "v").tolist()) == [0, 1, 2, 3]


def test_cached_reader_builds_once_and_then_reads_the_file(tmp_path):
    path = str(tmp_path / "cache.db")
    first = _source("first", label=np.arange(12, dtype=np.int64))
    cached = CachedReader(first.reader(), db_path=path, db_type="LevelDB", batch_size=5)
    LocalSession().run(cached.build_cache_step())
    dst = _sink("dst1", cached.schema())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        pipe(cached, dst.writer(), num_threads=3)
    _run(group)
    assert sorted(_column(dst, "label").tolist()) == list(range(12))

    # another source, same file: the cache wins, the new source is never read
    other = _source("second", label=np.arange(100, 150, dtype=np.int64))
    again = CachedReader(other.reader())
    assert len(again.build_cache(path).Proto().substep) == 0 and len(again.build_cache(path).Proto().network) == 0
    dst2 = _sink("dst2", again.schema())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        pipe(again, dst2.writer())
    _run(group)
    assert sorted(_column(dst2, "label").tolist()) == list(range(12))


def test_db_file_reader_finds_its_schema_in_the_file(tmp_path):
    path = str(tmp_path / "cols.minidb")
    workspace.FeedBlob("b_col", np.array([1.5, 2.5, 3.5], np.float32))
    workspace.FeedBlob("a_col", np.array([7, 8, 9], np.int64))
    workspace.RunOperatorOnce(core.CreateOperator(
        "Save", ["b_col", "a_col"], [], db=path, db_type="minidb", absolute_path=True,
        blob_name_overrides=["b", "a"]))
    reader = DBFileReader(db_path=path, db_type="minidb", batch_size=2)
    assert reader.name == "cols_db_file_reader"
    assert reader.schema().field_names() == ["a", "b"]          # alphabetical, from the file
    dst = _sink("dst", reader.schema())
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        pipe(reader, dst.writer())
    _run(group)
    rows = sorted(zip(_column(dst, "a").tolist(), _column(dst, "b").tolist()))
    assert rows == [(7, 1.5), (8, 2.5), (9, 3.5)]
    with pytest.raises(AssertionError, match="not available"):
        DBFileReader(db_path=path, db_type="no_such_db")


def test_final_output_inside_a_processor_reports_after_the_task():
    src = _source("src", v=np.arange(9, dtype=np.int64))
    outputs = []

    def count(rec):
        with ops.task_init():
            counter = ops.CreateCounter([], init_count=0)
        ops.CountUp(counter)
        with ops.task_exit():
            outputs.append(final_output(ops.RetrieveCount(counter)))
        return rec

    with TaskGroup() as group:
        pipe(src.reader(), processor=count, num_runtime_threads=3)
    _run(group)
    assert int(outputs[0].fetch()) == 9
