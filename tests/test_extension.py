"""workspace.C / core.C (caffe2py/extension.py): Caffe2's C++ extension module as
scripts and tests use it, checked against what Caffe2's pybind sources and
workspace.py say each name does. References are NumPy formulas."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace
from caffe2py.errors import Caffe2Error


@pytest.fixture(autouse=True)
def fresh_default_workspace():
    workspace.SwitchWorkspace("default", True)
    workspace.ResetWorkspace()
    yield
    workspace.SwitchWorkspace("default", True)
    workspace.ResetWorkspace()


C = workspace.C


def _relu_op(x="X", y="Y"):
    return core.CreateOperator("Relu", [x], [y])


def _x():
    return np.array([[-1.5, 0.0, 2.0], [3.0, -0.25, 1.0]], dtype=np.float32)


# ------------------------------------------------------------------ one module, three names

def test_the_extension_is_one_module_under_caffe2s_three_names():
    import caffe2.python._import_c_extension as c_ext
    assert C is not None and core.C is C and c_ext is C


def test_build_facts_answer_as_a_cpu_build():
    assert C.has_mkldnn is False and C.use_mkldnn is False and C.use_ideep is False
    assert C.has_hip_support is False and C.is_asan is False
    # Save writes FLOAT_BFLOAT16 as bfloat16 records, which Caffe2 does only with FBGEMM
    assert C.has_fbgemm is True and workspace.has_fbgemm is True
    assert C.get_build_options()["USE_FBGEMM"] == "ON"
    assert C.define_caffe2_no_operator_schema is False
    # CUDA only where caffe2py's CUDA device is usable
    assert C.has_cuda_support == workspace.has_cuda_support
    assert C.has_gpu_support == workspace.has_gpu_support
    options = C.get_build_options()
    assert options["USE_CUDA"] == ("ON" if workspace.has_cuda_support else "OFF")
    assert options["USE_MKLDNN"] == "OFF" and all(isinstance(v, str) for v in options.values())
    assert isinstance(C.builtin_cpu_supports_avx2(), bool)
    assert C.is_numa_enabled() is False and C.get_num_numa_nodes() == -1
    with pytest.raises(AttributeError):
        C.no_such_thing  # noqa: B018


def test_build_module():
    from caffe2.python import build
    assert build.CAFFE2_NO_OPERATOR_SCHEMA is False
    assert build.build_options["USE_ROCM"] == "OFF"


# ------------------------------------------------------------------ C.Workspace objects

def test_a_new_workspace_is_its_own():
    ws = C.Workspace()
    blob = ws.create_blob("X")
    assert blob.feed(_x()) is True
    np.testing.assert_array_equal(blob.fetch(), _x())
    assert ws.has_blob("X") and not workspace.HasBlob("X")
    assert sorted(ws.blobs) == ["X"]
    np.testing.assert_array_equal(ws.blobs["X"].fetch(), _x())
    np.testing.assert_array_equal(ws.fetch_blob("X"), _x())
    other = C.Workspace()
    assert not other.has_blob("X") and other != ws


def test_run_an_operator_a_net_and_a_plan():
    ws = C.Workspace()
    ws.feed_blob("X", _x())
    ws.run(_relu_op())
    np.testing.assert_array_equal(ws.blobs["Y"].fetch(), np.maximum(_x(), 0))

    net = core.Net("double")
    net.Add(["X", "X"], "Z")
    ws.run(net)                                  # a core.Net: its NetDef, once
    np.testing.assert_array_equal(ws.fetch_blob("Z"), 2 * _x())
    assert "double" not in ws.nets               # running once does not keep the net

    ws.feed_blob("X", np.ones((2, 3), np.float32))
    plan = core.Plan("p")
    plan.AddStep(core.execution_step("s", net, num_iter=1))
    ws.run(plan)
    np.testing.assert_array_equal(ws.fetch_blob("Z"), np.full((2, 3), 2, np.float32))

    with pytest.raises(ValueError):
        ws.run("double")


def test_create_net_gives_a_net_to_run_again():
    ws = C.Workspace()
    ws.create_blob("X").feed(np.array([1.0, -2.0], np.float32))
    net = core.Net("square")
    net.Mul(["X", "X"], "X")
    created = ws.create_net(net)
    assert list(ws.nets) == ["square"]
    created.run()
    ws.nets["square"].run()
    np.testing.assert_array_equal(ws.fetch_blob("X"), np.array([1.0, 16.0], np.float32))
    with pytest.raises(Caffe2Error):
        ws.create_net(net)                       # Caffe2 refuses to overwrite by default
    ws.create_net(net, overwrite=True)


def test_a_failing_op_raises_from_run():
    ws = C.Workspace()
    net = core.Net("bad")
    net.Split("a", ["b", "c"], axis=0)
    ws.create_blob("a").feed(np.array([1, 2, 3], dtype=np.float32))
    with pytest.raises(Exception):
        ws.run(net)


def test_current_is_the_named_current_workspace():
    workspace.FeedBlob("X", _x())
    current = C.Workspace.current
    assert current.has_blob("X") and current == C.Workspace.current
    current.create_blob("W").feed(np.arange(3, dtype=np.int64))
    np.testing.assert_array_equal(workspace.FetchBlob("W"), np.arange(3))
    workspace.SwitchWorkspace("other_ws", True)
    assert not C.Workspace.current.has_blob("X")


def test_blob_serialize_round_trip_and_remove():
    ws = C.Workspace()
    ws.create_blob("X").feed(_x())
    data = ws.blobs["X"].serialize("X")
    proto = caffe2_pb2.BlobProto.FromString(data)
    assert proto.name == "X" and list(proto.tensor.dims) == [2, 3]
    assert caffe2_pb2.BlobProto.FromString(ws.blobs["X"].serialize("renamed")).name == "renamed"
    copy = C.Workspace()
    copy.create_blob("Y").deserialize(data)
    np.testing.assert_array_equal(copy.fetch_blob("Y"), _x())
    ws.remove_blob("X")
    assert not ws.has_blob("X")


def test_strings_feed_and_fetch():
    ws = C.Workspace()
    ws.create_blob("s").feed(b"abc")
    assert ws.blobs["s"].fetch() == b"abc"


# ------------------------------------------------------------------ module functions

def test_module_functions_act_on_the_current_workspace():
    assert C.feed_blob("X", _x()) is True
    assert C.has_blob("X") and C.blobs() == ["X"] and C.local_blobs() == ["X"]
    np.testing.assert_array_equal(C.fetch_blob("X"), _x())
    C.run_operator_once(_relu_op().SerializeToString())
    np.testing.assert_array_equal(C.fetch_blob("Y"), np.maximum(_x(), 0))
    assert C.create_blob("empty") is True and C.has_blob("empty")


def test_nets_by_serialized_proto():
    C.feed_blob("X", _x())
    net = core.Net("n")
    net.Relu("X", "Y")
    assert C.create_net(net.Proto().SerializeToString()) is True
    assert C.nets() == ["n"]
    assert C.run_net("n", 2, False) is True
    np.testing.assert_array_equal(C.fetch_blob("Y"), np.maximum(_x(), 0))
    net2 = core.Net("once")
    net2.Scale("X", "S", scale=3.0)
    C.run_net_once(net2.Proto().SerializeToString())
    np.testing.assert_allclose(C.fetch_blob("S"), 3 * _x())
    C.delete_net("n")
    assert C.nets() == []


def test_workspaces_switch_reset_and_root_folder():
    assert C.current_workspace() == "default"
    C.switch_workspace("c_ext_ws", True)
    assert C.current_workspace() == "c_ext_ws" and "c_ext_ws" in C.workspaces()
    with pytest.raises(Caffe2Error):
        C.switch_workspace("never_made_ws")
    C.feed_blob("X", _x())
    C.reset_workspace("/tmp/root_a")
    assert C.blobs() == [] and C.root_folder() == "/tmp/root_a"
    C.reset_workspace()                       # None keeps the root folder (Caffe2's workspace.py)
    assert C.root_folder() == "/tmp/root_a"
    assert workspace.RootFolder() == "/tmp/root_a"


def test_serialize_and_deserialize_blob():
    C.feed_blob("X", _x())
    data = C.serialize_blob("X")
    C.deserialize_blob("X2", data)
    np.testing.assert_array_equal(C.fetch_blob("X2"), _x())


def test_shape_inference_from_a_map():
    net = core.Net("fc")
    net.FC(["X", "W", "b"], "Y")
    data = C.infer_shapes_and_types_from_map([net.Proto().SerializeToString()],
                                             {"X": [4, 3], "W": [5, 3], "b": [5]})
    shapes = {s.name: list(s.dims) for s in caffe2_pb2.TensorShapes.FromString(data).shapes}
    assert shapes["Y"] == [4, 5]


def test_operator_registry_names():
    ops = C.registered_operators()
    assert "Relu" in ops and ops == sorted(ops)
    assert C.op_registry_key("Conv", "CUDNN") == "Conv_ENGINE_CUDNN"
    assert C.op_registry_key("Conv", "") == "Conv" == C.op_registry_key("Conv", "DEFAULT")
    assert "Relu" in C.nearby_opnames("Reluu")
    C.global_init(["caffe2", "--caffe2_log_level=0"])


def test_engine_preferences():
    from caffe2py import registry
    try:
        C.set_global_engine_pref({caffe2_pb2.CPU: ["X1"]})
        C.set_op_engine_pref("Conv", {caffe2_pb2.CPU: ["X2"]})
        assert registry.engine_pref() == ({caffe2_pb2.CPU: {"Conv": ["X2"]}}, {caffe2_pb2.CPU: ["X1"]})
        C.set_per_op_engine_pref({})
        assert registry.engine_pref() == ({}, {caffe2_pb2.CPU: ["X1"]})
    finally:
        C.set_engine_pref({}, {})


def test_op_schema():
    schema = C.OpSchema.get("Relu")
    assert (schema.min_input, schema.max_input, schema.min_output, schema.max_output) == (1, 1, 1, 1)
    assert schema.num_inputs_allowed(1) and not schema.num_inputs_allowed(2)
    sum_schema = C.OpSchema.get("Sum")
    assert sum_schema.min_input == 1 and sum_schema.max_input == sum_schema.inf
    assert C.OpSchema.get("NoSuchOpAnywhere") is None
    assert isinstance(schema.doc, str)


def test_dbs():
    assert "minidb" in C.registered_dbs()
    assert (C.Mode.read, C.Mode.write, C.Mode.new) == ("read", "write", "new")


def test_db_round_trip(tmp_path):
    path = str(tmp_path / "x.minidb")
    db = C.create_db("minidb", path, C.Mode.new)
    txn = db.new_transaction()
    txn.put("k", b"v")
    txn.commit()
    db.close()
    cursor = C.create_db("minidb", path, C.Mode.read).new_cursor()
    cursor.seek_to_first()
    assert cursor.valid() and cursor.key() in ("k", b"k") and cursor.value() == b"v"


def test_blob_size_and_numa_node():
    C.feed_blob("X", _x())
    assert C.get_blob_size_bytes("X") == _x().nbytes
    assert C.get_blob_numa_node("X") == -1
    with pytest.raises(Caffe2Error):
        C.get_blob_numa_node("missing")


# ------------------------------------------------------------------ Python ops

def test_register_python_op_and_its_gradient():
    def double(inputs, outputs):
        outputs[0].feed(inputs[0].data * 2)

    def double_grad(inputs, outputs):
        # inputs: X, Y, dY; outputs: dX
        outputs[0].feed(inputs[2].data * 2)

    token = C.register_python_op(double, False, "mine")
    assert token.startswith("mine:")
    C.register_python_gradient_op(token, double_grad)
    op = core.CreateOperator("Python", ["X"], ["Y"], token=token)
    C.feed_blob("X", _x())
    C.run_operator_once(op.SerializeToString())
    np.testing.assert_array_equal(C.fetch_blob("Y"), 2 * _x())
    grad_ops, _ = core.GradientRegistry.GetBackwardPass([op], {"Y": "Y_grad"})
    C.feed_blob("Y_grad", np.ones((2, 3), np.float32))
    workspace.RunOperatorsOnce(grad_ops)
    np.testing.assert_array_equal(C.fetch_blob("X_grad"), np.full((2, 3), 2, np.float32))
    with pytest.raises(Caffe2Error):
        C.register_python_gradient_op("no-such-token", double_grad)
