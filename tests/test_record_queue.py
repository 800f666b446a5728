"""caffe2py.record_queue (Caffe2's caffe2.python.record_queue): producers read a
dataset through an optional processing net into a BlobsQueue; consumers drain it.
Expected values are computed from the input rows with NumPy."""
import numpy as np
import pytest

from caffe2py import core, schema, workspace
from caffe2py.dataset import Dataset
from caffe2py.record_queue import RecordQueue


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _source(label, value):
    """A dataset holding the given columns and a reader of it (one row per read)."""
    fields = schema.Struct(("label", schema.Scalar(np.int32)), ("value", schema.Scalar(np.float32)))
    init = core.Net("init")
    ds = Dataset(fields)
    ds.init_empty(init)
    record = schema.NewRecord(init, fields)
    schema.FeedRecord(record, [label, value])
    ds.writer(init_net=init).write_record(init, record)
    reader = ds.reader(init_net=init)
    return fields, init, reader


def _drain(queue_reader, sink_fields, num_consumers, producer_step, exit_step, init):
    sink = Dataset(sink_fields, name="sink")
    sink.init_empty(init_net=init)
    sink_writer = sink.writer(init_net=init)
    workspace.RunNetOnce(init)
    consumers = []
    for i in range(num_consumers):
        read = core.Net("consume_%d" % i)
        should_stop, record = queue_reader.read_record(read)
        write = core.Net("store_%d" % i)
        sink_writer.write(write, record.field_blobs())
        consumers.append(core.execution_step(
            "consumer_%d" % i, [core.execution_step("read_%d" % i, read),
                                core.execution_step("write_%d" % i, write)],
            should_stop_blob=should_stop))
    work = core.execution_step("work", [
        core.execution_step("produce", [producer_step, exit_step]),
        core.execution_step("consume", consumers, concurrent_substeps=True)],
        concurrent_substeps=True)
    plan = core.Plan("record_queue_test")
    plan.AddStep(work)
    workspace.RunPlan(plan)
    return workspace.FetchBlobs(sink.get_blobs())


def test_processed_records_pass_through_the_queue_once_each():
    label = np.arange(10, dtype=np.int32)
    value = np.linspace(0.5, 5.0, 10).astype(np.float32)
    fields, init, reader = _source(label, value)
    queue = RecordQueue(fields, num_threads=3, capacity=2)

    def process(net, record):
        doubled = net.Scale(record.value(), scale=2.0)
        return schema.from_blob_list(record, [net.Copy(record.label()), doubled])

    queue_reader, producer_step, exit_step, out_schema = queue.build(reader, process)
    assert out_schema is queue.schema and queue_reader is queue.reader
    got_label, got_value = _drain(queue_reader, fields, 2, producer_step, exit_step, init)
    # consumers and producers interleave: compare as sets of rows
    rows = sorted(zip(got_label.tolist(), got_value.tolist()))
    expected = sorted(zip(label.tolist(), (2 * value).tolist()))
    assert [r[0] for r in rows] == [e[0] for e in expected]
    np.testing.assert_allclose([r[1] for r in rows], [e[1] for e in expected], rtol=1e-6)


def test_field_names_make_the_schema_and_records_pass_unprocessed():
    label = np.array([7, 8, 9], dtype=np.int32)
    value = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    fields, init, reader = _source(label, value)
    queue = RecordQueue(["label", "value"], name="plain")
    assert queue.schema.field_names() == ["label", "value"]
    queue_reader, producer_step, exit_step, _ = queue.build(reader)
    got_label, got_value = _drain(queue_reader, fields, 1, producer_step, exit_step, init)
    assert sorted(got_label.tolist()) == [7, 8, 9]
    assert sorted(got_value.tolist()) == [1.0, 2.0, 4.0]


def test_the_writer_refuses_records_of_unequal_length():
    fields = schema.Struct(("a", schema.Scalar(np.float32)), ("b", schema.Scalar(np.float32)))
    queue = RecordQueue(fields, name="checked")
    net = core.Net("bad_write")
    workspace.FeedBlob("a", np.zeros(3, np.float32))
    workspace.FeedBlob("b", np.zeros(2, np.float32))
    queue.writer.write(net, [core.BlobReference("a"), core.BlobReference("b")])
    with pytest.raises(Exception, match="CheckDatasetConsistency"):
        workspace.RunNetOnce(net)


def test_fields_must_be_a_struct_or_a_list_of_names():
    with pytest.raises(TypeError):
        RecordQueue(("a", "b"))
