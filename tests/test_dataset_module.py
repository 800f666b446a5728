"""caffe2py.schema and caffe2py.dataset (Caffe2's caffe2.python.schema / dataset)."""
import numpy as np
import pytest

from caffe2py import core, dataset, registry, schema, workspace
from caffe2py.registry import OpSchema, TensorType, register_kernel, register_schema


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


@pytest.fixture
def is_empty(monkeypatch):
    """The readers emit IsEmpty, which another work package registers; until it lands,
    a stand-in lives in a private copy of the registry for the test's duration."""
    if registry.has_op("IsEmpty"):
        return
    monkeypatch.setattr(registry, "_schemas", dict(registry._schemas))
    monkeypatch.setattr(registry, "_kernels", dict(registry._kernels))
    register_schema(OpSchema("IsEmpty", num_inputs=1, num_outputs=1,
                             inference=lambda ctx, ins: [TensorType((), 5)]))
    register_kernel("IsEmpty")(lambda ctx: lambda x: np.array(np.asarray(x).size == 0))


FIELDS = ["label", "dense", "ids:lengths", "ids:values", "kv:lengths", "kv:values:keys", "kv:values:values"]


def test_schema_from_column_list_rebuilds_lists_maps_and_structs():
    s = schema.from_column_list(FIELDS)
    assert s.field_names() == FIELDS
    assert isinstance(s.ids, schema.List) and isinstance(s.kv, schema.List)
    assert isinstance(s.kv._items, schema.Struct) and s.kv.keys is s.kv._items.keys
    assert s["ids:lengths"].field_types() == [np.dtype(np.void)]      # untyped columns stay untyped
    assert schema.List(np.float32).lengths.field_types() == [np.dtype(np.int32)]
    assert s.kv.values.id() == 6 and s.ids.slice() == slice(2, 4)
    # columns lengths/keys/values are read as a Map, whose own columns nest under values
    m = schema.from_column_list(["m:lengths", "m:keys", "m:values"])
    assert m.field_names() == ["m:lengths", "m:values:keys", "m:values:values"]


def test_schema_types_records_and_arithmetic():
    s = schema.Struct(
        ("a", schema.Scalar(np.float32)),
        ("b:c", schema.Scalar((np.int64, 3))),
        ("l", schema.List(np.float64)),
        ("m", schema.Map(np.int32, np.float32)),
    )
    assert s.field_names() == ["a", "b:c", "l:lengths", "l:values", "m:lengths", "m:values:keys", "m:values:values"]
    assert s.b.c.field_type() == np.dtype((np.int64, (3,)))
    values = [np.array([1.5], np.float32), np.array([[1, 2, 3]], np.int64), np.array([2], np.int32),
              np.array([0.5, 0.25]), np.array([1], np.int32), np.array([7], np.int32), np.array([9.0], np.float32)]
    record = schema.from_blob_list(s, values)
    np.testing.assert_array_equal(record.l["values"](), values[3])
    assert record.l.value is record.l["values"]
    merged = schema.Struct(("a", np.float32)) + schema.Struct(("x", np.int32))
    assert merged.field_names() == ["a", "x"]
    assert (s - schema.Struct(("b", schema.Struct(("c", np.int64))))).field_names()[:2] == ["a", "l:lengths"]
    assert schema.equal_schemas(s, s.clone_schema())
    with pytest.raises(TypeError):
        s.a = schema.Scalar()
    with pytest.raises(ValueError, match="ambiguous"):
        schema.Scalar(blob="name")

    net = core.Net("rec")
    blob_record = schema.NewRecord(net, s)
    assert all(isinstance(b, core.BlobReference) for b in blob_record.field_blobs())
    schema.FeedRecord(blob_record, values)
    fetched = schema.FetchRecord(blob_record)
    for got, ref in zip(fetched.field_blobs(), values):
        np.testing.assert_array_equal(got, ref)
    init = core.Net("init")
    empty = schema.InitEmptyRecord(init, s.clone_schema())
    workspace.RunNetOnce(init)
    arrays = [workspace.FetchBlob(str(b)) for b in empty.field_blobs()]
    assert [a.shape for a in arrays][:2] == [(0,), (0, 3)] and arrays[1].dtype == np.int64


