"""Caffe2's MNIST tutorial, end to end, on a synthetic digit set: the input read from
a db by TensorProtosDBInput (uint8 images, Cast, Scale, StopGradient), the LeNet
of brew conv / max_pool / fc / relu, the tutorial's AddTrainingOperators (the loss,
Accuracy, AddGradientOperators, optimizer.build_sgd with its step policy), a test
model sharing the trained parameters (init_params=False) scoring held-out digits.

The digits are seven-segment figures drawn as 3-pixel strokes on 28 x 28, shifted by
up to a pixel, dimmed and covered in Gaussian noise: ten classes a LeNet separates
in a few dozen steps, so the test is quick. The tutorial's script itself runs through
`python -m caffe2py.compat` in test_mnist_tutorial_script_runs_through_compat."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from caffe2py import brew, core, model_helper, optimizer, workspace
from caffe2py.db import NEW, create_db
from caffe2py.proto import caffe2_pb2

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# segment -> (top row, left column, bottom row, right column) of its centre line
SEGMENTS = {"a": (5, 9, 5, 18), "b": (5, 18, 13, 18), "c": (13, 18, 22, 18), "d": (22, 9, 22, 18),
            "e": (13, 9, 22, 9), "f": (5, 9, 13, 9), "g": (13, 9, 13, 18)}
DIGITS = ("abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg")


def seven_segment_digits(n, rng):
    """(uint8 images [n, 1, 28, 28], int32 labels [n])."""
    labels = rng.integers(0, 10, n).astype(np.int32)
    images = np.zeros((n, 1, 28, 28), np.float32)
    for k, label in enumerate(labels):
        dy, dx = rng.integers(-1, 2, 2)
        for segment in DIGITS[label]:
            r0, c0, r1, c1 = SEGMENTS[segment]
            images[k, 0, r0 + dy - 1:r1 + dy + 2, c0 + dx - 1:c1 + dx + 2] = 1.0
    images = images * rng.uniform(0.6, 1.0, (n, 1, 1, 1)) + rng.normal(0.0, 0.15, images.shape)
    return (np.clip(images, 0.0, 1.0) * 255).astype(np.uint8), labels


def write_db(path, images, labels):
    """A minidb of TensorProtos records as Caffe2's make_mnist_db writes them: the image
    as BYTE data [1, 28, 28], the label an INT32 scalar."""
    db = create_db("minidb", str(path), NEW)
    transaction = db.new_transaction()
    for k, (image, label) in enumerate(zip(images, labels)):
        record = caffe2_pb2.TensorProtos()
        data = record.protos.add()
        data.data_type = caffe2_pb2.TensorProto.BYTE
        data.dims.extend(image.shape)
        data.byte_data = image.tobytes()
        target = record.protos.add()
        target.data_type = caffe2_pb2.TensorProto.INT32
        target.int32_data.append(int(label))
        transaction.put("%08d" % k, record.SerializeToString())
    transaction.commit()
    db.close()


# ----------------------------------------------------------------- the tutorial's functions

def AddInput(model, batch_size, db, db_type):
    data_uint8, label = model.TensorProtosDBInput([], ["data_uint8", "label"], batch_size=batch_size,
                                                  db=db, db_type=db_type)
    data = model.Cast(data_uint8, "data", to=core.DataType.FLOAT)
    data = model.Scale(data, data, scale=float(1. / 256))
    data = model.StopGradient(data, data)
    return data, label


def AddLeNetModel(model, data):
    conv1 = brew.conv(model, data, "conv1", dim_in=1, dim_out=20, kernel=5)
    pool1 = brew.max_pool(model, conv1, "pool1", kernel=2, stride=2)
    conv2 = brew.conv(model, pool1, "conv2", dim_in=20, dim_out=50, kernel=5)
    pool2 = brew.max_pool(model, conv2, "pool2", kernel=2, stride=2)
    fc3 = brew.fc(model, pool2, "fc3", dim_in=50 * 4 * 4, dim_out=500)
    relu = brew.relu(model, fc3, fc3)
    return brew.fc(model, relu, "pred", 500, 10)


def AddAccuracy(model, softmax, label):
    return brew.accuracy(model, [softmax, label], "accuracy")


def AddTrainingOperators(model, pred, label, loss_form):
    if loss_form == "tutorial":        # Softmax, LabelCrossEntropy, AveragedLoss
        softmax = brew.softmax(model, pred, "softmax")
        xent = model.LabelCrossEntropy([softmax, label], "xent")
        loss = model.AveragedLoss(xent, "loss")
    else:                              # the fused op: softmax and the averaged loss
        softmax, loss = model.SoftmaxWithLoss([pred, label], ["softmax", "loss"])
    AddAccuracy(model, softmax, label)
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, base_learning_rate=0.1, policy="step", stepsize=1, gamma=0.999)
    return softmax, loss


# ----------------------------------------------------------------- tests

@pytest.fixture()
def digit_dbs(tmp_path):
    rng = np.random.default_rng(3)
    train, test = tmp_path / "train.minidb", tmp_path / "test.minidb"
    write_db(train, *seven_segment_digits(640, rng))
    write_db(test, *seven_segment_digits(200, rng))
    return str(train), str(test)


def test_lenet_tutorial_learns_synthetic_digits(digit_dbs):
    # SoftmaxWithLoss here; examples/mnist_tutorial.py (the script test below) has the
    # tutorial's Softmax + LabelCrossEntropy + AveragedLoss
    loss_form = "softmax_with_loss"
    train_db, test_db = digit_dbs
    workspace.ResetWorkspace()
    arg_scope = {"order": "NCHW"}
    train_model = model_helper.ModelHelper(name="mnist_train_" + loss_form, arg_scope=arg_scope)
    data, label = AddInput(train_model, batch_size=16, db=train_db, db_type="minidb")
    pred = AddLeNetModel(train_model, data)
    AddTrainingOperators(train_model, pred, label, loss_form)
    assert {str(p) for p in train_model.param_to_grad} == {
        "conv1_w", "conv1_b", "conv2_w", "conv2_b", "fc3_w", "fc3_b", "pred_w", "pred_b"}
    assert "data" not in train_model.grad_map     # StopGradient on the input

    workspace.RunNetOnce(train_model.param_init_net)
    workspace.CreateNet(train_model.net, overwrite=True)
    losses, accuracies = [], []
    for _ in range(40):
        workspace.RunNet(train_model.net)
        losses.append(float(workspace.FetchBlob("loss")))
        accuracies.append(float(workspace.FetchBlob("accuracy")))
    assert workspace.FetchBlob("data").dtype == np.float32 and workspace.FetchBlob("data").max() < 1.0
    assert int(workspace.FetchBlob("optimizer_iteration")[0]) == 40
    # the step policy: lr = -0.1 * 0.999^iteration
    (lr,) = [op.output[0] for op in train_model.net.Proto().op if op.type == "LearningRate"]
    assert re.fullmatch(r"SgdOptimizer_\d+_lr_cpu", lr)
    np.testing.assert_allclose(workspace.FetchBlob(lr), [-0.1 * 0.999 ** 40], rtol=1e-5)
    assert np.mean(losses[-4:]) < 0.25 * np.mean(losses[:4]), losses
    assert np.mean(accuracies[-4:]) >= 0.8, accuracies

    # the tutorial's test model: same blob names, parameters not re-initialised
    test_model = model_helper.ModelHelper(name="mnist_test_" + loss_form, arg_scope=arg_scope, init_params=False)
    data, label = AddInput(test_model, batch_size=50, db=test_db, db_type="minidb")
    softmax = brew.softmax(test_model, AddLeNetModel(test_model, data), "softmax")
    AddAccuracy(test_model, softmax, label)
    assert not [op for op in test_model.param_init_net.Proto().op if op.type != "CreateDB"]
    workspace.RunNetOnce(test_model.param_init_net)
    workspace.CreateNet(test_model.net, overwrite=True)
    scores = []
    for _ in range(4):                            # the 200 held-out digits
        workspace.RunNet(test_model.net)
        scores.append(float(workspace.FetchBlob("accuracy")))
        prob, labels = workspace.FetchBlob("softmax"), workspace.FetchBlob("label")
        assert scores[-1] == pytest.approx(np.mean(prob.argmax(axis=1) == labels))
    assert np.mean(scores) >= 0.95, scores


def test_model_db_input_refuses_a_reader_input():
    model = model_helper.ModelHelper(name="db_input_args")
    with pytest.raises(Exception, match="makes its own reader"):
        model.TensorProtosDBInput(["reader"], ["x", "y"], batch_size=2, db="d", db_type="minidb")


def test_mnist_tutorial_script_runs_through_compat(tmp_path):
    script = EXAMPLES / "mnist_tutorial.py"
    env = dict(os.environ, CAFFE2PY_JIT=os.environ.get("CAFFE2PY_JIT", "inline"))
    out = subprocess.run([sys.executable, "-m", "caffe2py.compat", str(script), "--iterations", "40",
                          "--folder", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "from caffe2.python import" in script.read_text()
    losses = [float(v) for v in re.findall(r"^iter \d+: loss ([0-9.]+)", text, re.M)]
    assert len(losses) == 40, text[-2000:]
    assert np.mean(losses[-4:]) < 0.25 * np.mean(losses[:4]), losses
    test_accuracy = float(re.search(r"^test accuracy: ([0-9.]+)", text, re.M).group(1))
    assert test_accuracy >= 0.95, text[-2000:]
    assert (tmp_path / "mnist_train.minidb").exists() and (tmp_path / "mnist_model.minidb").exists()
    # the deploy model, saved by predictor_exporter and loaded back, predicts as the test net did
    assert re.search(r"^deployed model: .* same as the test net: True$", text, re.M), text[-2000:]
