"""CreateDB, TensorProtosDBInput, Load from DBReaders, and the text file reader, on
files the tests write from the formats' definitions."""
import numpy as np
import pytest

import _c2_wire as W
from caffe2py import core, workspace
from caffe2py.db import DBError
from caffe2py.errors import Caffe2Error, OperatorError
from caffe2py.registry import left_out_reasons


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def run(op, inputs, outputs, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(op, inputs, outputs, **kwargs))


def tensor_protos(image, label):
    """TensorProtos {repeated TensorProto protos = 1}: a float image and an int32 label."""
    img = W.tensor(image.shape, W.FLOAT, (3, W.f_packed_floats(3, image.reshape(-1).tolist())), "", device_type=None)
    lab = W.tensor([], W.INT32, (4, W.f_packed_varints(4, [label])), "", device_type=None)
    return W.f_bytes(1, img) + W.f_bytes(1, lab)


def image_db(path, n=5):
    rng = np.random.default_rng(0)
    items = [(rng.standard_normal((2, 3)).astype(np.float32), int(k * 10 - 7)) for k in range(n)]
    path.write_bytes(W.minidb([("%03d" % k, tensor_protos(img, lab)) for k, (img, lab) in enumerate(items)]))
    return items


def test_tensor_protos_db_input_one_record_and_batches(tmp_path):
    items = image_db(tmp_path / "img.minidb")
    run("CreateDB", [], ["reader"], db=str(tmp_path / "img.minidb"), db_type="minidb")
    run("TensorProtosDBInput", ["reader"], ["image", "label"])
    np.testing.assert_array_equal(workspace.FetchBlob("image"), items[0][0])
    assert workspace.FetchBlob("label").shape == () and int(workspace.FetchBlob("label")) == -7
    net = core.Net("input")
    net.TensorProtosDBInput(["reader"], ["images", "labels"], batch_size=3)
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())    # records 1, 2, 3
    np.testing.assert_array_equal(workspace.FetchBlob("images"), np.stack([items[k][0] for k in (1, 2, 3)]))
    workspace.RunNet(net.Name())    # records 4, then the reader starts over: 0, 1
    assert workspace.FetchBlob("labels").tolist() == [items[k][1] for k in (4, 0, 1)]
    assert workspace.FetchBlob("labels").dtype == np.int32


def test_sharded_readers_split_the_records(tmp_path):
    items = image_db(tmp_path / "img.minidb", n=6)
    for shard in (0, 1, 2):
        run("CreateDB", [], ["r%d" % shard], db=str(tmp_path / "img.minidb"), db_type="minidb",
            num_shards=3, shard_id=shard)
        run("TensorProtosDBInput", ["r%d" % shard], ["img", "lab"], batch_size=4)
        assert workspace.FetchBlob("lab").tolist() == [items[k][1] for k in (shard, shard + 3, shard, shard + 3)]
    with pytest.raises(Caffe2Error, match="shard_id"):
        run("CreateDB", [], ["bad"], db=str(tmp_path / "img.minidb"), db_type="minidb", num_shards=2, shard_id=2)


def test_db_input_errors(tmp_path):
    image_db(tmp_path / "img.minidb")
    run("CreateDB", [], ["reader"], db=str(tmp_path / "img.minidb"), db_type="minidb")
    with pytest.raises(OperatorError, match="holds 2 tensors; the op has 1 outputs"):
        run("TensorProtosDBInput", ["reader"], ["only_one"])
    workspace.FeedBlob("notreader", np.zeros(1))
    with pytest.raises(OperatorError, match="must be a DBReader"):
        run("TensorProtosDBInput", ["notreader"], ["a"])
    with pytest.raises(OperatorError) as info:
        run("CreateDB", [], ["r"], db=str(tmp_path / "missing.minidb"), db_type="minidb")
    assert isinstance(info.value.cause, DBError)
    (tmp_path / "empty.minidb").write_bytes(b"")
    run("CreateDB", [], ["empty"], db=str(tmp_path / "empty.minidb"), db_type="minidb")
    with pytest.raises(OperatorError, match="no records"):
        run("TensorProtosDBInput", ["empty"], ["a", "b"])


def test_load_from_db_readers_reads_on_from_the_cursor(tmp_path):
    """predictor_exporter's pattern: Load a first blob from a DBReader, then the rest."""
    records = [(name + "#%0", W.float_chunk(name, np.full(2, v, np.float32), 0, 2))
               for name, v in (("meta", 1.0), ("w", 2.0), ("b", 3.0))]
    (tmp_path / "m.minidb").write_bytes(W.minidb(records))
    run("CreateDB", [], ["reader"], db=str(tmp_path / "m.minidb"), db_type="minidb")
    run("Load", ["reader"], ["meta"])
    run("Load", ["reader"], ["w", "b"])
    assert workspace.FetchBlob("b").tolist() == [3.0, 3.0] and workspace.FetchBlob("w").tolist() == [2.0, 2.0]


@pytest.mark.parametrize("db_type,module", [("lmdb", "lmdb"), ("leveldb", "plyvel")])
def test_tensor_protos_from_sorted_dbs(tmp_path, db_type, module):
    """An image db written with the backend's own binding is read in key order."""
    binding = pytest.importorskip(module)
    items = [(np.full((1, 2), k, np.float32), k) for k in range(4)]
    path = str(tmp_path / db_type)
    keys = ["%03d" % k for k in (2, 0, 3, 1)]          # written out of order
    if module == "lmdb":
        env = binding.open(path, map_size=1 << 24)
        with env.begin(write=True) as txn:
            for key in keys:
                txn.put(key.encode(), tensor_protos(*items[int(key)]))
        env.close()
    else:
        db = binding.DB(path, create_if_missing=True)
        for key in keys:
            db.put(key.encode(), tensor_protos(*items[int(key)]))
        db.close()
    run("CreateDB", [], ["reader"], db=path, db_type=db_type)
    run("TensorProtosDBInput", ["reader"], ["img", "lab"], batch_size=4)
    assert workspace.FetchBlob("lab").tolist() == [0, 1, 2, 3]


