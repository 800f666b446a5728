"""Caffe2's Int8 tensor blob (int8::Int8TensorCPU): FeedBlob / FetchBlob / FetchInt8Blob
in Caffe2's Python form, Save / Load and SerializeBlob in Caffe2's BlobProto form
(records written here by hand from caffe2.proto's field numbers), schema and bound shape
inference, and the `caffe2py shapes` report of an Int8 net."""
import json
import struct

import numpy as np
import pytest

import _c2_wire as W
from caffe2py import core, workspace
from caffe2py.cli import main
from caffe2py.errors import Caffe2Error, OperatorError
from caffe2py.proto import caffe2_pb2
from caffe2py.serialization import SerializationError
from caffe2py.shape_inference import BoundShapeSpec, infer_bound_shapes


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def run(op_type, inputs, outputs, **kwargs):
    return workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **kwargs))


def qtensor_record(name, dims, scale, zero_point, data_type, values):
    """BlobProto {name 1, type 2 "Int8TensorCPU", qtensor 5: QTensorProto {dims 1 (int64,
    unpacked), precision 2, scale 3 (double), bias 4 (double), is_signed 5, data 6 (packed
    int32), name 7, data_type 8}}, fields in number order."""
    q = b"".join(W.f_varint(1, d) for d in dims)
    q += W.f_varint(2, 8) + W.key(3, 1) + struct.pack("<d", scale) + W.key(4, 1) + struct.pack("<d", zero_point)
    q += W.f_varint(5, 0)
    if len(values):
        q += W.f_packed_varints(6, [int(v) for v in values])
    q += W.f_bytes(7, name.encode()) + W.f_varint(8, data_type)
    return W.f_bytes(1, name.encode()) + W.f_bytes(2, b"Int8TensorCPU") + W.f_bytes(5, q)


# ----------------------------------------------------------------- feed / fetch

def test_feed_and_fetch_in_caffe2s_python_form():
    data = np.arange(24, dtype=np.uint8).reshape(1, 2, 3, 4)
    workspace.FeedBlob("q", workspace.Int8Tensor(data, 0.25, 3))
    data[0, 0, 0, 0] = 99                          # the blob holds its own copy
    fetched = workspace.FetchBlob("q")
    assert isinstance(fetched, tuple) and len(fetched) == 3     # Caffe2's fetcher: (data, scale, zero_point)
    q = workspace.FetchInt8Blob("q")
    assert q.data.dtype == np.uint8 and q.data.shape == (1, 2, 3, 4) and q.data[0, 0, 0, 0] == 0
    assert q.scale == 0.25 and q.zero_point == 3 and type(q).__name__ == "Int8Tensor"
    q.data[0, 0, 0, 1] = 77                        # nor does a fetch alias it
    assert workspace.FetchInt8Blob("q").data[0, 0, 0, 1] == 1
    # an int32 bias tensor, and the scale kept as Caffe2's float
    workspace.FeedBlob("b", workspace.Int8Tensor(np.array([-5, 7], np.int32), 0.1, 0))
    b = workspace.FetchInt8Blob("b")
    assert b.data.dtype == np.int32 and b.data.tolist() == [-5, 7] and b.scale == float(np.float32(0.1))


def test_fetch_int8_blob_of_a_float_blob_is_an_error():
    workspace.FeedBlob("f", np.ones(3, np.float32))
    with pytest.raises(Caffe2Error, match="'f' is not an Int8 blob"):
        workspace.FetchInt8Blob("f")


@pytest.mark.parametrize("value, message", [
    (workspace.Int8Tensor(np.ones(3, np.float32), 1.0, 0), "must be uint8"),
    (workspace.Int8Tensor(np.ones(3, np.uint8), float("nan"), 0), "scale must be a finite"),
    (workspace.Int8Tensor(np.ones(3, np.uint8), 1.0, 0.5), "zero_point must be an int32"),
])
def test_feeding_bad_int8_tensors_is_an_error(value, message):
    with pytest.raises(Caffe2Error, match=message):
        workspace.FeedBlob("q", value)
    assert not workspace.HasBlob("q")


