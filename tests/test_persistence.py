"""Save / Load / Checkpoint / DBExists and the minidb format, against records built
by hand from Caffe2's format definitions (tests/_c2_wire.py)."""
import os
import struct

import numpy as np
import pytest

import _c2_wire as W
from caffe2py import core, workspace
from caffe2py.db import CorruptDBError, DBError, MissingBackendError, minidb
from caffe2py.errors import Caffe2Error, OperatorError
from caffe2py.proto import caffe2_pb2
from caffe2py.serialization import SerializationError


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def run(op_type, inputs, outputs, **kwargs):
    return workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **kwargs))


def save(path, blobs, **kwargs):
    kwargs.setdefault("db_type", "minidb")
    run("Save", blobs, [], db=str(path), absolute_path=1, **kwargs)


def load(path, outputs, **kwargs):
    kwargs.setdefault("db_type", "minidb")
    run("Load", [], outputs, db=str(path), absolute_path=1, **kwargs)


# ----------------------------------------------------------------- files Caffe2 wrote

def caffe2_written_file(path):
    """A minidb as Caffe2 lays it out: a float tensor in three chunks (stored out of
    order, as Caffe2's serializer threads may), an int64 tensor, a std::string blob, a
    uint8 tensor in byte_data (the byte-encoding flag's layout), a float16 tensor in
    int32_data and an int32 tensor with negative values, without segment/device
    fields (an older writer's layout)."""
    w = np.arange(10, dtype=np.float32).reshape(2, 5) / 4 - 1
    records = [
        ("gpu_0/w#%1", W.float_chunk("gpu_0/w", w, 4, 8)),
        ("gpu_0/w#%0", W.float_chunk("gpu_0/w", w, 0, 4)),
        ("gpu_0/w#%2", W.float_chunk("gpu_0/w", w, 8, 10)),
        ("it#%0", W.blob("it", "Tensor", W.tensor([1], W.INT64, (10, W.f_packed_varints(10, [2 ** 40 + 3])), "it",
                                                  segment=(0, 1)))),
        ("meta", W.blob("meta", "std::string", content=b"\x00model\xff")),
        ("u8#%0", W.blob("u8", "Tensor", W.tensor([3], W.UINT8, (5, W.f_bytes(5, b"\x00\x7f\xff")), "u8",
                                                  segment=(0, 3)))),
        ("h#%0", W.blob("h", "Tensor", W.tensor([2], W.FLOAT16, (4, W.f_packed_varints(
            4, np.array([1.5, -2.0], np.float16).view(np.uint16).tolist())), "h", segment=(0, 2)))),
        ("neg", W.blob("neg", "Tensor", W.tensor([2, 2], W.INT32, (4, W.f_packed_varints(4, [-1, 2, -(2 ** 31), 7])),
                                                 "neg", device_type=None))),
    ]
    path.write_bytes(W.minidb(records))
    return w


def test_load_a_file_caffe2_wrote(tmp_path):
    path = tmp_path / "c2.minidb"
    w = caffe2_written_file(path)
    load(path, ["w", "it", "meta", "u8", "h", "neg"], strip_prefix="gpu_0/")
    np.testing.assert_array_equal(workspace.FetchBlob("w"), w)
    assert workspace.FetchBlob("w").dtype == np.float32
    assert workspace.FetchBlob("it").tolist() == [2 ** 40 + 3] and workspace.FetchBlob("it").dtype == np.int64
    assert workspace.FetchBlob("meta") == b"\x00model\xff"
    assert workspace.FetchBlob("u8").tolist() == [0, 127, 255] and workspace.FetchBlob("u8").dtype == np.uint8
    np.testing.assert_array_equal(workspace.FetchBlob("h"), np.array([1.5, -2.0], np.float16))
    np.testing.assert_array_equal(workspace.FetchBlob("neg"), [[-1, 2], [-(2 ** 31), 7]])
    assert workspace.FetchBlob("neg").dtype == np.int32


