"""The built-in demo: a small CNN classifier the project builds itself with brew,
so `caffe2py run` works with no files at all."""
import numpy as np

from . import brew
from .model_helper import ModelHelper

INPUT = "data"
OUTPUT = "softmax"


def build_demo(batch=4, seed=0):
    """(init_net, predict_net, inputs) for a LeNet-style net on 1x28x28 images."""
    model = ModelHelper(name="demo_lenet")
    conv1 = brew.conv(model, INPUT, "conv1", dim_in=1, dim_out=8, kernel=5)
    pool1 = brew.max_pool(model, conv1, "pool1", kernel=2, stride=2)
    relu1 = brew.relu(model, pool1, "relu1")
    conv2 = brew.conv(model, relu1, "conv2", dim_in=8, dim_out=16, kernel=5, pad=2)
    pool2 = brew.max_pool(model, conv2, "pool2", kernel=2, stride=2)
    relu2 = brew.relu(model, pool2, "relu2")
    flat = model.net.Flatten(relu2, "flat")
    fc1 = brew.fc(model, flat, "fc1", dim_in=16 * 6 * 6, dim_out=64)
    act = brew.relu(model, fc1, "fc1_relu")
    fc2 = brew.fc(model, act, "fc2", dim_in=64, dim_out=10)
    brew.softmax(model, fc2, OUTPUT)
    init_net = model.param_init_net.Proto()
    for op in init_net.op:  # deterministic weights: same demo output everywhere
        op.device_option.random_seed = seed + 1
    predict_net = model.net.Proto()
    predict_net.external_output.append(OUTPUT)
    rng = np.random.default_rng(seed)
    inputs = {INPUT: rng.random((batch, 1, 28, 28), dtype=np.float32)}
    return init_net, predict_net, inputs
