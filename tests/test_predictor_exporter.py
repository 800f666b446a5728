"""predictor_exporter and mobile_exporter: a model saved, reloaded in a fresh workspace
and run gives the NumPy reference of its own formula."""
import numpy as np
import pytest

from caffe2py import brew, core, model_helper, workspace
from caffe2py.db import minidb
from caffe2py.predictor import mobile_exporter, predictor_exporter as pe
from caffe2py.predictor import predictor_py_utils as pred_utils
from caffe2py.predictor_constants import predictor_constants as pc
from caffe2py.proto import caffe2_pb2


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def build_mlp():
    model = model_helper.ModelHelper(name="mlp")
    hidden = brew.fc(model, "data", "hidden", dim_in=5, dim_out=8)
    hidden = brew.relu(model, hidden, hidden)
    logits = brew.fc(model, hidden, "logits", dim_in=8, dim_out=3)
    brew.softmax(model, logits, "prob")
    workspace.RunNetOnce(model.param_init_net)
    params = [str(p) for p in model.params]
    return model, params


def reference(x, p):
    """The MLP's formula in NumPy: softmax(relu(x W1' + b1) W2' + b2)."""
    h = np.maximum(x @ p["hidden_w"].T + p["hidden_b"], 0)
    z = h @ p["logits_w"].T + p["logits_b"]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("db_type,module", [("minidb", None), ("lmdb", "lmdb"), ("leveldb", "plyvel")])
def test_save_and_prepare_prediction_net(tmp_path, db_type, module):
    if module:
        pytest.importorskip(module)
    model, params = build_mlp()
    values = {p: workspace.FetchBlob(p) for p in params}
    meta = pe.PredictorExportMeta(predict_net=model.net.Proto(), parameters=params, inputs=["data"],
                                  outputs=["prob"], shapes={"data": (1, 5), "prob": (1, 3)})
    path = str(tmp_path / ("pred." + db_type))
    pe.save_to_db(db_type, path, meta)
    if db_type == "minidb":
        keys = [k for k, _ in minidb.read_records(path)]
        assert keys[0] == b"!!META_NET_DEF" and sorted(keys[1:]) == sorted(p.encode() + b"#%0" for p in params)

    workspace.ResetWorkspace()
    net = pe.prepare_prediction_net(path, db_type)
    # creating the predict net created its ops' outputs (Caffe2's operator constructors do)
    outputs = {name for op in model.net.Proto().op for name in op.output}
    assert sorted(workspace.Blobs()) == sorted(
        set(params + ["!!META_NET_DEF", "!!PREDICTOR_DBREADER", "data", "prob"]) | outputs)
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    workspace.FeedBlob("data", x)
    workspace.RunNet(net.Name())
    np.testing.assert_allclose(workspace.FetchBlob("prob"), reference(x, values), rtol=1e-5, atol=1e-6)
    for p in params:
        np.testing.assert_array_equal(workspace.FetchBlob(p), values[p])


def test_meta_net_def_contents(tmp_path):
    model, params = build_mlp()
    model.net.Proto().arg.add(name="model_id", i=42)
    meta = pe.PredictorExportMeta(model.net, params, ["data"], ["prob"], shapes={"data": (2, 5), "prob": (2, 3)},
                                  name="m1", net_type="dag", num_workers=4)
    pe.save_to_db("minidb", str(tmp_path / "p"), meta)
    workspace.ResetWorkspace()
    device = core.DeviceOption(caffe2_pb2.CPU)
    device.random_seed = 5
    mnd = pe.load_from_db(str(tmp_path / "p"), "minidb", device_option=device)
    assert list(pred_utils.GetBlobs(mnd, meta.inputs_name())) == ["data"]
    assert list(pred_utils.GetBlobs(mnd, "PARAMETERS_BLOB_TYPE_m1")) == params
    predict = pred_utils.GetNet(mnd, "PREDICT_NET_TYPE_m1")
    assert predict.type == "dag" and predict.num_workers == 4
    assert list(predict.external_input) == ["data"] + params and list(predict.external_output) == ["prob"]
    init = pred_utils.GetNet(mnd, meta.global_init_name())
    assert [op.type for op in init.op] == ["Load"] and list(init.op[0].input) == [pc.PREDICTOR_DBREADER]
    assert pred_utils.GetArgumentByName(init, "model_id").i == 42
    predict_init = pred_utils.GetNet(mnd, meta.predict_init_name())
    assert [list(a.ints) for op in predict_init.op for a in op.arg if a.name == "shape"] == [[2, 5], [2, 3]]
    assert all(op.device_option.random_seed == 5 for kv in mnd.nets for op in kv.value.op)


