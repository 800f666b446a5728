"""caffe2py.brew's arg_scope, Register/has_helper, non-square conv kernels and the
cond/loop control-flow helpers (Caffe2's brew), checked against NumPy."""
import threading

import numpy as np
import pytest

from caffe2py import brew, core, workspace
from caffe2py.model_helper import ModelHelper


def _echo(model, val=-1, other=0):
    return val, other


if not brew.has_helper("_echo"):
    brew.Register(_echo)


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def test_arg_scope_defaults_nest_and_yield_to_the_call():
    model = ModelHelper(name="scoped")
    with brew.arg_scope([brew._echo], val=1, other=5):
        assert brew._echo(model) == (1, 5)
        with brew.arg_scope(brew._echo, val=2):
            assert brew._echo(model) == (2, 5)
            assert brew._echo(model, val=9) == (9, 5)
        assert brew._echo(model) == (1, 5)
    assert brew._echo(model) == (-1, 0)


def test_arg_scopes_are_per_thread():
    model = ModelHelper(name="threads")
    seen = []
    with brew.arg_scope(brew._echo, val=7):
        worker = threading.Thread(target=lambda: seen.append(brew._echo(model)))
        worker.start()
        worker.join()
        assert brew._echo(model) == (7, 0)
    assert seen == [(-1, 0)]


def test_an_arg_scope_leaves_no_trace_after_an_error():
    model = ModelHelper(name="err")
    with pytest.raises(RuntimeError):
        with brew.arg_scope(brew._echo, val=3):
            raise RuntimeError("inside")
    assert brew._echo(model) == (-1, 0)


def test_register_refuses_a_second_helper_of_a_name_and_has_helper_takes_both_forms():
    with pytest.raises(AttributeError, match="already exists"):
        brew.Register(_echo)
    assert brew.has_helper(brew.conv) and brew.has_helper("conv") and not brew.has_helper(lambda m: m)


def test_conv_with_a_scoped_stride_and_a_rectangular_kernel():
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 8)).astype(np.float32)
    workspace.FeedBlob("x", x)
    model = ModelHelper(name="conv_scope")
    with brew.arg_scope(brew.conv, stride=2, weight_init=("ConstantFill", {"value": 1.0})):
        brew.conv(model, "x", "y", dim_in=3, dim_out=4, kernel=[3, 2])
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    assert workspace.FetchBlob("y_w").shape == (4, 3, 3, 2)
    # all-ones weights, zero bias: each output is the window's sum over channels
    expected = np.array([[x[n, :, 2 * i:2 * i + 3, 2 * j:2 * j + 2].sum() for i in range(4) for j in range(4)]
                         for n in range(2)]).reshape(2, 1, 4, 4)
    np.testing.assert_allclose(workspace.FetchBlob("y"), np.repeat(expected, 4, axis=1), rtol=1e-4, atol=1e-4)


def test_cond_and_loop_helpers():
    workspace.FeedBlob("flag", np.array(True))
    workspace.FeedBlob("x", np.array([1.0], np.float32))
    model = ModelHelper(name="outer")
    then_model, else_model = ModelHelper(name="then"), ModelHelper(name="else")
    then_model.net.Scale("x", "y", scale=10.0)
    else_model.net.Scale("x", "y", scale=-1.0)
    brew.cond(model, "flag", ["x", "y"], then_model, else_model)
    workspace.RunNetOnce(model.net)
    assert workspace.FetchBlob("y").tolist() == [10.0]
    workspace.FeedBlob("flag", np.array(False))
    workspace.RunNetOnce(model.net)
    assert workspace.FetchBlob("y").tolist() == [-1.0]

    workspace.FeedBlob("i", np.array([0], np.int64))
    workspace.FeedBlob("limit", np.array([5], np.int64))
    workspace.FeedBlob("one", np.array([1], np.int64))
    loop_model, cond_model = ModelHelper(name="body"), ModelHelper(name="test")
    loop_model.net.Add(["i", "one"], "i")
    cond_model.net.LT(["i", "limit"], "go")
    outer = ModelHelper(name="looping")
    outer.net.LT(["i", "limit"], "go")
    brew.loop(outer, "go", ["i", "limit", "one", "go"], loop_model, cond_model)
    workspace.RunNetOnce(outer.net)
    assert workspace.FetchBlob("i").tolist() == [5]
