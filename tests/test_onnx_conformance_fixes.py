"""Deterministic onnx node-suite cases fixed for issue 25, each checked here against
an independent reference (the spec's table, onnx's numpy_helper, a float32 sum
written out in NumPy) so they are pinned without the whole node suite."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import caffe2py.onnx.backend as c2_backend

ml_dtypes = pytest.importorskip("ml_dtypes")
E8M0 = ml_dtypes.float8_e8m0fnu


def _run(nodes, inputs, outputs, feeds, opset=25, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] + list(extra_opsets))
    return c2_backend.prepare(model).run(feeds)


def _cast_e8m0(x, **attrs):
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, **attrs)
    (y,) = _run([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT8E8M0, None)], [x])
    assert y.dtype == E8M0
    return y.view(np.uint8)


MAX_CODE, MIN_CODE, NAN_CODE = 0xFE, 0x00, 0xFF


def test_e8m0_saturate_up_follows_the_spec_table():
    """Cast's table for saturate + up: 0 -> smallest, NaN -> NaN, Inf and values
    above the largest -> largest, values below the smallest -> smallest."""
    x = np.array([0.0, np.nan, np.inf, 3e38, 1e-45, 2.0 ** -127, 1.0], np.float32)
    codes = _cast_e8m0(x)
    assert list(codes) == [MIN_CODE, NAN_CODE, MAX_CODE, MAX_CODE, MIN_CODE, MIN_CODE, 127]


def test_e8m0_without_saturation_gives_nan_out_of_range():
    x = np.array([0.0, np.inf, 3e38, 2.0 ** 127 * 1.5, 4.0], np.float32)
    codes = _cast_e8m0(x, saturate=0, round_mode="nearest")
    assert list(codes) == [NAN_CODE, NAN_CODE, NAN_CODE, NAN_CODE, 129]


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_e8m0_rounding_of_normal_values_matches_onnx(mode):
    """Normal float32 values: the rounding modes agree with onnx's numpy_helper."""
    from onnx.numpy_helper import to_float8e8m0
    rng = np.random.default_rng(3)
    x = np.concatenate([2.0 ** rng.uniform(-120, 120, 500),
                        [1.0, 1.5, 1.4999, 3.0, 0.75, 2.0 ** 100]]).astype(np.float32)
    want = to_float8e8m0(x, saturate=True, round_mode=mode).view(np.uint8)
    np.testing.assert_array_equal(_cast_e8m0(x, round_mode=mode), want)


def test_e8m0_round_modes_by_hand():
    x = np.array([1.1, 1.5, 1.9, 2.0], np.float32)
    assert list(_cast_e8m0(x, round_mode="up")) == [128, 128, 128, 128]
    assert list(_cast_e8m0(x, round_mode="down")) == [127, 127, 127, 128]
    assert list(_cast_e8m0(x, round_mode="nearest")) == [127, 128, 128, 128]


def test_e8m0_bad_round_mode_is_named():
    with pytest.raises(Exception, match="round_mode"):
        _cast_e8m0(np.ones(2, np.float32), round_mode="sideways")


def _depthwise_reference(x, w):
    """Valid 1-d depthwise convolution summed in float32 and rounded once."""
    k = w.shape[2]
    n = x.shape[2] - k + 1
    acc = sum(x[:, :, t:t + n].astype(np.float32) * w[:, 0, t][None, :, None].astype(np.float32)
              for t in range(k))
    return acc.astype(np.float16)


def test_float16_conv_accumulates_in_float32():
    """An ONNX float16 Conv (rewritten to a Caffe2 Conv by the optimiser) rounds once:
    a float16 running sum drifts by several ulps on these values."""
    rng = np.random.default_rng(0)
    x = rng.random((2, 8, 64)).astype(np.float16) * 4
    w = rng.random((8, 1, 7)).astype(np.float16)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=8)
    (y,) = _run([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT16, list(x.shape)),
                         helper.make_tensor_value_info("w", TensorProto.FLOAT16, list(w.shape))],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)], [x, w], opset=17)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, _depthwise_reference(x, w))


def test_range_takes_one_element_tensors():
    """AffineGrid's function body feeds Range a [1] limit; onnxruntime accepts it."""
    node = helper.make_node("Range", ["a", "b", "d"], ["y"])
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, s) for n, s in (("a", []), ("b", [1]), ("d", []))]
    (y,) = _run([node], ins, [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
                [np.array(2, np.int64), np.array([7], np.int64), np.array(2, np.int64)], opset=17)
    np.testing.assert_array_equal(y, np.arange(2, 7, 2))


def test_dequantize_one_element_zero_point_with_scalar_scale():
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])
    ins = [helper.make_tensor_value_info("q", TensorProto.INT8, [4]),
           helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
           helper.make_tensor_value_info("z", TensorProto.INT8, [1])]
    q = np.array([-3, 0, 5, 100], np.int8)
    (y,) = _run([node], ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                [q, np.array(0.5, np.float32), np.array([2], np.int8)], opset=21)
    np.testing.assert_allclose(y, (q.astype(np.float32) - 2) * 0.5)


def test_scan_state_and_scan_inputs_of_different_types():
    """Scan's inputs are heterogeneous: a float state and an int64 scan input."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["xi"], ["xf"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["s", "xf"], ["s2"]),
         helper.make_node("Identity", ["s2"], ["o"])], "body",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("xi", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("s2", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("o", TensorProto.FLOAT, [])])
    node = helper.make_node("Scan", ["s0", "xs"], ["final", "ys"], body=body, num_scan_inputs=1)
    ins = [helper.make_tensor_value_info("s0", TensorProto.FLOAT, []),
           helper.make_tensor_value_info("xs", TensorProto.INT64, [4])]
    outs = [helper.make_tensor_value_info("final", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("ys", TensorProto.FLOAT, None)]
    final, ys = _run([node], ins, outs, [np.array(0.5, np.float32), np.array([1, 2, 3, 4], np.int64)], opset=17)
    np.testing.assert_allclose(ys, 0.5 + np.cumsum([1, 2, 3, 4]))
    np.testing.assert_allclose(final, 10.5)


def test_scan_still_rejects_mismatched_shared_types():
    """The per-value typing of Scan leaves homogeneous variadics (Concat) checked."""
    node = helper.make_node("Concat", ["a", "b"], ["y"], axis=0)
    ins = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
           helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])]
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    rep = c2_backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    rep.declared = {}          # feed past the model's declared types to reach the op's rule
    with pytest.raises(Exception, match="must match"):
        rep.run([np.ones(2, np.float32), np.ones(2, np.float64)])
