"""Caffe2's ResNet-50 trainer (caffe2/python/examples/resnet50_trainer.py) as caffe2py
runs it on the CPU: the trainer's structure and flags, run unmodified through the
compatibility alias on an image db of Caffe Datums read by ImageInput.

    python -m caffe2py.tools.make_image_db --datum IMAGES_FOLDER /tmp/train.lmdb
    python -m caffe2py.compat examples/resnet50_trainer.py --train_data /tmp/train.lmdb \\
        --use_cpu 1 --num_gpus 2 --batch_size 8 --epoch_size 64 --num_epochs 2 \\
        --image_size 64 --scale 72 --num_labels 2 --file_store_path /tmp/ckpt

(--make_db N writes a db of N generated images of --num_labels classes to
--train_data first, for a run without a dataset.) What it does, as Caffe2's trainer:
AddImageInput (brew.image_input with use_caffe_datum, mean / std 128, scale, crop,
mirror), resnet.create_resnet50 under brew.arg_scope with the Initializer classes
(no_bias, no_loss; SoftmaxWithLoss, Scale by the loss scale, brew.accuracy),
data_parallel_model.Parallelize on CPU devices (shared_model, combine_spatial_bn),
weight decay and build_multi_precision_sgd with the step policy, the test model
sharing the parameters, experiment_util's log, timeout_guard, and after every epoch
the model saved with predictor_exporter to <file_store_path>/<save_model_name>_<epoch>.mdl
(--load_model_path resumes from one). --model resnet_32x32 trains the small CIFAR
ResNet instead (images 32 x 32), for quick runs.
"""
import argparse
import logging
import os
import time

import numpy as np

from caffe2.python import brew, core, data_parallel_model, dyndep, experiment_util, model_helper, optimizer
from caffe2.python import timeout_guard, workspace
import caffe2.python.models.resnet as resnet
from caffe2.python.modeling.initializers import Initializer, PseudoFP16Initializer
import caffe2.python.predictor.predictor_exporter as pred_exp
import caffe2.python.predictor.predictor_py_utils as pred_utils
from caffe2.python.predictor_constants import predictor_constants

logging.basicConfig()
log = logging.getLogger("resnet50_trainer")
log.setLevel(logging.INFO)

# Caffe2 loaded its rendezvous ops here; missing library files are skipped with a warning
dyndep.InitOpsLibrary("@/caffe2/caffe2/distributed:file_store_handler_ops")


def add_image_input(model, reader, batch_size, img_size, scale, dtype, is_test):
    """ImageInput on the reader: Caffe Datum records, mean / std 128, scale, crop, mirror."""
    data, _label = brew.image_input(
        model, reader, ["data", "label"], batch_size=batch_size, output_type=dtype,
        use_gpu_transform=model._device_type == 1, use_caffe_datum=True, mean=128.0, std=128.0,
        scale=scale, crop=img_size, mirror=1, is_test=is_test)
    model.StopGradient(data, data)


def save_model(args, train_model, epoch):
    prefix = "{}_{}".format(train_model._device_prefix, train_model._devices[0])
    meta = pred_exp.PredictorExportMeta(
        predict_net=train_model.net.Proto(),
        parameters=data_parallel_model.GetCheckpointParams(train_model),
        inputs=[prefix + "/data"], outputs=[prefix + "/softmax"],
        shapes={prefix + "/softmax": (1, args.num_labels),
                prefix + "/data": (args.num_channels, args.image_size, args.image_size)})
    path = "%s/%s_%d.mdl" % (args.file_store_path, args.save_model_name, epoch)
    pred_exp.save_to_db(db_type="minidb", db_destination=path, predictor_export_meta=meta)
    previous = "%s/%s_%d.mdl" % (args.file_store_path, args.save_model_name, epoch - 1)
    if os.path.isfile(previous):
        os.remove(previous)
    return path


