"""Gradients of the unary elementwise ops (issue 31): for every op, finite differences
through hypothesis_test_util's assertGradientChecks (inputs kept away from kinks and
singularities), the gradient op's output against torch.autograd where torch has the
function (against the derivative written out here where it has not), and the
gradient OperatorDefs the maker emits against Caffe2's C++ gradient makers."""
from collections import namedtuple

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2py import core, workspace
from caffe2py import hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error
from caffe2py.gradients import get_gradient_for_op

from _grad_util import compare_with_torch, run_gradient, torch

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
F = torch.nn.functional if torch is not None else None


def uniform(lo, hi, kinks=(), margin=0.1, signed=False):
    """float32 values in [lo, hi] (with a random sign when signed), none within
    `margin` of a kink, so finite-difference steps never cross one."""
    def sample(rng, shape):
        x = rng.uniform(lo, hi, shape)
        if signed:
            x = x * rng.choice([-1.0, 1.0], shape)
        near = np.zeros(shape, bool)
        for k in kinks:
            near |= np.abs(x - k) < margin
        while near.any():
            x[near] = rng.uniform(lo, hi, int(near.sum()))
            near = np.zeros(shape, bool)
            for k in kinks:
                near |= np.abs(x - k) < margin
        return x.astype(np.float32)
    return sample


# op, its arguments, input sampler, torch's function of X (None: torch has none)
Spec = namedtuple("Spec", "op args sample torch_fn")

SPECS = {
    "Abs": Spec("Abs", {}, uniform(0.1, 2, signed=True), lambda x: torch.abs(x)),
    "Cos": Spec("Cos", {}, uniform(-3, 3), lambda x: torch.cos(x)),
    "Sin": Spec("Sin", {}, uniform(-3, 3), lambda x: torch.sin(x)),
    "Exp": Spec("Exp", {}, uniform(-2, 2), lambda x: torch.exp(x)),
    "Log": Spec("Log", {}, uniform(0.2, 3), lambda x: torch.log(x)),
    "Logit": Spec("Logit", {}, uniform(0.1, 0.9), lambda x: torch.logit(x, eps=1e-6)),
    "Logit(eps=0.2)": Spec("Logit", {"eps": 0.2}, uniform(0.0, 1.0, kinks=(0.2, 0.8)),
                           lambda x: torch.logit(x, eps=0.2)),
    "Negative": Spec("Negative", {}, uniform(-3, 3), lambda x: torch.neg(x)),
    "Sqr": Spec("Sqr", {}, uniform(-2, 2), lambda x: torch.square(x)),
    "Sqrt": Spec("Sqrt", {}, uniform(0.2, 3), lambda x: torch.sqrt(x)),
    "Softsign": Spec("Softsign", {}, uniform(0.1, 3, signed=True), lambda x: F.softsign(x)),
    "Softplus": Spec("Softplus", {}, uniform(-3, 3), lambda x: F.softplus(x)),
    "Swish": Spec("Swish", {}, uniform(-3, 3), lambda x: F.silu(x)),
    "Elu": Spec("Elu", {}, uniform(0.1, 2, signed=True), lambda x: F.elu(x)),
    "Elu(alpha=0.7)": Spec("Elu", {"alpha": 0.7}, uniform(0.1, 2, signed=True), lambda x: F.elu(x, 0.7)),
    "Selu": Spec("Selu", {}, uniform(0.1, 2, signed=True), lambda x: F.selu(x)),
    "Selu(alpha=1.5,scale=0.9)": Spec("Selu", {"alpha": 1.5, "scale": 0.9}, uniform(0.1, 2, signed=True),
                                      lambda x: 0.9 * torch.where(x > 0, x, 1.5 * torch.expm1(x))),
    "LeakyRelu": Spec("LeakyRelu", {}, uniform(0.1, 2, signed=True), lambda x: F.leaky_relu(x)),
    "LeakyRelu(alpha=0.2)": Spec("LeakyRelu", {"alpha": 0.2}, uniform(0.1, 2, signed=True),
                                 lambda x: F.leaky_relu(x, 0.2)),
    "ThresholdedRelu": Spec("ThresholdedRelu", {}, uniform(-1, 3, kinks=(1.0,)),
                            lambda x: F.threshold(x, 1.0, 0.0)),
    "ThresholdedRelu(alpha=-0.5)": Spec("ThresholdedRelu", {"alpha": -0.5}, uniform(-1.5, 1.5, kinks=(-0.5,)),
                                        lambda x: F.threshold(x, -0.5, 0.0)),
    "Erf": Spec("Erf", {}, uniform(-2, 2), lambda x: torch.erf(x)),
    "Gelu": Spec("Gelu", {}, uniform(-3, 3), lambda x: F.gelu(x)),
    "Gelu(fast_gelu=1)": Spec("Gelu", {"fast_gelu": True}, uniform(-3, 3), lambda x: F.gelu(x, approximate="tanh")),
    "Mish": Spec("Mish", {}, uniform(-3, 3), lambda x: F.mish(x)),
    "HardSigmoid": Spec("HardSigmoid", {}, uniform(-4, 4, kinks=(-2.5, 2.5)),
                        lambda x: torch.clamp(0.2 * x + 0.5, 0, 1)),
    "HardSigmoid(alpha=1/6)": Spec("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, uniform(-4, 4, kinks=(-3, 3)),
                                   lambda x: F.hardsigmoid(x)),
    "Log1p": Spec("Log1p", {}, uniform(-0.8, 3), lambda x: torch.log1p(x)),
    "RSqrt": Spec("RSqrt", {}, uniform(0.3, 3), lambda x: torch.rsqrt(x)),
    "Tan": Spec("Tan", {}, uniform(-1.2, 1.2), lambda x: torch.tan(x)),
    "Atan": Spec("Atan", {}, uniform(-3, 3), lambda x: torch.atan(x)),
    "Acos": Spec("Acos", {}, uniform(-0.8, 0.8), lambda x: torch.acos(x)),
    "Asin": Spec("Asin", {}, uniform(-0.8, 0.8), lambda x: torch.asin(x)),
    "Cosh": Spec("Cosh", {}, uniform(-2, 2), lambda x: torch.cosh(x)),
    "Sinh": Spec("Sinh", {}, uniform(-2, 2), lambda x: torch.sinh(x)),
    "Cbrt": Spec("Cbrt", {}, uniform(0.2, 3, signed=True), None),
    "Cube": Spec("Cube", {}, uniform(-2, 2), lambda x: torch.pow(x, 3)),
    "Reciprocal": Spec("Reciprocal", {}, uniform(0.3, 3, signed=True), lambda x: torch.reciprocal(x)),
}