def test_export_meta_checks():
    net = core.Net("n")
    with pytest.raises(AssertionError, match="disjoint"):
        pe.PredictorExportMeta(net, ["w"], ["w"], ["y"])
    with pytest.raises(AssertionError, match="unique"):
        pe.PredictorExportMeta(net, [], ["x", "x"], ["y"])
    workspace.ResetWorkspace()
    with pytest.raises(Exception, match="not in workspace"):
        pe.get_meta_net_def(pe.PredictorExportMeta(net, [], ["x"], ["y"]))


def test_mobile_export_round_trip():
    model, params = build_mlp()
    values = {p: workspace.FetchBlob(p) for p in params}
    workspace.FeedBlob("data", np.zeros((1, 5), np.float32))
    init_net, predict_net = mobile_exporter.Export(workspace, model.net, params)
    assert [op.type for op in init_net.op] == ["GivenTensorFill"] * (len(params) + 1)
    assert list(predict_net.external_input)[0] == "data" and set(params) <= set(predict_net.external_input)
    assert list(predict_net.external_output) == ["prob"]
    blob = init_net.SerializeToString(), predict_net.SerializeToString()

    workspace.ResetWorkspace()
    workspace.RunNetOnce(caffe2_pb2.NetDef.FromString(blob[0]))
    assert workspace.FetchBlob("data").shape == (1, 1)            # the placeholder input
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    workspace.FeedBlob("data", x)
    workspace.CreateNet(caffe2_pb2.NetDef.FromString(blob[1]))
    workspace.RunNet(predict_net.name)
    np.testing.assert_allclose(workspace.FetchBlob("prob"), reference(x, values), rtol=1e-5, atol=1e-6)


def test_mobile_export_of_integer_byte_and_string_params():
    workspace.FeedBlob("i32", np.array([[1, -2]], np.int32))
    workspace.FeedBlob("i64", np.array([2 ** 40], np.int64))
    workspace.FeedBlob("u8", np.array([[0, 255], [7, 8]], np.uint8))
    workspace.FeedBlob("s", np.array([b"a", b"\x00b"], dtype=object))
    net = core.Net("uses")
    for name in ("i32", "i64", "u8", "s"):
        net.Copy(name, name + "_out")
    params = ["i32", "i64", "u8", "s"]
    init_net, _ = mobile_exporter.Export(workspace, net, params)
    assert [op.type for op in init_net.op] == ["GivenTensorIntFill", "GivenTensorInt64Fill",
                                               "GivenTensorByteStringToUInt8Fill", "GivenTensorStringFill"]
    expected = {p: workspace.FetchBlob(p) for p in params}
    workspace.ResetWorkspace()
    workspace.RunNetOnce(init_net)
    for p in params:
        got = workspace.FetchBlob(p)
        # GivenTensorStringFill (fills.py) decodes its strings to str; compare the bytes
        values = [v.encode() if isinstance(v, str) else v for v in got.reshape(-1).tolist()]
        assert got.dtype == expected[p].dtype and got.shape == expected[p].shape
        assert values == expected[p].reshape(-1).tolist()


def test_caffe2_module_paths():
    import caffe2py.compat  # noqa: F401 - installs the aliases
    from caffe2.proto import metanet_pb2
    from caffe2.python.predictor import mobile_exporter as me
    from caffe2.python.predictor import predictor_exporter as pe2
    from caffe2.python.predictor_constants import predictor_constants
    assert pe2.save_to_db is pe.save_to_db and me.Export is mobile_exporter.Export
    assert predictor_constants.META_NET_DEF == "!!META_NET_DEF" and metanet_pb2.MetaNetDef().blobs is not None