def test_load_all_add_prefix_and_source_names(tmp_path):
    path = tmp_path / "c2.minidb"
    w = caffe2_written_file(path)
    load(path, [], load_all=1, add_prefix="m/")
    assert sorted(workspace.Blobs()) == ["m/gpu_0/w", "m/h", "m/it", "m/meta", "m/neg", "m/u8"]
    np.testing.assert_array_equal(workspace.FetchBlob("m/gpu_0/w"), w)
    load(path, ["x", "y"], source_blob_names=["it", "gpu_0/w"])
    np.testing.assert_array_equal(workspace.FetchBlob("y"), w)
    assert workspace.FetchBlob("x").tolist() == [2 ** 40 + 3]


def test_save_writes_caffe2s_bytes(tmp_path):
    """Each record is byte for byte what Caffe2's serializer writes for the same blob."""
    w = np.array([[0.5, -1.0, 3.25]], np.float32)
    ids = np.array([5, -6], np.int64)
    workspace.FeedBlob("w", w)
    workspace.FeedBlob("ids", ids)
    workspace.FeedBlob("tag", b"v1")
    path = tmp_path / "out.minidb"
    save(path, ["w", "ids", "tag"])
    expected = W.minidb([
        ("w#%0", W.float_chunk("w", w, 0, 3)),
        ("ids#%0", W.blob("ids", "Tensor", W.tensor([2], W.INT64, (10, W.f_packed_varints(10, [5, -6])), "ids",
                                                    segment=(0, 2)))),
        ("tag", W.blob("tag", "std::string", content=b"v1")),
    ])
    assert path.read_bytes() == expected


def test_chunked_save_matches_caffe2_chunks(tmp_path):
    x = np.arange(7, dtype=np.float32)
    workspace.FeedBlob("x", x)
    path = tmp_path / "c.minidb"
    save(path, ["x"], chunk_size=3)
    assert minidb.read_records(str(path)) == [
        (b"x#%0", W.float_chunk("x", x, 0, 3)), (b"x#%1", W.float_chunk("x", x, 3, 6)),
        (b"x#%2", W.float_chunk("x", x, 6, 7))]
    workspace.ResetWorkspace()
    load(path, ["x"])
    np.testing.assert_array_equal(workspace.FetchBlob("x"), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_, np.uint8,
                                   np.int8, np.uint16, np.int16, np.float16])
def test_round_trip_every_dtype(tmp_path, dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 4)) * 100).astype(dtype)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("empty", np.zeros((0, 5), dtype))
    workspace.FeedBlob("scalar", np.array(7, dtype))
    save(tmp_path / "d.minidb", ["x", "empty", "scalar"], chunk_size=5)
    workspace.ResetWorkspace()
    load(tmp_path / "d.minidb", ["x", "empty", "scalar"])
    for name, ref in (("x", x), ("empty", np.zeros((0, 5), dtype)), ("scalar", np.array(7, dtype))):
        got = workspace.FetchBlob(name)
        assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def test_string_tensor_round_trip(tmp_path):
    workspace.FeedBlob("s", np.array([b"a", b"", b"\xffz"], dtype=object))
    save(tmp_path / "s.minidb", ["s"])
    workspace.ResetWorkspace()
    load(tmp_path / "s.minidb", ["s"])
    assert workspace.FetchBlob("s").tolist() == [b"a", b"", b"\xffz"]


