"""What fuzz campaign 15 (seed 17, docs/reliability.md) found, fixed at its source."""
import numpy as np
import pytest
from onnx import helper

from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend

X = np.arange(6, dtype=np.float32)


def test_split_1_sizes_typed_float_must_be_whole_numbers():
    # onnx:17:35290: Split-1 types `split` like the input (float); an inf reached int()
    node = helper.make_node("Split", ["x", "split"], ["a", "b"])
    with pytest.raises(Caffe2Error, match="blob 'split': must hold whole numbers, got inf at position 1"):
        backend.run_node(node, [X, np.array([2.0, np.inf], np.float32)], opset_version=1)
    with pytest.raises(Caffe2Error, match="got 2.5 at position 0"):
        backend.run_node(node, [X, np.array([2.5, 3.5], np.float32)], opset_version=1)
    a, b = backend.run_node(node, [X, np.array([2.0, 4.0], np.float32)], opset_version=1)
    assert (a.tolist(), b.tolist()) == ([0, 1], [2, 3, 4, 5])


def test_tile_1_tiles_and_axis_typed_float_must_be_whole_numbers():
    # the same float typing in Tile-1 (tiles and axis): NaN reached int()
    node = helper.make_node("Tile", ["x", "tiles", "axis"], ["y"])
    with pytest.raises(Caffe2Error, match="blob 'tiles': must hold whole numbers, got nan"):
        backend.run_node(node, [X, np.array([np.nan], np.float32), np.array([0.0], np.float32)], opset_version=1)
    with pytest.raises(Caffe2Error, match="blob 'axis': must hold whole numbers, got -inf"):
        backend.run_node(node, [X, np.array([2.0], np.float32), np.array([-np.inf], np.float32)], opset_version=1)
    (y,) = backend.run_node(node, [X, np.array([2.0], np.float32), np.array([0.0], np.float32)], opset_version=1)
    np.testing.assert_array_equal(y, np.tile(X, 2))


def _mod(x, **args):
    from caffe2py import core, workspace
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    net = core.Net("mod")
    net.Mod(["x"], ["y"], **args)
    workspace.RunNetOnce(net)
    return workspace.FetchBlob("y")


def test_mod_divisor_must_fit_the_data_type():
    # op:17:63070: divisor 2**31 on int32 X reached NumPy's "out of bounds for int32"
    x = np.array([-7, 0, 10, np.iinfo(np.int32).min], np.int32)
    with pytest.raises(Caffe2Error, match="divisor 2147483648 does not fit X's type int32"):
        _mod(x, divisor=2 ** 31)
    # int64 data holds it; C's truncating remainder: the result takes x's sign
    np.testing.assert_array_equal(_mod(x.astype(np.int64), divisor=2 ** 31), np.fmod(x.astype(np.int64), 2 ** 31))
    np.testing.assert_array_equal(_mod(x, divisor=-1), np.zeros(4, np.int32))
    np.testing.assert_array_equal(_mod(x, divisor=3), np.fmod(x, 3))


def test_cast_of_strings_reads_numbers_and_names_what_is_not_one():
    # probing beside campaign 15's float-typed inputs: 'abc' got a message saying Cast takes no strings
    node = helper.make_node("Cast", ["x"], ["y"], to=1)        # FLOAT
    strings = lambda *v: np.array(v, dtype=object)  # noqa: E731
    (y,) = backend.run_node(node, [strings("1.5", " -2 ", "1e999", "nan")], opset_version=13)
    np.testing.assert_array_equal(y, np.array([1.5, -2.0, np.inf, np.nan], np.float32))
    with pytest.raises(Caffe2Error, match="blob 'x': cannot read 'abc' as a number"):
        backend.run_node(node, [strings("1", "abc")], opset_version=13)
