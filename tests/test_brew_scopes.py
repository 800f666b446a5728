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


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


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


@pytest.mark.parametrize("model_default", [None, True, False])
def test_conv_use_cudnn_sets_the_engine_as_caffe2(model_default):
    # ModelHelper's arg_scope turns use_cudnn on unless told otherwise; a call's
    # use_cudnn wins; an engine that contradicts it is a ValueError
    model = ModelHelper(name="cudnn", arg_scope={} if model_default is None else {"use_cudnn": model_default})
    scope_default = True if model_default is None else model_default
    for use_cudnn in (None, True, False):
        for engine in (None, "", "CUDNN"):
            kwargs = {}
            if use_cudnn is not None:
                kwargs["use_cudnn"] = use_cudnn
            if engine is not None:
                kwargs["engine"] = engine
            wanted = scope_default if use_cudnn is None else use_cudnn
            if (not wanted and engine == "CUDNN") or (wanted and engine == ""):
                with pytest.raises(ValueError):
                    brew.conv(model, "x", "y", 2, 3, 1, **kwargs)
                continue
            brew.conv(model, "x", "y", 2, 3, 1, **kwargs)
            op = model.net.Proto().op[-1]
            assert op.engine == (engine if engine is not None else ("CUDNN" if wanted else ""))
            searched = [a.i for a in op.arg if a.name == "exhaustive_search"]
            assert searched == ([0] if op.engine == "CUDNN" else [])


def test_a_cudnn_conv_runs_the_default_kernel_on_the_cpu():
    model = ModelHelper(name="cudnn_cpu")
    y = brew.conv(model, "x", "y", 2, 3, 1)
    assert model.net.Proto().op[0].engine == "CUDNN"
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 2, 4, 5)).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    w, b = workspace.FetchBlob("y_w"), workspace.FetchBlob("y_b")
    expected = np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]) + b.reshape(1, -1, 1, 1)
    np.testing.assert_allclose(workspace.FetchBlob("y"), expected, rtol=1e-5, atol=1e-5)