def test_serialization_options_regex_and_bfloat16(tmp_path):
    x = np.array([1.0, 1.00390625, 1.01171875, -3.3e-3, 65504.0, 1e-40], np.float32)
    workspace.FeedBlob("half_me", x)
    workspace.FeedBlob("keep", x)
    options = caffe2_pb2.SerializationOptions()
    o = options.options.add()
    o.blob_name_regex = "half_.*"
    o.float_format = caffe2_pb2.BlobSerializationOptions.FLOAT_BFLOAT16
    options.options.add().chunk_size = 2        # the rest: 2 elements per record
    save(tmp_path / "o.minidb", ["half_me", "keep"], options=options.SerializeToString())
    keys = [k for k, _ in minidb.read_records(str(tmp_path / "o.minidb"))]
    assert keys == [b"half_me#%0", b"keep#%0", b"keep#%1", b"keep#%2"]
    workspace.ResetWorkspace()
    load(tmp_path / "o.minidb", ["half_me", "keep"])
    # bfloat16 reference: round the float32 bit pattern to its upper 16 bits (+0x8000, truncate)
    bits = x.view(np.uint32).astype(np.uint64)
    ref = (((bits + 0x8000) >> 16) << 16).astype(np.uint32).view(np.float32)
    np.testing.assert_array_equal(workspace.FetchBlob("half_me"), ref)
    np.testing.assert_array_equal(workspace.FetchBlob("keep"), x)


def test_strip_prefix_and_overrides_on_save(tmp_path):
    workspace.FeedBlob("gpu_0/a", np.ones(2, np.float32))
    workspace.FeedBlob("b", np.zeros(1, np.int32))
    save(tmp_path / "p.minidb", ["gpu_0/a", "b"], strip_prefix="gpu_0/")
    assert [k for k, _ in minidb.read_records(str(tmp_path / "p.minidb"))] == [b"a#%0", b"b#%0"]
    save(tmp_path / "q.minidb", ["gpu_0/a", "b"], blob_name_overrides=["x", "y"])
    assert [k for k, _ in minidb.read_records(str(tmp_path / "q.minidb"))] == [b"x#%0", b"y#%0"]
    with pytest.raises(Caffe2Error, match="mutually exclusive"):
        save(tmp_path / "r.minidb", ["gpu_0/a", "b"], blob_name_overrides=["x", "y"], strip_prefix="g")
    with pytest.raises(Caffe2Error, match="blob_name_overrides .*mismatch"):
        save(tmp_path / "r.minidb", ["gpu_0/a", "b"], blob_name_overrides=["x"])
    with pytest.raises(Caffe2Error, match="duplicated input"):
        save(tmp_path / "r.minidb", ["gpu_0/a", "b"], blob_name_overrides=["x", "x"])


def test_multiple_dbs_and_duplicate_keys(tmp_path):
    workspace.FeedBlob("a", np.ones(2, np.float32))
    workspace.FeedBlob("b", np.full(3, 2.0, np.float32))
    save(tmp_path / "1.minidb", ["a"])
    save(tmp_path / "2.minidb", ["b"])
    workspace.ResetWorkspace()
    run("Load", [], ["a", "b"], dbs=[str(tmp_path / "1.minidb"), str(tmp_path / "2.minidb")],
        db_type="minidb", absolute_path=1)
    assert workspace.FetchBlob("b").tolist() == [2, 2, 2]
    workspace.FeedBlob("a", np.zeros(1, np.float32))
    save(tmp_path / "3.minidb", ["a"])
    with pytest.raises(OperatorError, match="duplicate key a"):
        run("Load", [], ["a"], dbs=[str(tmp_path / "1.minidb"), str(tmp_path / "3.minidb")],
            db_type="minidb", absolute_path=1, load_all=1)


def test_missing_outputs_and_allow_incomplete(tmp_path):
    workspace.FeedBlob("a", np.ones(2, np.float32))
    save(tmp_path / "a.minidb", ["a"])
    workspace.FeedBlob("zzz", np.array([9], np.int32))
    with pytest.raises(OperatorError, match="expected to load 2 blobs, got 1 only; missing: zzz"):
        load(tmp_path / "a.minidb", ["a", "zzz"])
    load(tmp_path / "a.minidb", ["a", "zzz"], allow_incomplete=True)
    assert workspace.FetchBlob("zzz").tolist() == [9]      # untouched
    with pytest.raises(OperatorError, match="output blob name nope does not exist"):
        load(tmp_path / "a.minidb", ["nope"], load_all=1)


