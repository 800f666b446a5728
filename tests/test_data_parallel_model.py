"""caffe2.python.data_parallel_model on CPU devices: data-parallel SGD equals
single-device SGD on the concatenated batch (checked against torch), dense and sparse
gradients, a trimmed resnet50_trainer.py, and the named errors."""
import numpy as np
import pytest

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a trainer script imports them)
from caffe2py import brew, core, data_parallel_model, model_helper, optimizer, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2

torch = pytest.importorskip("torch")

DEVICES = [0, 1]


@pytest.fixture(autouse=True)
def fresh_workspace():
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()
    yield
    workspace.ResetWorkspace()


def _run_init_net(model):
    """data_parallel_model.RunInitNet, after creating (empty) the batch blobs the training
    net reads and nothing produces: RunInitNet also creates the net, and as in Caffe2 an
    op refuses an input blob that does not exist yet (the tests feed batches later)."""
    produced = {o for net in model._data_parallel_model_init_nets for op in net.Proto().op for o in op.output}
    for net in model._data_parallel_model_nets:
        for op in net.Proto().op:
            for name in op.input:
                if name not in produced and not workspace.HasBlob(name):
                    workspace.CreateBlob(name)
            produced.update(op.output)
    data_parallel_model.RunInitNet(model)


def _fetch(name):
    return np.array(workspace.FetchBlob(name))


# ----------------------------------------------------------------- dense: an MLP

def _mlp_model(momentum, shared_model=False):
    model = model_helper.ModelHelper(name="mlp")

    def add_input(model):
        return None  # the test feeds cpu_i/data and cpu_i/label

    def forward(model, loss_scale):
        hidden = brew.fc(model, "data", "fc1", dim_in=5, dim_out=7)
        hidden = brew.relu(model, hidden, hidden)
        logits = brew.fc(model, hidden, "fc2", dim_in=7, dim_out=3)
        _, loss = model.net.SoftmaxWithLoss([logits, "label"], ["softmax", "loss"])
        return [model.net.Scale(loss, "scaled_loss", scale=loss_scale)]

    def add_optimizer(model):
        return optimizer.build_sgd(model, base_learning_rate=0.1, policy="fixed", momentum=momentum)

    data_parallel_model.Parallelize(model, input_builder_fun=add_input, forward_pass_builder_fun=forward,
                                    optimizer_builder_fun=add_optimizer, devices=DEVICES, cpu_device=True,
                                    shared_model=shared_model)
    return model


