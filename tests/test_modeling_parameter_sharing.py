"""caffe2py.modeling.parameter_sharing: ParameterSharing maps name scopes onto
others so that brew helpers in both create one set of parameters; an SGD step
then updates the shared blob with the sum of both towers' gradients (written out
in NumPy here)."""
import numpy as np
import pytest

from caffe2py import brew, model_helper, optimizer, scope, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.modeling.parameter_sharing import ParameterSharing, parameter_sharing_context

RNG = np.random.default_rng(2603)
LR = 0.05


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()


def test_scope_resolution_follows_overrides():
    with scope.NameScope("global"):
        with ParameterSharing({"scope_b": "scope_a"}):
            for current, expected in [("scope_a", "global/scope_a/w"), ("scope_b", "global/scope_a/w"),
                                      ("scope_c", "global/scope_c/w")]:
                with scope.NameScope(current):
                    assert parameter_sharing_context.get_parameter_name("w") == expected
            with scope.NameScope("scope_b"):
                with ParameterSharing({"shared_child": ""}):
                    with scope.NameScope("shared_child"):
                        assert parameter_sharing_context.get_parameter_name("w") == "global/scope_a/w"
                    with scope.NameScope("unshared_child"):
                        assert parameter_sharing_context.get_parameter_name("w") == \
                            "global/scope_a/unshared_child/w"
        with scope.NameScope("scope_b"):        # outside the block: no sharing
            assert parameter_sharing_context.get_parameter_name("w") == "global/scope_b/w"


def test_two_towers_train_one_parameter_set():
    model = model_helper.ModelHelper(name="towers")
    xs = {t: RNG.standard_normal((4, 3)).astype(np.float32) for t in ("a", "b")}
    labels = {t: RNG.standard_normal((4, 2)).astype(np.float32) for t in ("a", "b")}
    losses = []
    with ParameterSharing({"tower_b": "tower_a"}):
        for t in ("a", "b"):
            with scope.NameScope("tower_" + t):
                workspace.FeedBlob("tower_%s/x" % t, xs[t])
                workspace.FeedBlob("tower_%s/label" % t, labels[t])
                y = brew.fc(model, "x", "fc", 3, 2, weight_init=("GaussianFill", {"std": 1.0}),
                            bias_init=("GaussianFill", {"std": 1.0}))
                dist = model.net.SquaredL2Distance([y, "label"], "dist")
                losses.append(model.net.AveragedLoss(dist, "loss"))
    assert sorted(map(str, model.params)) == ["tower_a/fc_b", "tower_a/fc_w"]
    assert [str(o) for op in model.param_init_net.Proto().op for o in op.output] == ["tower_a/fc_w", "tower_a/fc_b"]
    fc_ops = [op for op in model.net.Proto().op if op.type == "FC"]
    assert [list(op.input[1:]) for op in fc_ops] == [["tower_a/fc_w", "tower_a/fc_b"]] * 2

    model.AddGradientOperators(losses)
    optimizer.build_sgd(model, base_learning_rate=LR)
    workspace.RunNetOnce(model.param_init_net)
    w0, b0 = workspace.FetchBlob("tower_a/fc_w").copy(), workspace.FetchBlob("tower_a/fc_b").copy()
    workspace.RunNetOnce(model.net)
    assert not workspace.HasBlob("tower_b/fc_w")

    grad_w, grad_b = np.zeros_like(w0, np.float64), np.zeros_like(b0, np.float64)
    for t in ("a", "b"):          # d/dW of mean_i 0.5 ||x_i W^T + b - label_i||^2, both towers summed
        dy = (xs[t].astype(np.float64) @ w0.T + b0 - labels[t]) / len(xs[t])
        grad_w += dy.T @ xs[t]
        grad_b += dy.sum(0)
    np.testing.assert_allclose(workspace.FetchBlob("tower_a/fc_w"), w0 - LR * grad_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("tower_a/fc_b"), b0 - LR * grad_b, rtol=1e-5, atol=1e-6)


def test_named_errors():
    with pytest.raises(Caffe2Error, match="prefix"):
        with ParameterSharing({"a": "a/b"}):
            pass
    with pytest.raises(Caffe2Error, match="dict"):
        with ParameterSharing([("a", "b")]):
            pass
    assert parameter_sharing_context.get_parameter_name("w") == "w"   # nothing left open
    with pytest.raises(Caffe2Error, match="no ParameterSharing block"):
        parameter_sharing_context.pop()
