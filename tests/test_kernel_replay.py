"""Kernel replay (caffe2py/kernel_replay.py): a model's warm runs as its recorded kernel
calls give bit-identical results to plain runs, never hand a caller a buffer a later
run overwrites, and fall back to the op itself wherever a recorded call would not
redo the op's work."""
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from caffe2py import core
from caffe2py.executor import compile_net
from caffe2py.kernels.cpu.runtime import output_pool
from caffe2py.kernels.cpu.runtime.jit import compiled
from caffe2py.onnx import backend
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import OpSchema, register_kernel, register_schema


def _fire_net(seed=3):
    """Conv + Relu, max pool, a SqueezeNet fire module (the expand convs write their
    channels of the Concat's buffer), global pool, Flatten, Gemm, Softmax."""
    rng = np.random.default_rng(seed)
    inits = []
    for name, shape in (("c0", (16, 3, 3, 3)), ("sq", (8, 16, 1, 1)), ("e1", (16, 8, 1, 1)),
                        ("e3", (16, 8, 3, 3)), ("fc", (10, 32)), ("fb", (10,))):
        t = numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32))
        t.name = name
        inits.append(t)
    nodes = [
        helper.make_node("Conv", ["x", "c0"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("MaxPool", ["ar"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Conv", ["p", "sq"], ["s"]), helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("Conv", ["sr", "e1"], ["b"]), helper.make_node("Relu", ["b"], ["br"]),
        helper.make_node("Conv", ["sr", "e3"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["cr"]),
        helper.make_node("Concat", ["br", "cr"], ["f"], axis=1),
        helper.make_node("GlobalAveragePool", ["f"], ["g"]),
        helper.make_node("Flatten", ["g"], ["h"]),
        helper.make_node("Gemm", ["h", "fc", "fb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "fire_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _inputs(n, shape=(1, 3, 33, 33), seed=5):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _plain(model, monkeypatch):
    monkeypatch.setenv("CAFFE2PY_KERNEL_REPLAY", "0")
    rep = backend.prepare(model)
    monkeypatch.delenv("CAFFE2PY_KERNEL_REPLAY")
    assert rep.plan.replay is None
    return rep


def test_replayed_runs_match_plain_runs_bit_for_bit(monkeypatch):
    model = _fire_net()
    plain = _plain(model, monkeypatch)
    rep = backend.prepare(model)
    replay = rep.plan.replay
    assert replay is not None
    xs = _inputs(8)
    for i, x in enumerate(xs):
        got, = rep.run({"x": x})
        want, = plain.run({"x": x})
        np.testing.assert_array_equal(got, want, err_msg="run %d" % i)
    state, units, pure, reason = replay.summary()
    assert state == "ready", reason
    assert replay.replayed == len(xs) - 3          # run 2 captures, run 3 validates
    # the convs, pool, concat placement and softmax replay as kernel calls; what a
    # replay could not redo (the Gemm's BLAS call is not a compiled kernel) runs as its op
    assert pure >= units - 2 and pure >= 5, replay.opaque_ops()
    # the reference itself, written out: softmax(W . mean(fire(pool(relu(conv(x))))) + b)
    got, = rep.run({"x": xs[0]})
    assert got.shape == (1, 10)
    np.testing.assert_allclose(got.sum(), 1.0, rtol=1e-5)


def test_a_warm_replayed_run_allocates_nothing_for_its_intermediates():
    rep = backend.prepare(_fire_net())
    xs = _inputs(4)
    for x in xs:
        rep.run({"x": x})
    assert rep.plan.replay.state == "ready"
    pool = rep.plan.output_pool
    before = pool.allocations
    tracemalloc.start()
    rep.run({"x": xs[0]})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert pool.allocations == before
    # the largest intermediate (16 x 33 x 33 floats) is 70 KB; the run allocates only
    # its returned output and a few small objects
    assert peak < 16 * 33 * 33 * 4 / 4, peak


def test_outputs_the_caller_holds_are_never_overwritten(monkeypatch):
    model = _fire_net()
    plain = _plain(model, monkeypatch)
    rep = backend.prepare(model)
    xs = _inputs(7)
    held = [rep.run({"x": x})[0] for x in xs]
    assert rep.plan.replay.replayed > 0
    for x, got in zip(xs, held):
        np.testing.assert_array_equal(got, plain.run({"x": x})[0])
    assert len({id(h) for h in held}) == len(held)


def test_another_input_shape_runs_plainly_and_correctly(monkeypatch):
    model = _fire_net()
    plain = _plain(model, monkeypatch)
    rep = backend.prepare(model)
    for x in _inputs(4):
        rep.run({"x": x})
    replayed = rep.plan.replay.replayed
    other = _inputs(1, (1, 3, 41, 41))[0]
    np.testing.assert_array_equal(rep.run({"x": other})[0], plain.run({"x": other})[0])
    assert rep.plan.replay.replayed == replayed
    x = _inputs(1, seed=9)[0]
    np.testing.assert_array_equal(rep.run({"x": x})[0], plain.run({"x": x})[0])
    assert rep.plan.replay.replayed == replayed + 1


def test_off_switch(monkeypatch):
    monkeypatch.setenv("CAFFE2PY_KERNEL_REPLAY", "0")
    assert backend.prepare(_fire_net()).plan.replay is None


# ----------------------------------------------------------------- ops a replay cannot redo

@compiled
def _copy_into(src, out):
    for i in range(src.size):
        out.flat[i] = src.flat[i]


@_copy_into.numpy_twin
def _copy_into_numpy(src, out):
    out[...] = src


@compiled
def _double_into(src, out):
    for i in range(src.size):
        out.flat[i] = 2.0 * src.flat[i]


@_double_into.numpy_twin
def _double_into_numpy(src, out):
    out[...] = 2.0 * src


def test_the_test_kernels_twins_agree_with_them():
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    for kernel, twin in ((_copy_into, _copy_into_numpy), (_double_into, _double_into_numpy)):
        a, b = np.empty_like(x), np.empty_like(x)
        kernel(x, a)
        twin(x, b)
        np.testing.assert_array_equal(a, b)


register_schema(OpSchema("_TestReplayHidden", num_inputs=1, num_outputs=1,
                         inference=lambda ctx, ins: [ins[0]]))
register_schema(OpSchema("_TestReplayKernel", num_inputs=1, num_outputs=1,
                         inference=lambda ctx, ins: [ins[0]]))


_HIDDEN_CALLS = [0]


@register_kernel("_TestReplayHidden")
def _hidden_work(ctx):
    def run(x):
        _HIDDEN_CALLS[0] += 1
        doubled = x * 2                 # NumPy work a recorded kernel call would not redo
        out = output_pool.output_array(x.shape, x.dtype)
        _copy_into(doubled, out)
        return out
    return run


@register_kernel("_TestReplayKernel")
def _kernel_work(ctx):
    def run(x):
        out = output_pool.output_array(x.shape, x.dtype)
        _double_into(x, out)
        return out
    return run


def _net(*ops):
    net = caffe2_pb2.NetDef()
    net.name = "replay_test"
    net.op.extend(ops)
    net.external_input.append("x")
    net.external_output.append("z")
    return net


@pytest.mark.parametrize("first", ["_TestReplayHidden", "_TestReplayKernel"])
def test_an_op_whose_work_is_not_all_in_its_kernel_calls_runs_as_the_op(first):
    net = _net(core.CreateOperator(first, ["x"], ["y"]), core.CreateOperator("_TestReplayKernel", ["y"], ["z"]))
    plan = compile_net(net, known_blobs=["x"], keep=["z"])
    replay = plan.enable_replay(["x"])
    assert replay is not None
    rng = np.random.default_rng(4)
    _HIDDEN_CALLS[0] = 0
    for i in range(6):
        x = rng.standard_normal((5, 7)).astype(np.float32)
        blobs = {"x": x}
        plan.run(blobs)
        np.testing.assert_array_equal(blobs["z"], x * 4, err_msg="run %d" % i)
    assert replay.state == "ready" and replay.replayed == 3, replay.summary()
    # the hidden NumPy work was caught by validation: that op runs as itself, once a run
    # (validation does not run it a second time: an op's side effects happen once)
    assert replay.opaque_ops() == (["_TestReplayHidden"] if first == "_TestReplayHidden" else [])
    assert _HIDDEN_CALLS[0] == (6 if first == "_TestReplayHidden" else 0)


def test_an_integer_input_fed_each_run_keeps_its_op_out_of_the_replay():
    """An index or length decided by data is checked by the op's Python, which a replay
    would skip: an op reading a non-float blob that is not one of the plan's fixed
    ones runs as itself."""
    net = _net(core.CreateOperator("_TestReplayKernel", ["x"], ["z"]))
    plan = compile_net(net, known_blobs=["x"], keep=["z"])
    replay = plan.enable_replay(["x"])
    for i in range(5):
        x = np.arange(6, dtype=np.int64) * (i + 1)
        blobs = {"x": x}
        plan.run(blobs)
        np.testing.assert_array_equal(blobs["z"], x * 2)
    assert replay.state == "ready" and replay.opaque_ops() == ["_TestReplayKernel"]


def test_a_strided_1x1_conv_replays_as_kernel_calls(monkeypatch):
    """Its input's subsample is a compiled copy (phases.subsample), which a replay redoes."""
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((32, 16, 1, 1)) * 0.3).astype(np.float32)
    init = numpy_helper.from_array(w)
    init.name = "w"
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2]),
                               helper.make_node("Relu", ["c"], ["y"])], "strided",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 21, 21])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    plain = _plain(model, monkeypatch)
    rep = backend.prepare(model)
    for i, x in enumerate(_inputs(6, (1, 16, 21, 21))):
        got, = rep.run({"x": x})
        np.testing.assert_array_equal(got, plain.run({"x": x})[0])
        want = np.maximum(np.einsum("mc,nchw->nmhw", w[:, :, 0, 0], x[:, :, ::2, ::2]), 0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg="run %d" % i)
    assert rep.plan.replay.state == "ready" and rep.plan.replay.replayed == 3
    assert rep.plan.replay.opaque_ops() == []


def test_no_capture_while_kernels_run_their_twins_then_one_once_they_are_compiled(monkeypatch):
    from caffe2py.kernels.cpu.runtime import jit
    model = _fire_net()
    plain = _plain(model, monkeypatch)
    before = jit.jit_mode()
    xs = _inputs(11)
    jit.set_jit_mode("numpy")           # every kernel with a twin runs it: no machine code
    try:
        rep = backend.prepare(model)
        for x in xs[:5]:
            np.testing.assert_allclose(rep.run({"x": x})[0], plain.run({"x": x})[0], rtol=1e-5, atol=1e-7)
        assert rep.plan.replay.state == "warming" and "machine code" in rep.plan.replay.reason
    finally:
        jit.set_jit_mode(before)
    for i, x in enumerate(xs[5:], 6):   # run 8 captures, 9 validates, 10 and 11 replay
        np.testing.assert_array_equal(rep.run({"x": x})[0], plain.run({"x": x})[0], err_msg="run %d" % i)
    assert rep.plan.replay.state == "ready" and rep.plan.replay.replayed == 2


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "densenet121", "inception_v2", "resnet50"])
def test_light_models_replay_bit_for_bit(monkeypatch, name):
    """Concat placement (squeezenet, inception_v2), channel buffers (densenet121),
    grouped and shuffled convs (shufflenet), strided 1x1s and residual sums (resnet50):
    replayed runs give exactly the plain runs' outputs, over inputs the capture and the
    validation never saw."""
    import os
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_%s.onnx" % name)
    if not os.path.exists(path):
        pytest.skip("onnx's light models are not installed")
    model = onnx.load(path)
    plain = _plain(model, monkeypatch)
    rep = backend.prepare(model)
    (value_info,) = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    shape = [d.dim_value for d in value_info.type.tensor_type.shape.dim]
    rng = np.random.default_rng(11)
    for i in range(6):
        x = rng.standard_normal(shape).astype(np.float32)
        got = rep.run({value_info.name: x})
        want = plain.run({value_info.name: x})
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b, err_msg="%s run %d" % (name, i))
    state, units, pure, reason = rep.plan.replay.summary()
    assert state == "ready" and rep.plan.replay.replayed == 3, reason
    assert pure >= units - 4, rep.plan.replay.opaque_ops()