def test_plan_time_argument_errors(tmp_path):
    workspace.FeedBlob("a", np.ones(2, np.float32))
    with pytest.raises(Caffe2Error, match="unknown|cannot find db implementation of type 'nosuchdb'"):
        save(tmp_path / "a", ["a"], db_type="nosuchdb")
    with pytest.raises(Caffe2Error, match="must specify a db name"):
        run("Save", ["a"], [], db_type="minidb")
    with pytest.raises(Caffe2Error, match="source_blob_names .*mismatch"):
        load(tmp_path / "a", ["a"], source_blob_names=["x", "y"])
    with pytest.raises(Caffe2Error, match="cannot load_all while using source_blob_names"):
        load(tmp_path / "a", ["a"], source_blob_names=["x"], load_all=1)
    with pytest.raises(Caffe2Error, match="duplicated db name"):
        run("Load", [], ["a"], dbs=["x", "x"], db_type="minidb")


def test_relative_paths_and_absolute_path_hint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    workspace.FeedBlob("a", np.arange(3, dtype=np.int32))
    run("Save", ["a"], [], db="rel.minidb", db_type="minidb")
    assert (tmp_path / "rel.minidb").exists()
    with pytest.raises(OperatorError, match="pass absolute_path=1"):
        run("Load", [], ["a"], db=str(tmp_path / "rel.minidb"), db_type="minidb")


def test_db_type_defaults_to_minidb(tmp_path):
    workspace.FeedBlob("a", np.arange(3, dtype=np.int32))
    run("Save", ["a"], [], db=str(tmp_path / "d"), absolute_path=1)
    assert minidb.read_records(str(tmp_path / "d"))[0][0] == b"a#%0"


# ----------------------------------------------------------------- corrupt files

