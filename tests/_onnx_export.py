"""Helpers for the ONNX export tests: build small Caffe2 nets, run them in caffe2py
and, exported, in onnxruntime, and compare."""
import numpy as np
import pytest

from caffe2py import core
from caffe2py.onnx import frontend
from caffe2py.proto import caffe2_pb2
from caffe2py.workspace import Workspace

_FILLS = {np.dtype(np.float32): "GivenTensorFill", np.dtype(np.float64): "GivenTensorDoubleFill",
          np.dtype(np.int32): "GivenTensorIntFill", np.dtype(np.int64): "GivenTensorInt64Fill",
          np.dtype(np.bool_): "GivenTensorBoolFill"}


def init_net_of(constants, extra=None):
    """An init NetDef with a GivenTensor*Fill per array (then `extra(net)` ops)."""
    net = core.Net("init")
    for name, value in constants.items():
        value = np.asarray(value)
        values = value.reshape(-1).tolist()
        getattr(net, _FILLS[value.dtype])([], name, shape=list(value.shape), values=values)
    if extra is not None:
        extra(net)
    return net.Proto()


def predict_net(build, inputs, outputs, name="predict"):
    net = core.Net(name)
    build(net)
    proto = net.Proto()
    del proto.external_input[:]
    proto.external_input.extend(inputs)
    del proto.external_output[:]
    proto.external_output.extend(outputs)
    return proto


def value_info_of(feeds, symbolic_batch=False):
    from onnx import helper
    info = {}
    for name, value in feeds.items():
        dims = list(np.shape(value))
        if symbolic_batch and dims:
            dims[0] = "batch"
        info[name] = (helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype), dims)
    return info


def run_caffe2(pred, init, feeds):
    ws = Workspace("export-test")
    if init is not None:
        ws.run_net_once(init)
    for name, value in feeds.items():
        ws.feed_blob(name, value)
    ws.run_net_once(pred)
    return [ws.fetch_blob(name) for name in pred.external_output]


def run_onnxruntime(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {k: np.asarray(v) for k, v in feeds.items()})


def check_export(pred, init, feeds, value_info=None, opset=None, rtol=1e-5, atol=1e-6):
    """Export, pass onnx's full check, and match caffe2py's outputs in onnxruntime.
    Returns the model."""
    import onnx
    expected = run_caffe2(pred, init, feeds)
    model = frontend.caffe2_net_to_onnx_model(pred, init, value_info or value_info_of(feeds), opset=opset)
    onnx.checker.check_model(model, full_check=True)
    got = run_onnxruntime(model, feeds)
    assert len(got) == len(expected)
    for name, e, g in zip(pred.external_output, expected, got):
        assert g.shape == e.shape, (name, g.shape, e.shape)
        assert g.dtype == e.dtype, (name, g.dtype, e.dtype)
        if e.dtype.kind in "iub":
            np.testing.assert_array_equal(g, e, err_msg=name)
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)
    return model


def onnx_op_types(model):
    return [n.op_type for n in model.graph.node]


def netdef(ops, inputs, outputs):
    net = caffe2_pb2.NetDef(name="n")
    net.op.extend(ops)
    net.external_input.extend(inputs)
    net.external_output.extend(outputs)
    return net