def test_feeding_an_int8_tensor_to_a_gpu_is_an_error():
    option = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.PROTO_CUDA)
    with pytest.raises(Caffe2Error, match="Int8 tensors live on the CPU"):
        workspace.FeedBlob("q", workspace.Int8Tensor(np.ones(2, np.uint8), 1.0, 0), device_option=option)


# ----------------------------------------------------------------- BlobProto form

def test_serialize_blob_writes_caffe2s_qtensor_record():
    data = np.array([[0, 255, 17]], np.uint8)
    workspace.FeedBlob("q", workspace.Int8Tensor(data, 0.5, 128))
    assert workspace.SerializeBlob("q") == qtensor_record("q", [1, 3], 0.5, 128, W.UINT8, [0, 255, 17])
    workspace.FeedBlob("b", workspace.Int8Tensor(np.array([-3, 2 ** 31 - 1], np.int32), 0.125, 0))
    assert workspace.SerializeBlob("b") == qtensor_record("b", [2], 0.125, 0, W.INT32, [-3, 2 ** 31 - 1])


def test_load_reads_caffe2_written_int8_records(tmp_path):
    path = tmp_path / "int8.minidb"
    path.write_bytes(W.minidb([
        ("w", qtensor_record("w", [2, 1, 1, 2], 0.0625, 7, W.UINT8, [1, 2, 250, 4])),
        ("b", qtensor_record("b", [2], 0.001, 0, W.INT32, [-100, 100])),
        ("f#%0", W.float_chunk("f", np.array([1.5], np.float32), 0, 1)),
    ]))
    run("Load", [], [], db=str(path), db_type="minidb", absolute_path=1, load_all=1)
    w = workspace.FetchInt8Blob("w")
    assert w.data.tolist() == [[[[1, 2]]], [[[250, 4]]]] and w.data.dtype == np.uint8
    assert (w.scale, w.zero_point) == (0.0625, 7)
    b = workspace.FetchInt8Blob("b")
    assert b.data.tolist() == [-100, 100] and b.data.dtype == np.int32 and b.scale == float(np.float32(0.001))
    assert workspace.FetchBlob("f").tolist() == [1.5]


def test_save_then_load_round_trips_int8_blobs(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (3, 4, 5, 6), dtype=np.uint8)
    workspace.FeedBlob("q", workspace.Int8Tensor(data, 0.03, 101))
    workspace.FeedBlob("b", workspace.Int8Tensor(rng.integers(-9999, 9999, 6).astype(np.int32), 0.0003, 0))
    run("Save", ["q", "b"], [], db=str(tmp_path / "s.minidb"), db_type="minidb", absolute_path=1)
    workspace.ResetWorkspace()
    run("Load", [], ["q", "b"], db=str(tmp_path / "s.minidb"), db_type="minidb", absolute_path=1)
    q = workspace.FetchInt8Blob("q")
    assert (q.data == data).all() and q.scale == float(np.float32(0.03)) and q.zero_point == 101


@pytest.mark.parametrize("record, message", [
    (qtensor_record("w", [2, 2], 1.0, 0, W.UINT8, [1, 2, 3]), "holds 3 values where dims"),
    (qtensor_record("w", [2], 1.0, 0, W.FLOAT, [1, 2]), "unsupported data type FLOAT"),
    (qtensor_record("w", [2], 1.0, 0, W.UINT8, [1, 300]), r"outside \[0, 255\]"),
    (W.f_bytes(1, b"w") + W.f_bytes(2, b"Int8TensorCPU"), "has no qtensor"),
])
def test_malformed_int8_records_are_named_errors(tmp_path, record, message):
    path = tmp_path / "bad.minidb"
    path.write_bytes(W.minidb([("w", record)]))
    with pytest.raises(OperatorError, match=message) as info:
        run("Load", [], [], db=str(path), db_type="minidb", absolute_path=1, load_all=1)
    assert isinstance(info.value.cause, SerializationError)
    assert not workspace.HasBlob("w")


