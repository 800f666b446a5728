"""Details of Caffe2's Python API that Caffe2's own API tests (caffe2/python/*_test.py)
rely on: core's partial clone, plans rebuilt from protos, op call sites, sessions on
C.Workspace objects, lazy op libraries, the fp-exception flag, nested device scopes,
HSoftmax's unknown words, the gradient checker's older helper, AtomicIter's stat."""
import inspect

import numpy as np
import pytest

from caffe2py import core, gradient_checker, lazy_dyndep, scope, workspace
from caffe2py.extension import Workspace as CWorkspace
from caffe2py.proto import caffe2_pb2, hsm_pb2
from caffe2py.session import LocalSession


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


# ----------------------------------------------------------------- sessions, plans

def test_local_session_runs_in_a_c_workspace():
    ws = CWorkspace()
    net = core.Net("fill_in_c_ws")
    net.ConstantFill([], "filled", shape=[2, 3], value=4.0)
    LocalSession(ws).run(net)
    np.testing.assert_array_equal(ws.blobs["filled"].fetch(), np.full((2, 3), 4.0, np.float32))
    assert not workspace.HasBlob("filled")          # not the current workspace


def test_plan_rebuilt_from_its_proto_runs_the_same_steps():
    init = core.Net("plan_init")
    init.ConstantFill([], "x", shape=[3], value=1.5)
    body = core.Net("plan_body")
    body.Add(["x", "x"], "y")
    step = core.execution_step("outer", [core.execution_step("first", init), core.execution_step("second", body)])
    plan = core.Plan(step)
    rebuilt = core.Plan.create_from_proto(plan.Proto())

    assert [s.Name() for s in rebuilt.Steps()] == ["outer"]
    assert [s.Name() for s in rebuilt.Steps()[0].Substeps()] == ["first", "second"]
    originals = [n.Name() for n in plan.Nets()]
    copies = [n.Name() for n in rebuilt.Nets()]
    assert len(copies) == 2 and all(c.startswith(o) and c != o for o, c in zip(originals, copies))
    workspace.RunPlan(rebuilt)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), np.full(3, 3.0, np.float32))


# ----------------------------------------------------------------- partial clone

def _chain_net():
    net = core.Net("chain")
    a = net.AddExternalInput("a")
    b = net.Relu(a, "b")
    c = net.Scale(b, "c", scale=2.0)
    d = net.Add([c, "offset"], "d")
    return net, b, d


def test_clone_partial_keeps_only_the_ops_between_inputs_and_outputs():
    net, b, d = _chain_net()
    clone, (d_copy,) = net.ClonePartial("part", {b: "b_in"}, [d])
    assert [op.type for op in clone.Proto().op] == ["Scale", "Add"]
    assert str(d_copy) == "part/d"
    assert set(clone.Proto().external_input) == {"b_in", "offset"}   # read, never written: kept
    assert list(clone.Proto().external_output) == ["part/d"]

    b_value = np.array([0.0, 1.0, 2.5], np.float32)
    offset = np.array([1.0, -1.0, 0.5], np.float32)
    workspace.FeedBlob("b_in", b_value)
    workspace.FeedBlob("offset", offset)
    workspace.RunNetOnce(clone)
    np.testing.assert_allclose(workspace.FetchBlob("part/d"), 2.0 * b_value + offset)


def test_clone_partial_refuses_inputs_its_ops_would_write():
    net, b, d = _chain_net()
    e = net.Add(["c", b], "e")
    with pytest.raises(AssertionError):
        # e needs b = Relu(a), and Relu is also on the way from a to the given c
        net.ClonePartial("bad", ["a", "c"], [e])


def test_is_operator_with_engine_default_is_the_plain_registration():
    assert core.IsOperatorWithEngine("Relu", "DEFAULT")
    assert not core.IsOperatorWithEngine("Relu", "NOEXIST")


def test_populate_proto_with_file_name_names_the_caller_line():
    net = core.Net("sites")
    net.Relu("x", "y"); line = inspect.currentframe().f_lineno  # noqa: E702 - the line itself is checked
    net.PopulateProtoWithFileName()
    assert net.Proto().op[0].name == "%s:%d" % (__file__, line)


def test_check_lookup_tables_sees_ops_added_through_the_proto():
    net = core.Net("tables")
    net.Relu("x", "y")
    net.Proto().op.add().CopyFrom(core.CreateOperator("Relu", "y", "z"))
    net._CheckLookupTables()
    assert net.BlobIsDefined("z")