def _corrupt_cases(good):
    first_value_len = struct.unpack_from("<i", good, 4)[0]
    yield "empty header tail", good[:3]
    yield "truncated value", good[:-1]
    yield "truncated mid-file", good[: len(good) // 2]
    yield "negative length", struct.pack("<ii", 3, -5) + good[8:]
    yield "huge length", good[:4] + struct.pack("<i", 2 ** 31 - 1) + good[8:]
    yield "zero key length", struct.pack("<ii", 0, first_value_len) + good[8:]


def test_corrupt_or_truncated_minidb_loads_nothing(tmp_path):
    workspace.FeedBlob("w", np.arange(6, dtype=np.float32))
    workspace.FeedBlob("b", np.ones(3, np.int64))
    save(tmp_path / "good.minidb", ["w", "b"])
    good = (tmp_path / "good.minidb").read_bytes()
    for case, data in _corrupt_cases(good):
        workspace.ResetWorkspace()
        workspace.FeedBlob("w", np.full(2, -1.0, np.float32))
        bad = tmp_path / "bad.minidb"
        bad.write_bytes(data)
        for kwargs in ({}, {"load_all": 1}):
            with pytest.raises(OperatorError) as info:
                load(bad, [] if kwargs else ["w", "b"], **kwargs)
            assert isinstance(info.value.cause, CorruptDBError), case
            assert "Load" in str(info.value) and "bad.minidb" in str(info.value), case
            assert workspace.Blobs() == ["w"], case
            assert workspace.FetchBlob("w").tolist() == [-1.0, -1.0], case


def test_malformed_records_load_nothing(tmp_path):
    x = np.arange(6, dtype=np.float32)
    cases = {
        "not a BlobProto": [("x#%0", b"\xff\xff\xff")],
        "missing chunk": [("x#%0", W.float_chunk("x", x, 0, 3))],
        "repeated chunk": [("x#%0", W.float_chunk("x", x, 0, 3)), ("x#%0", W.float_chunk("x", x, 0, 3)),
                           ("x#%1", W.float_chunk("x", x, 3, 6))],
        "chunk past the end": [("x#%0", W.blob("x", "Tensor", W.tensor(
            [6], W.FLOAT, (3, W.f_packed_floats(3, [1.0] * 4)), "x", segment=(4, 8))))],
        "values do not fill the segment": [("x#%0", W.blob("x", "Tensor", W.tensor(
            [6], W.FLOAT, (3, W.f_packed_floats(3, [1.0])), "x")))],
        "unknown blob type": [("x", W.blob("x", "SomethingElse", content=b"?"))],
    }
    for case, records in cases.items():
        workspace.ResetWorkspace()
        workspace.FeedBlob("keep", np.ones(1, np.float32))
        (tmp_path / "m.minidb").write_bytes(W.minidb(records + [("y#%0", W.float_chunk("y", x, 0, 6))]))
        with pytest.raises(OperatorError) as info:
            load(tmp_path / "m.minidb", [], load_all=1)
        assert isinstance(info.value.cause, SerializationError), case
        assert workspace.Blobs() == ["keep"], case


def test_failed_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "ckpt.minidb"
    workspace.FeedBlob("a", np.ones(2, np.float32))
    save(path, ["a"])
    before = path.read_bytes()
    workspace.FeedBlob("bad", np.array([b"x", 3], dtype=object))   # a string tensor holding an int
    with pytest.raises(OperatorError, match="bad.*element 1 is a int"):
        save(path, ["a", "bad"])
    workspace.current_workspace().blobs["obj"] = object()
    with pytest.raises(OperatorError, match="'obj' holds a object, which has no serializer"):
        save(path, ["a", "obj"])
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt.minidb"]


# ----------------------------------------------------------------- Checkpoint, DBExists

@pytest.mark.parametrize("op_type", ["Checkpoint", "Snapshot"])
def test_checkpoint_every_n_iterations(tmp_path, op_type):
    workspace.FeedBlob("iter", np.array([0], np.int64))
    workspace.FeedBlob("w", np.zeros(2, np.float32))
    net = core.Net("train")
    net.Iter("iter", "iter")
    net.Add(["w", "w"], "w2")
    getattr(net, op_type)(["iter", "w"], [], db=str(tmp_path / "ckpt_%04d.minidb"), db_type="minidb",
                          absolute_path=1, every=3)
    workspace.CreateNet(net)
    workspace.RunNet(net.Name(), 7)
    assert sorted(os.listdir(tmp_path)) == ["ckpt_0003.minidb", "ckpt_0006.minidb"]
    workspace.ResetWorkspace()
    load(tmp_path / "ckpt_0006.minidb", ["iter", "w"])
    assert workspace.FetchBlob("iter").tolist() == [6]


def test_checkpoint_needs_int64_counter(tmp_path):
    workspace.FeedBlob("it", np.array([3], np.int32))
    with pytest.raises(OperatorError, match="int64"):
        run("Checkpoint", ["it"], [], db=str(tmp_path / "c%d"), absolute_path=1)
    with pytest.raises(Caffe2Error, match="every"):
        run("Checkpoint", ["it"], [], db=str(tmp_path / "c%d"), absolute_path=1, every=0)


def test_db_exists(tmp_path):
    workspace.FeedBlob("a", np.ones(1, np.float32))
    save(tmp_path / "x.minidb", ["a"])
    run("DBExists", [], ["yes"], db_name=str(tmp_path / "x.minidb"), db_type="minidb", absolute_path=1)
    run("DBExists", [], ["no"], db_name=str(tmp_path / "y.minidb"), db_type="minidb", absolute_path=1)
    assert workspace.FetchBlob("yes").shape == () and bool(workspace.FetchBlob("yes"))
    assert not bool(workspace.FetchBlob("no"))


# ----------------------------------------------------------------- SerializeBlob, other backends

def test_serialize_blob_is_one_unchunked_record():
    x = np.arange(5, dtype=np.float32)
    workspace.FeedBlob("x", x)
    assert workspace.SerializeBlob("x") == W.float_chunk("x", x, 0, 5)
    workspace.DeserializeBlob("y", W.float_chunk("y", x, 0, 5))
    np.testing.assert_array_equal(workspace.FetchBlob("y"), x)
    workspace.DeserializeBlob("s", W.blob("s", "std::string", content=b"abc"))
    assert workspace.FetchBlob("s") == b"abc"


@pytest.mark.parametrize("db_type,module", [("lmdb", "lmdb"), ("leveldb", "plyvel")])
def test_optional_backends_round_trip(tmp_path, db_type, module):
    pytest.importorskip(module)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("s", b"meta")
    path = tmp_path / db_type
    save(path, ["x", "s"], db_type=db_type, chunk_size=5)
    with pytest.raises(OperatorError, match="exists|already"):
        save(path, ["x"], db_type=db_type)      # NEW refuses an existing db, as in Caffe2
    workspace.ResetWorkspace()
    load(path, ["x", "s"], db_type=db_type)
    np.testing.assert_array_equal(workspace.FetchBlob("x"), x)
    assert workspace.FetchBlob("s") == b"meta"
    run("DBExists", [], ["e"], db_name=str(path), db_type=db_type, absolute_path=1)
    assert bool(workspace.FetchBlob("e"))


def test_missing_binding_says_how_to_install(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_lmdb(name, *args, **kwargs):
        if name == "lmdb":
            raise ImportError("no lmdb here")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_lmdb)
    workspace.FeedBlob("x", np.ones(1, np.float32))
    with pytest.raises(OperatorError) as info:
        save(tmp_path / "l", ["x"], db_type="lmdb")
    assert isinstance(info.value.cause, MissingBackendError)
    assert "pip install 'caffe2py[lmdb]'" in str(info.value)
    assert not (tmp_path / "l").exists()


def test_minidb_rejects_empty_keys_and_values(tmp_path):
    with pytest.raises(DBError, match="non-empty"):
        minidb.write_records(str(tmp_path / "e"), [(b"k", b"")])
    assert not (tmp_path / "e").exists()


def test_string_blobs_keep_trailing_nul_bytes(tmp_path):
    """A serialized protobuf may end in a NUL byte: FeedBlob and Save/Load keep it."""
    data = b"\x08\x00\x10\x00"
    workspace.FeedBlob("proto", data)
    workspace.FeedBlob("list", [b"a\x00", b"\x00"])
    save(tmp_path / "n.minidb", ["proto", "list"])
    workspace.ResetWorkspace()
    load(tmp_path / "n.minidb", ["proto", "list"])
    assert workspace.FetchBlob("proto") == data
    assert workspace.FetchBlob("list").tolist() == [b"a\x00", b"\x00"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_, np.uint8, np.int8,
                                   np.uint16, np.int16, np.float16])
