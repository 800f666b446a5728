"""caffe2.python.convnet_benchmarks: the convnet models of Soumith Chintala's
benchmarks (AlexNet, OverFeat, VGG-A, Inception v1) and a deep MLP, built with
cnn.CNNModelHelper, and Benchmark(model_gen, args) to time one (workspace.BenchmarkNet).

Each builder takes the order ("NCHW" / "NHWC") and optionally cudnn_ws, and returns (model, input size); the
model reads "data" and "label" and ends in an averaged cross-entropy "loss" (the MLP
reads "data" [batch, 256]). The layer sizes are Caffe2's, written here as tables."""
import argparse

from . import cnn, workspace

_FILL = (("XavierFill", {}), ("ConstantFill", {}))


def MLP(order, cudnn_ws=None):  # noqa: ARG001 - the MLP has no image order
    """`width` parallel stacks of `depth` FC layers of d units, summed, then 1000 classes."""
    model = cnn.CNNModelHelper()
    d, depth, width = 256, 20, 3
    for i in range(depth):
        for j in range(width):
            source = "fc_{}_{}".format(i, j) if i > 0 else "data"
            model.FC(source, "fc_{}_{}".format(i + 1, j), dim_in=d, dim_out=d,
                     weight_init=model.XavierInit, bias_init=model.XavierInit)
    model.Sum(["fc_{}_{}".format(depth, j) for j in range(width)], ["sum"])
    model.FC("sum", "last", dim_in=d, dim_out=1000, weight_init=model.XavierInit, bias_init=model.XavierInit)
    model.AveragedLoss(model.LabelCrossEntropy(["last", "label"], "xent"), "loss")
    return model, d


def _classifier(model, blob, fcs):
    """FC + Relu layers (name, dim_in, dim_out), the last without Relu, then softmax loss."""
    for k, (name, dim_in, dim_out) in enumerate(fcs):
        blob = model.FC(blob, name, dim_in, dim_out, *_FILL)
        if k + 1 < len(fcs):
            blob = model.Relu(blob, name)
    pred = model.Softmax(blob, "pred")
    model.AveragedLoss(model.LabelCrossEntropy([pred, "label"], "xent"), "loss")


def _conv_stack(model, layers):
    """layers: ("conv", name, dim_in, dim_out, kernel, kwargs) -> Conv + Relu in place of
    the name; ("pool", name, kernel, stride) -> MaxPool."""
    blob = "data"
    for layer in layers:
        if layer[0] == "conv":
            _, name, dim_in, dim_out, kernel, kwargs = layer
            blob = model.Relu(model.Conv(blob, name, dim_in, dim_out, kernel, *_FILL, **kwargs), name)
        else:
            _, name, kernel, stride = layer
            blob = model.MaxPool(blob, name, kernel=kernel, stride=stride)
    return blob


def _model(order, cudnn_ws, name):
    # cudnn_ws: the cuDNN workspace limit in MB (Caffe2's later builders take it)
    extra = {"ws_nbytes_limit": cudnn_ws * 1024 * 1024} if cudnn_ws and cudnn_ws > 0 else {}
    return cnn.CNNModelHelper(order, name=name, use_cudnn=True, cudnn_exhaustive_search=True, **extra)


def AlexNet(order, cudnn_ws=None):
    model = _model(order, cudnn_ws, "alexnet")
    top = _conv_stack(model, [
        ("conv", "conv1", 3, 64, 11, dict(stride=4, pad=2)), ("pool", "pool1", 3, 2),
        ("conv", "conv2", 64, 192, 5, dict(pad=2)), ("pool", "pool2", 3, 2),
        ("conv", "conv3", 192, 384, 3, dict(pad=1)),
        ("conv", "conv4", 384, 256, 3, dict(pad=1)),
        ("conv", "conv5", 256, 256, 3, dict(pad=1)), ("pool", "pool5", 3, 2)])
    _classifier(model, top, [("fc6", 256 * 6 * 6, 4096), ("fc7", 4096, 4096), ("fc8", 4096, 1000)])
    return model, 224