# The gradient OperatorDefs of op(X) -> Y given Y_grad, read off Caffe2's C++ makers
# (caffe2/operators/<op>_op.cc, reciprocal_gradient_op.cc): (type, inputs, outputs, args).
CAFFE2_GRADIENTS = {
    "Abs": [("AbsGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Cos": [("CosGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Sin": [("SinGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Exp": [("Mul", ["Y", "Y_grad"], ["X_grad"], {})],
    "Log": [("Div", ["Y_grad", "X"], ["X_grad"], {})],
    "Logit": [("LogitGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Negative": [("Negative", ["Y_grad"], ["X_grad"], {})],
    "Sqr": [("Scale", ["Y_grad"], ["Y_grad"], {"scale": 2.0}), ("Mul", ["Y_grad", "X"], ["X_grad"], {})],
    "Sqrt": [("Scale", ["Y_grad"], ["X_grad"], {"scale": 0.5}), ("Div", ["X_grad", "Y"], ["X_grad"], {})],
    "Softsign": [("SoftsignGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Softplus": [("SoftplusGradient", ["Y", "Y_grad"], ["X_grad"], {})],
    "Swish": [("SwishGradient", ["X", "Y", "Y_grad"], ["X_grad"], {})],
    "Elu": [("EluGradient", ["Y", "Y_grad"], ["X_grad"], {})],
    "Selu": [("SeluGradient", ["Y", "Y_grad"], ["X_grad"], {})],
    "LeakyRelu": [("LeakyReluGradient", ["Y", "Y_grad"], ["X_grad"], {})],
    "ThresholdedRelu": [("ThresholdedReluGradient", ["Y", "Y_grad"], ["X_grad"], {})],
    "Erf": [("ErfGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Gelu": [("GeluGradient", ["Y_grad", "X"], ["X_grad"], {})],
    "Mish": [("MishGradient", ["X", "Y", "Y_grad"], ["X_grad"], {})],
    "HardSigmoid": [("HardSigmoidGradient", ["Y", "Y_grad"], ["X_grad"], {})],
    "Log1p": [("Log1pGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "RSqrt": [("RSqrtGradient", ["Y_grad", "Y"], ["X_grad"], {})],
    "Tan": [("TanGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Atan": [("AtanGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Acos": [("AcosGradient", ["X", "Y_grad"], ["X_grad"], {})],
    "Asin": [("AsinGradient", ["Y_grad", "X"], ["X_grad"], {})],
    "Cosh": [("CoshGradient", ["Y_grad", "X"], ["X_grad"], {})],
    "Sinh": [("SinhGradient", ["Y_grad", "X"], ["X_grad"], {})],
    "Cbrt": [("CbrtGradient", ["Y_grad", "Y"], ["X_grad"], {})],
    "Cube": [("CubeGradient", ["Y_grad", "X"], ["X_grad"], {})],
    "Reciprocal": [("ReciprocalGradient", ["Y", "Y_grad"], ["X_grad"], {})],
}


def _arg_values(op_def):
    from caffe2py.args import ArgumentHelper
    helper = ArgumentHelper(op_def)
    return {a.name: helper.get(a.name) for a in op_def.arg}


# ----------------------------------------------------------------- finite differences

class TestUnaryGradientsFiniteDifferences(hu.HypothesisTestCase):
    @given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), seed=st.integers(0, 10_000),
           **hu.gcs_cpu_only)
    @settings(max_examples=3, deadline=None)
    def test_every_op(self, shape, seed, gc, dc):
        rng = np.random.default_rng(seed)
        for name, spec in SPECS.items():
            x = spec.sample(rng, tuple(shape))
            op = core.CreateOperator(spec.op, ["X"], ["Y"], **spec.args)
            try:
                self.assertGradientChecks(gc, op, [x], 0, [0], stepsize=1e-2, threshold=1e-2,
                                          ensure_outputs_are_inferred=True)
            except AssertionError as exc:
                raise AssertionError("%s on %s: %s" % (name, x.tolist(), exc)) from None


# ----------------------------------------------------------------- against torch

@needs_torch
@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.torch_fn is not None))
def test_gradient_matches_torch(name):
    spec = SPECS[name]
    rng = np.random.default_rng(7)
    x = spec.sample(rng, (3, 4))
    op = core.CreateOperator(spec.op, ["X"], ["Y"], **spec.args)
    compare_with_torch(op, [x], [0], lambda t: [spec.torch_fn(t)], rtol=1e-4, atol=1e-5)


def test_cbrt_gradient_matches_its_derivative():
    # torch has no cbrt: d/dx x^(1/3) = 1 / (3 x^(2/3)), in float64
    x = SPECS["Cbrt"].sample(np.random.default_rng(3), (3, 4))
    dy = np.random.default_rng(4).standard_normal(x.shape).astype(np.float32)
    grads, _ = run_gradient(core.CreateOperator("Cbrt", ["X"], ["Y"]), [x], {0: dy})
    expected = dy / (3 * np.cbrt(x.astype(np.float64)) ** 2)
    np.testing.assert_allclose(grads[0], expected, rtol=1e-5)


@needs_torch
def test_mish_gradient_stays_finite_for_large_inputs():
    # Caffe2's formula divides powers of e^x, which overflow above x ~ 29
    x = np.array([-60, -30, 30, 60, 88.5], np.float32)
    compare_with_torch(core.CreateOperator("Mish", ["X"], ["Y"]), [x], [0], lambda t: [F.mish(t)])


def test_float16_gradients_are_float16_and_match_float32():
    rng = np.random.default_rng(5)
    for name in ("Elu", "Gelu", "Sin", "Swish", "Reciprocal", "LeakyRelu(alpha=0.2)"):
        spec = SPECS[name]
        x = spec.sample(rng, (2, 5))
        dy = rng.standard_normal(x.shape).astype(np.float32)
        op = core.CreateOperator(spec.op, ["X"], ["Y"], **spec.args)
        half, _ = run_gradient(op, [x.astype(np.float16)], {0: dy.astype(np.float16)})
        full, _ = run_gradient(op, [x.astype(np.float16).astype(np.float32)], {0: dy.astype(np.float16).astype(np.float32)})
        assert half[0].dtype == np.float16, name
        np.testing.assert_allclose(half[0], full[0], rtol=5e-3, atol=5e-3, err_msg=name)


def test_integer_cube_and_abs_gradients():
    x = np.array([-3, -1, 0, 2], np.int32)
    dy = np.array([1, 2, 3, 4], np.int32)
    cube, _ = run_gradient(core.CreateOperator("Cube", ["X"], ["Y"]), [x], {0: dy})
    np.testing.assert_array_equal(cube[0], 3 * x * x * dy)
    assert cube[0].dtype == np.int32
    absolute, _ = run_gradient(core.CreateOperator("Abs", ["X"], ["Y"]), [x], {0: dy})
    np.testing.assert_array_equal(absolute[0], [-1, -2, 0, 4])


# ----------------------------------------------------------------- Caffe2's gradient OperatorDefs

@pytest.mark.parametrize("op_type", sorted(CAFFE2_GRADIENTS))
def test_maker_emits_caffe2s_gradient_ops(op_type):
    grad_ops, g_input = get_gradient_for_op(core.CreateOperator(op_type, ["X"], ["Y"]), ["Y_grad"])
    assert g_input == ["X_grad"]
    emitted = [(g.type, list(g.input), list(g.output), _arg_values(g)) for g in grad_ops]
    assert emitted == [tuple(e) for e in CAFFE2_GRADIENTS[op_type]]
    assert all(g.is_gradient_op for g in grad_ops)


@pytest.mark.parametrize("op_type,args", [("Elu", {"alpha": 0.5}), ("Selu", {"alpha": 1.5, "scale": 1.2}),
                                          ("LeakyRelu", {"alpha": 0.3}), ("ThresholdedRelu", {"alpha": 0.25}),
                                          ("HardSigmoid", {"alpha": 0.1, "beta": 0.4}),
                                          ("Logit", {"eps": 0.01}), ("Gelu", {"fast_gelu": 1})])
def test_forward_arguments_reach_the_gradient_op(op_type, args):
    grad_ops, _ = get_gradient_for_op(core.CreateOperator(op_type, ["X"], ["Y"], **args), ["Y_grad"])
    (grad_op,) = grad_ops
    values = _arg_values(grad_op)
    for key, value in args.items():
        assert values[key] == pytest.approx(value), (op_type, key)


def test_a_saved_caffe2_gradient_op_runs_as_written():
    # an EluGradient OperatorDef as a Caffe2 training net stores it: Y, dY -> dX, alpha
    y = np.array([-0.5, 0.0, 1.5], np.float32)
    dy = np.array([2.0, 3.0, 4.0], np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("fc_elu", y)
    workspace.FeedBlob("fc_elu_grad", dy)
    workspace.RunOperatorOnce(core.CreateOperator("EluGradient", ["fc_elu", "fc_elu_grad"], ["fc_grad"], alpha=2.0))
    np.testing.assert_allclose(workspace.FetchBlob("fc_grad"), [2.0 * (-0.5 + 2.0), 3.0, 4.0])


# ----------------------------------------------------------------- nets, in place, errors

@needs_torch
def test_chain_of_unary_ops_in_a_net_matches_torch():
    net = core.Net("unary_chain")
    net.Sqr("x", "a")
    net.Log1p("a", "b")
    net.Gelu("b", "c", fast_gelu=1)
    net.Sin("x", "d")
    net.Mul(["c", "d"], "e")
    net.Sqrt("a", "f")                      # a read twice: its gradient is summed
    net.Add(["e", "f"], "y")
    grad_map = net.AddGradientOperators({"y": "dy"})
    rng = np.random.default_rng(11)
    x = uniform(0.2, 2, signed=True)(rng, (2, 3))
    dy = rng.standard_normal((2, 3)).astype(np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("dy", dy.copy())
    workspace.RunNetOnce(net)
    t = torch.tensor(x.astype(np.float64), requires_grad=True)
    a = t * t
    y = F.gelu(torch.log1p(a), approximate="tanh") * torch.sin(t) + torch.sqrt(a)
    (expected,) = torch.autograd.grad(y, [t], torch.tensor(dy.astype(np.float64)))
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["x"]), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_in_place_forward_reading_its_output_works():
    net = core.Net("elu_in_place")
    net.Copy("a", "h")
    net.Elu("h", "h", alpha=0.5)
    grad_map = net.AddGradientOperators({"h": "dh"})
    a = np.array([-1.0, -0.2, 0.3, 2.0], np.float32)
    dh = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("a", a)
    workspace.FeedBlob("dh", dh)
    workspace.RunNetOnce(net)
    expected = np.where(a > 0, dh, dh * 0.5 * np.exp(a))
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["a"]), expected, rtol=1e-6)


@pytest.mark.parametrize("op_type", ["Log", "Softsign", "Sqr", "Cos", "Gelu", "Swish"])
def test_in_place_forward_whose_gradient_needs_the_input_is_refused(op_type):
    net = core.Net("in_place")
    net.Copy("a", "h")
    getattr(net, op_type)("h", "h")
    with pytest.raises(Caffe2Error, match="in place on 'h'"):
        net.AddGradientOperators({"h": "dh"})


def test_sign_must_not_be_differentiated():
    with pytest.raises(Caffe2Error, match="should not ask for the gradient of operator type 'Sign'"):
        get_gradient_for_op(core.CreateOperator("Sign", ["X"], ["Y"]), ["Y_grad"])


def test_gradient_op_refuses_mismatched_shapes_and_dtypes():
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", np.ones((2, 3), np.float32))
    workspace.FeedBlob("dY", np.ones((3, 2), np.float32))
    with pytest.raises(Caffe2Error, match="blob 'dY': shape \\[3, 2\\] differs from 'X''s \\[2, 3\\]"):
        workspace.RunOperatorOnce(core.CreateOperator("SinGradient", ["X", "dY"], ["dX"]))
    workspace.FeedBlob("dY", np.ones((2, 3), np.float64))
    with pytest.raises(Caffe2Error, match="dY"):
        workspace.RunOperatorOnce(core.CreateOperator("SinGradient", ["X", "dY"], ["dX"]))
    workspace.FeedBlob("dY", np.ones((2, 3), np.int32))
    workspace.FeedBlob("X", np.ones((2, 3), np.int32))
    with pytest.raises(Caffe2Error, match="int32"):
        workspace.RunOperatorOnce(core.CreateOperator("SinGradient", ["X", "dY"], ["dX"]))


def test_selu_gradient_takes_dy_of_y_size_and_gives_y_shape():
    # Caffe2's SeluGradient asks for as many dY values as Y has (selu_op_test's
    # in-place check feeds Y of shape [1, 1] and dY of shape [1])
    alpha, scale = 1.3, 1.1
    y = np.array([[0.5, -0.4, 2.0]], np.float32)
    dy = np.array([1.0, 2.0, -3.0], np.float32)
    workspace.FeedBlob("Y", y)
    workspace.FeedBlob("dY", dy)
    workspace.RunOperatorOnce(core.CreateOperator("SeluGradient", ["Y", "dY"], ["dY"], alpha=alpha, scale=scale))
    expected = np.where(y > 0, scale * dy.reshape(y.shape), dy.reshape(y.shape) * (y + scale * alpha))
    np.testing.assert_allclose(workspace.FetchBlob("dY"), expected, rtol=1e-6)
    workspace.FeedBlob("dY", dy[:2])
    with pytest.raises(Caffe2Error, match="needs one per value"):
        workspace.RunOperatorOnce(core.CreateOperator("SeluGradient", ["Y", "dY"], ["dX"]))
