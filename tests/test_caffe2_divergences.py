"""Behaviour that used to differ from Caffe2's (issue 31, item 5), each against a
reference computed here: NumPy formulas, records built by hand from Caffe2's
serializer layouts (tests/_c2_wire.py), Caffe2's index formulas for PadImage."""
import copy
import itertools
import json

import numpy as np
import pytest
from google.protobuf import text_format

import _c2_wire as W
from caffe2py import core, model_helper, workspace
from caffe2py.cli import main
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2

DT = caffe2_pb2.TensorProto


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def run(op_type, inputs, outputs, **kwargs):
    return workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **kwargs))


def fetch(name):
    return workspace.FetchBlob(name)


def rand(*shape, seed=0):
    return np.random.RandomState(seed).uniform(-1, 1, shape).astype(np.float32)


# ----------------------------------------------------------------- 1. core.Net(netdef) naming

def test_net_built_from_a_proto_gets_a_fresh_name_like_one_built_from_a_name():
    first = core.Net("div_naming")
    second = core.Net("div_naming")
    assert (first.Name(), second.Name()) == ("div_naming", "div_naming_1")
    from_proto = core.Net(first.Proto())
    assert from_proto.Name() == "div_naming_2"
    assert first.Name() == "div_naming"                 # the original keeps its name
    unused = caffe2_pb2.NetDef(name="div_naming_never_used")
    assert core.Net(unused).Name() == "div_naming_never_used"
    assert core.Net(unused).Name() == "div_naming_never_used_1"


def test_a_copy_made_from_the_proto_is_created_and_run_beside_the_original():
    net = core.Net("div_copy")
    net.Relu("x", "y")
    net.Scale("y", "z", scale=3.0)
    copied = core.Net(copy.deepcopy(net.Proto()))
    x = rand(2, 5, seed=1)
    workspace.FeedBlob("x", x)
    workspace.CreateNet(net)
    workspace.CreateNet(copied)                 # used to refuse: same name as the original
    workspace.RunNet(net.Name())
    workspace.RunNet(copied.Name())
    np.testing.assert_allclose(fetch("z"), 3 * np.maximum(x, 0), rtol=1e-6)


