"""Packed weights standing in for the arrays they were made from
(kernels/cpu/runtime/packed_weights.py), and the ONNX backend's prepared model holding
conv weights only packed after its first run."""
import gc
import weakref

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import caffe2py.onnx.backend as backend
from caffe2py.executor import compile_net
from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn.direct_conv import pack_weights, unpack_weights
from caffe2py.kernels.cpu.cnn.pointwise_conv import chunk_channels, pack_rows, unpack_rows
from caffe2py.kernels.cpu.runtime import packed_weights as pw
from caffe2py.proto import caffe2_pb2

rng = np.random.default_rng(11)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _transposed():
    """A toy layout: the weights transposed, rebuilt by transposing back."""
    made = []
    derived = pw.DerivedWeights(lambda w: made.append(1) or np.ascontiguousarray(w.T), layout=("toy T",),
                                unpack=lambda p, shape: p.T.reshape(shape))
    return derived, made


@pytest.mark.parametrize("shape,channels", [((64, 32, 3, 3), 32), ((40, 7, 3, 3), 32), ((24, 5, 1, 1), 4),
                                            ((3, 2, 5, 5), 8)])
def test_channel_blocks_unpack_to_the_same_bits(shape, channels):
    w = randn(*shape)
    w[0, 0, 0, 0] = -0.0
    back = unpack_weights(pack_weights(w, channels), shape)
    assert back.shape == w.shape and back.tobytes() == w.tobytes()


@pytest.mark.parametrize("m,c", [(64, 48), (8, 600), (128, 1030)])
def test_pointwise_rows_unpack_to_the_same_bits(m, c):
    w = randn(m, c, 1, 1)
    back = unpack_rows(pack_rows(w), chunk_channels(c)).reshape(w.shape)
    assert back.tobytes() == w.tobytes()


def test_a_stand_in_holds_no_values_and_gives_the_packed_form_without_making_it_again():
    derived, made = _transposed()
    w = randn(6, 4)
    packed = derived(w)
    standing = pw.stand_in(w)
    assert standing is not None and pw.is_stand_in(standing) and not pw.is_stand_in(w)
    assert standing.shape == w.shape and standing.dtype == w.dtype and not standing.flags.writeable
    assert standing.strides == (0, 0) and np.isnan(standing).all()      # nothing readable by mistake
    assert derived(standing) is packed and len(made) == 1
    np.testing.assert_array_equal(pw.values_of(standing), w)
    assert pw.values_of(w) is w
    # the caches no longer reference the original: its owner may drop it
    ref = weakref.ref(w)
    del w
    gc.collect()
    assert ref() is None


def test_another_layout_of_a_stand_in_is_made_from_the_rebuilt_values():
    derived, _ = _transposed()
    w = randn(5, 3)
    derived(w)
    standing = pw.stand_in(w)
    doubled = pw.DerivedWeights(lambda v: v * 2)      # a layout that does not rebuild its weights
    np.testing.assert_array_equal(doubled(standing), w * 2)


def test_no_stand_in_when_a_form_cannot_rebuild_the_weights_or_they_changed():
    derived, _ = _transposed()
    transformed = pw.DerivedWeights(lambda v: v.sum(axis=0))     # transformed filters: no way back
    w = randn(6, 4)
    derived(w)
    transformed(w)
    assert pw.stand_in(w) is None
    derived2, _ = _transposed()
    v = randn(6, 4)
    derived2(v)
    v[0, 0] += 1.0          # edited after packing: the packed form is stale
    assert pw.stand_in(v) is None
    assert pw.stand_in(randn(3, 3)) is None            # never packed


def test_conv_on_a_stand_in_matches_the_original_on_every_path():
    # paths that pack the weights take the stand-in; the others (3-D, depthwise) read the
    # rebuilt values
    cases = [((1, 64, 14, 14), (64, 64, 1, 1), 1, [0] * 4), ((1, 32, 7, 7), (64, 32, 3, 3), 1, [1] * 4),
             ((1, 16, 12, 12), (16, 1, 3, 3), 16, [1] * 4)]
    for x_shape, w_shape, group, pads in cases:
        x, w = randn(*x_shape), randn(*w_shape)
        want = conv_k.conv_nchw(x, w, None, [1, 1], pads, [1, 1], group)
        standing = pw.stand_in(w)
        if standing is None:        # a path that keeps no packed copy: a stand-in of a toy layout
            derived, _ = _transposed()
            derived(w)
            standing = pw.stand_in(w)
        got = conv_k.conv_nchw(x, standing, None, [1, 1], pads, [1, 1], group)
        assert got.tobytes() == want.tobytes(), (x_shape, w_shape)
    x, w = randn(1, 4, 5, 6, 6), randn(8, 4, 3, 3, 3)
    derived, _ = _transposed()
    derived(w)
    want = conv_k.conv_nchw(x, w, None, [1] * 3, [0] * 6, [1] * 3, 1)
    got = conv_k.conv_nchw(x, pw.stand_in(w), None, [1] * 3, [0] * 6, [1] * 3, 1)
    assert got.tobytes() == want.tobytes()