@pytest.mark.parametrize("momentum, shared_model", [(0.0, False), (0.9, False), (0.9, True)])
def test_mlp_on_two_cpu_devices_equals_single_device_training_on_the_whole_batch(momentum, shared_model):
    model = _mlp_model(momentum, shared_model)
    rng = np.random.default_rng(0)
    # the init net draws each device's parameters, then copies device 0's to device 1
    _run_init_net(model)
    names = ["fc1_w", "fc1_b", "fc2_w", "fc2_b"]
    if shared_model:     # one copy, device 0's: device 1's ops read it
        assert [str(p) for p in model.params] == ["cpu_0/" + n for n in names]
        used = {b for net in (model.param_init_net, model.net) for op in net.Proto().op
                for b in list(op.input) + list(op.output)}
        assert not any("cpu_1/" + n in used for n in names) and "cpu_1/fc1_w_grad" in used
        assert not workspace.HasBlob("cpu_1/fc1_w")
    for name in names if not shared_model else []:
        np.testing.assert_array_equal(_fetch("cpu_0/" + name), _fetch("cpu_1/" + name))
    ref = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3)).double()
    with torch.no_grad():
        for param, name in zip(ref.parameters(), names):
            param.copy_(torch.from_numpy(_fetch("cpu_0/" + name).astype(np.float64)))
    sgd = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=momentum, nesterov=momentum > 0)
    for _ in range(4):
        batches = [(rng.standard_normal((4, 5)).astype(np.float32), rng.integers(0, 3, 4).astype(np.int32))
                   for _ in DEVICES]
        for device, (x, y) in zip(DEVICES, batches):
            workspace.FeedBlob("cpu_%d/data" % device, x)
            workspace.FeedBlob("cpu_%d/label" % device, y)
        data_parallel_model.RunNet(model, 1)
        x = torch.from_numpy(np.concatenate([b[0] for b in batches]).astype(np.float64))
        y = torch.from_numpy(np.concatenate([b[1] for b in batches]).astype(np.int64))
        sgd.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        sgd.step()
    for param, name in zip(ref.parameters(), names):
        if not shared_model:
            np.testing.assert_array_equal(_fetch("cpu_0/" + name), _fetch("cpu_1/" + name))
        np.testing.assert_allclose(_fetch("cpu_0/" + name), param.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_the_net_sums_gradients_across_devices_and_copies_them_back():
    model = _mlp_model(0.0)
    ops = model.net.Proto().op
    sums = [op for op in ops if op.type == "Sum" and op.name == "dpm"]
    assert {tuple(op.input) for op in sums} == {("cpu_0/%s_grad" % p, "cpu_1/%s_grad" % p)
                                                for p in ("fc1_w", "fc1_b", "fc2_w", "fc2_b")}
    assert all(list(op.output) == [op.input[0]] for op in sums)
    copies = {(op.input[0], op.output[0]) for op in ops if op.type == "Copy"}
    assert ("cpu_0/fc2_w_grad", "cpu_1/fc2_w_grad") in copies
    init_copies = {(op.input[0], op.output[0]) for op in model.param_init_net.Proto().op if op.type == "Copy"}
    assert ("cpu_0/fc1_w", "cpu_1/fc1_w") in init_copies
    scales = [op for op in ops if op.type == "Scale" and not op.is_gradient_op]
    assert [a.f for op in scales for a in op.arg if a.name == "scale"] == [0.5, 0.5]
    assert model.net.Proto().type == "dag" and model.net.Proto().num_workers == 8


def test_helpers_scripts_call():
    model = _mlp_model(0.9)
    assert data_parallel_model.GetDevices(model) == DEVICES
    assert data_parallel_model.GetLearningRateBlobNames(model) == ["SgdOptimizer_0_lr_cpu"]
    checkpoint = {str(b) for b in data_parallel_model.GetCheckpointParams(model)}
    assert {"cpu_0/fc1_w", "cpu_0/fc1_b", "cpu_0/fc2_w", "cpu_0/fc2_b", "cpu_0/fc1_w_momentum",
            "optimizer_iteration"} <= checkpoint
    assert not any(b.startswith("cpu_1/") for b in checkpoint)
    _run_init_net(model)
    data_parallel_model.Synchronize(model)
    # a checkpoint loaded into device 0 reaches device 1
    loaded = np.full((7, 5), 3.0, np.float32)
    workspace.FeedBlob("cpu_0/fc1_w", loaded)
    data_parallel_model.FinalizeAfterCheckpoint(model, cpu_mode=True)
    np.testing.assert_array_equal(_fetch("cpu_1/fc1_w"), loaded)


def test_numpy_device_ids_are_accepted():
    model = _parallelize(devices=np.arange(2), cpu_device=True)
    assert data_parallel_model.GetDevices(model) == [0, 1] and type(model._devices[0]) is int


def test_convert_net_for_device():
    net = core.Net("other")
    net.Relu("x", "y")
    converted = data_parallel_model.ConvertNetForDevice(net, core.DeviceOption(caffe2_pb2.CPU, 1))
    op = converted.Proto().op[0]
    assert list(op.input) == ["cpu_1/x"] and list(op.output) == ["cpu_1/y"]
    assert op.device_option.device_id == 1
    assert list(converted.Proto().external_input) == ["cpu_1/x"]
    assert list(net.Proto().op[0].input) == ["x"]          # the original is untouched


def test_forward_only_model_has_no_gradients_and_no_syncs():
    model = model_helper.ModelHelper(name="test_model", init_params=False)

    def forward(model, loss_scale):  # noqa: ARG001
        brew.fc(model, "data", "fc1", dim_in=5, dim_out=7)
        return None

    data_parallel_model.Parallelize_CPU(model, input_builder_fun=lambda m: None, forward_pass_builder_fun=forward,
                                        devices=DEVICES)
    assert [op.type for op in model.net.Proto().op] == ["FC", "FC"]
    assert [op.input[0] for op in model.net.Proto().op] == ["cpu_0/data", "cpu_1/data"]
    assert [op.device_option.device_id for op in model.net.Proto().op] == [0, 1]


# ----------------------------------------------------------------- sparse: an embedding bag

VOCAB, DIM = 6, 3


def _embedding_model(two_tables=False, momentum=0.0, devices=DEVICES):
    model = model_helper.ModelHelper(name="emb")

    def forward(model, loss_scale):
        table = model.create_param("table", [VOCAB, DIM], ("GaussianFill", {"std": 1.0}), tags="WEIGHT")
        pooled = model.net.SparseLengthsSum([table, "indices", "lengths"], "pooled")
        if two_tables:   # a second table read with the same indices blob: one shared indices concat
            table2 = model.create_param("table2", [VOCAB, DIM], ("GaussianFill", {"std": 1.0}), tags="WEIGHT")
            pooled2 = model.net.SparseLengthsSum([table2, "indices", "lengths"], "pooled2")
            pooled = model.net.Mul([pooled, pooled2], "pooled_product")
        pred = brew.fc(model, pooled, "pred", dim_in=DIM, dim_out=1)
        dist = model.net.SquaredL2Distance([pred, "target"], "dist")
        loss = model.net.AveragedLoss(dist, "loss")
        return [model.net.Scale(loss, "scaled_loss", scale=loss_scale)]

    data_parallel_model.Parallelize(
        model, input_builder_fun=lambda m: None, forward_pass_builder_fun=forward,
        optimizer_builder_fun=lambda m: optimizer.build_sgd(m, base_learning_rate=0.2, momentum=momentum),
        devices=devices,
        cpu_device=True)
    return model


@pytest.mark.parametrize("two_tables", [False, True])
def test_sparse_embedding_gradients_across_two_devices_match_single_device_training(two_tables):
    momentum = 0.0
    model = _embedding_model(two_tables, momentum)
    grad = model.param_to_grad[core.BlobReference("cpu_0/table")]
    assert hasattr(grad, "indices")                        # a GradientSlice: the sparse path
    concats = [op for op in model.net.Proto().op if op.type == "Concat"]
    assert len(concats) == (3 if two_tables else 2)        # indices once, values per table
    _run_init_net(model)
    names = ["table", "pred_w", "pred_b"] + (["table2"] if two_tables else [])
    for name in names:
        np.testing.assert_array_equal(_fetch("cpu_0/" + name), _fetch("cpu_1/" + name))
    ref = {name: torch.tensor(_fetch("cpu_0/" + name).astype(np.float64), requires_grad=True) for name in names}
    table, w, b = ref["table"], ref["pred_w"], ref["pred_b"]
    sgd = torch.optim.SGD(list(ref.values()), lr=0.2, momentum=momentum, nesterov=momentum > 0)
    rng = np.random.default_rng(1)
    for _ in range(3):
        feeds = []
        for device in DEVICES:
            lengths = rng.integers(0, 4, 3).astype(np.int32)
            # repeated ids inside and across devices: the concatenated update must add them
            indices = rng.integers(0, VOCAB, int(lengths.sum())).astype(np.int64)
            target = rng.standard_normal((3, 1)).astype(np.float32)
            feeds.append((indices, lengths, target))
            for name, value in zip(("indices", "lengths", "target"), feeds[-1]):
                workspace.FeedBlob("cpu_%d/%s" % (device, name), value)
        data_parallel_model.RunNet(model, 1)
        indices = torch.from_numpy(np.concatenate([f[0] for f in feeds]))
        lengths = np.concatenate([f[1] for f in feeds])
        offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))
        target = torch.from_numpy(np.concatenate([f[2] for f in feeds]).astype(np.float64))
        sgd.zero_grad()
        pooled = torch.nn.functional.embedding_bag(indices, table, offsets, mode="sum")
        if two_tables:
            pooled = pooled * torch.nn.functional.embedding_bag(indices, ref["table2"], offsets, mode="sum")
        pred = pooled @ w.T + b
        (0.5 * ((pred - target) ** 2).sum(dim=1)).mean().backward()
        sgd.step()
    for name in names:
        np.testing.assert_array_equal(_fetch("cpu_0/" + name), _fetch("cpu_1/" + name))
        np.testing.assert_allclose(_fetch("cpu_0/" + name), ref[name].detach().numpy(), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------- named errors

def _parallelize(**kwargs):
    model = model_helper.ModelHelper(name="m")
    args = dict(input_builder_fun=lambda m: None,
                forward_pass_builder_fun=lambda m, s: [brew.fc(m, "x", "y", 2, 2)],
                optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.1))
    args.update(kwargs)
    data_parallel_model.Parallelize(model, **args)
    return model