# ----------------------------------------------------------------- workspace

def test_net_with_an_empty_name_set_can_be_created():
    named_empty = caffe2_pb2.NetDef(name="")
    named_empty.op.add().CopyFrom(core.CreateOperator("ConstantFill", [], "k", shape=[1], value=7.0))
    assert workspace.CreateNet(named_empty)
    workspace.RunNet("")
    assert workspace.FetchBlob("k")[0] == 7.0
    with pytest.raises(Exception, match="name"):
        workspace.CreateNet(caffe2_pb2.NetDef())        # no name field at all


def test_throw_if_fp_exceptions_flag():
    workspace.FeedBlob("num", np.array([1.0], np.float32))
    workspace.FeedBlob("den", np.array([0.0], np.float32))
    op = core.CreateOperator("Div", ["num", "den"], "q")
    try:
        core.GlobalInit(["caffe2", "--caffe2_operator_throw_if_fp_exceptions=1"])
        with pytest.raises(Exception, match="divide by zero"):
            workspace.RunOperatorOnce(op)
    finally:
        core.GlobalInit(["caffe2", "--caffe2_operator_throw_if_fp_exceptions=0"])
    workspace.RunOperatorOnce(op)
    assert np.isinf(workspace.FetchBlob("q")[0])


def test_nested_device_scopes_merge_extra_info_sorted():
    with scope.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, extra_info=["k2:v2"])):
        with scope.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, extra_info=["k1:v1"])):
            assert list(scope.CurrentDeviceScope().extra_info) == ["k1:v1", "k2:v2"]
        assert list(scope.CurrentDeviceScope().extra_info) == ["k2:v2"]
    assert scope.CurrentDeviceScope() is None


# ----------------------------------------------------------------- lazy op libraries

def test_lazy_dyndep_hands_load_failures_to_the_handler_once(tmp_path):
    not_a_module = tmp_path / "ops_library.bin"
    not_a_module.write_bytes(b"")
    seen = []

    def handler(exc):
        seen.append(exc)
        raise ValueError("handled")

    lazy_dyndep.RegisterOpsLibrary(str(not_a_module))
    lazy_dyndep.SetErrorHandler(handler)
    try:
        with pytest.raises(ValueError, match="handled"):
            workspace.CreateNet("never_built")          # CreateNet loads pending libraries first
        assert len(seen) == 1
        core.RefreshRegisteredOperators()               # the failed library is no longer pending
        assert len(seen) == 1
    finally:
        lazy_dyndep.SetErrorHandler(None)


# ----------------------------------------------------------------- ops

def _hierarchy_with_words(words):
    """One node over `words`: word i's path is one step (index 0, len(words), target i)."""
    hierarchy = hsm_pb2.HierarchyProto()
    for target, word in enumerate(words):
        path = hierarchy.paths.add(word_id=word)
        path.path_nodes.add(index=0, length=len(words), target=target)
    return hierarchy.SerializeToString()


def test_hsoftmax_word_outside_the_hierarchy_has_no_loss():
    rng = np.random.RandomState(3)
    x = rng.randn(3, 4).astype(np.float32)
    w = rng.randn(2, 4).astype(np.float32)
    b = rng.randn(2).astype(np.float32)
    labels = np.array([1, 99, 0], np.int32)           # 99: not in the hierarchy
    for name, value in zip("XWbL", (x, w, b, labels)):
        workspace.FeedBlob(name, value)
    op = core.CreateOperator("HSoftmax", ["X", "W", "b", "L"], ["Y", "inter"],
                             hierarchy=_hierarchy_with_words([1, 0]))
    workspace.RunOperatorOnce(op)
    logits = x @ w.T + b
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    targets = {0: 1, 1: 0}                             # word 0 -> target 1, word 1 -> target 0
    expected = [-log_softmax[0, targets[1]], 0.0, -log_softmax[2, targets[0]]]
    np.testing.assert_allclose(workspace.FetchBlob("Y"), expected, rtol=1e-5)
    assert workspace.FetchBlob("inter").size == 2 * 2 * 2   # two known samples, logits + softmax

    grad_ops, _ = core.GradientRegistry.GetGradientForOp(op, ["Y_grad", "inter_grad"])
    workspace.FeedBlob("Y_grad", np.ones(3, np.float32))
    workspace.RunOperatorsOnce(grad_ops)
    dx = workspace.FetchBlob("X_grad")
    np.testing.assert_array_equal(dx[1], np.zeros(4, np.float32))
    softmax = np.exp(log_softmax)
    onehot = np.zeros_like(softmax)
    onehot[0, targets[1]] = onehot[2, targets[0]] = 1
    expected_dx = (softmax - onehot) @ w
    np.testing.assert_allclose(dx[[0, 2]], expected_dx[[0, 2]], rtol=1e-4, atol=1e-5)