def load_model(path):
    """Run a saved model's init nets: the parameters and the iteration counter come back."""
    log.info("Loading path: %s", path)
    meta = pred_exp.load_from_db(path, "minidb")
    workspace.RunNetOnce(core.Net(pred_utils.GetNet(meta, predictor_constants.PREDICT_INIT_NET_TYPE)))
    workspace.RunNetOnce(core.Net(pred_utils.GetNet(meta, predictor_constants.GLOBAL_INIT_NET_TYPE)))


def run_epoch(args, epoch, train_model, test_model, total_batch_size, explog):
    """One epoch of training (and the test model's accuracy); returns the losses."""
    epoch_iters = int(args.epoch_size / total_batch_size / args.num_shards)
    prefix = "{}_{}".format(train_model._device_prefix, train_model._devices[0])
    losses = []
    for i in range(epoch_iters):
        with timeout_guard.CompleteInTimeOrDie(600.0 if i == 0 else 120.0):
            t1 = time.time()
            workspace.RunNet(train_model.net.Proto().name)
            dt = time.time() - t1
        loss = float(np.asarray(workspace.FetchBlob(prefix + "/loss")))
        accuracy = float(np.asarray(workspace.FetchBlob(prefix + "/accuracy")))
        losses.append(loss)
        log.info("Finished iteration %d/%d of epoch %d (%.2f images/sec)", i + 1, epoch_iters, epoch,
                 total_batch_size / dt)
        log.info("Training loss: %s, accuracy: %s", loss, accuracy)
    test_accuracy = -1.0
    if test_model is not None:
        scores = []
        for _ in range(args.test_iters):
            workspace.RunNet(test_model.net.Proto().name)
            scores += [float(np.asarray(workspace.FetchBlob("{}_{}/accuracy".format(test_model._device_prefix, d))))
                       for d in test_model._devices]
        test_accuracy = float(np.mean(scores))
    learning_rate = workspace.FetchBlob(data_parallel_model.GetLearningRateBlobNames(train_model)[0])
    explog.log(input_count=(epoch + 1) * epoch_iters * total_batch_size, batch_count=(epoch + 1) * epoch_iters,
               additional_values={"accuracy": accuracy, "loss": loss, "learning_rate": learning_rate,
                                  "epoch": epoch, "test_accuracy": test_accuracy})
    assert loss < 40, "Exploded gradients :("
    return losses