@pytest.mark.parametrize("kwargs, message", [
    (dict(devices=[], cpu_device=True), "device list is empty"),
    (dict(devices=[0, 1], cpu_device=True, rendezvous={"num_shards": 2}), "rendezvous"),
    (dict(devices=[0, 0], cpu_device=True), "distinct"),
    (dict(devices=[0, -1], cpu_device=True), "non-negative ints"),
    (dict(devices=["0"], cpu_device=True), "non-negative ints"),
    (dict(devices=[0], shared_model=True), "only supported on CPU"),
    (dict(devices=[0], cpu_device=True, rendezvous=dict(kv_handler="kv", shard_id=2, num_shards=2)), "outside"),
    (dict(devices=[0], cpu_device=True, rendezvous=dict(kv_handler="kv", shard_id=0, num_shards=2,
                                                        engine="MPI")), "GLOO"),
    (dict(devices=[0], cpu_device=True, param_update_builder_fun=lambda m: None), "only one of"),
    (dict(devices=[0], cpu_device=True, forward_pass_builder_fun=lambda m, s: "loss"), "list of loss"),
])
def test_named_errors(kwargs, message):
    with pytest.raises(Caffe2Error, match=message):
        _parallelize(**kwargs)


def test_gpu_devices_without_a_cuda_device_is_an_error(monkeypatch):
    monkeypatch.setattr(workspace, "NumCudaDevices", lambda: 0)
    with pytest.raises(Caffe2Error, match="no CUDA device"):
        _parallelize(devices=[0, 1])
    with pytest.raises(Caffe2Error, match="no CUDA device"):
        data_parallel_model.Parallelize_GPU(model_helper.ModelHelper(name="g"), lambda m: None,
                                            lambda m, s: [], devices=[0])