def test_gradient_checker_older_get_loss_and_grad_form():
    x = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)
    op = core.CreateOperator("Relu", ["X"], ["Y"])
    grad_ops, g_input = core.GradientRegistry.GetGradientForOp(op, ["Y_grad"])
    checker = gradient_checker.GradientChecker(0.01, 0.05, caffe2_pb2.DeviceOption(), "default")
    loss, grad = checker.GetLossAndGrad(op, grad_ops, x, "X", g_input[0], [0])
    relu = np.maximum(x, 0)
    assert loss == pytest.approx(0.5 * float((relu ** 2).sum()))
    np.testing.assert_allclose(grad, relu * (x > 0))


def test_atomic_iter_counts_its_runs_in_the_stat_registry():
    workspace.RunOperatorOnce(core.CreateOperator("CreateMutex", [], ["mutex"]))
    workspace.FeedBlob("my_iter", np.array([5], np.int64))
    workspace.RunOperatorOnce(core.CreateOperator("StatRegistryExport", [], ["k0", "v0", "t0"]))  # reset
    op = core.CreateOperator("AtomicIter", ["mutex", "my_iter"], ["my_iter"])
    for _ in range(3):
        workspace.RunOperatorOnce(op)
    workspace.RunOperatorOnce(core.CreateOperator("StatRegistryExport", [], ["k", "v", "t"]))
    keys = list(workspace.FetchBlob("k"))
    assert workspace.FetchBlob("my_iter")[0] == 8
    assert workspace.FetchBlob("v")[keys.index(b"atomic_iter/stats/my_iter/num_iter")] == 3


def test_histogram_modifier_counts_an_int_blob_as_float():
    from caffe2py.modeling.compute_histogram_for_blobs import ComputeHistogramForBlobs
    values = np.array([0, 1, 1, 2, 3, 5, 9, -2], np.int32)
    net = core.Net("int_hist")
    net.GivenTensorIntFill([], "ids", shape=[values.size], values=values.tolist())
    ComputeHistogramForBlobs(["ids"], logging_frequency=0, num_buckets=4, lower_bound=0.0, upper_bound=4.0)(net)
    assert [op.type for op in net.Proto().op][1:] == ["Cast", "AccumulateHistogram", "Cast", "NormalizeL1"]
    workspace.RunNetOnce(net)
    edges = np.linspace(0.0, 4.0, 5)
    counts = [np.sum(values < 0)] + [np.sum((values >= lo) & (values < hi)) for lo, hi in zip(edges, edges[1:])] \
        + [np.sum(values >= 4)]
    np.testing.assert_allclose(workspace.FetchBlob("ids_curr_normalized_hist"), np.array(counts) / values.size)


# ----------------------------------------------------------------- workspace module functions

def _fill_net(name, value):
    net = core.Net(name)
    net.ConstantFill([], "filled_" + name, shape=[2], value=value)
    return net


def test_run_plan_takes_an_execution_step_with_its_nets():
    step = core.ExecutionStep("step_as_plan", _fill_net("step_net", 2.0))
    assert workspace.RunPlan(step)
    np.testing.assert_array_equal(workspace.FetchBlob("filled_step_net"), [2.0, 2.0])


def test_run_plan_in_background_reports_success_and_failure():
    plan = core.Plan("bg_plan")
    plan.AddStep(core.ExecutionStep("bg_step", _fill_net("bg_net", 5.0)))
    done = workspace.RunPlanInBackground(plan)
    assert done.wait(60) and done.is_succeeded()
    np.testing.assert_array_equal(workspace.FetchBlob("filled_bg_net"), [5.0, 5.0])
    failing = core.Net("bg_fail")
    failing.Relu("missing_input", "out")
    bad = workspace.RunPlanInBackground(core.ExecutionStep("bad_step", failing))
    assert bad.wait(60) and not bad.is_succeeded()


