"""The model resnet50_trainer.py builds (Caffe2's caffe2/python/examples/resnet50_trainer.py),
one training step checked against independent references: ResNet-50 under the trainer's
arg_scope (use_cudnn, cudnn_exhaustive_search, ws_nbytes_limit: GPU hints a CPU run
ignores) and its brew.arg_scope of Initializer classes, SoftmaxWithLoss, Scale by the
loss scale, Accuracy; then add_weight_decay and build_multi_precision_sgd (momentum 0.9,
Nesterov, step policy). The loss, the softmax and every parameter's gradient against
torch autograd of the same network (translated op by op from the net, with the same
parameter values), run in float64 where the comparison is tight (in float32 a freshly
initialised 50-layer net with batch norm over 4 images is chaotic: torch's own float32
gradients differ from its float64 ones by several percent); the trainer's float32 step
against the Nesterov momentum formula with weight decay written here."""
import numpy as np
import pytest

from caffe2py import brew, model_helper, optimizer, workspace
from caffe2py.models import resnet
from caffe2py.modeling.initializers import Initializer

torch = pytest.importorskip("torch")
F = torch.nn.functional

BATCH, SIZE, LABELS, LR, WEIGHT_DECAY, LOSS_SCALE = 4, 32, 10, 0.1, 1e-4, 0.5
TRAIN_ARG_SCOPE = {"order": "NCHW", "use_cudnn": True, "cudnn_exhaustive_search": True,
                   "ws_nbytes_limit": 64 * 1024 * 1024}
# arguments of the trainer's ops that change nothing numerically on the CPU
IGNORED_ARGS = {"order", "use_cudnn", "cudnn_exhaustive_search", "exhaustive_search", "ws_nbytes_limit",
                "enable_tensor_core", "float16_compute", "momentum", "is_test"}


def build_trainer_model(with_optimizer):
    """The trainer's create_resnet50_model_ops (and add_optimizer); returns the model,
    its forward ops, the scaled loss and {param: a copy of its gradient taken before the
    optimizer rewrites the gradient blob}."""
    model = model_helper.ModelHelper(name="resnet50", arg_scope=TRAIN_ARG_SCOPE)
    with brew.arg_scope([brew.conv, brew.fc], WeightInitializer=Initializer, BiasInitializer=Initializer,
                        enable_tensor_core=False, float16_compute=False):
        # a 32 x 32 image leaves 1 x 1 after the last stage: the final pool's kernel is 1
        pred = resnet.create_resnet50(model, "data", num_input_channels=3, num_labels=LABELS, no_bias=True,
                                      no_loss=True, final_avg_kernel=1)
    softmax, loss = model.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
    loss = model.Scale(loss, scale=LOSS_SCALE)
    brew.accuracy(model, [softmax, "label"], "accuracy")
    forward_ops = list(model.net.Proto().op)
    model.AddGradientOperators([loss])
    raw_grads = {}
    if with_optimizer:
        for param in model.GetParams():
            raw_grads[str(param)] = str(model.net.Copy(model.param_to_grad[param], str(param) + "_raw_grad"))
        optimizer.add_weight_decay(model, WEIGHT_DECAY)
        optimizer.build_multi_precision_sgd(model, LR, momentum=0.9, nesterov=1, policy="step", stepsize=30,
                                            gamma=0.1)
    return model, forward_ops, str(loss), raw_grads


def feed_batch(dtype):
    rng = np.random.default_rng(0)
    data = rng.normal(0, 1, (BATCH, 3, SIZE, SIZE)).astype(dtype)
    label = rng.integers(0, LABELS, BATCH).astype(np.int32)
    workspace.FeedBlob("data", data)
    workspace.FeedBlob("label", label)
    return data, label


def _args(op):
    args = {}
    for a in op.arg:
        args[a.name] = a.i if a.HasField("i") else a.f if a.HasField("f") else list(a.ints) or None
    unknown = set(args) - IGNORED_ARGS - {"kernel", "stride", "pad", "group", "epsilon", "scale"}
    assert not unknown, (op.type, unknown)
    return args


