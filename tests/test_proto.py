"""The committed bindings match proto/caffe2.proto, and the wire format matches
Caffe2's field numbers (checked on bytes written by hand here)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from caffe2py.proto import caffe2_pb2
from caffe2py.tensors import numpy_to_tensor, tensor_to_numpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_committed_bindings_match_proto():
    pytest.importorskip("grpc_tools")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_proto.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_short_device_aliases():
    assert caffe2_pb2.CPU == 0 and caffe2_pb2.CUDA == 1 and caffe2_pb2.HIP == 6
    assert caffe2_pb2.PROTO_CUDA == caffe2_pb2.CUDA


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, wire, payload):
    key = _varint((num << 3) | wire)
    if wire == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def test_operatordef_field_numbers_on_the_wire():
    # OperatorDef: input=1, output=2, name=3, type=4, arg=5, engine=7, domain=11, op_version=12.
    arg = _field(1, 2, b"axis") + _field(3, 0, _varint(2))
    raw = (_field(1, 2, b"x") + _field(2, 2, b"y") + _field(3, 2, b"n") + _field(4, 2, b"Relu")
           + _field(5, 2, arg) + _field(7, 2, b"CUDNN") + _field(11, 2, b"ai.onnx")
           + _field(12, 0, _varint(13)))
    op = caffe2_pb2.OperatorDef.FromString(raw)
    assert (list(op.input), list(op.output), op.name, op.type) == (["x"], ["y"], "n", "Relu")
    assert op.arg[0].name == "axis" and op.arg[0].i == 2
    assert op.engine == "CUDNN" and op.domain == "ai.onnx" and op.op_version == 13


def test_netdef_and_device_option_field_numbers():
    dev = _field(1, 0, _varint(1)) + _field(2, 0, _varint(3))
    raw = (_field(1, 2, b"net") + _field(3, 2, b"dag") + _field(5, 2, dev)
           + _field(7, 2, b"in") + _field(8, 2, b"out"))
    net = caffe2_pb2.NetDef.FromString(raw)
    assert net.name == "net" and net.type == "dag"
    assert net.device_option.device_type == 1 and net.device_option.device_id == 3
    assert list(net.external_input) == ["in"] and list(net.external_output) == ["out"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8,
                                   np.int16, np.uint16, np.bool_, np.float16])
def test_tensor_roundtrip(dtype):
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal((3, 4)) * 50).astype(dtype)
    t = numpy_to_tensor(arr, name="a")
    back = tensor_to_numpy(caffe2_pb2.TensorProto.FromString(t.SerializeToString()))
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)


def test_tensor_float16_stored_as_int32_bits():
    arr = np.array([1.0, -2.5], dtype=np.float16)
    t = numpy_to_tensor(arr)
    assert list(t.int32_data) == arr.view(np.uint16).tolist()


def test_tensor_raw_data_and_strings():
    t = caffe2_pb2.TensorProto(dims=[2], data_type=caffe2_pb2.TensorProto.INT32,
                               raw_data=np.array([7, -1], "<i4").tobytes())
    np.testing.assert_array_equal(tensor_to_numpy(t), [7, -1])
    s = caffe2_pb2.TensorProto(dims=[2], data_type=caffe2_pb2.TensorProto.STRING, string_data=[b"a", b"bc"])
    assert tensor_to_numpy(s).tolist() == [b"a", b"bc"]
