"""Named errors of a whole training setup (ModelHelper + brew + AddGradientOperators +
build_sgd), the way a user meets them: a gradient asked through an op that has none,
a loss that is not a scalar, labels that do not match the batch. Each names the op and
the blob, and a failed step leaves the parameters and the iteration counter as they
were (the update ops come after the failing op)."""
import numpy as np
import pytest

from caffe2py import brew, model_helper, optimizer, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(16)
BATCH, FEATURES, CLASSES = 8, 5, 3


def _forward(name, floor=False):
    model = model_helper.ModelHelper(name=name)
    h = brew.relu(model, brew.fc(model, "data", name + "_h", dim_in=FEATURES, dim_out=6), name + "_hr")
    if floor:            # Floor has no gradient (in Caffe2 neither)
        h = model.net.Floor(h, name + "_floored")
    return model, brew.fc(model, h, name + "_pred", dim_in=6, dim_out=CLASSES)


def _feed(labels):
    workspace.FeedBlob("data", RNG.standard_normal((BATCH, FEATURES)).astype(np.float32))
    workspace.FeedBlob("label", labels)


def _snapshot(model):
    return {str(p): workspace.FetchBlob(p).copy() for p in model.params}


def test_a_gradient_through_an_op_without_one_is_named_and_leaves_the_net_as_it_was():
    model, pred = _forward("nograd", floor=True)
    _, loss = model.net.SoftmaxWithLoss([pred, "label"], ["prob", "loss"])
    before = [op.type for op in model.net.Proto().op]
    with pytest.raises(Caffe2Error, match="Floor #\\d+ 'nograd_floored': no gradient is defined for operator "
                                          "type 'Floor'"):
        model.AddGradientOperators([loss])
    assert [op.type for op in model.net.Proto().op] == before        # no half-built backward pass
    assert not model.param_to_grad


def _train_step_fails(model, loss_blob, labels, match):
    model.AddGradientOperators([loss_blob])
    optimizer.build_sgd(model, base_learning_rate=0.1)
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    _feed(labels)
    workspace.CreateNet(model.net)
    params = _snapshot(model)
    with pytest.raises(Caffe2Error, match=match):
        workspace.RunNet(model.net.Name())
    for name, value in _snapshot(model).items():
        np.testing.assert_array_equal(value, params[name], err_msg=name)
    assert workspace.FetchBlob("optimizer_iteration").tolist() == [0]      # AtomicIter did not run


def test_a_loss_that_is_not_a_scalar_is_named_when_the_step_runs():
    model, pred = _forward("vector_loss")
    prob = model.net.Softmax(pred, "vl_prob")
    xent = model.net.LabelCrossEntropy([prob, "label"], "vl_xent")      # per example: no AveragedLoss
    _train_step_fails(model, xent, np.zeros(BATCH, np.int32), "blob 'vl_xent': a loss must be a scalar")


@pytest.mark.parametrize("loss", ["SoftmaxWithLoss", "LabelCrossEntropy", "SigmoidCrossEntropyWithLogits"])
def test_labels_that_do_not_match_the_batch_are_named(loss):
    model, pred = _forward("labels_" + loss)
    if loss == "SoftmaxWithLoss":
        _, avg = model.net.SoftmaxWithLoss([pred, "label"], ["prob", "loss"])
        labels, match = np.zeros(BATCH - 1, np.int32), "SoftmaxWithLoss #\\d+ .*blob 'label': labels of shape " \
                                                       "\\[7\\] do not match 8 rows"
    elif loss == "LabelCrossEntropy":
        xent = model.net.LabelCrossEntropy([model.net.Softmax(pred, "prob"), "label"], "xent")
        avg = model.net.AveragedLoss(xent, "loss")
        labels, match = np.zeros((BATCH, 2), np.int32), "LabelCrossEntropy #\\d+ 'xent': blob 'label': labels " \
                                                        "must have shape \\[8\\] or \\[8, 1\\]"
    else:
        xent = model.net.SigmoidCrossEntropyWithLogits([pred, "label"], "xent")
        avg = model.net.AveragedLoss(xent, "loss")
        labels, match = np.zeros((BATCH, 1), np.float32), "SigmoidCrossEntropyWithLogits #\\d+ 'xent': blob " \
                                                          "'label': targets of shape \\[8, 1\\] do not match"
    _train_step_fails(model, avg, labels, match)
