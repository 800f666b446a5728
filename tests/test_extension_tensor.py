"""C.Blob.tensor(): a TensorCPU whose .data is the blob's array; workspace.FetchTorch."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


def test_tensor_data_writes_through_and_init_replaces_the_blob():
    ws = workspace.C.Workspace()
    ws.create_blob("t").feed(np.array([1.5, 2.5, 3.5]))
    tensor = ws.blobs["t"].tensor()
    assert tensor.shape == [3]
    tensor.data[1] = -1.0
    np.testing.assert_array_equal(ws.blobs["t"].fetch(), [1.5, -1.0, 3.5])
    tensor.init([2, 4], core.DataType.INT64)
    assert tensor.data.dtype == np.int64 and tensor.data.shape == (2, 4)
    tensor.data[1, 3] = 7
    expected = np.zeros((2, 4), np.int64)
    expected[1, 3] = 7
    np.testing.assert_array_equal(ws.blobs["t"].fetch(), expected)
    with pytest.raises(RuntimeError):
        tensor.init([1], core.DataType.STRING)
    with pytest.raises(Caffe2Error):
        tensor.init([-1], core.DataType.FLOAT)


def test_tensor_of_a_non_tensor_blob_is_an_error():
    ws = workspace.C.Workspace()
    ws.create_blob("empty")
    with pytest.raises(Caffe2Error, match="does not hold a CPU tensor"):
        ws.blobs["empty"].tensor().data


def test_fetch_torch_shares_memory():
    torch = pytest.importorskip("torch")
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("ConstantFill", [], "foo", shape=(4,), value=2,
                                                  dtype=core.DataType.INT64))
    t = workspace.FetchTorch("foo")
    assert isinstance(t, torch.Tensor) and t.dtype == torch.int64
    t[2] = 777
    np.testing.assert_array_equal(workspace.FetchBlob("foo"), [2, 2, 777, 2])
    # NumPy owns the memory: torch cannot grow it (Caffe2's own tensors could be resized)
    with pytest.raises(RuntimeError, match="not resizable"):
        t.resize_(5)
    workspace.ResetWorkspace()
