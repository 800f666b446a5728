"""Fill ops: Caffe2's fan-in/fan-out rules and the statistics of the random fills
(bounds, means and standard deviations against the formulas, with tolerances several
standard errors wide, seeded so CI is deterministic), the FillerOp shape rules,
ConstantFill's dtype rule, and the named errors."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

DT = core.DataType


def fill(op_type, inputs=(), **kwargs):
    workspace.ResetWorkspace()
    names = []
    for i, value in enumerate(inputs):
        names.append("in%d" % i)
        workspace.FeedBlob(names[-1], value)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, names, ["out"], **kwargs))
    return workspace.FetchBlob("out")


@pytest.mark.parametrize("shape", [[64, 3, 5, 5], [200, 50]])
def test_xavier_fill_is_uniform_in_sqrt_3_over_fan_in(shape):
    out = fill("XavierFill", shape=shape, random_seed=11)
    fan_in = int(np.prod(shape)) // shape[0]
    scale = np.sqrt(3.0 / fan_in)
    assert out.dtype == np.float32 and list(out.shape) == shape
    assert out.min() >= -scale and out.max() <= scale
    assert out.max() > 0.98 * scale and out.min() < -0.98 * scale     # the whole range is used
    n = out.size
    assert abs(out.mean()) < 4 * scale / np.sqrt(3 * n)
    np.testing.assert_allclose(out.std(), scale / np.sqrt(3), rtol=0.05)


@pytest.mark.parametrize("shape", [[32, 16, 3, 3], [100, 300]])
def test_msra_fill_std_is_sqrt_2_over_fan_out(shape):
    out = fill("MSRAFill", shape=shape, random_seed=12)
    fan_out = int(np.prod(shape)) // shape[1]
    std = np.sqrt(2.0 / fan_out)
    assert abs(out.mean()) < 4 * std / np.sqrt(out.size)
    np.testing.assert_allclose(out.std(), std, rtol=0.05)


def test_msra_fill_needs_two_dims():
    with pytest.raises(Caffe2Error, match="MSRAFill.*at least 2 dimensions"):
        fill("MSRAFill", shape=[10])


def test_xavier_fill_rejects_an_empty_first_dim():
    with pytest.raises(Caffe2Error, match="XavierFill.*0 in dimension 0"):
        fill("XavierFill", shape=[0, 4])


def test_gaussian_fill():
    out = fill("GaussianFill", shape=[40000], mean=1.5, std=0.25, random_seed=13)
    assert abs(out.mean() - 1.5) < 4 * 0.25 / 200
    np.testing.assert_allclose(out.std(), 0.25, rtol=0.03)
    with pytest.raises(Caffe2Error, match="std.* must be (non-negative|>= 0)"):
        fill("GaussianFill", shape=[3], std=-1.0)


def test_uniform_fill_bounds_and_moments():
    out = fill("UniformFill", shape=[20000], min=-2.0, max=3.0, random_seed=14)
    assert out.min() >= -2.0 and out.max() < 3.0
    assert abs(out.mean() - 0.5) < 4 * 5 / np.sqrt(12 * out.size)
    np.testing.assert_allclose(out.std(), 5 / np.sqrt(12), rtol=0.03)


def test_uniform_fill_needs_min_below_max():
    with pytest.raises(Caffe2Error, match="UniformFill.*max value .* should be bigger than min"):
        fill("UniformFill", shape=[3], min=1.0, max=1.0)


def test_uniform_fill_with_bounds_from_inputs():
    out = fill("UniformFill", [np.zeros((50, 4), np.float32), np.array([2.0], np.float32),
                               np.array([2.5], np.float32)])
    assert out.shape == (50, 4) and out.min() >= 2.0 and out.max() < 2.5
    empty = fill("UniformFill", [np.zeros((50, 4), np.float32), np.array([3.0], np.float32),
                                 np.array([2.0], np.float32)])
    assert empty.shape == (0, 4)       # Caffe2: min > max gives no rows


def test_uniform_int_fill_includes_both_ends():
    out = fill("UniformIntFill", shape=[5000], min=-2, max=2, random_seed=15)
    assert out.dtype == np.int32 and set(out.tolist()) == {-2, -1, 0, 1, 2}


def test_random_fills_are_reproducible_with_a_seed():
    a = fill("GaussianFill", shape=[10], random_seed=7)
    b = fill("GaussianFill", shape=[10], random_seed=7)
    c = fill("GaussianFill", shape=[10], random_seed=8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_shape_from_input_extra_shape_and_input_as_shape():
    out = fill("XavierFill", [np.zeros((4, 3), np.float32)], extra_shape=[2])
    assert out.shape == (4, 3, 2)
    assert np.abs(out).max() <= np.sqrt(3.0 / 6)
    out = fill("ConstantFill", [np.array([2, 5], np.int64)], input_as_shape=1, value=3.0)
    assert out.shape == (2, 5) and (out == 3.0).all()


@pytest.mark.parametrize("inputs, kwargs, text", [
    ([np.zeros(3, np.float32)], dict(shape=[2]), "cannot set the shape argument and pass in an input"),
    ([], dict(shape=[2], extra_shape=[3]), "cannot set extra_shape when there is no input"),
    ([], dict(shape=[2], input_as_shape=1), "an input must be given if input_as_shape is true"),
    ([np.zeros((2, 2), np.int64)], dict(input_as_shape=1), "non-empty 1-D integer tensor"),
    ([np.array([2.0], np.float32)], dict(input_as_shape=1), "non-empty 1-D integer tensor"),
])
def test_filler_shape_rules(inputs, kwargs, text):
    with pytest.raises(Caffe2Error, match="ConstantFill.*" + text):
        fill("ConstantFill", inputs, **kwargs)


@pytest.mark.parametrize("op_type", ["GaussianFill", "ConstantFill", "XavierFill", "UniformFill"])
def test_scalar_shape_is_refused_without_input(op_type):
    # Caffe2 reads `shape` as a list: a single int is not a 1-D shape
    with pytest.raises(Caffe2Error, match=op_type + ".*'shape' argument was a scalar \\(32\\), list expected"):
        fill(op_type, shape=32)


def test_scalar_shape_is_no_shape_beside_an_input():
    # the repeated argument is empty then: the input gives the shape, nothing is refused
    out = fill("ConstantFill", [np.zeros((2, 3), np.float32)], shape=5, value=1.5)
    np.testing.assert_array_equal(out, np.full((2, 3), 1.5, np.float32))


def test_empty_shape_list_is_a_scalar():
    out = fill("ConstantFill", shape=[], value=2.0)
    assert out.shape == () and out == 2.0


def test_constant_fill_dtype_follows_the_value():
    assert fill("ConstantFill", shape=[2], value=3).dtype == np.int64
    assert fill("ConstantFill", shape=[2], value=3.0).dtype == np.float32
    assert fill("ConstantFill", shape=[2]).dtype == np.float32
    out = fill("ConstantFill", shape=[2], value=3, dtype=DT.INT32)
    assert out.dtype == np.int32 and out.tolist() == [3, 3]
    out = fill("ConstantFill", shape=[1], value="abc", dtype=DT.STRING)
    assert out.tolist() == [b"abc"]   # Caffe2 fetches string tensors as bytes
    with pytest.raises(Caffe2Error, match="ConstantFill.*'value' is of unexpected type"):
        fill("ConstantFill", shape=[1], value="abc")
    with pytest.raises(Caffe2Error, match="ConstantFill.*undefined 'dtype'"):
        fill("ConstantFill", shape=[1], value=1.0, dtype=DT.UNDEFINED)


def test_range_fill():
    out = fill("RangeFill", shape=[2, 3])
    assert out.dtype == np.float32 and out.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_float16_fills():
    out = fill("Float16ConstantFill", shape=[3], value=1.5)
    assert out.dtype == np.float16 and out.tolist() == [1.5, 1.5, 1.5]
    out = fill("Float16UniformFill", shape=[1000], min=-1.0, max=1.0)
    assert out.dtype == np.float16 and out.min() >= -1 and out.max() <= 1 and out.std() > 0.5


def test_given_tensor_fill_reads_values_as_dtype():
    out = fill("GivenTensorFill", shape=[3], values=[1, 2, 3], dtype=DT.INT64)
    assert out.dtype == np.int64 and out.tolist() == [1, 2, 3]
    out = fill("GivenTensorFill", shape=[2], values=[0.5, 1.5], dtype=DT.DOUBLE)
    assert out.dtype == np.float64 and out.tolist() == [0.5, 1.5]


def test_inferred_types_match_the_outputs():
    net = core.Net("fill_types")
    net.ConstantFill([], "i", shape=[2], value=1)
    net.XavierFill([], "w", shape=[3, 4])
    net.UniformIntFill([], "u", shape=[5], min=0, max=3)
    shapes, types = workspace.InferShapesAndTypes([net], blob_dimensions={})
    assert types["i"] == DT.INT64 and types["w"] == DT.FLOAT and types["u"] == DT.INT32
    assert shapes["w"] == [3, 4] and shapes["u"] == [5]