def test_text_file_reader(tmp_path):
    path = tmp_path / "rows.tsv"
    path.write_bytes(b"alpha\t1.5\nbe\x00\tta\t-2e3xyz\ngamma\t  .25\ndropped")
    run("CreateTextFileReader", [], ["reader"], filename=str(path), num_passes=2,
        field_types=[core.DataType.STRING, core.DataType.FLOAT])
    net = core.Net("read")
    net.TextFileReaderRead(["reader"], ["name", "value"], batch_size=2)
    workspace.CreateNet(net)
    batches = []
    for _ in range(4):
        workspace.RunNet(net.Name())
        batches.append((workspace.FetchBlob("name").tolist(), workspace.FetchBlob("value").tolist()))
    # NUL escapes the tab after it; text after the last delimiter of a pass is no token
    assert batches[0] == ([b"alpha", b"be\tta"], [1.5, -2000.0])
    assert batches[1] == ([b"gamma", b"alpha"], [0.25, 1.5])          # the second pass starts
    assert batches[2] == ([b"be\tta", b"gamma"], [-2000.0, 0.25])
    assert batches[3] == ([], [])
    assert workspace.FetchBlob("value").dtype == np.float32
    (tmp_path / "short.tsv").write_bytes(b"a\t1\nb")        # the last row's field 2 never ends
    run("CreateTextFileReader", [], ["r"], filename=str(tmp_path / "short.tsv"),
        field_types=[core.DataType.STRING, core.DataType.FLOAT])
    run("TextFileReaderRead", ["r"], ["s", "f"], batch_size=5)
    assert workspace.FetchBlob("s").tolist() == [b"a"]
    (tmp_path / "half.tsv").write_bytes(b"a\t1\nb\t")
    run("CreateTextFileReader", [], ["r"], filename=str(tmp_path / "half.tsv"),
        field_types=[core.DataType.STRING, core.DataType.FLOAT])
    with pytest.raises(OperatorError, match="invalid number of fields at end of file"):
        run("TextFileReaderRead", ["r"], ["s", "f"], batch_size=5)


def test_text_file_reader_errors(tmp_path):
    (tmp_path / "bad.tsv").write_bytes(b"a\t1\nb\nc\t2\n")
    run("CreateTextFileReader", [], ["reader"], filename=str(tmp_path / "bad.tsv"),
        field_types=[core.DataType.STRING, core.DataType.FLOAT])
    with pytest.raises(OperatorError, match="invalid number of columns at row 2"):
        run("TextFileReaderRead", ["reader"], ["s", "f"], batch_size=5)
    (tmp_path / "nan.tsv").write_bytes(b"x\tabc\n")
    run("CreateTextFileReader", [], ["r2"], filename=str(tmp_path / "nan.tsv"),
        field_types=[core.DataType.STRING, core.DataType.FLOAT])
    with pytest.raises(OperatorError, match="invalid float: 'abc'"):
        run("TextFileReaderRead", ["r2"], ["s", "f"])
    with pytest.raises(OperatorError, match="expected 2, got 1"):
        run("TextFileReaderRead", ["r2"], ["s"])
    with pytest.raises(Caffe2Error, match="INT64 is not supported"):
        run("CreateTextFileReader", [], ["r3"], filename=str(tmp_path / "nan.tsv"),
            field_types=[core.DataType.INT64])
    with pytest.raises(OperatorError, match="error opening file"):
        run("CreateTextFileReader", [], ["r4"], filename=str(tmp_path / "none.tsv"),
            field_types=[core.DataType.STRING])


def test_image_input_is_no_longer_left_out():
    assert "ImageInput" not in left_out_reasons()


@pytest.mark.parametrize("db_type,module", [("minidb", None), ("leveldb", "plyvel")])
def test_db_reader_saves_and_loads(tmp_path, db_type, module):
    """A DBReader blob saves as Caffe2's DBReaderProto; seekable dbs resume at its key."""
    if module:
        binding = pytest.importorskip(module)
        db = binding.DB(str(tmp_path / "src"), create_if_missing=True)
        for k in range(4):
            db.put(b"%03d" % k, tensor_protos(np.zeros((1, 1), np.float32), k))
        db.close()
    else:
        image_db(tmp_path / "src", n=4)
    run("CreateDB", [], ["reader"], db=str(tmp_path / "src"), db_type=db_type)
    run("TensorProtosDBInput", ["reader"], ["img", "lab"], batch_size=2)     # now at record 2
    run("Save", ["reader"], [], db=str(tmp_path / "ckpt"), db_type="minidb", absolute_path=1)
    workspace.ResetWorkspace()
    run("Load", [], ["reader"], db=str(tmp_path / "ckpt"), db_type="minidb", absolute_path=1)
    run("TensorProtosDBInput", ["reader"], ["img", "lab"])
    expected = 2 if db_type == "leveldb" else (-7)        # minidb cannot seek: starts over
    assert int(workspace.FetchBlob("lab")) == expected
