"""The modules and names Caffe2's operator tests import besides hypothesis_test_util:
mkl_test_util, hip_test_util, rnn.rnn_cell_test_util, and core.CreatePythonOperator
(each as Caffe2's sources define it; references are NumPy formulas)."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis
import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


# ------------------------------------------------------------------ mkl / hip test utils

def test_mkl_test_util_as_a_build_without_mkldnn():
    import caffe2.python.hypothesis_test_util as hu
    import caffe2.python.mkl_test_util as mu
    assert mu.mkl_do.device_type == caffe2_pb2.MKLDNN
    assert mu.device_options == hu.device_options          # MKLDNN never joins
    assert mu.cpu_do == hu.cpu_do and mu.gpu_do == hu.gpu_do
    assert set(mu.gcs) == {"gc", "dc"} and set(mu.gcs_cpu_only) == {"gc", "dc"}
    assert hypothesis.find(mu.gcs_mkl_only["dc"], lambda v: True) == [mu.mkl_do]


def test_hip_test_util_run_in_hip():
    import caffe2.python.hip_test_util as hiputl
    cpu = caffe2_pb2.DeviceOption()
    hip = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.HIP)
    assert not hiputl.run_in_hip(cpu, [cpu])
    assert hiputl.run_in_hip(hip, [cpu])
    assert hiputl.run_in_hip(cpu, [cpu, hip])


# ------------------------------------------------------------------ rnn.rnn_cell_test_util

def test_rnn_cell_test_util_activations():
    from caffe2.python.rnn.rnn_cell_test_util import sigmoid, tanh
    x = np.linspace(-4, 4, 17)
    np.testing.assert_allclose(sigmoid(x), 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(tanh(x), np.tanh(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("two_d,num_states", [(True, 2), (False, 2), (True, 1)])
def test_prepare_rnn_feeds_states_and_lengths_and_calls_the_builder(two_d, num_states):
    from caffe2.python.rnn.rnn_cell_test_util import _prepare_rnn
    calls = []

    def create_rnn(model, input_blob, seq_lengths, states, **kwargs):
        calls.append((str(input_blob), str(seq_lengths), [str(s) for s in states], kwargs))
        return ["out"]

    outputs, net, inputs = _prepare_rnn(t=4, n=3, dim_in=5, create_rnn=create_rnn, outputs_with_grads=[0],
                                        forget_bias=1.0, T=2, two_d_initial_states=two_d, dim_out=[6, 7],
                                        num_states=num_states, extra_arg="x")
    assert outputs == ["out"] and calls
    input_blob, seq_lengths, states, kwargs = calls[0]
    assert input_blob == "test_name_scope/input_blob" and seq_lengths == "test_name_scope/seq_lengths"
    assert states == ["state_%d/layer_%d" % (i, layer) for layer in range(2) for i in range(num_states)]
    assert kwargs == dict(dim_in=5, dim_out=[6, 7], scope="external/recurrent", outputs_with_grads=[0],
                          memory_optimization=False, forget_bias=1.0, forward_only=False, drop_states=False,
                          static_rnn_unroll_size=2, extra_arg="x")
    for name, d in (("state_0/layer_0", 6), ("state_%d/layer_1" % (num_states - 1), 7)):
        value = workspace.FetchBlob(name)
        assert value.dtype == np.float32 and value.shape == ((3, d) if two_d else (1, 3, d))
    lengths = workspace.FetchBlob("test_name_scope/seq_lengths")
    assert lengths.dtype == np.int32 and lengths.shape == (3,) and lengths.min() >= 1 and lengths.max() <= 4
    assert [str(b) for b in inputs] == states + ["test_name_scope/input_blob"]
    assert net.Name().startswith("external")    # a ModelHelper named 'external'


# ------------------------------------------------------------------ core.CreatePythonOperator

def test_create_python_operator_runs_f():
    def f(inputs, outputs):
        outputs[0].feed(np.square(inputs[0].data) + 1)

    op = core.CreatePythonOperator(f, ["x"], ["y"])
    assert op.type == "Python" and any(a.name == "token" for a in op.arg)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    workspace.FeedBlob("x", x)
    workspace.RunOperatorOnce(op)
    np.testing.assert_allclose(workspace.FetchBlob("y"), x ** 2 + 1)


def test_create_python_operator_with_gradient():
    def f(inputs, outputs):
        outputs[0].feed(3 * inputs[0].data)

    def grad_f(inputs, outputs):
        # inputs: x, y, dy
        outputs[0].feed(3 * inputs[2].data)

    op = core.CreatePythonOperator(f, ["x"], ["y"], grad_f=grad_f)
    workspace.FeedBlob("x", np.ones(4, np.float32))
    workspace.RunOperatorOnce(op)
    grad_ops, grad_map = core.GradientRegistry.GetBackwardPass([op], {"y": "y_grad"})
    workspace.FeedBlob("y_grad", np.arange(4, dtype=np.float32))
    workspace.RunOperatorsOnce(grad_ops)
    np.testing.assert_allclose(workspace.FetchBlob(str(grad_map["x"])), 3 * np.arange(4))


def test_create_python_operator_passes_the_workspace():
    seen = {}

    def f(inputs, outputs, ws):
        seen["has"] = ws.has_blob("side")
        outputs[0].feed(ws.fetch_blob("side") + inputs[0].data)

    op = core.CreatePythonOperator(f, ["x"], ["y"], pass_workspace=True)
    workspace.FeedBlob("x", np.ones(2, np.float32))
    workspace.FeedBlob("side", np.full(2, 5, np.float32))
    workspace.RunOperatorOnce(op)
    assert seen["has"]
    np.testing.assert_allclose(workspace.FetchBlob("y"), np.full(2, 6))


def test_create_python_operator_with_a_builder_tuple_and_extra_arguments():
    def make_adder(k):
        def add(inputs, outputs):
            outputs[0].feed(inputs[0].data + k)
        return add

    op = core.CreatePythonOperator((make_adder, (10,), {}), ["x"], ["y"], name="adder")
    assert op.name == "adder"
    workspace.FeedBlob("x", np.zeros(3, np.float32))
    workspace.RunOperatorOnce(op)
    np.testing.assert_allclose(workspace.FetchBlob("y"), np.full(3, 10))
