"""The output pool (kernels/cpu/runtime/output_pool.py): plans that drop their
intermediates (the ONNX backend's) reuse their kernels' output buffers between runs.
A warm run of unchanged shapes allocates nothing for them (counted by the pool, and
checked independently with tracemalloc, to which NumPy reports its data
allocations); changed shapes get new buffers; nothing a caller holds is overwritten;
a failed run leaves the pool usable. onnxruntime is the reference for the values."""
import gc
import os
import threading
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from caffe2py.errors import Caffe2Error
from caffe2py.executor import compile_net
from caffe2py.kernels.cpu.runtime import output_pool
from caffe2py.kernels.cpu.runtime.output_pool import NO_POOL, OutputPool, output_array
from caffe2py.onnx import backend

ort = pytest.importorskip("onnxruntime")



@pytest.fixture(autouse=True)
def _plain_runs(monkeypatch):
    """These tests are about the pool itself, run after run: kernel replay, which takes
    over a model's warm runs, is off here (tests/test_kernel_replay.py has its own)."""
    monkeypatch.setenv("CAFFE2PY_KERNEL_REPLAY", "0")


def _ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _small_cnn(seed=0):
    """Conv-Relu-MaxPool, a 1x1 Conv, a Gemm on the flattened maps and a Concat of
    two pooled values: random weights, any batch and image size (multiples of 2).
    A second input `extra` joins at the Concat (a wrong shape fails the run there,
    after the convolutions took their buffers)."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((4, 8, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Concat", ["r2", "p1", "extra"], ["y"], axis=1),
        helper.make_node("GlobalAveragePool", ["y"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf"], ["z"]),
    ]
    wf = rng.standard_normal((13, 5)).astype(np.float32)
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"]),
         helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["n", 1, "h2", "w2"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, name) for a, name in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (wf, "wf"))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(n, h, w, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 3, h, w)).astype(np.float32),
            "extra": rng.standard_normal((n, 1, h // 2, w // 2)).astype(np.float32)}


def _assert_matches(outs, ref):
    assert len(outs) == len(ref)
    for a, b in zip(outs, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ ResNet-50 warm runs

def _light_resnet50():
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx")
    if not os.path.exists(path):
        pytest.skip("onnx's light models are not installed")
    return onnx.load(path)


def _intermediate_sizes(rep, feeds):
    """Bytes of each blob the predict net writes, from a run of the same net as a
    workspace net (which commits every blob and uses no pool)."""
    blobs = dict(rep.constants)
    blobs.update(feeds)
    plan = compile_net(rep.predict_net, known_blobs=blobs.keys())
    assert plan.output_pool is None
    plan.run(blobs)
    return [blobs[b].nbytes for op in rep.predict_net.op for b in op.output if isinstance(blobs[b], np.ndarray)]


def test_warm_resnet50_run_allocates_no_intermediate_buffers():
    model = _light_resnet50()
    rng = np.random.default_rng(0)
    feeds = {"gpu_0/data_0": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    rep = backend.prepare(model)
    pool = rep.plan.output_pool
    assert pool is not None
    first = rep.run(feeds)                 # cold: new buffers, shared along the net
    requests = pool.allocations + pool.reuses
    assert 0 < pool.allocations < requests and requests > 50      # ~55 conv/pool/Gemm outputs
    second = rep.run(feeds)                # the caller still holds the first outputs
    del second
    before = (pool.allocations, pool.reuses)
    tracemalloc.start()
    third = rep.run(feeds)
    _, warm_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert pool.allocations == before[0], "a warm run allocated new pool buffers"
    assert pool.reuses - before[1] == requests, "every output of the warm run came from the pool"
    for a, b in zip(third, first):
        np.testing.assert_array_equal(a, b)
    _assert_matches(third, _ort_run(model, feeds))
    # independent of the pool's counters: what NumPy allocated during the warm run is
    # a small part of what the net's intermediates take (any run without reuse needs
    # at least its largest intermediate)
    sizes = _intermediate_sizes(rep, feeds)
    assert warm_peak < max(sizes) / 2, (warm_peak, max(sizes))
    assert warm_peak < 0.02 * sum(sizes), (warm_peak, sum(sizes))


def _concat_net(seed=1):
    """A SqueezeNet fire module (squeeze 1x1, then a 1x1 and a 3x3 expand into one
    Concat: the convs write their channels of the concat's buffer) followed by a
    DenseNet-style chain (c1 = Concat(f, conv(f)), c2 = Concat(c1, conv(c1)): one
    ChannelBuffer), pooled to a small output."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32))
    inits = []
    for name, shape in (("sq", (8, 16, 1, 1)), ("e1", (16, 8, 1, 1)), ("e3", (16, 8, 3, 3)),
                        ("d1", (8, 32, 3, 3)), ("d2", (8, 40, 3, 3))):
        t = w(*shape)
        t.name = name
        inits.append(t)
    nodes = [
        helper.make_node("Conv", ["x", "sq"], ["s"]), helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("Conv", ["sr", "e1"], ["a"]), helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["sr", "e3"], ["b"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["b"], ["br"]),
        helper.make_node("Concat", ["ar", "br"], ["f"], axis=1),
        helper.make_node("Conv", ["f", "d1"], ["g1"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["f", "g1"], ["c1"], axis=1),
        helper.make_node("Conv", ["c1", "d2"], ["g2"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["c1", "g2"], ["c2"], axis=1),
        helper.make_node("GlobalAveragePool", ["c2"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "concat_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, 16, 40, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_concat_buffers_come_from_the_pool():
    """The buffers convs write their channels into (a placed Concat's, a Concat chain's
    ChannelBuffer) are pool outputs too: a warm run allocates nothing for them. (Made
    fresh each run they were new pages for the convs to fault in: SqueezeNet's expand
    1x1s took 0.42 ms in the model against 0.13 alone.)"""
    model = _concat_net()
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 16, 40, 40)).astype(np.float32)}
    rep = backend.prepare(model)
    ops = [op.type for op in rep.predict_net.op]
    assert "ChannelBuffer" in ops and "Concat" not in ops         # every Concat became a placement
    pool = rep.plan.output_pool
    rep.run(feeds)
    rep.run(feeds)
    before = pool.allocations
    tracemalloc.start()
    out = rep.run(feeds)
    _, warm_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert pool.allocations == before
    biggest = 1 * 48 * 40 * 40 * 4          # the chain's buffer
    assert warm_peak < biggest / 4, (warm_peak, biggest)
    _assert_matches(out, _ort_run(model, feeds))


# ------------------------------------------------------------------ shapes, callers, failures

def test_changed_shapes_get_new_buffers_and_right_values():
    model = _small_cnn()
    rep = backend.prepare(model)
    pool = rep.plan.output_pool
    for shape, seed in (((1, 16, 16), 1), ((1, 16, 16), 2), ((2, 12, 20), 3), ((2, 12, 20), 4), ((1, 16, 8), 5)):
        feeds = _feeds(*shape, seed)
        before = pool.allocations
        _assert_matches(rep.run(feeds), _ort_run(model, feeds))
        if seed == 3:                # larger maps than any buffer held
            assert pool.allocations > before
        elif seed in (2, 4):         # the same shapes again
            assert pool.allocations == before
    # what the pool keeps is what the last run took: the larger shape's spare buffers went
    assert all(entry[1] == pool._run for entries in pool._entries.values() for entry in entries)


def test_returned_outputs_and_their_views_are_never_overwritten():
    model = _small_cnn()
    rep = backend.prepare(model)
    feeds1, feeds2 = _feeds(1, 16, 16, 1), _feeds(1, 16, 16, 2)
    rep.run(feeds1)
    rep.run(feeds1)                         # warm: the buffers exist
    reused = rep.plan.output_pool.reuses
    y1, z1 = rep.run(feeds1)
    assert rep.plan.output_pool.reuses > reused      # this run's outputs came from the pool
    kept = (y1.copy(), z1.copy())
    view = y1[0, 2:5]                       # a view keeps its base busy
    view_copy = view.copy()
    y2, z2 = rep.run(feeds2)
    assert not np.shares_memory(y1, y2) and not np.shares_memory(z1, z2)
    np.testing.assert_array_equal(y1, kept[0])
    np.testing.assert_array_equal(z1, kept[1])
    _assert_matches((y2, z2), _ort_run(model, feeds2))
    del y1, z1
    for seed in (3, 4):
        feeds = _feeds(1, 16, 16, seed)
        _assert_matches(rep.run(feeds), _ort_run(model, feeds))
    np.testing.assert_array_equal(view, view_copy)


def test_a_failed_run_leaves_the_pool_usable():
    model = _small_cnn()
    rep = backend.prepare(model)
    pool = rep.plan.output_pool
    good = _feeds(1, 16, 16, 1)
    rep.run(good)
    rep.run(good)
    bad = dict(good, extra=np.ones((1, 1, 5, 5), np.float32))     # Concat refuses 5x5 next to 8x8
    with pytest.raises(Caffe2Error) as raised:
        rep.run(bad)
    assert "Concat" in str(raised.value)
    del raised
    gc.collect()
    _assert_matches(rep.run(good), _ort_run(model, good))
    allocated = pool.allocations
    other = _feeds(1, 16, 16, 7)
    _assert_matches(rep.run(other), _ort_run(model, other))
    assert pool.allocations == allocated


def test_two_threads_running_one_plan_never_share_buffers():
    model = _small_cnn()
    rep = backend.prepare(model)
    cases = [_feeds(1, 16, 16, seed) for seed in range(8)]
    refs = [_ort_run(model, f) for f in cases]
    errors = []

    def worker(order):
        try:
            for _ in range(5):
                for k in order:
                    _assert_matches(rep.run(cases[k]), refs[k])
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(order,)) for order in (range(8), range(7, -1, -1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


# ------------------------------------------------------------------ the pool itself

def test_without_an_active_pool_outputs_are_plain_new_arrays():
    assert output_pool.active_pool() is None
    a, b = output_array((3, 4), np.float32), output_array((3, 4), np.float32)
    assert a.flags.owndata and b.flags.owndata and a.flags.c_contiguous
    assert a.shape == (3, 4) and a.dtype == np.float32
    assert not np.shares_memory(a, b)


@pytest.mark.parametrize("shape", [(5,), (64, 512)], ids=["heap", "mapped"])
def test_a_buffer_is_reused_only_when_nobody_else_holds_it(shape):
    pool = OutputPool()
    with pool:
        a = output_array(shape, np.float64)
        b = output_array(shape, np.float64)        # `a` is held: a second buffer
        assert not np.shares_memory(a, b) and pool.allocations == 2
        assert a.shape == shape and a.flags.c_contiguous and a.flags.writeable
        c = output_array(shape, np.float32)        # another dtype: its own buffer
        assert pool.allocations == 3
        address = a.ctypes.data
        view = a[1:][::2]                          # a view of a view
        del a
        d = output_array(shape, np.float64)        # `a` lives on through its view
        assert pool.allocations == 4 and not np.shares_memory(d, view)
        del view
        e = output_array(shape, np.float64)
        assert e.ctypes.data == address and pool.reuses == 1
        with NO_POOL:                              # a nested run without pooling
            assert output_pool.active_pool() is None
            assert output_array(shape, np.float64).ctypes.data != address
        assert output_pool.active_pool() is pool
    assert output_pool.active_pool() is None
    del b, c, d, e


def test_exact_fits_are_found_first_and_forms_of_a_request_agree():
    """take() looks up free buffers of exactly the requested size before its best-fit
    scan (the scan would stop at the same one), and remembers each (shape, dtype) it
    was asked for: an int, a tuple, a list and a dtype given as a type or an instance
    are one request; the sweep drops buffers from the exact-size index too."""
    pool = OutputPool()
    with pool:
        big = output_array((8, 8), np.float32)      # 64 elements
        small = output_array((4, 4), np.float32)    # 16
        big_at, small_at = big.ctypes.data, small.ctypes.data
        del big, small
        # 16 elements fit the 64-element buffer too (4x slack): the exact one wins
        a = output_array(16, np.dtype(np.float32))
        assert a.ctypes.data == small_at and a.shape == (16,)
        b = output_array([2, 8], np.float32)         # 16 again, `a` busy: best fit is `big`
        assert b.ctypes.data == big_at and b.shape == (2, 8) and b.flags.c_contiguous
        del a, b
        c = output_array((2, 2, 4), "float32")      # 16 elements, both free: exact again
        assert c.ctypes.data == small_at and c.shape == (2, 2, 4)
        assert pool.allocations == 2 and pool.reuses == 3
        del c
    with pool:                                      # a run that takes only the 64-element one
        d = output_array((64,), np.float32)
        assert d.ctypes.data == big_at
        del d
    with pool:                                      # the 16-element buffer was swept away
        e = output_array((16,), np.float32)
        assert e.ctypes.data == big_at and pool.buffer_count() == 1
        f = output_array((16,), np.float32)
        assert f.ctypes.data not in (big_at, e.ctypes.data) and pool.allocations == 3
        del e, f


def test_a_request_takes_its_last_buffer_again_unless_someone_holds_it():
    """Each (shape, dtype) request remembers the buffer it took: a warm run takes it
    again without a search, but only while nobody else holds it, and never once the
    sweep let it go (the pool then keeps no reference to it)."""
    import gc
    import weakref
    pool = OutputPool()
    with pool:
        big = output_array((64,), np.float32)
        keep = output_array((16,), np.float32)          # busy: the next 16 takes `big`
        big_at, keep_at = big.ctypes.data, keep.ctypes.data
        del big
        a = output_array((16,), np.float32)
        assert a.ctypes.data == big_at
        del a, keep
    with pool:
        # both free: the request's own buffer again (a slack fit), not the exact one
        again = output_array((16,), np.float32)
        assert again.ctypes.data == big_at and pool.allocations == 2
        other = output_array((16,), np.float32)         # its buffer busy: the search
        assert other.ctypes.data == keep_at and not np.shares_memory(again, other)
        del again
        held = other                                    # the caller keeps it; the request's
        del other                                       # hint is now this buffer
    with pool:
        pass                                            # `held` busy and older: forgotten
    with pool:
        pass
    base = held
    while isinstance(base.base, np.ndarray):
        base = base.base
    gone = weakref.ref(base)
    del held, base
    gc.collect()
    assert gone() is None                               # the pool's hint did not keep it
    with pool:
        fresh = output_array((16,), np.float32)         # every old buffer let go: a new one
        assert pool.allocations == 3 and pool.buffer_count() == 1
        del fresh


def test_workspace_nets_do_not_pool():
    model = _small_cnn()
    rep = backend.prepare(model)
    blobs = dict(rep.constants)
    blobs.update(_feeds(1, 16, 16, 1))
    plan = compile_net(rep.predict_net, known_blobs=blobs.keys())
    assert plan.output_pool is None
    outer = OutputPool()
    with outer:                  # even inside a pooled run (a workspace net run by a kernel)
        plan.run(blobs)
    assert outer.allocations == 0 and outer.reuses == 0
    first = blobs[rep.predict_net.op[0].output[0]]
    assert first.flags.owndata and first.shape == (1, 8, 16, 16)


def test_pooling_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("CAFFE2PY_OUTPUT_POOL", "0")
    model = _small_cnn()
    rep = backend.prepare(model)
    assert rep.plan.output_pool is None
    feeds = _feeds(1, 16, 16, 1)
    _assert_matches(rep.run(feeds), _ort_run(model, feeds))


def test_weights_the_optimiser_replaced_are_not_kept():
    """Conv + BatchNormalization: prepare folds the BN into a new conv weight; the
    unfolded weight is no longer read by anything and is not kept beside it."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    params = [rng.standard_normal(6).astype(np.float32) for _ in range(3)] + [rng.uniform(0.5, 2, 6).astype(np.float32)]
    names = ["scale", "bias", "mean", "var"]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c"] + names, ["y"])],
        "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")] + [numpy_helper.from_array(p, n) for p, n in zip(params, names)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rep = backend.prepare(model)
    assert [op.type for op in rep.predict_net.op] == ["Conv"]          # folded
    assert "w" not in rep.constants and not set(names) & set(rep.constants)
    held = sum(v.nbytes for v in rep.constants.values() if isinstance(v, np.ndarray))
    assert held == w.nbytes + 6 * 4                                     # folded weight and bias
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    _assert_matches(rep.run({"x": x}), _ort_run(model, {"x": x}))