def test_bmuf_and_multi_host_helpers_are_named_as_not_provided():
    with pytest.raises(Caffe2Error, match="BMUF"):
        data_parallel_model.Parallelize_BMUF(model_helper.ModelHelper(name="b"), None, None, None)
    with pytest.raises(Caffe2Error, match="not made data parallel"):
        data_parallel_model.GetDevices(model_helper.ModelHelper(name="plain"))


def test_parameters_created_outside_a_device_scope_are_refused():
    model = model_helper.ModelHelper(name="outside")
    with pytest.raises(Caffe2Error, match="cpu_<device>/"):
        def forward(model, loss_scale):  # noqa: ARG001
            with core.NameScope("elsewhere", reset=True):
                return [brew.fc(model, "x", "y", 2, 2)]
        data_parallel_model.Parallelize(model, lambda m: None, forward,
                                        optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.1),
                                        devices=DEVICES, cpu_device=True)


# ----------------------------------------------------------------- a trimmed resnet50_trainer.py

@pytest.mark.parametrize("use_cpu_shared_model", [False, True])
def test_trimmed_resnet50_trainer_runs_through_caffe2_python_imports(use_cpu_shared_model):
    """resnet50_trainer.py's structure: ModelHelper with a CNN arg_scope, an input builder,
    a residual net with SpatialBN in training mode, weight decay plus multi-precision SGD
    (step policy), a post-sync builder, Parallelize on CPU devices, the learning-rate and
    checkpoint helpers, and a test model sharing the trained blobs (init_params=False).
    The trainer's --use_cpu passes shared_model=True (here too in the second run) and
    combine_spatial_bn=True (not provided: left off)."""
    from caffe2.python import brew as c2_brew
    from caffe2.python import data_parallel_model as dpm
    from caffe2.python import model_helper as c2_model_helper
    from caffe2.python import optimizer as c2_optimizer
    from caffe2.python import workspace as c2_workspace
    batch, num_labels = 2, 4

    def add_image_input(model):
        data = model.net.GaussianFill([], "data", shape=[batch, 3, 8, 8], std=1.0)
        model.net.UniformIntFill([], "label", shape=[batch], min=0, max=num_labels - 1)
        model.StopGradient(data, data)

    def residual_block(model, blob_in, prefix, channels, is_test):
        branch = c2_brew.conv(model, blob_in, prefix + "_conv1", channels, channels, kernel=3, pad=1, no_bias=1)
        branch = c2_brew.spatial_bn(model, branch, prefix + "_bn1", channels, epsilon=1e-3, is_test=is_test)
        branch = c2_brew.relu(model, branch, branch)
        branch = c2_brew.conv(model, branch, prefix + "_conv2", channels, channels, kernel=3, pad=1, no_bias=1)
        branch = c2_brew.spatial_bn(model, branch, prefix + "_bn2", channels, epsilon=1e-3, is_test=is_test)
        out = c2_brew.sum(model, [branch, blob_in], prefix + "_sum")
        return c2_brew.relu(model, out, out)

    def create_model_ops(model, loss_scale, is_test=False):
        conv1 = c2_brew.conv(model, "data", "conv1", 3, 8, kernel=3, pad=1, no_bias=1)
        bn1 = c2_brew.spatial_bn(model, conv1, "conv1_spatbn", 8, epsilon=1e-3, is_test=is_test)
        relu1 = c2_brew.relu(model, bn1, bn1)
        res = residual_block(model, relu1, "comp_0", 8, is_test)
        pool = c2_brew.average_pool(model, res, "final_avg", kernel=8, stride=1)
        pred = c2_brew.fc(model, pool, "pred", 8, num_labels)
        softmax, loss = model.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
        loss = model.Scale(loss, scale=loss_scale)
        c2_brew.accuracy(model, [softmax, "label"], "accuracy")
        return [loss]

    def add_optimizer(model):
        c2_optimizer.add_weight_decay(model, 1e-4)
        return c2_optimizer.build_multi_precision_sgd(model, 0.1, momentum=0.9, nesterov=1, policy="step",
                                                      stepsize=2, gamma=0.1)

    def add_post_sync_ops(model):
        for info in model.GetOptimizationParamInfo(model.GetParams()):
            if info.blob_copy is not None:
                model.param_init_net.HalfToFloat(info.blob_copy[core.DataType.FLOAT], info.blob)

    arg_scope = {"order": "NCHW", "use_cudnn": True, "cudnn_exhaustive_search": True,
                 "ws_nbytes_limit": 64 * 1024 * 1024}
    train_model = c2_model_helper.ModelHelper(name="resnet50", arg_scope=arg_scope)
    dpm.Parallelize(train_model, input_builder_fun=add_image_input, forward_pass_builder_fun=create_model_ops,
                    optimizer_builder_fun=add_optimizer, post_sync_builder_fun=add_post_sync_ops,
                    devices=DEVICES, rendezvous=None, optimize_gradient_memory=False, cpu_device=True,
                    shared_model=use_cpu_shared_model)
    c2_workspace.RunNetOnce(train_model.param_init_net)
    c2_workspace.CreateNet(train_model.net)
    lr_blob = dpm.GetLearningRateBlobNames(train_model)[0]
    lrs, losses = [], []
    for _ in range(3):
        c2_workspace.RunNet(train_model.net.Proto().name)
        lrs.append(float(np.asarray(c2_workspace.FetchBlob(lr_blob)).ravel()[0]))
        losses.append(float(np.asarray(c2_workspace.FetchBlob("cpu_0/loss"))))
        assert 0.0 <= float(np.asarray(c2_workspace.FetchBlob("cpu_0/accuracy"))) <= 1.0
    # momentum SGD's LearningRate: base_lr +0.1 (MomentumSGDUpdate subtracts), step policy
    # 0.1 * 0.1 ** floor(iter / 2) at iterations 1, 2, 3 (AtomicIter steps before it)
    np.testing.assert_allclose(lrs, [0.1, 0.01, 0.01], rtol=1e-6)
    assert all(np.isfinite(losses))
    for blob in ("conv1_spatbn_rm", "comp_0_bn1_riv") + (() if use_cpu_shared_model else
                                                          ("conv1_w", "comp_0_conv2_w", "pred_w")):
        np.testing.assert_array_equal(_fetch("cpu_0/" + blob), _fetch("cpu_1/" + blob))
    assert c2_workspace.HasBlob("cpu_1/conv1_w") != use_cpu_shared_model
    assert "cpu_0/conv1_w" in {str(b) for b in dpm.GetCheckpointParams(train_model)}
    dpm.FinalizeAfterCheckpoint(train_model, cpu_mode=True)

    # a forward-only model reads its own device's parameters (Caffe2 remaps only trained
    # shared models): after shared training only device 0 has them
    test_devices = DEVICES[:1] if use_cpu_shared_model else DEVICES
    test_model = c2_model_helper.ModelHelper(name="resnet50_test", arg_scope=arg_scope, init_params=False)
    dpm.Parallelize(test_model, input_builder_fun=add_image_input,
                    forward_pass_builder_fun=lambda m, s: create_model_ops(m, s, is_test=True),
                    post_sync_builder_fun=add_post_sync_ops, param_update_builder_fun=None, devices=test_devices,
                    cpu_device=True)
    c2_workspace.RunNetOnce(test_model.param_init_net)
    c2_workspace.CreateNet(test_model.net)
    c2_workspace.RunNet(test_model.net.Proto().name)
    assert np.asarray(c2_workspace.FetchBlob("cpu_%d/softmax" % test_devices[-1])).shape == (batch, num_labels)