def _feed(ds, records):
    """records: (label, dense[2], ids list, {key: value}); flattened here by hand."""
    cols = {f: [] for f in FIELDS}
    for label, dense, ids, kv in records:
        cols["label"].append(label)
        cols["dense"].append(dense)
        cols["ids:lengths"].append(len(ids))
        cols["ids:values"].extend(ids)
        cols["kv:lengths"].append(len(kv))
        cols["kv:values:keys"].extend(kv.keys())
        cols["kv:values:values"].extend(kv.values())
    dtypes = [np.int64, np.float32, np.int32, np.int64, np.int32, np.int32, np.float32]
    arrays = [np.array(cols[f], dtype=t).reshape((-1, 2) if f == "dense" else (-1,)) for f, t in zip(FIELDS, dtypes)]
    schema.FeedRecord(ds.content(), arrays)
    return arrays


def _records(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(i, rng.standard_normal(2).astype(np.float32).tolist(), list(rng.integers(0, 9, rng.integers(0, 4))),
             {int(k): float(k) / 2 for k in rng.integers(0, 50, rng.integers(0, 3))}) for i in range(n)]


def test_dataset_reader_reads_every_batch(is_empty):
    records = _records(10)
    ds = dataset.Dataset(FIELDS, name="train")
    init = core.Net("init")
    ds.init_empty(init)
    workspace.RunNetOnce(init)
    full = _feed(ds, records)
    reader_init = core.Net("reader_init")
    reader = ds.reader(reader_init, batch_size=3)
    workspace.RunNetOnce(reader_init)
    read = core.Net("read")
    should_stop, fields = reader.read_record(read)
    workspace.CreateNet(read)
    batches = []
    while True:
        workspace.RunNet(read.Name())
        if bool(workspace.FetchBlob(str(should_stop))):
            break
        batches.append([workspace.FetchBlob(str(b)) for b in fields.field_blobs()])
    assert len(batches) == 4
    for col, ref in enumerate(full):
        np.testing.assert_array_equal(np.concatenate([b[col] for b in batches]), ref)
    assert fields.field_names() == FIELDS


def test_dataset_random_reader_follows_the_indices(is_empty):
    records = _records(6, seed=4)
    ds = dataset.Dataset(schema.from_column_list(FIELDS))
    init = core.Net("init")
    ds.init_empty(init)
    workspace.RunNetOnce(init)
    _feed(ds, records)
    order = [4, 0, 5, 2, 1, 3]
    workspace.FeedBlob("order", np.array(order, np.int64))
    reader_init = core.Net("reader_init")
    reader = ds.random_reader(reader_init, indices=core.BlobReference("order"), batch_size=6)
    reader.computeoffset(reader_init)
    workspace.RunNetOnce(reader_init)
    read = core.Net("read")
    _, fields = reader.read(read)
    workspace.RunNetOnce(read)
    ordered = dataset.Dataset(FIELDS, name="ordered")
    ordered.field_blobs = [core.BlobReference("ordered/%d" % i) for i in range(len(FIELDS))]
    expected = _feed(ordered, [records[i] for i in order])
    for got, want in zip(fields, expected):
        np.testing.assert_array_equal(workspace.FetchBlob(str(got)), want)


def test_dataset_writer_appends_when_the_atomic_ops_exist(monkeypatch):
    runnable = registry.has_op("CreateMutex") and registry.has_op("AtomicAppend")
    if not runnable:     # another work package registers them: build the nets against schemas only
        monkeypatch.setattr(registry, "_schemas", dict(registry._schemas))
        for op in ("CreateMutex", "AtomicAppend"):
            register_schema(OpSchema(op))
    ds = dataset.Dataset(FIELDS)
    init = core.Net("init")
    ds.init_empty(init)
    writer = ds.writer(init)
    write = core.Net("write")
    batch = [core.BlobReference("in/%d" % i) for i in range(len(FIELDS))]
    writer.write(write, batch)
    assert [op.type for op in write.Proto().op] == ["CheckDatasetConsistency", "AtomicAppend"]
    assert list(write.Proto().op[0].input) == [str(b) for b in batch]
    if not runnable:
        pytest.skip("CreateMutex/AtomicAppend are registered by another work package")
    workspace.RunNetOnce(init)
    src = dataset.Dataset(FIELDS, name="src")
    src.field_blobs = batch
    records = _records(3)
    expected = _feed(src, records)
    workspace.RunNetOnce(write)
    workspace.RunNetOnce(write)
    for blob, ref in zip(ds.get_blobs(), expected):
        np.testing.assert_array_equal(workspace.FetchBlob(str(blob)), np.concatenate([ref, ref]))