def test_stringify_proto_serializes_as_caffe2():
    net = _fill_net("stringified", 1.0)
    data = workspace.StringifyProto(net)
    assert caffe2_pb2.NetDef.FromString(data) == net.Proto()
    assert workspace.StringifyProto(b"as is") == b"as is"
    predictor = workspace.Predictor(workspace.StringifyProto(_fill_net("p_init", 3.0)),
                                    workspace.StringifyProto(core.Net("p_net")))
    assert predictor.run([]) == []


def test_c_workspace_create_net_refuses_text():
    with pytest.raises(TypeError):
        CWorkspace().create_net("...")


def test_registered_operators_set():
    assert "Relu" in core._REGISTERED_OPERATORS and "NoSuchOp" not in core._REGISTERED_OPERATORS


# ----------------------------------------------------------------- muji, seq2seq helper, initializers

def test_muji_allreduce_sums_into_every_reduced_blob():
    from caffe2py import muji
    values = [np.arange(3, dtype=np.float32) * (i + 1) for i in range(4)]
    for reduce in (muji.Allreduce4, muji.AllreduceFallback):
        net = core.Net("allreduce")
        for i, v in enumerate(values):
            workspace.FeedBlob("part_%d" % i, v)
        reduce(net, ["part_%d" % i for i in range(4)], "_sum", list(range(4)))
        net.RunAllOnCPU()                          # the GPU placements, on the host
        workspace.RunNetOnce(net)
        for i in range(4):
            np.testing.assert_array_equal(workspace.FetchBlob("part_%d_sum" % i), sum(values))
    assert muji.OnGPU(1).device_id == 1 and muji.OnCPU().device_type == caffe2_pb2.CPU


def test_seq2seq_model_helper_keeps_non_trainable_params_apart():
    from caffe2py.models.seq2seq.seq2seq_model_helper import Seq2SeqModelHelper
    model = Seq2SeqModelHelper(name="s2s")
    assert model.arg_scope == {"use_cudnn": True, "cudnn_exhaustive_search": False, "order": "NHWC"}
    trained = model.AddParam("w", init_value=1.5)
    with core.NameScope("dec"):
        frozen = model.AddParam("steps", init_value=4, trainable=False)
    assert model.GetNonTrainableParams() == [frozen] and str(frozen) == "dec/steps"
    assert model.GetAllParams() == [trained, frozen]
    workspace.RunNetOnce(model.param_init_net)
    assert workspace.FetchBlob("w")[0] == 1.5 and workspace.FetchBlob("dec/steps")[0] == 4


def test_pfp16_initializer_is_the_pseudo_fp16_one():
    from caffe2py.modeling import initializers
    assert initializers.pFP16Initializer is initializers.PseudoFP16Initializer


# ----------------------------------------------------------------- gradient builder details

def test_gradient_ops_carry_an_empty_name_as_caffe2s():
    net = core.Net("named_grads")
    net.Relu("x", "y")
    net.AddGradientOperators(["y"])
    for op in net.Proto().op[1:]:
        assert op.HasField("name") and op.name == ""


def test_gradient_of_an_op_that_breaks_its_schema_names_the_schema():
    net = core.Net("bad_mul")
    m = net.Mul("a", "b")             # one input: Mul takes two
    with pytest.raises(Exception, match="schema"):
        net.AddGradientOperators([m])


def test_orphan_stop_gradient_is_a_value_error():
    ops = [core.CreateOperator("Relu", "in", "hidden"),
           core.CreateOperator("StopGradient", "hidden", "unused"),
           core.CreateOperator("Relu", "hidden", "out")]
    with pytest.raises(ValueError):
        core.GradientRegistry.GetBackwardPass(ops, {"out": "out_grad"})


def test_convnet_benchmarks_models_and_cpu_benchmark():
    from caffe2py import convnet_benchmarks as cb
    model, size = cb.AlexNet("NCHW")
    assert size == 224
    fills = {op.output[0]: list(next(a.ints for a in op.arg if a.name == "shape"))
             for op in model.param_init_net.Proto().op}
    # 224 -> conv 11/4 pad 2 -> 55 -> pool 3/2 -> 27 -> pool -> 13 -> pool -> 6: 256 * 6 * 6 inputs
    assert fills["fc6_w"] == [4096, 256 * 6 * 6] and fills["conv1_w"] == [64, 3, 11, 11]
    inception, _ = cb.Inception("NCHW")
    concat_inputs = [list(op.input) for op in inception.net.Proto().op if op.type == "Concat"]
    assert len(concat_inputs) == 9 and concat_inputs[0] == ["inc3:conv1", "inc3:conv3", "inc3:conv5",
                                                            "inc3:pool_proj"]
    args = cb.GetArgumentParser().parse_args(
        "--batch_size 2 --model MLP --iterations 1 --warmup_iterations 1 --cpu".split())
    cb.Benchmark(cb.MLP, args)
    data = workspace.FetchBlob("data")
    assert data.shape == (2, 256)
    hidden = [data] * 3
    for i in range(20):
        # the MLP's FC layers have no activation between them
        hidden = [h @ workspace.FetchBlob("fc_%d_%d_w" % (i + 1, j)).T + workspace.FetchBlob("fc_%d_%d_b" % (i + 1, j))
                  for j, h in enumerate(hidden)]
    np.testing.assert_allclose(workspace.FetchBlob("sum"), sum(hidden), rtol=1e-3, atol=1e-3)