def test_fast_record_writer_matches_protobufs_serializer(dtype):
    """Save writes packed fields from the array bytes; the result is byte for byte what
    protobuf's own serializer makes of the same TensorProto (negative varints included)."""
    from caffe2py import serialization as S
    from caffe2py import tensor_records
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    for shape in [(0,), (), (3, 4), (257,)]:
        if info is not None:
            a = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
        else:
            a = (rng.standard_normal(shape) * 1000).astype(dtype)
        for begin, end in [(0, a.size), (a.size // 3, a.size)]:
            proto = caffe2_pb2.BlobProto(name="t", type="Tensor")
            proto.tensor.CopyFrom(S.tensor_chunk(a, "t", begin, end))
            assert tensor_records.chunk_record(a, "t", begin, end) == proto.SerializeToString()


def test_a_minidb_that_cannot_be_opened_leaves_nothing_behind(tmp_path, monkeypatch):
    # opening for NEW in a missing folder fails; the half-made db must not raise again
    # from __del__ (it printed "Exception ignored ... no attribute '_file'")
    import gc
    import sys
    from caffe2py.db import NEW, create_db
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(DBError, match="cannot open minidb"):
        create_db("minidb", str(tmp_path / "missing" / "x.minidb"), NEW)
    gc.collect()
    assert not unraisable
    assert not list(tmp_path.iterdir())