# ----------------------------------------------------------------- Caffe2's data_parallel_model_test, on CPU

def _run_equiv_model(devices):
    """Caffe2's DataParallelModelTest.run_model: a CNNModelHelper FC + sigmoid regression
    with clipped SGD and lr injection; the same 64-row batches split over the devices."""
    from caffe2.python import cnn

    def model_build_fun(model, loss_scale):
        fc = model.FC("data", "fc", 16, 1, ("ConstantFill", {}), ("ConstantFill", {}))
        fc_fl = model.FlattenToVec(fc, "fc_fl")
        sigm = model.Sigmoid(fc_fl, "sigm")
        sq = model.SquaredL2Distance([sigm, "label"], "sq")
        loss = model.AveragedLoss(sq, "loss")
        return [model.Scale(loss, scale=loss_scale)]

    def add_optimizer(model):
        return optimizer.build_sgd(model, 0.1, policy="fixed", max_gradient_norm=5.0, allow_lr_injection=True)

    workspace.ResetWorkspace()
    model = cnn.CNNModelHelper(order="NHWC", name="test{}".format(devices))
    data_parallel_model.Parallelize(model, input_builder_fun=lambda m: None, forward_pass_builder_fun=model_build_fun,
                                    optimizer_builder_fun=add_optimizer, devices=devices, cpu_device=True)
    rng = np.random.RandomState(2603)
    batch_size = 64
    for i in range(10):
        full_data = rng.rand(batch_size, 16)
        full_labels = np.round(full_data[:, 0])
        per_device = batch_size // len(devices)
        for j, g in enumerate(devices):
            rows = slice(j * per_device, (j + 1) * per_device)
            workspace.FeedBlob("cpu_{}/data".format(g), full_data[rows].astype(np.float32))
            workspace.FeedBlob("cpu_{}/label".format(g), full_labels[rows].astype(np.float32))
        if i == 0:
            workspace.RunNetOnce(model.param_init_net)
            workspace.CreateNet(model.net)
        workspace.RunNet(model.net.Proto().name)
    return _fetch("cpu_{}/fc_w".format(devices[0]))