def test_an_nhwc_conv_op_reads_the_values_of_a_stand_in():
    x, w = randn(1, 9, 9, 8), randn(16, 3, 3, 8)        # NHWC input, filter M x kh x kw x C
    derived, _ = _transposed()
    derived(w)
    standing = pw.stand_in(w)
    net = caffe2_pb2.NetDef()
    op = net.op.add()
    op.type, op.input[:], op.output[:] = "Conv", ["x", "w"], ["y"]
    op.arg.add(name="kernel", i=3)
    op.arg.add(name="order", s=b"NHWC")
    net.external_input[:] = ["x", "w"]
    outs = []
    for weights in (w, standing):
        blobs = {"x": x, "w": weights}
        compile_net(net, known_blobs=["x", "w"]).run(blobs)
        outs.append(blobs["y"])
    assert outs[1].tobytes() == outs[0].tobytes()


# ----------------------------------------------------------------- the prepared model

F = TensorProto.FLOAT


def _model():
    """Four convs (a 1x1 and a 16 -> 64 3x3 at 14x14, two more 3x3s), one filter also read
    by a Mul with a model input, one filter that is also a graph output; batch and
    spatial size free."""
    inits = {"w1": randn(16, 32, 1, 1), "w2": randn(64, 16, 3, 3), "w3": randn(32, 64, 3, 3),
             "w4": randn(32, 32, 3, 3), "b2": randn(64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c2", "w3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w4"], ["c4"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["w3", "s"], ["w3s"])]
    inputs = [helper.make_tensor_value_info("x", F, ["n", 32, "h", "w"]), helper.make_tensor_value_info("s", F, [1])]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info(n, F, None) for n in ("c3", "c4", "w3s", "w4")],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), inits


_S = np.array([0.5], np.float32)


def _ort(model, x):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "s": _S})


def _close(got, want):
    for g, r in zip(got, want):
        # float32 sums of up to 576 products of values up to ~1e3: error relative to the scale
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5 * float(np.abs(r).max()))


def test_the_prepared_model_holds_conv_weights_packed_after_its_first_run(monkeypatch):
    monkeypatch.delenv("CAFFE2PY_KEEP_WEIGHTS", raising=False)
    model, inits = _model()
    rep = backend.prepare(model)
    x = randn(1, 32, 14, 14)
    originals = {name: weakref.ref(rep.constants[name]) for name in inits if name in rep.constants}
    want = _ort(model, x)
    _close(rep.run({"x": x, "s": _S}), want)        # packs, then holds the packed forms only
    gc.collect()
    standing = {name for name, value in rep.constants.items() if pw.is_stand_in(value)}
    # w3 (also read by Mul) and w4 (an output) keep their arrays; the bias is no filter.
    # w2 goes to a kernel that packs it on every x86 target (direct or channel panels)
    assert "w2" in standing and not standing & {"w3", "w4", "b2"}
    assert all(originals[name]() is None for name in standing)         # the originals are gone
    first = rep.run({"x": x, "s": _S})
    _close(first, want)
    np.testing.assert_array_equal(first[3], inits["w4"])
    # other shapes choose other plans (Winograd at 28x28, other batch sizes): they rebuild
    # what they need from the packed forms
    for shape in ((2, 32, 14, 14), (1, 32, 7, 7), (1, 32, 28, 28), (3, 32, 9, 5)):
        x = randn(*shape)
        _close(rep.run({"x": x, "s": _S}), _ort(model, x))


def test_keep_weights_leaves_the_originals(monkeypatch):
    monkeypatch.setenv("CAFFE2PY_KEEP_WEIGHTS", "1")
    model, _ = _model()
    rep = backend.prepare(model)
    x = randn(1, 32, 14, 14)
    _close(rep.run({"x": x, "s": _S}), _ort(model, x))
    assert not any(pw.is_stand_in(v) for v in rep.constants.values())


def test_packable_constants_are_filters_only_convs_read():
    model, _ = _model()
    rep = backend.prepare(model)
    names = set(backend.packable_constants(rep.predict_net, rep.constants))
    assert names == {"w1", "w2"}
