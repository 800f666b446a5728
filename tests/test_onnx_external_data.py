"""ONNX external data is read only from inside the model's folder (issue 22): every
other location is caffe2py's ModelLoadError naming the tensor and the location."""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from caffe2py.onnx import backend  # noqa: E402
from caffe2py.onnx.loader import ModelLoadError  # noqa: E402

N = 4
WEIGHTS = np.arange(N, dtype=np.float32) + 0.5


def _tensor(location, offset=None, length=None):
    t = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[N])
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = t.external_data.add()
            entry.key, entry.value = key, value
    return t


def _model(tensor, in_node=False):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])
    add = helper.make_node("Add", ["x", "W"], ["y"])
    if in_node:
        graph = helper.make_graph([helper.make_node("Constant", [], ["W"], value=tensor), add], "ext", [x], [y])
    else:
        graph = helper.make_graph([add], "ext", [x], [y], initializer=[tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture
def folder(tmp_path):
    """tmp/model/ holds the model; weights in it, in sub/, and one file outside."""
    model_dir = tmp_path / "model"
    (model_dir / "sub").mkdir(parents=True)
    for path in (tmp_path / "outside.bin", model_dir / "weights.bin", model_dir / "sub" / "weights.bin"):
        path.write_bytes(WEIGHTS.tobytes())
    return model_dir


def _save(folder, tensor, in_node=False):
    path = folder / "model.onnx"
    path.write_bytes(_model(tensor, in_node).SerializeToString())
    return str(path)


def _run(path):
    x = np.ones(N, np.float32)
    return backend.prepare(path).run({"x": x})[0]


@pytest.mark.parametrize("in_node", [False, True])
@pytest.mark.parametrize("location", ["weights.bin", "sub/weights.bin", "./weights.bin", "inside_link.bin"])
def test_external_data_inside_the_folder_loads(folder, location, in_node):
    os.symlink(folder / "weights.bin", folder / "inside_link.bin")     # a symlink that stays inside
    got = _run(_save(folder, _tensor(location), in_node))
    np.testing.assert_array_equal(got, WEIGHTS + 1)


def test_an_offset_and_length_select_a_range(folder):
    (folder / "packed.bin").write_bytes(b"\x00" * 8 + WEIGHTS.tobytes() + b"\x01" * 3)
    got = _run(_save(folder, _tensor("packed.bin", "8", str(4 * N))))
    np.testing.assert_array_equal(got, WEIGHTS + 1)


@pytest.mark.parametrize("in_node", [False, True])
@pytest.mark.parametrize("location,expected", [
    ("../outside.bin", "contains '..'"),
    ("sub/../../outside.bin", "contains '..'"),
    ("sub/../weights.bin", "contains '..'"),
    ("ABSOLUTE", "is an absolute path"),
    ("/etc/hostname", "is an absolute path"),
    ("link_out.bin", "outside the model's folder"),
    ("dir_link/outside.bin", "outside the model's folder"),
    ("missing.bin", "does not exist"),
    ("", "names no file"),
    ("sub", "not a regular file"),
    ("a\x00b.bin", "NUL byte"),
])
def test_external_data_outside_the_folder_is_refused(folder, location, expected, in_node):
    os.symlink(folder.parent / "outside.bin", folder / "link_out.bin")
    os.symlink(folder.parent, folder / "dir_link")
    if location == "ABSOLUTE":
        location = str(folder.parent / "outside.bin")
    with pytest.raises(ModelLoadError, match=expected) as info:
        _run(_save(folder, _tensor(location), in_node))
    assert "ONNX tensor 'W'" in str(info.value) and repr(location) in str(info.value)


@pytest.mark.parametrize("offset,length,expected", [
    ("64", None, "past the end of the 16-byte file"),
    ("0", "80", "past the end"),
    ("-4", None, "negative external data offset"),
    ("abc", None, "not a whole number"),
])
def test_bad_ranges_are_refused(folder, offset, length, expected):
    with pytest.raises(ModelLoadError, match=expected):
        _run(_save(folder, _tensor("weights.bin", offset, length)))


def test_a_model_given_as_bytes_cannot_use_external_data(folder):
    data = _model(_tensor("weights.bin")).SerializeToString()
    with pytest.raises(ModelLoadError, match="ONNX tensor 'W' of ONNX bytes keeps its data in the external file "
                                              "'weights.bin'.*pass the model's file path"):
        backend.prepare(data)