def test_caffe2_equiv_one_two_and_four_cpu_devices_train_the_same_weights():
    one = _run_equiv_model([0])
    assert np.abs(one).max() > 0                          # training moved the zero-initialised weights
    np.testing.assert_allclose(_run_equiv_model([0, 1]), one, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(_run_equiv_model([0, 1, 2, 3]), one, rtol=1e-5, atol=1e-7)


def _nhwc_conv_model_ops(model, fc_dim_in, fc_dim_out):
    model.NHWC2NCHW("data", "data_nchw")
    model.Conv("data_nchw", "conv1", 3, 8, weight_init=("MSRAFill", {}), kernel=7, stride=2, pad=3, no_bias=0)
    model.SpatialBN("conv1", "conv1_spatbn_relu", 8, epsilon=1e-3)
    model.Relu("conv1_spatbn_relu", "conv1_spatbn_relu")
    model.MaxPool("conv1_spatbn_relu", "pool1", kernel=3, stride=2)
    model.FC("pool1", "fc", dim_in=fc_dim_in, dim_out=fc_dim_out)


def test_caffe2_checkpoint_params_on_devices_1_2_3():
    from caffe2.python import cnn

    def add_model_ops(model, loss_scale):  # noqa: ARG001
        _nhwc_conv_model_ops(model, 8 * 7 * 7, 10)
        model.Sigmoid("fc", "fc_sigm")
        model.Softmax("fc_sigm", "softmax")
        model.LabelCrossEntropy(["softmax", "label"], "xent")
        loss = model.AveragedLoss("xent", "loss")
        model.param_init_net.ConstantFill([], ["fc_w"], shape=(8 * 7 * 7, 1000))   # a duplicate param init
        return [loss]

    model = cnn.CNNModelHelper(order="NHWC", name="test")
    data_parallel_model.Parallelize_CPU(
        model, input_builder_fun=lambda m: None, forward_pass_builder_fun=add_model_ops,
        optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.1, policy="fixed", momentum=0.9),
        devices=[1, 2, 3])
    checkpoint = data_parallel_model.GetCheckpointParams(model)
    for p in model.GetParams("cpu_1/"):
        assert p in checkpoint and p + "_momentum" in checkpoint
    for p in model.GetParams("cpu_2/"):
        assert p not in checkpoint
    assert core.BlobReference("cpu_1/fc_w_momentum") in checkpoint
    assert model.GetComputedParams("cpu_1/") and all(c in checkpoint for c in model.GetComputedParams("cpu_1/"))
    assert not any(c in checkpoint for c in model.GetComputedParams("cpu_2/"))
    assert core.BlobReference("cpu_1/data") not in checkpoint
    assert core.BlobReference("optimizer_iteration") in checkpoint


def test_caffe2_net_conversion_and_append_net():
    from caffe2.python import cnn
    other = model_helper.ModelHelper()
    fc1 = brew.fc(other, "data", "other_fc1", dim_in=3 * 31 * 31, dim_out=10)
    fc2 = brew.fc(other, fc1, "other_fc2", dim_in=10, dim_out=10)
    brew.fc(other, fc2, "other_fc3", dim_in=10, dim_out=10)

    def add_input_ops(model):
        model.net.UniformFill([], ["data"], shape=[4, 31, 31, 3])
        model.net.UniformFill([], ["label"], shape=[4])

    def add_model_ops(model, loss_scale):  # noqa: ARG001
        _nhwc_conv_model_ops(model, 8 * 7 * 7, 10)
        model.net.AppendNet(data_parallel_model.ConvertNetForDevice(other.net))
        model.param_init_net.AppendNet(data_parallel_model.ConvertNetForDevice(other.param_init_net))
        model.Sigmoid("fc", "fc_sigm")
        model.Softmax("fc_sigm", "softmax")
        return [model.AveragedLoss("softmax", "loss")]

    model = cnn.CNNModelHelper(order="NCHW", name="test")
    data_parallel_model.Parallelize_CPU(
        model, input_builder_fun=add_input_ops, forward_pass_builder_fun=add_model_ops,
        optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.1, policy="fixed", momentum=0.9),
        devices=range(4))
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    workspace.RunNet(model.net)
    assert _fetch("cpu_3/other_fc3").shape == (4, 10)
    np.testing.assert_array_equal(_fetch("cpu_0/conv1_w"), _fetch("cpu_3/conv1_w"))