def test_dlrm_style_train_net_and_eval_copy_are_both_created():
    model = model_helper.ModelHelper(name="div_dlrm")
    w = model.param_init_net.GivenTensorFill([], "w", shape=[2, 3], values=[0.5, -1, 2, 0.25, 1, -0.5])
    b = model.param_init_net.ConstantFill([], "b", shape=[2], value=0.1)
    model.params.extend([w, b])
    y = model.net.FC(["x", w, b], "y")
    loss = model.net.AveragedLoss(model.net.SquaredL2Distance([y, "target"], "dist"), "loss")
    eval_net = core.Net(copy.deepcopy(model.net.Proto()))      # the eval net, before the gradients
    model.net.AddGradientOperators([loss])
    x, target = rand(4, 3, seed=2), rand(4, 2, seed=3)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("target", target)
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    workspace.CreateNet(eval_net)
    assert eval_net.Name() != model.net.Name()
    workspace.RunNet(eval_net.Name())
    wv = np.array([[0.5, -1, 2], [0.25, 1, -0.5]], np.float32)
    ref = x @ wv.T + 0.1
    np.testing.assert_allclose(fetch("y"), ref, rtol=1e-5)
    np.testing.assert_allclose(fetch("loss"), np.mean(0.5 * np.sum((ref - target) ** 2, axis=1)), rtol=1e-5)
    workspace.RunNet(model.net.Name())
    # d loss / d y = (y - target) / N; w_grad = dy^T x
    np.testing.assert_allclose(fetch("w_grad"), ((ref - target) / 4).T @ x, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------- 2. global pools stored with kernel 0

GLOBAL_POOLS_NET = """
name: "div_global_pools"
op { type: "AveragePool" input: "x" output: "avg" arg { name: "kernel" i: 0 } arg { name: "global_pooling" i: 1 }
     arg { name: "order" s: "NCHW" } }
op { type: "MaxPool" input: "x" output: "max" arg { name: "kernel" i: 0 } arg { name: "global_pooling" i: 1 } }
op { type: "MaxPool2D" input: "x" output: "max2d" arg { name: "kernel" i: 0 } arg { name: "global_pooling" i: 1 } }
op { type: "AveragePool" input: "x_nhwc" output: "avg_nhwc" arg { name: "kernel" i: 0 }
     arg { name: "global_pooling" i: 1 } arg { name: "order" s: "NHWC" } }
external_input: "x"
external_input: "x_nhwc"
external_output: "avg"
external_output: "max"
"""


def _net(text):
    return text_format.Parse(text, caffe2_pb2.NetDef())


def test_global_pools_stored_with_kernel_zero_run_as_global_mean_and_max():
    x = rand(2, 3, 5, 4, seed=4)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("x_nhwc", np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    workspace.RunNetOnce(_net(GLOBAL_POOLS_NET))
    np.testing.assert_allclose(fetch("avg"), x.mean(axis=(2, 3), keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(fetch("max"), x.max(axis=(2, 3), keepdims=True))
    np.testing.assert_array_equal(fetch("max2d"), x.max(axis=(2, 3), keepdims=True))
    np.testing.assert_allclose(fetch("avg_nhwc"), x.mean(axis=(2, 3)).reshape(2, 1, 1, 3), rtol=1e-6)


@pytest.mark.parametrize("op_type, reference", [
    ("MaxPool3D", lambda v: v.max(axis=(2, 3, 4), keepdims=True)),
    ("AveragePool3D", lambda v: v.mean(axis=(2, 3, 4), keepdims=True)),
    ("LpPool", lambda v: np.sqrt((v.astype(np.float64) ** 2).sum(axis=(2, 3, 4), keepdims=True))),
    ("MaxPool1D", lambda v: v.max(axis=2, keepdims=True)),
    ("AveragePool1D", lambda v: v.mean(axis=2, keepdims=True))])
def test_every_pool_and_alias_takes_kernel_zero_with_global_pooling(op_type, reference):
    x = rand(2, 3, 7, seed=5) if op_type.endswith("1D") else rand(2, 3, 3, 4, 2, seed=6)
    workspace.FeedBlob("x", x)
    run(op_type, ["x"], ["y"], kernel=0, global_pooling=1)
    np.testing.assert_allclose(fetch("y"), reference(x), rtol=1e-5)


def test_global_pool_gradient_with_kernel_zero():
    x = rand(2, 3, 4, 5, seed=7)
    workspace.FeedBlob("x", x)
    net = core.Net("div_global_grad")
    net.AveragePool("x", "y", kernel=0, global_pooling=1)
    net.MaxPool("x", "m", kernel=0, global_pooling=1)
    net.Sum(["y", "m"], "s")
    net.SumElements("s", "loss")
    net.AddGradientOperators(["loss"])
    workspace.RunNetOnce(net)
    is_max = (x == x.max(axis=(2, 3), keepdims=True)).astype(np.float32)
    np.testing.assert_allclose(fetch("x_grad"), 1.0 / 20 + is_max, rtol=1e-6)


def test_kernel_zero_is_refused_without_global_pooling_as_caffe2_refuses_it():
    workspace.FeedBlob("x", rand(1, 2, 4, 4))
    for op_type in ("MaxPool", "AveragePool", "LpPool", "AveragePool2D"):
        with pytest.raises(Caffe2Error, match="'kernel' must be >= 1 unless global_pooling is set, got 0"):
            run(op_type, ["x"], ["y"], kernel=0)
    with pytest.raises(Caffe2Error, match="'kernel_w' must be >= 1 unless global_pooling"):
        run("MaxPool", ["x"], ["y"], kernel_h=2, kernel_w=0)
    with pytest.raises(Caffe2Error, match="must be >= 0, got -1"):
        run("MaxPool", ["x"], ["y"], kernel=-1, global_pooling=1)
    # ConvPoolOpBase: global_pooling takes no pads, strides or dilations
    with pytest.raises(Caffe2Error, match="global_pooling takes no stride: argument 'stride' must be 1, got 2"):
        run("AveragePool", ["x"], ["y"], kernel=0, global_pooling=1, stride=2)
    with pytest.raises(Caffe2Error, match="global_pooling takes no pad: argument 'pads' must be 0"):
        run("MaxPool", ["x"], ["y"], kernel=0, global_pooling=1, pads=[0, 1, 0, 1])


def _write_global_pool_model(tmp_path):
    predict = tmp_path / "predict.pbtxt"
    predict.write_text("""
name: "div_zoo_tail"
op { type: "Conv" input: "data" input: "w" output: "c" arg { name: "kernel" i: 1 } }
op { type: "AveragePool" input: "c" output: "pool" arg { name: "kernel" i: 0 } arg { name: "global_pooling" i: 1 } }
op { type: "MaxPool2D" input: "c" output: "mpool" arg { name: "kernel" i: 0 } arg { name: "global_pooling" i: 1 } }
external_input: "data"
external_input: "w"
external_output: "pool"
external_output: "mpool"
""")
    init = tmp_path / "init.pbtxt"
    w = np.arange(12, dtype=np.float32).reshape(4, 3, 1, 1) / 10
    init.write_text('name: "div_zoo_init" op { type: "GivenTensorFill" output: "w" arg { name: "shape" %s } '
                    'arg { name: "values" %s } }' % (" ".join("ints: %d" % d for d in w.shape),
                                                     " ".join("floats: %r" % float(v) for v in w.ravel())))
    return predict, init, w


def test_shapes_report_and_export_of_kernel_zero_global_pools(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator
    predict, init, w = _write_global_pool_model(tmp_path)
    assert main(["shapes", "--quiet", "--predict-net", str(predict), "--init-net", str(init),
                 "--hint", "data,8,3,7,6", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    dims = {b["name"]: b["dims"] for b in report["blobs"]}
    assert dims["c"] == [8, 4, 7, 6]
    assert dims["pool"] == [8, 4, 1, 1] and dims["mpool"] == [8, 4, 1, 1]
    out = tmp_path / "model.onnx"
    assert main(["export", "--quiet", "--predict-net", str(predict), "--init-net", str(init),
                 "--input", "data:float32:2x3x5x4", "-o", str(out)]) == 0
    model = onnx.load(str(out))
    assert {"GlobalAveragePool", "GlobalMaxPool"} <= {n.op_type for n in model.graph.node}
    data = rand(2, 3, 5, 4, seed=8)
    pool, mpool = ReferenceEvaluator(model).run(["pool", "mpool"], {"data": data})
    conv = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], data)
    np.testing.assert_allclose(pool, conv.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mpool, conv.max(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------- 3. PadImage: negative pads crop

def _caffe2_source(i, size, mode):
    """Caffe2's pad_op.cc index formulas for output position i (already minus the pad)."""
    if mode == "constant":
        return i if 0 <= i < size else None
    if mode == "edge":
        return min(size - 1, max(i, 0))
    i = max(i, -i)
    return min(i, 2 * size - i - 2)


def _pad_reference(x, pads, mode, value):
    pt, pl, pb, pr = pads
    n, c, h, w = x.shape
    y = np.full((n, c, h + pt + pb, w + pl + pr), value, np.float32)
    for i, j in itertools.product(range(y.shape[2]), range(y.shape[3])):
        si, sj = _caffe2_source(i - pt, h, mode), _caffe2_source(j - pl, w, mode)
        if si is not None and sj is not None:
            y[:, :, i, j] = x[:, :, si, sj]
    return y


def _pad_grad_reference(dy, x_shape, pads, mode):
    pt, pl = pads[0], pads[1]
    dx = np.zeros(x_shape, np.float32)
    for i, j in itertools.product(range(dy.shape[2]), range(dy.shape[3])):
        si, sj = _caffe2_source(i - pt, x_shape[2], mode), _caffe2_source(j - pl, x_shape[3], mode)
        if si is not None and sj is not None:
            dx[:, :, si, sj] += dy[:, :, i, j]
    return dx


PAD_CASES = [(-1, -1, -1, -1), (-2, 0, 1, -1), (2, -1, -3, 1), (0, 0, -5, 0), (-1, 3, 2, -2)]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", PAD_CASES)
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_pad_image_negative_pads_crop_in_every_mode(mode, pads, order):
    x = rand(2, 3, 5, 6, seed=9)
    want = _pad_reference(x, pads, mode, 1.5)
    dy = rand(*want.shape, seed=10)
    want_dx = _pad_grad_reference(dy, x.shape, pads, mode)
    to, back = ((0, 2, 3, 1), (0, 3, 1, 2)) if order == "NHWC" else ((0, 1, 2, 3), (0, 1, 2, 3))
    workspace.FeedBlob("x", np.ascontiguousarray(x.transpose(to)))
    workspace.FeedBlob("dy", np.ascontiguousarray(dy.transpose(to)))
    args = dict(pad_t=pads[0], pad_l=pads[1], pad_b=pads[2], pad_r=pads[3], mode=mode, value=1.5, order=order)
    run("PadImage", ["x"], ["y"], **args)
    np.testing.assert_array_equal(fetch("y").transpose(back), want)
    run("PadImageGradient", ["dy"], ["dx"], **args)
    np.testing.assert_allclose(fetch("dx").transpose(back), want_dx, rtol=1e-6, atol=1e-6)


def test_pad_image_gradient_of_a_crop_through_the_gradient_builder():
    x = rand(1, 2, 4, 5, seed=11)
    workspace.FeedBlob("x", x)
    net = core.Net("div_pad_grad")
    net.PadImage("x", "y", pads=[-1, 1, 0, -2], mode="reflect")
    net.SumElements("y", "loss")
    net.AddGradientOperators(["loss"])
    workspace.RunNetOnce(net)
    y = _pad_reference(x, (-1, 1, 0, -2), "reflect", 0.0)
    np.testing.assert_array_equal(fetch("y"), y)
    np.testing.assert_allclose(fetch("x_grad"), _pad_grad_reference(np.ones_like(y), x.shape, (-1, 1, 0, -2),
                                                                    "reflect"), rtol=1e-6)


def test_pad_image_reflect_follows_caffe2s_formula_past_the_size_and_refuses_reading_outside():
    x = rand(1, 1, 3, 3, seed=12)
    workspace.FeedBlob("x", x)
    # Caffe2's formula stays inside for a top/left pad up to 2 * 3 - 2, a bottom/right one up to 3 - 1
    run("PadImage", ["x"], ["y"], pads=[4, 4, 2, 2], mode="reflect")
    np.testing.assert_array_equal(fetch("y"), _pad_reference(x, (4, 4, 2, 2), "reflect", 0.0))
    for pads in ([5, 0, 0, 0], [0, 0, 3, 0], [0, 0, 0, 3]):
        with pytest.raises(Caffe2Error, match="reflect padding .* reads outside"):
            run("PadImage", ["x"], ["y"], pads=pads, mode="reflect")
    with pytest.raises(Caffe2Error, match="smaller than the pads"):
        run("PadImage", ["x"], ["y"], pads=[-2, 0, -2, 0])          # a crop past the whole image


# ----------------------------------------------------------------- 4. Iter re-types its counter

def test_iter_retypes_an_int32_counter_to_int64_and_counts():
    workspace.FeedBlob("it", np.array([41], np.int32))
    run("Iter", ["it"], ["it"])
    # Caffe2's mutable_data<int64_t> replaces the 4-byte buffer by a zero-filled 8-byte one
    assert fetch("it").dtype == np.int64 and fetch("it").tolist() == [1]
    run("Iter", ["it"], ["it"])
    assert fetch("it").tolist() == [2]
    net = core.Net("div_iter_types")
    net.Iter(["it32"], ["it32"])
    _, types = workspace.InferShapesAndTypes([net], {"it32": [1]}, blob_types={"it32": DT.INT32})
    assert types["it32"] == DT.INT64                    # shape inference knows the re-typing
    counter = np.array([7.0], np.float64)         # 8 bytes: Caffe2 keeps the buffer and reads its bits
    workspace.FeedBlob("wide", counter)
    run("Iter", ["wide"], ["wide"])
    assert fetch("wide").dtype == np.int64 and fetch("wide").tolist() == [int(counter.view(np.int64)[0]) + 1]


def test_atomic_iter_retypes_too():
    run("CreateMutex", [], ["mutex"])
    workspace.FeedBlob("it", np.array([5], np.int32))
    run("AtomicIter", ["mutex", "it"], ["it"])
    run("AtomicIter", ["mutex", "it"], ["it"])
    assert fetch("it").dtype == np.int64 and fetch("it").tolist() == [2]


def test_iter_without_input_and_its_refusals():
    run("Iter", [], ["fresh"])                  # Caffe2's older form: starts from 0
    run("Iter", [], ["fresh"])
    assert fetch("fresh").dtype == np.int64 and fetch("fresh").tolist() == [2]
    workspace.FeedBlob("neg", np.array([-3], np.int64))
    with pytest.raises(Caffe2Error, match="previous iteration number is negative"):
        run("Iter", ["neg"], ["neg"])
    workspace.FeedBlob("two", np.array([1, 2], np.int64))
    with pytest.raises(Caffe2Error, match="must hold one value"):
        run("Iter", ["two"], ["two"])


# ----------------------------------------------------------------- 5. Save / Load of counters, indexes, maps

def _index_tensor(keys, data_type):
    """TensorSerializer's whole-tensor layout without a name (Caffe2's IndexSerializer)."""
    if data_type == W.STRING:
        data = [(6, b"".join(W.f_bytes(6, k) for k in keys))]
    elif data_type == W.INT64:
        data = [(10, W.f_packed_varints(10, keys))]
    else:
        data = [(4, W.f_packed_varints(4, keys))]
    fields = [(1, W.f_varint(1, len(keys))), (2, W.f_varint(2, data_type)), (8, W.f_bytes(8, W.f_varint(1, 0))),
              (11, W.f_bytes(11, W.f_varint(1, 0) + W.f_varint(2, len(keys))))] + data
    return b"".join(v for _, v in sorted(fields, key=lambda f: f[0]))


def test_counter_index_map_and_mutex_blobs_serialize_in_caffe2s_layout():
    run("CreateCounter", [], ["counter"], init_count=9)
    run("CountDown", ["counter"], ["done"])
    run("StringIndexCreate", [], ["index"], max_elements=7)
    workspace.FeedBlob("keys", np.array(["b", "a", "b", "c"], dtype=object))
    run("IndexGet", ["index", "keys"], ["ids"])
    run("IndexFreeze", ["index"], ["index"])
    workspace.FeedBlob("mk", np.array([4, 2], np.int64))
    workspace.FeedBlob("mv", np.array([40, 20], np.int32))
    run("KeyValueToMap", ["mk", "mv"], ["map"])
    run("CreateMutex", [], ["mutex"])

    counter_tensor = (W.f_varint(1, 1) + W.f_varint(2, W.INT64) + W.f_bytes(7, "counter")
                      + W.f_packed_varints(10, [8]))
    assert workspace.SerializeBlob("counter") == W.blob("counter", "std::unique_ptr<Counter<int64_t>>",
                                                        counter_tensor)
    assert workspace.SerializeBlob("index") == W.blob(
        "index", "std::unique_ptr<caffe2::IndexBase>", _index_tensor([b"b", b"a", b"c"], W.STRING), b"7 1")
    protos = (W.f_bytes(1, _index_tensor([4, 2], W.INT64)) + W.f_bytes(1, _index_tensor([40, 20], W.INT32)))
    assert workspace.SerializeBlob("map") == W.blob("map", "(std::unordered_map<int64_t, int32_t>)",
                                                    content=protos)
    assert workspace.SerializeBlob("mutex") == W.blob("mutex", "std::unique_ptr<std::mutex>", content=b"")


def test_save_and_load_restore_counter_index_and_map(tmp_path):
    run("CreateCounter", [], ["counter"], init_count=3)
    run("CountUp", ["counter"], ["previous"])
    run("LongIndexCreate", [], ["index"], max_elements=5)
    workspace.FeedBlob("keys", np.array([30, 10, 30], np.int64))
    run("IndexGet", ["index", "keys"], ["ids"])
    workspace.FeedBlob("mk", np.array([1, 2, 3], np.int32))
    workspace.FeedBlob("mv", np.array([10, 20, 30], np.int64))
    run("KeyValueToMap", ["mk", "mv"], ["map"])
    run("CreateMutex", [], ["mutex"])
    db = str(tmp_path / "objects.minidb")
    run("Save", ["counter", "index", "map", "mutex"], [], db=db, db_type="minidb", absolute_path=1)
    workspace.ResetWorkspace()
    run("Load", [], ["counter", "index", "map", "mutex"], db=db, db_type="minidb", absolute_path=1)
    run("RetrieveCount", ["counter"], ["count"])
    assert int(fetch("count")) == 4
    workspace.FeedBlob("q", np.array([10, 99, 30], np.int64))
    run("IndexGet", ["index", "q"], ["got"])
    assert fetch("got").tolist() == [2, 3, 1]          # not frozen: 99 is added as id 3
    run("IndexSize", ["index"], ["size"])
    assert int(fetch("size")) == 4
    run("MapToKeyValue", ["map"], ["k", "v"])
    assert dict(zip(fetch("k").tolist(), fetch("v").tolist())) == {1: 10, 2: 20, 3: 30}
    assert fetch("k").dtype == np.int32 and fetch("v").dtype == np.int64
    workspace.FeedBlob("it", np.array([0], np.int64))
    run("AtomicIter", ["mutex", "it"], ["it"])          # the loaded mutex is a working one
    assert fetch("it").tolist() == [1]


def test_deserialize_blob_reads_records_caffe2_wrote():
    workspace.DeserializeBlob("counter", W.blob(
        "counter", "std::unique_ptr<Counter<int64_t>>",
        W.f_varint(1, 1) + W.f_varint(2, W.INT64) + W.f_bytes(7, "counter") + W.f_packed_varints(10, [5])))
    run("CountDown", ["counter"], ["done"])
    run("RetrieveCount", ["counter"], ["count"])
    assert int(fetch("count")) == 4 and not bool(fetch("done"))
    workspace.DeserializeBlob("index", W.blob("index", "std::unique_ptr<caffe2::IndexBase>",
                                              _index_tensor([7, 8], W.INT32), b"10 1"))
    workspace.FeedBlob("q", np.array([8, 9], np.int32))
    run("IndexGet", ["index", "q"], ["got"])
    assert fetch("got").tolist() == [2, 0]              # frozen: an unknown key gets 0
    protos = (W.f_bytes(1, _index_tensor([5, 6], W.INT32)) + W.f_bytes(1, _index_tensor([50, 60], W.INT32)))
    workspace.DeserializeBlob("map", W.blob("map", "(std::unordered_map<int32_t, int32_t>)", content=protos))
    run("MapToKeyValue", ["map"], ["k", "v"])
    assert dict(zip(fetch("k").tolist(), fetch("v").tolist())) == {5: 50, 6: 60}
    with pytest.raises(Caffe2Error, match="only int64_t counters|one int64 value"):
        workspace.DeserializeBlob("bad", W.blob("bad", "std::unique_ptr<Counter<int64_t>>",
                                                W.f_varint(1, 2) + W.f_varint(2, W.INT64)
                                                + W.f_packed_varints(10, [1, 2])))


def test_create_map_value_type_defaults_to_int32_as_in_caffe2():
    run("CreateMap", [], ["map"], key_dtype=DT.INT64)
    run("MapToKeyValue", ["map"], ["k", "v"])
    assert fetch("k").dtype == np.int64 and fetch("v").dtype == np.int32


# ----------------------------------------------------------------- 6. strings come back as bytes

def test_fetch_blob_gives_string_tensors_as_bytes():
    workspace.FeedBlob("s", np.array(["a", "héllo"]))
    got = fetch("s")
    assert got.dtype == object and got.tolist() == [b"a", "héllo".encode()]
    workspace.FeedBlob("mixed", np.array([b"x", "y"], dtype=object))
    assert fetch("mixed").tolist() == [b"x", b"y"]
    workspace.FeedBlob("one", "text")                   # a string blob comes back as one bytes
    assert fetch("one") == b"text"
    workspace.FeedBlob("raw", b"\x00\xff")
    assert fetch("raw") == b"\x00\xff"


def test_string_ops_give_bytes_cut_at_byte_positions():
    workspace.FeedBlob("s", np.array(["héllo", "ab"], dtype=object))
    run("StringPrefix", ["s"], ["p"], length=2)
    assert fetch("p").tolist() == [b"h\xc3", b"ab"]            # Caffe2 keeps the partial character
    run("GivenTensorStringFill", [], ["g"], shape=[2], values=[b"u", b"v"])
    assert fetch("g").tolist() == [b"u", b"v"]
    run("StringIndexCreate", [], ["index"])
    workspace.FeedBlob("keys", np.array(["k", b"k", "z"], dtype=object))
    run("IndexGet", ["index", "keys"], ["ids"])
    assert fetch("ids").tolist() == [1, 1, 2]            # "k" and b"k" are one std::string
    run("IndexStore", ["index"], ["stored"])
    assert fetch("stored").tolist() == [b"k", b"z"]


# ----------------------------------------------------------------- 7. Partition, ONNXWhile, Lars, LambdaRankNdcg

def test_partition_shapes_and_extra_inputs_with_larger_leading_dims():
    keys = np.array([[3, -4, 5], [6, 7, -9]], np.int64)
    extra = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)      # leading dim 4 >= 2, as Caffe2 allows
    workspace.FeedBlob("keys", keys)
    workspace.FeedBlob("extra", extra)
    run("Partition", ["keys", "extra"], ["k0", "e0", "k1", "e1"], pack_first_input=1)
    flat, rows = keys.reshape(-1), extra.reshape(-1, 2)[:keys.size]
    for part in (0, 1):
        sel = np.nonzero(np.mod(flat, 2) == part)[0]
        np.testing.assert_array_equal(fetch("k%d" % part), (flat[sel] - part) // 2)
        np.testing.assert_array_equal(fetch("e%d" % part), rows[sel])
        # the main input is flattened; extra inputs keep their dims past the main input's rank
        assert fetch("k%d" % part).shape == (sel.size,) and fetch("e%d" % part).shape == (sel.size, 2)
    workspace.FeedBlob("short", np.zeros((1, 3), np.float32))
    with pytest.raises(Caffe2Error, match="Prefix of extra input's shape"):
        run("Partition", ["keys", "short"], ["a", "b", "c", "d"])


def _while_body(scan_shape):
    body = caffe2_pb2.NetDef(name="div_while_body")
    body.external_input.extend(["iter", "cond_in", "acc"])
    body.op.add().CopyFrom(core.CreateOperator("Cast", ["iter"], ["iter_f"], to=DT.FLOAT))
    body.op.add().CopyFrom(core.CreateOperator("Add", ["acc", "iter_f"], ["acc_out"]))
    body.op.add().CopyFrom(core.CreateOperator("ConstantFill", ["acc_out"], ["ones"], value=1.0))
    body.op.add().CopyFrom(core.CreateOperator("ConstantFill", [], ["zeros"], shape=list(scan_shape), value=0.0))
    body.op.add().CopyFrom(core.CreateOperator("Add", ["zeros", "iter_f"], ["scan"]))
    body.op.add().CopyFrom(core.CreateOperator("Copy", ["cond_in"], ["cond_out"]))
    body.external_output.extend(["cond_out", "acc_out", "scan"])
    return body


@pytest.mark.parametrize("trips", [1, 4])
def test_onnx_while_scan_outputs_grow_by_a_row_per_iteration(trips):
    workspace.FeedBlob("trips", np.array(trips, np.int64))
    workspace.FeedBlob("cond", np.array(True))
    workspace.FeedBlob("acc0", np.zeros((), np.float32))
    run("ONNXWhile", ["trips", "cond", "acc0"], ["acc", "scans"], body=_while_body([1, 2]), has_trip_count=1)
    np.testing.assert_array_equal(fetch("acc"), np.float32(sum(range(trips))))
    # per-iteration [1, 2]: rows stack on the existing first axis, [T, 2] (not [T, 1, 2])
    np.testing.assert_array_equal(fetch("scans"), np.repeat(np.arange(trips, dtype=np.float32), 2).reshape(-1, 2))


def test_onnx_while_scan_output_layouts_caffe2_defines_and_refuses():
    workspace.FeedBlob("cond", np.array(True))
    workspace.FeedBlob("acc0", np.zeros((), np.float32))
    workspace.FeedBlob("trips", np.array(0, np.int64))
    run("ONNXWhile", ["trips", "cond", "acc0"], ["acc", "scans"], body=_while_body([1, 2]), has_trip_count=1)
    assert fetch("scans").dtype == np.int32 and fetch("scans").shape == (0,)    # no iteration
    workspace.FeedBlob("trips", np.array(1, np.int64))
    run("ONNXWhile", ["trips", "cond", "acc0"], ["acc", "scans"], body=_while_body([]), has_trip_count=1)
    assert fetch("scans").shape == ()                   # one iteration: the value as it is
    workspace.FeedBlob("trips", np.array(2, np.int64))
    run("ONNXWhile", ["trips", "cond", "acc0"], ["acc", "scans"], body=_while_body([2]), has_trip_count=1)
    np.testing.assert_array_equal(fetch("scans"), np.array([0, 0, 1], np.float32))   # [2] grown to [3]
    workspace.FeedBlob("trips", np.array(3, np.int64))
    with pytest.raises(Caffe2Error, match="overrun"):
        run("ONNXWhile", ["trips", "cond", "acc0"], ["acc", "scans"], body=_while_body([2]), has_trip_count=1)
    with pytest.raises(Caffe2Error, match="0-d"):
        run("ONNXWhile", ["trips", "cond", "acc0"], ["acc", "scans"], body=_while_body([]), has_trip_count=1)


def test_onnx_while_gives_the_body_a_one_value_condition():
    body = caffe2_pb2.NetDef(name="div_while_cond")
    body.external_input.extend(["iter", "cond_in"])
    body.op.add().CopyFrom(core.CreateOperator("Copy", ["cond_in"], ["cond_out"]))
    body.op.add().CopyFrom(core.CreateOperator("Shape", ["cond_in"], ["cond_shape"]))
    body.external_output.extend(["cond_out", "cond_shape"])
    workspace.FeedBlob("trips", np.array(2, np.int64))
    workspace.FeedBlob("cond", np.array(True))
    run("ONNXWhile", ["trips", "cond"], ["shapes"], body=body, has_trip_count=1, has_cond=1)
    assert fetch("shapes").tolist() == [1, 1]           # [1] each iteration, extended: [1, 1]


def _lars_reference(x, dx, wd, offset):
    xn = np.sqrt(np.sum(x.astype(np.float64) ** 2))
    if xn == 0:
        return 1.0
    return 1.0 / (np.sqrt(np.sum(dx.astype(np.float64) ** 2)) / xn + wd + offset)


def test_lars_older_two_and_three_input_forms():
    x, dx = rand(4, 3, seed=13), rand(4, 3, seed=14)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("dx", dx)
    workspace.FeedBlob("wd", np.array([0.3], np.float32))
    run("Lars", ["x", "dx"], ["r2"], offset=0.25)
    np.testing.assert_allclose(fetch("r2"), [_lars_reference(x, dx, 0.0, 0.25)], rtol=1e-5)
    run("Lars", ["x", "dx", "wd"], ["r3"], offset=0.25, lr_min=5.0)      # no clipping in these forms
    np.testing.assert_allclose(fetch("r3"), [_lars_reference(x, dx, 0.3, 0.25)], rtol=1e-5)
    workspace.FeedBlob("zero", np.zeros((2,), np.float32))
    run("Lars", ["zero", "zero"], ["r0"])
    assert fetch("r0").tolist() == [1.0]
    workspace.FeedBlob("trust", np.array([2.0], np.float32))
    workspace.FeedBlob("lr_max", np.array([0.5], np.float32))
    run("Lars", ["x", "dx", "wd", "trust", "lr_max"], ["r5"], offset=0.25, lr_min=0.0)
    np.testing.assert_allclose(fetch("r5"), [min(2 * _lars_reference(x, dx, 0.3, 0.25), 0.5)], rtol=1e-5)


def _lambda_rank_reference(y, r):
    """Caffe2's older LambdaRankNdcg (one session): gains 2^r, discounts 1/log2(rank + 2),
    lambda_ij = |dDiscount * dGain|, normalised by the ideal DCG."""
    y, r = y.astype(np.float64), r.astype(np.float64)
    n = y.size
    inv_log = 1.0 / np.log2(np.arange(n) + 2.0)
    gain = 2.0 ** r
    ideal = np.empty(n)
    ideal[np.argsort(-r, kind="stable")] = inv_log
    idcg = np.sum(gain * ideal)
    discount = np.empty(n)
    discount[np.argsort(-y, kind="stable")] = inv_log
    lam = np.abs((discount[:, None] - discount[None, :]) * (gain[:, None] - gain[None, :]))
    sign = np.where(r[:, None] - r[None, :] > 0, 1.0, -1.0)
    dy_diff = y[:, None] - y[None, :]
    dy = np.sum(lam * sign / (1 + np.exp(sign * dy_diff)), axis=1) / idcg
    loss = np.sum(lam * np.log(1 / (1 + np.exp(-sign * dy_diff)))) / idcg
    return loss, dy


def test_lambda_rank_ndcg_older_form_without_session_lengths():
    y = np.array([0.3, -1.2, 2.0, 0.7, 0.1], np.float32)
    r = np.array([1.0, 0.0, 2.0, 3.0, 0.0], np.float32)
    workspace.FeedBlob("y", y)
    workspace.FeedBlob("r", r)
    run("LambdaRankNdcg", ["y", "r"], ["loss", "dy"])
    loss, dy = _lambda_rank_reference(y, r)
    np.testing.assert_allclose(fetch("loss"), [loss], rtol=1e-4)
    np.testing.assert_allclose(fetch("dy"), dy, rtol=1e-4, atol=1e-6)
    # the older gradient op has three inputs (y, dy_cache, dLoss); the maker writes it for this form
    net = core.Net("div_lambda_rank")
    net.LambdaRankNdcg(["y", "r"], ["loss2", "dy2"])
    net.Scale("loss2", "scaled", scale=3.0)
    net.AddGradientOperators(["scaled"])
    grad_ops = [op for op in net.Proto().op if op.type == "LambdaRankNdcgGradient"]
    assert len(grad_ops) == 1 and list(grad_ops[0].input) == ["y", "dy2", "loss2_grad"]
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(fetch("y_grad"), 3.0 * dy, rtol=1e-4, atol=1e-6)
    # the later form (session lengths) negated both loss and gradient
    workspace.FeedBlob("lengths", np.array([5], np.int32))
    run("LambdaRankNdcg", ["y", "r", "lengths"], ["loss3", "dy3"])
    np.testing.assert_allclose(fetch("loss3"), [-loss], rtol=1e-4)
    np.testing.assert_allclose(fetch("dy3"), -dy, rtol=1e-4, atol=1e-6)