def build_models(args, gpus, batch_per_device):
    train_model = model_helper.ModelHelper(name="resnet50", arg_scope={
        "order": "NCHW", "use_cudnn": True, "cudnn_exhaustive_search": True,
        "ws_nbytes_limit": args.cudnn_workspace_limit_mb * 1024 * 1024})
    total_batch_size = args.batch_size

    def create_model_ops(model, loss_scale):
        initializer = PseudoFP16Initializer if args.dtype == "float16" else Initializer
        with brew.arg_scope([brew.conv, brew.fc], WeightInitializer=initializer, BiasInitializer=initializer):
            if args.model == "resnet_32x32":
                resnet.create_resnet_32x32(model, "data", num_input_channels=args.num_channels, num_groups=1,
                                           num_labels=args.num_labels)
                pred = "last_out"
            else:
                pred = resnet.create_resnet50(model, "data", num_input_channels=args.num_channels,
                                              num_labels=args.num_labels, no_bias=True, no_loss=True,
                                              final_avg_kernel=max(1, args.image_size // 32))
        softmax, loss = model.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
        loss = model.Scale(loss, scale=loss_scale)
        brew.accuracy(model, [softmax, "label"], "accuracy")
        return [loss]

    def add_optimizer(model):
        stepsz = int(30 * args.epoch_size / total_batch_size / args.num_shards)
        optimizer.add_weight_decay(model, args.weight_decay)
        return optimizer.build_multi_precision_sgd(model, args.base_learning_rate, momentum=0.9, nesterov=1,
                                                   policy="step", stepsize=stepsz, gamma=0.1)

    reader = train_model.CreateDB("reader", db=args.train_data, db_type=args.db_type,
                                  num_shards=args.num_shards, shard_id=args.shard_id)

    def train_input(model):
        add_image_input(model, reader, batch_per_device, args.image_size, args.scale, args.dtype, is_test=False)

    def add_post_sync_ops(model):
        for info in model.GetOptimizationParamInfo(model.GetParams()):
            if info.blob_copy is not None:
                model.param_init_net.HalfToFloat(info.blob, info.blob_copy[core.DataType.FLOAT])

    data_parallel_model.Parallelize(
        train_model, input_builder_fun=train_input, forward_pass_builder_fun=create_model_ops,
        optimizer_builder_fun=add_optimizer, post_sync_builder_fun=add_post_sync_ops, devices=gpus,
        rendezvous=make_rendezvous(args), optimize_gradient_memory=False, cpu_device=args.use_cpu,
        shared_model=args.use_cpu, combine_spatial_bn=args.use_cpu)
    data_parallel_model.OptimizeGradientMemory(train_model, {}, set(), False)
    seed_ops(args.seed, train_model)
    workspace.RunNetOnce(train_model.param_init_net)
    workspace.CreateNet(train_model.net)

    test_model = None
    if args.test_data is not None:
        test_model = model_helper.ModelHelper(name="resnet50_test", init_params=False,
                                              arg_scope={"order": "NCHW", "use_cudnn": True,
                                                         "cudnn_exhaustive_search": True})
        test_reader = test_model.CreateDB("test_reader", db=args.test_data, db_type=args.db_type)

        def test_input(model):
            add_image_input(model, test_reader, batch_per_device, args.image_size, args.scale, args.dtype,
                            is_test=True)
        data_parallel_model.Parallelize(test_model, input_builder_fun=test_input,
                                        forward_pass_builder_fun=create_model_ops,
                                        post_sync_builder_fun=add_post_sync_ops, param_update_builder_fun=None,
                                        devices=gpus, cpu_device=args.use_cpu)
        seed_ops(None if args.seed is None else args.seed + 1, test_model)
        workspace.RunNetOnce(test_model.param_init_net)
        workspace.CreateNet(test_model.net)
    return train_model, test_model


def seed_ops(seed, model):
    """--seed (caffe2py's addition; Caffe2's trainer draws fresh entropy): every op of the
    model's nets gets its own random_seed, so the initial weights and ImageInput's crops
    and mirrors are the same in every run."""
    if seed is None:
        return
    for offset, net in enumerate((model.param_init_net, model.net)):
        for i, op in enumerate(net.Proto().op):
            op.device_option.random_seed = (seed * 7919 + offset * 100003 + i) % (2 ** 32)


def train(args):
    gpus = [int(x) for x in args.gpus.split(",")] if args.gpus else list(range(args.num_gpus))
    assert args.batch_size % len(gpus) == 0, "Number of GPUs must divide batch size"
    batch_per_device = args.batch_size // len(gpus)
    global_batch_size = args.batch_size * args.num_shards
    epoch_iters = int(args.epoch_size / global_batch_size)
    assert epoch_iters > 0, "Epoch size must be larger than batch size times shard count"
    args.epoch_size = epoch_iters * global_batch_size
    log.info("Running on %s %s; epoch size %d", "CPU devices" if args.use_cpu else "GPUs", gpus, args.epoch_size)

    train_model, test_model = build_models(args, gpus, batch_per_device)
    epoch = 0
    if args.load_model_path is not None:
        load_model(args.load_model_path)
        data_parallel_model.FinalizeAfterCheckpoint(train_model)
        last = args.load_model_path.split("_")[-1]
        if last.endswith(".mdl"):
            epoch = int(last[:-4])
            log.info("Reset epoch to %d", epoch)
    expname = "resnet50_gpu%d_b%d_L%d_lr%.2f_v2" % (len(gpus), args.batch_size, args.num_labels,
                                                    args.base_learning_rate)
    explog = experiment_util.ModelTrainerLog(os.path.join(args.file_store_path, expname), args)
    losses = []
    while epoch < args.num_epochs:
        losses += run_epoch(args, epoch, train_model, test_model, args.batch_size, explog)
        epoch += 1
        if args.shard_id == 0:      # the shards hold the same parameters; one writer per file
            save_model(args, train_model, epoch)
    return losses


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Caffe2: Resnet-50 training (caffe2py, CPU devices)")
    parser.add_argument("--train_data", type=str, required=True, help="path to the training db")
    parser.add_argument("--test_data", type=str, default=None, help="path to test data")
    parser.add_argument("--db_type", type=str, default="lmdb")
    parser.add_argument("--gpus", type=str, help="comma separated device ids")
    parser.add_argument("--num_gpus", type=int, default=1, help="number of devices (CPU devices with --use_cpu)")
    parser.add_argument("--num_channels", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None,
                        help="seed every op's random draws (initial weights, crops): reproducible runs")
    parser.add_argument("--image_size", type=int, default=227, help="input image size (to crop to)")
    parser.add_argument("--scale", type=int, default=256, help="ImageInput's shorter-side size before the crop")
    parser.add_argument("--num_labels", type=int, default=1000)
    parser.add_argument("--batch_size", type=int, default=32, help="batch size, total over all devices")
    parser.add_argument("--epoch_size", type=int, default=1500000, help="images per epoch")
    parser.add_argument("--num_epochs", type=int, default=1000)
    parser.add_argument("--base_learning_rate", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=1e-4)
    parser.add_argument("--cudnn_workspace_limit_mb", type=int, default=64)
    parser.add_argument("--num_shards", type=int, default=1)
    parser.add_argument("--shard_id", type=int, default=0)
    parser.add_argument("--file_store_path", type=str, default="/tmp")
    parser.add_argument("--run_id", type=str, default="", help="unique run id (keys of the shards' store)")
    parser.add_argument("--redis_host", type=str, default=None, help="Redis host for the shards' rendezvous")
    parser.add_argument("--redis_port", type=int, default=6379)
    parser.add_argument("--distributed_transport", type=str, default="tcp")
    parser.add_argument("--distributed_interfaces", type=str, default="", help="network interfaces, comma-separated")
    parser.add_argument("--save_model_name", type=str, default="resnet50_model")
    parser.add_argument("--load_model_path", type=str, default=None)
    parser.add_argument("--use_cpu", type=int, default=1, help="CPU devices (caffe2py trains on the CPU)")
    parser.add_argument("--dtype", default="float", choices=["float", "float16"])
    parser.add_argument("--test_iters", type=int, default=100)
    parser.add_argument("--model", default="resnet50", choices=["resnet50", "resnet_32x32"])
    parser.add_argument("--make_db", type=int, default=0, help="first write N generated images to --train_data")
    return parser.parse_args(argv)


def make_rendezvous(args):
    """Caffe2's trainer: with several shards, a store handler on Redis (--redis_host) or
    in --file_store_path, under --run_id, and a GLOO rendezvous."""
    if args.num_shards <= 1:
        return None
    if args.redis_host is not None:
        workspace.RunOperatorOnce(core.CreateOperator(
            "RedisStoreHandlerCreate", [], ["store_handler"], host=args.redis_host, port=args.redis_port,
            prefix=args.run_id))
    else:
        workspace.RunOperatorOnce(core.CreateOperator(
            "FileStoreHandlerCreate", [], ["store_handler"], path=args.file_store_path, prefix=args.run_id))
    interfaces = args.distributed_interfaces.split(",")
    return dict(kv_handler="store_handler", shard_id=args.shard_id, num_shards=args.num_shards, engine="GLOO",
                transport=args.distributed_transport, interface=interfaces[0], mpi_rendezvous=False,
                exit_nets=None)


def main(argv=None):
    args = parse_args(argv)
    if args.make_db:
        from caffe2py.tools.make_image_db import write_generated_db
        write_generated_db(args.train_data, args.make_db, args.num_labels, max(args.scale, args.image_size) + 8,
                           datum=True)
    os.makedirs(args.file_store_path, exist_ok=True)
    return train(args)


if __name__ == "__main__":
    workspace.GlobalInit(["caffe2", "--caffe2_log_level=2"])
    main()