def torch_forward(ops, values):
    """The forward ops as torch computes them (training-mode batch norm: batch statistics,
    biased variance); values maps blob names to tensors."""
    for op in ops:
        a, x = _args(op), [values.get(name) for name in op.input]
        if op.type == "Conv":
            y = F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, stride=a.get("stride", 1),
                         padding=a.get("pad", 0), groups=a.get("group", 1))
        elif op.type == "SpatialBN":
            mean = x[0].mean(dim=(0, 2, 3), keepdim=True)
            var = x[0].var(dim=(0, 2, 3), unbiased=False, keepdim=True)
            y = (x[0] - mean) / torch.sqrt(var + a["epsilon"]) * x[1].view(1, -1, 1, 1) + x[2].view(1, -1, 1, 1)
        elif op.type == "Relu":
            y = F.relu(x[0])
        elif op.type == "MaxPool":
            y = F.max_pool2d(x[0], a["kernel"], a.get("stride", 1), a.get("pad", 0))
        elif op.type == "AveragePool":
            y = F.avg_pool2d(x[0], a["kernel"], a.get("stride", 1), a.get("pad", 0))
        elif op.type == "Sum":
            y = sum(x)
        elif op.type == "FC":
            y = x[0].reshape(x[0].shape[0], -1) @ x[1].t() + x[2]
        elif op.type == "SoftmaxWithLoss":
            values[op.output[0]] = F.softmax(x[0], dim=1)
            y = F.cross_entropy(x[0], x[1].long())
            values[op.output[1]] = y
            continue
        elif op.type == "Scale":
            y = x[0] * a["scale"]
        elif op.type == "Accuracy":
            continue
        else:
            raise AssertionError("no torch translation for " + op.type)
        values[op.output[0]] = y
    return values


@pytest.fixture
def fresh_workspace():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def test_loss_and_gradients_match_torch(fresh_workspace):
    model, forward_ops, loss_name, _ = build_trainer_model(with_optimizer=False)
    assert {op.type for op in forward_ops} == {"Conv", "SpatialBN", "Relu", "MaxPool", "Sum", "AveragePool",
                                                "FC", "SoftmaxWithLoss", "Scale", "Accuracy"}
    workspace.RunNetOnce(model.param_init_net)
    for name in workspace.Blobs():          # the whole net in float64 (see above)
        value = workspace.FetchBlob(name)
        if isinstance(value, np.ndarray) and value.dtype == np.float32:
            workspace.FeedBlob(name, value.astype(np.float64))
    data, label = feed_batch(np.float64)
    params = [str(p) for p in model.GetParams()]
    assert len(params) == 161                # 53 convolutions, 53 batch norms (scale, bias), fc weight and bias
    before = {p: workspace.FetchBlob(p).copy() for p in params}
    workspace.RunNetOnce(model.net)

    tensors = {p: torch.tensor(v, requires_grad=True) for p, v in before.items()}
    values = dict(tensors, data=torch.tensor(data), label=torch.tensor(label))
    torch_forward(forward_ops, values)
    values[loss_name].backward()
    np.testing.assert_allclose(workspace.FetchBlob(loss_name), values[loss_name].item(), rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("softmax"), values["softmax"].detach().numpy(), rtol=1e-6,
                               atol=1e-9)
    for p in params:
        expected = tensors[p].grad.numpy()
        scale = np.abs(expected).max()
        np.testing.assert_allclose(workspace.FetchBlob(model.param_to_grad[p]) / scale, expected / scale, atol=1e-8,
                                   err_msg=p)


def test_the_trainer_step_is_nesterov_momentum_with_weight_decay(fresh_workspace):
    model, _, _, raw_grads = build_trainer_model(with_optimizer=True)
    workspace.RunNetOnce(model.param_init_net)
    feed_batch(np.float32)
    params = [str(p) for p in model.GetParams()]
    before = {p: workspace.FetchBlob(p).copy() for p in params}
    workspace.RunNetOnce(model.net)
    # Caffe2 tags conv / fc weights and batch-norm scales WEIGHT: those decay, biases do not
    decayed = {p for p in params if p.endswith("_w") or p.endswith("_s")}
    assert len(decayed) == 54 + 53
    assert float(workspace.FetchBlob("optimizer_iteration")[0]) == 1
    for p in params:
        grad = workspace.FetchBlob(raw_grads[p]) + (WEIGHT_DECAY * before[p] if p in decayed else 0)
        step = 1.9 * LR * grad      # the first Nesterov step from zero momentum: (1 + 0.9) * lr * grad
        scale = np.abs(step).max() + 1e-30
        np.testing.assert_allclose(workspace.FetchBlob(p), before[p] - step, rtol=1e-5, atol=1e-5 * scale,
                                   err_msg=p)
        # MomentumSGDUpdate writes the step it took over its gradient input, as Caffe2's does
        np.testing.assert_allclose(workspace.FetchBlob(model.param_to_grad[p]), step, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=p)