def _run_recurrent_model(devices, T=4, batch_size=4, input_dim=3, hidden_dim=5):
    """Caffe2's RecurrentNetworkParallelTest.run_model (GPU-only there), on CPU devices:
    an LSTM with a per-device param_update_builder_fun, deterministic fills."""
    from caffe2.python import cnn, rnn_cell
    per_device = batch_size // len(devices)

    def model_build_fun(model, loss_scale):
        workspace.FeedBlob(core.ScopedBlobReference("seq_lengths"), np.array([T] * per_device, dtype=np.int32))
        model.param_init_net.ConstantFill([], "hidden_init", value=0.0, shape=[1, per_device, hidden_dim])
        model.param_init_net.ConstantFill([], "cell_init", value=0.0, shape=[1, per_device, hidden_dim])
        output, _, _, _ = rnn_cell.LSTM(model=model, input_blob="data", seq_lengths="seq_lengths",
                                        initial_states=("hidden_init", "cell_init"), dim_in=input_dim,
                                        dim_out=hidden_dim, scope="partest")
        loss = model.AveragedLoss(model.Sub([output, "target"], "dist"), "loss")
        return [model.Scale(loss, "loss_scaled", scale=loss_scale)]

    def param_update_fun(model):
        ITER = model.Iter("ITER")
        LR = model.net.LearningRate([ITER], "LR", base_lr=(-0.1), policy="fixed")
        ONE = model.param_init_net.ConstantFill([], "ONE", shape=[1], value=1.0)
        for param in model.GetParams():
            model.WeightedSum([param, ONE, model.param_to_grad[param], LR], param)
        assert len(model.GetParams()) == len(model.params) // len(model._devices)

    workspace.ResetWorkspace()
    model = cnn.CNNModelHelper(name="recurrent_test{}".format(devices))
    data_parallel_model.Parallelize(model, input_builder_fun=lambda m: None, forward_pass_builder_fun=model_build_fun,
                                    param_update_builder_fun=param_update_fun, devices=devices,
                                    optimize_gradient_memory=True, cpu_device=True)
    for op in model.param_init_net.Proto().op:   # deterministic: every fill a ConstantFill
        if op.type.endswith("Fill"):
            op.type = "ConstantFill"
    rng = np.random.RandomState(20150210)
    for i in range(4):
        full_data = rng.rand(T, batch_size, input_dim)
        full_target = rng.rand(T, batch_size, hidden_dim)
        for j, g in enumerate(devices):
            cols = slice(j * per_device, (j + 1) * per_device)
            workspace.FeedBlob("cpu_{}/data".format(g), full_data[:, cols, :].astype(np.float32))
            workspace.FeedBlob("cpu_{}/target".format(g), full_target[:, cols, :].astype(np.float32))
        if i == 0:
            workspace.RunNetOnce(model.param_init_net)
            workspace.CreateNet(model.net)
        workspace.RunNet(model.net.Proto().name)
    assert data_parallel_model.GetLearningRateBlobNames(model) == ["cpu_{}/LR".format(g) for g in devices]
    return {str(p)[len("cpu_0/"):]: _fetch(str(p)) for p in model.GetParams("cpu_0/")}


def test_caffe2_recurrent_network_with_param_update_builder_one_vs_two_cpu_devices():
    one = _run_recurrent_model([0])
    two = _run_recurrent_model([0, 1])
    assert one.keys() == two.keys() and len(one) >= 2
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_gpu_devices_build_gpu_scopes_on_the_cuda_device(monkeypatch):
    monkeypatch.setattr(workspace, "NumCudaDevices", lambda: 1)
    model = _parallelize(devices=[0])
    assert [str(p) for p in model.params] == ["gpu_0/y_w", "gpu_0/y_b"]
    assert all(op.device_option.device_type == caffe2_pb2.CUDA for op in model.net.Proto().op
               if op.type in ("FC", "FCGradient"))
    assert data_parallel_model.GetLearningRateBlobNames(model) == ["SgdOptimizer_0_lr_gpu0"]
    with pytest.raises(Caffe2Error, match="only 1 CUDA device"):
        _parallelize(devices=[0, 1])


def test_parallelize_inside_a_gpu_device_scope_is_refused():
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CUDA, 0)):
        with pytest.raises(Caffe2Error, match="without a device scope"):
            _parallelize(devices=[0], cpu_device=True)


def _embedding_batches(seed, steps):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        lengths = rng.integers(0, 4, 6).astype(np.int32)
        out.append((rng.integers(0, VOCAB, int(lengths.sum())).astype(np.int64), lengths,
                    rng.standard_normal((6, 1)).astype(np.float32)))
    return out


def _train_embedding_on(devices, batches):
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()
    model = _embedding_model(momentum=0.9, devices=devices)
    _run_init_net(model)
    # the same start for both runs: device 0 "loads a checkpoint", FinalizeAfterCheckpoint spreads it
    workspace.FeedBlob("cpu_0/table", (np.arange(VOCAB * DIM, dtype=np.float32).reshape(VOCAB, DIM) - 8) / 10)
    workspace.FeedBlob("cpu_0/pred_w", np.array([[0.3, -0.2, 0.1]], np.float32))
    workspace.FeedBlob("cpu_0/pred_b", np.array([0.05], np.float32))
    data_parallel_model.FinalizeAfterCheckpoint(model, cpu_mode=True)
    for indices, lengths, target in batches:
        rows = len(lengths) // len(devices)
        for j, device in enumerate(devices):
            part = lengths[j * rows:(j + 1) * rows]
            start = int(lengths[:j * rows].sum())
            feeds = (indices[start:start + int(part.sum())], part, target[j * rows:(j + 1) * rows])
            for name, value in zip(("indices", "lengths", "target"), feeds):
                workspace.FeedBlob("cpu_%d/%s" % (device, name), value)
        data_parallel_model.RunNet(model, 1)
    for device in devices[1:]:
        for name in ("table", "pred_w", "table_momentum"):
            np.testing.assert_array_equal(_fetch("cpu_0/" + name), _fetch("cpu_%d/%s" % (device, name)))
    return {name: _fetch("cpu_0/" + name) for name in ("table", "pred_w", "pred_b", "table_momentum")}