def OverFeat(order, cudnn_ws=None):
    model = _model(order, cudnn_ws, "overfeat")
    top = _conv_stack(model, [
        ("conv", "conv1", 3, 96, 11, dict(stride=4)), ("pool", "pool1", 2, 2),
        ("conv", "conv2", 96, 256, 5, {}), ("pool", "pool2", 2, 2),
        ("conv", "conv3", 256, 512, 3, dict(pad=1)),
        ("conv", "conv4", 512, 1024, 3, dict(pad=1)),
        ("conv", "conv5", 1024, 1024, 3, dict(pad=1)), ("pool", "pool5", 2, 2)])
    _classifier(model, top, [("fc6", 1024 * 6 * 6, 3072), ("fc7", 3072, 4096), ("fc8", 4096, 1000)])
    return model, 231


def VGGA(order, cudnn_ws=None):
    model = _model(order, cudnn_ws, "vgg-a")
    same = dict(pad=1)
    top = _conv_stack(model, [
        ("conv", "conv1", 3, 64, 3, same), ("pool", "pool1", 2, 2),
        ("conv", "conv2", 64, 128, 3, same), ("pool", "pool2", 2, 2),
        ("conv", "conv3", 128, 256, 3, same), ("conv", "conv4", 256, 256, 3, same), ("pool", "pool4", 2, 2),
        ("conv", "conv5", 256, 512, 3, same), ("conv", "conv6", 512, 512, 3, same), ("pool", "pool6", 2, 2),
        ("conv", "conv7", 512, 512, 3, same), ("conv", "conv8", 512, 512, 3, same), ("pool", "pool8", 2, 2)])
    _classifier(model, top, [("fcix", 512 * 7 * 7, 4096), ("fcx", 4096, 4096), ("fcxi", 4096, 1000)])
    return model, 231


def _InceptionModule(model, input_blob, input_depth, output_name, conv1_depth, conv3_depths, conv5_depths,
                     pool_depth):
    """Four branches concatenated: 1x1; 1x1 then 3x3; 1x1 then 5x5; 3x3 max pool then 1x1."""
    def conv_relu(source, suffix, dim_in, dim_out, kernel, pad=0):
        out = model.Conv(source, output_name + ":" + suffix, dim_in, dim_out, kernel, *_FILL, pad=pad)
        return model.Relu(out, out)

    branch1 = conv_relu(input_blob, "conv1", input_depth, conv1_depth, 1)
    reduce3 = conv_relu(input_blob, "conv3_reduce", input_depth, conv3_depths[0], 1)
    branch3 = conv_relu(reduce3, "conv3", conv3_depths[0], conv3_depths[1], 3, pad=1)
    reduce5 = conv_relu(input_blob, "conv5_reduce", input_depth, conv5_depths[0], 1)
    branch5 = conv_relu(reduce5, "conv5", conv5_depths[0], conv5_depths[1], 5, pad=2)
    pooled = model.MaxPool(input_blob, output_name + ":pool", kernel=3, stride=1, pad=1)
    branch_pool = conv_relu(pooled, "pool_proj", input_depth, pool_depth, 1)
    return model.Concat([branch1, branch3, branch5, branch_pool], output_name)


# (name, input depth, 1x1, [3x3 reduce, 3x3], [5x5 reduce, 5x5], pool projection); "pool"
# rows are 3x3 stride-2 max pools between the modules
_INCEPTION = [
    ("inc3", 192, 64, [96, 128], [16, 32], 32), ("inc4", 256, 128, [128, 192], [32, 96], 64), ("pool5",),
    ("inc5", 480, 192, [96, 208], [16, 48], 64), ("inc6", 512, 160, [112, 224], [24, 64], 64),
    ("inc7", 512, 128, [128, 256], [24, 64], 64), ("inc8", 512, 112, [144, 288], [32, 64], 64),
    ("inc9", 528, 256, [160, 320], [32, 128], 128), ("pool9",),
    ("inc10", 832, 256, [160, 320], [32, 128], 128), ("inc11", 832, 384, [192, 384], [48, 128], 128)]


