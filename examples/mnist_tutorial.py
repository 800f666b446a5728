"""Caffe2's MNIST tutorial (caffe2/tutorials MNIST.ipynb) as a script, on synthetic
digits so that it needs no download. Run it unmodified through the compatibility alias:

    python -m caffe2py.compat examples/mnist_tutorial.py [--iterations 200] [--folder DIR]

It writes a training and a test db of seven-segment digits (28 x 28 uint8 images,
TensorProtos records as Caffe2's make_mnist_db writes them), then does what the
tutorial does: AddInput (TensorProtosDBInput, Cast, Scale, StopGradient), the LeNet
of brew.conv / max_pool / fc / relu / softmax, AddTrainingOperators (LabelCrossEntropy,
AveragedLoss, accuracy, AddGradientOperators, optimizer.build_sgd with the step
policy), training, a test model sharing the parameters (init_params=False), and the
deploy model saved with predictor_exporter and loaded back for one prediction.
"""
import argparse
import os
import tempfile

import numpy as np

from caffe2.proto import caffe2_pb2
from caffe2.python import brew, core, model_helper, optimizer, workspace
from caffe2.python.predictor import predictor_exporter as pe

# ----------------------------------------------------------------- the data (no download)

SEGMENTS = {"a": (5, 9, 5, 18), "b": (5, 18, 13, 18), "c": (13, 18, 22, 18), "d": (22, 9, 22, 18),
            "e": (13, 9, 22, 9), "f": (5, 9, 13, 9), "g": (13, 9, 13, 18)}
DIGITS = ("abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg")


def seven_segment_digits(n, rng):
    """uint8 images [n, 1, 28, 28] of seven-segment digits (3-pixel strokes, shifted by
    up to a pixel, dimmed, with Gaussian noise) and their int32 labels."""
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
    """A minidb of TensorProtos records (image BYTE [1, 28, 28], label INT32), the
    records Caffe2's make_mnist_db writes. (Caffe2 scripts wrote dbs through
    core.C.create_db; caffe2py's db module is the same interface.)"""
    from caffe2py.db import NEW, create_db
    db = create_db("minidb", path, NEW)
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


# ----------------------------------------------------------------- the tutorial

def AddInput(model, batch_size, db, db_type):
    data_uint8, label = model.TensorProtosDBInput(
        [], ["data_uint8", "label"], batch_size=batch_size, db=db, db_type=db_type)
    data = model.Cast(data_uint8, "data", to=core.DataType.FLOAT)
    data = model.Scale(data, data, scale=float(1. / 256))
    data = model.StopGradient(data, data)
    return data, label


def AddLeNetModel(model, data):
    conv1 = brew.conv(model, data, 'conv1', dim_in=1, dim_out=20, kernel=5)
    pool1 = brew.max_pool(model, conv1, 'pool1', kernel=2, stride=2)
    conv2 = brew.conv(model, pool1, 'conv2', dim_in=20, dim_out=50, kernel=5)
    pool2 = brew.max_pool(model, conv2, 'pool2', kernel=2, stride=2)
    fc3 = brew.fc(model, pool2, 'fc3', dim_in=50 * 4 * 4, dim_out=500)
    relu = brew.relu(model, fc3, fc3)
    pred = brew.fc(model, relu, 'pred', 500, 10)
    softmax = brew.softmax(model, pred, 'softmax')
    return softmax


def AddAccuracy(model, softmax, label):
    accuracy = brew.accuracy(model, [softmax, label], "accuracy")
    return accuracy


def AddTrainingOperators(model, softmax, label):
    xent = model.LabelCrossEntropy([softmax, label], 'xent')
    loss = model.AveragedLoss(xent, "loss")
    AddAccuracy(model, softmax, label)
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, base_learning_rate=0.1, policy="step", stepsize=1, gamma=0.999)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--folder", default=None, help="where the dbs and the model go (default: a temp dir)")
    args = parser.parse_args()
    workspace.GlobalInit(["caffe2", "--caffe2_log_level=0"])
    root_folder = args.folder or tempfile.mkdtemp(prefix="mnist_tutorial_")
    os.makedirs(root_folder, exist_ok=True)
    train_db = os.path.join(root_folder, "mnist_train.minidb")
    test_db = os.path.join(root_folder, "mnist_test.minidb")
    rng = np.random.default_rng(0)
    write_db(train_db, *seven_segment_digits(640, rng))
    write_db(test_db, *seven_segment_digits(200, rng))
    workspace.ResetWorkspace(root_folder)

    arg_scope = {"order": "NCHW"}
    train_model = model_helper.ModelHelper(name="mnist_train", arg_scope=arg_scope)
    data, label = AddInput(train_model, batch_size=args.batch_size, db=train_db, db_type='minidb')
    softmax = AddLeNetModel(train_model, data)
    AddTrainingOperators(train_model, softmax, label)

    test_model = model_helper.ModelHelper(name="mnist_test", arg_scope=arg_scope, init_params=False)
    data, label = AddInput(test_model, batch_size=50, db=test_db, db_type='minidb')
    softmax = AddLeNetModel(test_model, data)
    AddAccuracy(test_model, softmax, label)

    deploy_model = model_helper.ModelHelper(name="mnist_deploy", arg_scope=arg_scope, init_params=False)
    AddLeNetModel(deploy_model, "data")

    workspace.RunNetOnce(train_model.param_init_net)
    workspace.CreateNet(train_model.net, overwrite=True)
    for i in range(args.iterations):
        workspace.RunNet(train_model.net)
        print("iter %d: loss %.5f accuracy %.3f" % (
            i, workspace.FetchBlob('loss'), workspace.FetchBlob('accuracy')))

    workspace.RunNetOnce(test_model.param_init_net)
    workspace.CreateNet(test_model.net, overwrite=True)
    test_accuracy = np.zeros(4)
    for i in range(4):
        workspace.RunNet(test_model.net.Proto().name)
        test_accuracy[i] = workspace.FetchBlob('accuracy')
    print("test accuracy: %.4f" % test_accuracy.mean())

    # save the deploy model with its trained parameters, load it back, predict
    pe_meta = pe.PredictorExportMeta(
        predict_net=deploy_model.net.Proto(),
        parameters=[str(b) for b in deploy_model.params],
        inputs=["data"],
        outputs=["softmax"],
    )
    model_path = os.path.join(root_folder, "mnist_model.minidb")
    pe.save_to_db("minidb", model_path, pe_meta)
    blob = workspace.FetchBlob("data")[:1]
    expected = workspace.FetchBlob("softmax")[:1]
    workspace.ResetWorkspace(root_folder)
    predict_net = pe.prepare_prediction_net(model_path, "minidb")   # zero-fills the inputs
    workspace.FeedBlob("data", blob)
    workspace.RunNetOnce(predict_net)
    prob = workspace.FetchBlob("softmax")
    print("deployed model: predicts %d (p=%.4f), same as the test net: %s" % (
        prob.argmax(), prob.max(), np.allclose(prob, expected, rtol=1e-5, atol=1e-6)))


if __name__ == "__main__":
    main()