def test_sparse_momentum_sgd_two_devices_equal_one_device_on_the_concatenated_batch():
    """Caffe2's equivalence property (its test_equiv) for SparseMomentumSGDUpdate, whose
    per-touched-row momentum has no dense torch counterpart: the concatenated slice on
    two devices is the one-device slice of the whole batch, row for row."""
    batches = _embedding_batches(5, 3)
    one = _train_embedding_on([0], batches)
    two = _train_embedding_on([0, 1], batches)
    assert np.abs(one["table_momentum"]).max() > 0
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_extract_predictor_net_of_device_0():
    model = model_helper.ModelHelper(name="mlp_predict")

    def forward(model, loss_scale):
        hidden = brew.relu(model, brew.fc(model, "data", "fc1", dim_in=5, dim_out=7), "relu1")
        softmax = brew.softmax(model, brew.fc(model, hidden, "fc2", dim_in=7, dim_out=3), "softmax")
        xent = model.net.LabelCrossEntropy([softmax, "label"], "xent")
        return [model.net.Scale(model.net.AveragedLoss(xent, "loss"), "scaled_loss", scale=loss_scale)]

    data_parallel_model.Parallelize(model, lambda m: None, forward,
                                    optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.1),
                                    devices=DEVICES, cpu_device=True)
    _run_init_net(model)
    rng = np.random.default_rng(7)
    for device in DEVICES:
        workspace.FeedBlob("cpu_%d/data" % device, rng.standard_normal((4, 5)).astype(np.float32))
        workspace.FeedBlob("cpu_%d/label" % device, rng.integers(0, 3, 4).astype(np.int32))
    data_parallel_model.RunNet(model, 1)
    predict_net, export = data_parallel_model.ExtractPredictorNet(model, ["data"], ["softmax"],
                                                                  core.DeviceOption(caffe2_pb2.CPU))
    assert [op.type for op in predict_net.Proto().op] == ["FC", "Relu", "FC", "Softmax"]
    assert export == ["cpu_0/fc1_b", "cpu_0/fc1_w", "cpu_0/fc2_b", "cpu_0/fc2_w"]
    assert list(predict_net.Proto().external_output) == ["softmax"]
    params = {name: _fetch(name) for name in export}
    x = rng.standard_normal((3, 5)).astype(np.float32)
    workspace.ResetWorkspace()
    for name, value in params.items():
        workspace.FeedBlob(name, value)
    workspace.FeedBlob("data", x)
    workspace.RunNetOnce(predict_net)
    h = np.maximum(x @ params["cpu_0/fc1_w"].T + params["cpu_0/fc1_b"], 0)
    logits = h @ params["cpu_0/fc2_w"].T + params["cpu_0/fc2_b"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(_fetch("softmax"), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_extract_predictor_net_refuses_a_training_mode_op():
    net = core.Net("train")
    net.SpatialBN(["x", "s", "b", "m", "v"], ["y", "m", "v", "sm", "siv"], is_test=0)
    with pytest.raises(Caffe2Error, match="is_test=0"):
        model_helper.ExtractPredictorNet(net.Proto(), ["x"], ["y"])
    with pytest.raises(Caffe2Error, match="reads the inputs"):
        model_helper.ExtractPredictorNet(net.Proto(), ["nothing"], ["y"])


def test_a_blob_made_on_one_device_only_is_named():
    def forward(model, loss_scale):  # noqa: ARG001
        if core.ScopedName("") == "cpu_0/":
            model.param_init_net.ConstantFill([], "only_here", shape=[1], value=1.0)
        return [brew.fc(model, "x", "y", 2, 2)]
    with pytest.raises(Caffe2Error, match="'only_here' has no copy on device"):
        _parallelize(devices=DEVICES, cpu_device=True, forward_pass_builder_fun=forward)


def test_shared_model_checkpoint_holds_the_shared_parameters():
    model = _mlp_model(0.9, shared_model=True)
    checkpoint = {str(b) for b in data_parallel_model.GetCheckpointParams(model)}
    assert {"cpu_0/fc1_w", "cpu_0/fc2_b", "optimizer_iteration"} <= checkpoint
    assert not any(b.startswith("cpu_1/") for b in checkpoint)