def Inception(order, cudnn_ws=None):
    model = _model(order, cudnn_ws, "inception")
    blob = model.Relu(model.Conv("data", "conv1", 3, 64, 7, *_FILL, stride=2, pad=3), "conv1")
    blob = model.MaxPool(blob, "pool1", kernel=3, stride=2, pad=1)
    conv2a = model.Conv(blob, "conv2a", 64, 64, 1, *_FILL)
    blob = model.Relu(conv2a, conv2a)
    blob = model.Relu(model.Conv(blob, "conv2", 64, 192, 3, *_FILL, pad=1), "conv2")
    blob = model.MaxPool(blob, "pool2", kernel=3, stride=2, pad=1)
    for row in _INCEPTION:
        if len(row) == 1:
            blob = model.MaxPool(blob, row[0], kernel=3, stride=2, pad=1)
        else:
            blob = _InceptionModule(model, blob, row[1], row[0], *row[2:])
    blob = model.AveragePool(blob, "pool11", kernel=7, stride=1)
    # a softmax on top (the original benchmark had none) so there is a backward pass
    _classifier(model, blob, [("fc", 1024, 1000)])
    return model, 224


def Benchmark(model_gen, arg):
    """Build the model, fill "data" and "label" in its init net, add the backward pass
    unless arg.forward_only, move it to the GPU unless arg.cpu, and BenchmarkNet it."""
    model, input_size = model_gen(arg.order, arg.cudnn_ws)
    model.Proto().type = arg.net_type
    model.Proto().num_workers = arg.num_workers
    if arg.model == "MLP":
        shape = [arg.batch_size, input_size]
    elif arg.order == "NCHW":
        shape = [arg.batch_size, 3, input_size, input_size]
    else:
        shape = [arg.batch_size, input_size, input_size, 3]
    model.param_init_net.GaussianFill([], "data", shape=shape, mean=0.0, std=1.0)
    model.param_init_net.UniformIntFill([], "label", shape=[arg.batch_size], min=0, max=999)
    if not arg.forward_only:
        model.AddGradientOperators(["loss"])
    if not arg.cpu:
        model.param_init_net.RunAllOnGPU()
        model.net.RunAllOnGPU()
    if arg.dump_model:
        with open("{0}_init_batch_{1}.pbtxt".format(arg.model, arg.batch_size), "w") as fh:
            fh.write(str(model.param_init_net.Proto()))
        with open("{0}.pbtxt".format(arg.model), "w") as fh:
            fh.write(str(model.net.Proto()))
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    return workspace.BenchmarkNet(model.net.Proto().name, arg.warmup_iterations, arg.iterations,
                                  arg.layer_wise_benchmark)


def GetArgumentParser():
    parser = argparse.ArgumentParser(description="Caffe2 benchmark.")
    parser.add_argument("--batch_size", type=int, default=128, help="The batch size.")
    parser.add_argument("--model", type=str, help="The model to benchmark.")
    parser.add_argument("--order", type=str, default="NCHW", help="The order to evaluate.")
    parser.add_argument("--cudnn_ws", type=int, default=-1, help="The cudnn workspace size.")
    parser.add_argument("--iterations", type=int, default=10, help="Number of iterations to run the network.")
    parser.add_argument("--warmup_iterations", type=int, default=10,
                        help="Number of warm-up iterations before benchmarking.")
    parser.add_argument("--forward_only", action="store_true", help="If set, only run the forward pass.")
    parser.add_argument("--layer_wise_benchmark", action="store_true",
                        help="If True, run the layer-wise benchmark as well.")
    parser.add_argument("--cpu", action="store_true", help="If True, run testing on CPU instead of GPU.")
    parser.add_argument("--dump_model", action="store_true", help="If True, dump the model prototxts to disk.")
    parser.add_argument("--net_type", type=str, default="dag")
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--use-nvtx", default=False, action="store_true")
    return parser


_MODELS = {"AlexNet": AlexNet, "OverFeat": OverFeat, "VGGA": VGGA, "Inception": Inception, "MLP": MLP}

if __name__ == "__main__":
    args = GetArgumentParser().parse_args()
    workspace.GlobalInit(["caffe2", "--caffe2_log_level=0"])
    Benchmark(_MODELS[args.model], args)