def test_shared_parameter_of_another_shape_is_an_assertion_error():
    from caffe2py import brew, model_helper
    model = model_helper.ModelHelper(name="shapes")
    brew.fc(model, "data", "fc1", dim_in=16, dim_out=16)
    with pytest.raises(AssertionError, match=r"\[16, 16\]"):
        brew.fc(model, "data", "fc1", dim_in=2, dim_out=2)


def test_gradient_clipping_takes_blob_names():
    from caffe2py.modeling.gradient_clipping import GradientClipping
    grads = {"w": np.array([2.0, -3.0, 0.25], np.float32), "v": np.array([4.0, -5.0], np.float32)}
    net = core.Net("clip_some")
    for name, value in grads.items():
        workspace.FeedBlob(name + "_grad", value)
        workspace.FeedBlob(name, np.zeros_like(value))
        net.AddExternalInput(name, name + "_grad")
    GradientClipping("by_value", clip_max=0.5, clip_min=-0.5, blob_names=["w"])(
        net, grad_map={"w": "w_grad", "v": "v_grad"})
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("w_grad"), np.clip(grads["w"], -0.5, 0.5))
    np.testing.assert_array_equal(workspace.FetchBlob("v_grad"), grads["v"])      # not named: untouched


def test_apply_transform_conv_to_nnpack():
    net = core.Net("to_transform")
    net.Relu("x", "r")
    net.Conv(["r", "w", "b"], "y", kernel=1, engine="CUDNN")
    gpu_conv = net.Conv(["r", "w", "b"], "z", kernel=1)
    net.Proto().op[-1].device_option.CopyFrom(core.DeviceOption(caffe2_pb2.CUDA, 0))
    out = workspace.ApplyTransform("ConvToNNPack", net.Proto())
    assert [op.engine for op in out.op] == ["", "NNPACK", ""]          # CPU Conv only
    assert net.Proto().op[1].engine == "CUDNN" and str(gpu_conv) == "z"  # the input is left alone
    with pytest.raises(RuntimeError):
        workspace.ApplyTransform("definitely_not_a_real_transform", net.Proto())

    init = core.Net("transform_init")
    init.ConstantFill([], "x", shape=[1, 2, 3, 3], value=0.5)
    init.ConstantFill([], "w", shape=[2, 2, 1, 1], value=1.0)
    init.ConstantFill([], "b", shape=[2], value=0.0)
    cpu_net = core.Net("cpu_conv")
    cpu_net.Conv(["x", "w", "b"], "y", kernel=1)
    chosen = workspace.ApplyTransformIfFaster("ConvToNNPack", cpu_net.Proto(), init.Proto(), warmup_runs=1,
                                              main_runs=2, improvement_threshold=1e9)
    assert chosen.op[0].engine == ""                                     # never 1e9 times faster
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(workspace.ApplyTransform("ConvToNNPack", cpu_net.Proto()))
    np.testing.assert_allclose(workspace.FetchBlob("y"), np.full((1, 2, 3, 3), 1.0, np.float32))


def test_set_rand_seed_numbers_the_ops():
    net = core.Net("seeded")
    net.GaussianFill([], "a", shape=[2])
    net.GaussianFill([], "b", shape=[2])
    net.set_rand_seed(seed=7)
    assert [op.device_option.random_seed for op in net.Proto().op] == [7, 8]
    net.set_rand_seed(seed=3, sequence_seed=False)
    assert [op.device_option.random_seed for op in net.Proto().op] == [3, 3]
    with pytest.raises(AssertionError):
        net.set_rand_seed(seed_on_op_def=True)