# ----------------------------------------------------------------- shape inference

def test_schema_inference_types_int8_blobs_as_uint8():
    workspace.FeedBlob("x", workspace.Int8Tensor(np.zeros((2, 8, 8, 3), np.uint8), 0.1, 0))
    net = core.Net("n")
    net.Int8MaxPool(["x"], ["y"], kernel=2, stride=2, order="NHWC", Y_scale=0.1)
    shapes, types = workspace.InferShapesAndTypes([net])
    assert shapes["x"] == [2, 8, 8, 3] and shapes["y"] == [2, 4, 4, 3]
    assert types["y"] == caffe2_pb2.TensorProto.UINT8


def test_bound_shape_inference_marks_int8_workspace_blobs_and_outputs_quantized():
    workspace.FeedBlob("w", workspace.Int8Tensor(np.zeros((5, 12), np.uint8), 0.02, 9))
    workspace.FeedBlob("b", workspace.Int8Tensor(np.zeros(5, np.int32), 0.0002, 0))
    net = core.Net("fc")
    net.Int8Quantize(["x"], ["xq"], Y_scale=0.01, Y_zero_point=128)
    net.Int8FC(["xq", "w", "b"], ["y"], Y_scale=0.5, Y_zero_point=3)
    from caffe2py.shape_inference import with_default_dim_types
    shapes, _ = infer_bound_shapes(net.Proto(), BoundShapeSpec(4, 1), {"x": with_default_dim_types([4, 12])},
                                   workspace.current_workspace())
    w, b, y = shapes["w"], shapes["b"], shapes["y"]
    assert w.is_quantized and w.q_info.scale == [float(np.float32(0.02))] and w.q_info.offset == [9.0]
    assert b.is_quantized and b.dtype == caffe2_pb2.TensorProto.INT32
    assert y.is_quantized and y.dims == [4, 5] and y.q_info.scale == [0.5] and y.q_info.offset == [3.0]
    assert shapes["xq"].is_quantized and not shapes["x"].is_quantized


def test_caffe2py_shapes_reports_an_int8_net(tmp_path, capsys):
    init = core.Net("init")
    init.Int8GivenTensorFill([], ["w"], values=bytes(range(6 * 3 * 3 * 2)), shape=[6, 3, 3, 2], Y_scale=0.05,
                             Y_zero_point=100)
    init.Int8GivenIntTensorFill([], ["b"], values=list(range(6)), shape=[6], Y_scale=0.0005)
    predict = core.Net("predict")
    predict.Proto().external_input.extend(["x", "w", "b"])
    predict.Int8Quantize(["x"], ["xq"], Y_scale=0.01, Y_zero_point=128)
    predict.Int8Conv(["xq", "w", "b"], ["y"], kernel=3, order="NHWC", Y_scale=0.2, Y_zero_point=4)
    predict.Int8Dequantize(["y"], ["out"])
    (tmp_path / "init.pb").write_bytes(init.Proto().SerializeToString())
    (tmp_path / "predict.pb").write_bytes(predict.Proto().SerializeToString())
    assert main(["shapes", "--predict-net", str(tmp_path / "predict.pb"), "--init-net", str(tmp_path / "init.pb"),
                 "--max-batch-size", "8", "--hint", "x,8,10,10,2", "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["blobs"]}
    assert rows["y"]["dims"] == [8, 8, 8, 6] and rows["y"]["dtype"] == "UINT8" and rows["y"]["quantized"]
    assert rows["w"]["quantized"] and rows["w"]["bytes"] == 6 * 3 * 3 * 2
    assert rows["b"]["dtype"] == "INT32" and rows["b"]["quantized"]
    assert rows["out"]["dtype"] == "FLOAT" and not rows["out"]["quantized"]
    assert rows["x"]["dtype"] == "FLOAT" and not rows["x"]["quantized"]
