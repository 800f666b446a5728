"""What fuzz campaign 6 (seed 6, docs/reliability.md) found, each fixed at its source.
References are NumPy formulas written here or onnxruntime (skipped cleanly when absent)."""
import time

import numpy as np
import pytest
from onnx import helper

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend

from _unique_strings import assert_unique_of_strings_matches_onnxruntime

RNG = np.random.default_rng(6)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_a_conv_whose_padded_input_outgrows_the_machine_is_refused_before_planning():
    # mutate:6:224: a 3-D conv with a 2**31 pad planned tiles for minutes
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[2, 1, 1], dilations=[2, 2, 2],
                            pads=[2 ** 31, 1, 1, 2 ** 31, 1, 1])
    started = time.perf_counter()
    with pytest.raises(Caffe2Error, match="more than this process can hold"):
        backend.run_node(node, [f32(2, 3, 5, 5, 5), f32(4, 3, 2, 1, 1)], opset_version=13)
    assert time.perf_counter() - started < 30


def test_a_conv_filter_with_an_empty_window_is_a_named_error():
    # onnx:6:12582: W of shape [0, 4, 0, 2] reached an IndexError in the shift-add planner
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.zeros((0, 4, 0, 2), np.float32))
    workspace.FeedBlob("w", np.zeros((0, 4, 0, 2), np.float32))
    net = core.Net("empty_window")
    net.Conv(["x", "w"], ["y"])
    with pytest.raises(Caffe2Error, match="has an empty kernel window"):
        workspace.RunNetOnce(net)


def test_unique_of_a_string_vector_along_axis_0_matches_onnxruntime():
    # onnx:6:50088: the slices of a 1-D object array are str, not arrays
    x = np.array(["b", "a", "b", "c", "a"], dtype=object)
    assert_unique_of_strings_matches_onnxruntime(x, axis=0)


def test_batch_matmul_batch_dims_that_do_not_broadcast_are_named_in_our_words():
    # op:6:13343: NumPy's "remapped shapes" text reached the user
    workspace.ResetWorkspace()
    workspace.FeedBlob("a", f32(5, 2, 3))
    workspace.FeedBlob("b", f32(0, 3, 1))
    net = core.Net("bmm")
    net.BatchMatMul(["a", "b"], ["y"], broadcast=1)
    with pytest.raises(Caffe2Error, match=r"the batch dims of A \[5\] and B \[0\] do not broadcast") as err:
        workspace.RunNetOnce(net)
    assert "remapped" not in str(err.value)


def test_huge_int_attributes_other_than_axes_still_reach_onnx_inference_and_work():
    # the first fix for onnx:5:30261 skipped onnx's inference for every int beyond int32,
    # which let Col2Im's absurd dilations through to the kernel (onnx:6:25333); Slice-1's
    # INT64_MAX ends must keep working
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[2 ** 63 - 1], axes=[1])
    x = f32(2, 5)
    (y,) = backend.run_node(node, [x], opset_version=1)
    np.testing.assert_array_equal(y, x[:, 1:])
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], dilations=[2 ** 62, 1])
    with pytest.raises(Caffe2Error):
        backend.run_node(node, [f32(1, 4, 4), np.array([3, 3], np.int64), np.array([2, 2], np.int64)],
                         opset_version=18)


def test_the_fuzz_oracle_accepts_our_nan_where_the_model_data_hold_one():
    # mutate:6:42677: a NaN weight times a padding zero is NaN (IEEE); onnxruntime skips
    # the padding and answers a number
    from caffe2py.tools.fuzz.gen_onnx import compare
    ours, ref = [np.array([1.0, np.nan], np.float32)], [np.array([1.0, -0.3], np.float32)]
    assert compare(ours, ref) is not None
    assert compare(ours, ref, nonfinite=True) is None
    assert compare([np.array([1.0, 2.0], np.float32)], ref, nonfinite=True) is not None
