"""FuseConvBN (caffe2/opt/fusion.cc): fold an inference SpatialBN into the Conv
before it, rewriting the conv's filter and bias blobs in the workspace.

    BN(conv(X)) = s * (X * W + b - m) / sqrt(v + eps) + beta
                = X * W' + b'  with  W' = W * k,  b' = (b - m) * k + beta,  k = s / sqrt(v + eps)

per output channel (the filter's first dimension in NCHW and NHWC, 2-D and 3-D). A
conv without bias gets a zero bias blob `<conv name>_bias<N>` (the first N whose name
is free). The folding is computed in float64 and stored as float32.

Beyond Caffe2: a pair is left alone when a parameter blob is written by an op of the
net (its workspace value is not what the net will use), and a filter or bias another
op also reads is written to a new blob instead of in place.
"""
import numpy as np

from .. import workspace
from ..errors import Caffe2Error
from .op_args import op_args
from .representation import NeuralNetData


def _param(node, conv_label):
    name = node.getName()
    if not workspace.HasBlob(name):
        raise Caffe2Error("FuseConvBN: %s reads blob '%s', which is not in the workspace (feed "
                          "the parameters before running the transformation)" % (conv_label, name))
    value = workspace.FetchBlob(name)
    if not isinstance(value, np.ndarray) or value.dtype != np.float32:
        raise Caffe2Error("FuseConvBN: %s: blob '%s' must be a float32 tensor, got %s"
                          % (conv_label, name, getattr(value, "dtype", type(value).__name__)))
    return value


def _free_name(nn, stem, start=0):
    taken = {t.getName() for t in nn.dataFlow.tensors}
    index = start
    while stem + str(index) in taken or workspace.HasBlob(stem + str(index)):
        index += 1
    return stem + str(index)


def _own_blob(nn, conv, slot):
    """The conv's input `slot` as a blob only this conv reads (a new one if shared)."""
    edge = conv.getInEdges()[slot]
    tensor = edge.tail()
    if len(tensor.getConsumers()) == 1 and tensor not in nn.outputs:
        return tensor
    fresh = nn.dataFlow.createNode(NeuralNetData(_free_name(nn, tensor.getName() + "_fused")))
    nn.inputs.append(fresh)
    edge.set_tail(fresh)
    return fresh


def _fold_one(nn):
    """Fold the first foldable Conv -> SpatialBN pair; False when there is none."""
    for conv in nn.dataFlow.operators:
        if conv.getName() != "Conv" or len(conv.getOutputs()) != 1:
            continue
        consumers = conv.getOutputs()[0].getConsumers()
        if len(consumers) != 1 or consumers[0].getName() != "SpatialBN":
            continue
        bn = consumers[0]
        conv_inputs, bn_inputs = conv.getInputs(), bn.getInputs()
        # (X, W[, b]) only: a fourth input is caffe2py's concat buffer, not a plain conv
        if len(bn.getOutputs()) != 1 or len(conv_inputs) not in (2, 3):
            continue
        if len(bn_inputs) < 5:
            raise Caffe2Error("FuseConvBN: SpatialBN after Conv has %d inputs, expected "
                              "(X, scale, bias, mean, var)" % len(bn_inputs))
        params = conv_inputs[1:3] + bn_inputs[1:5]
        if any(t.hasProducer() for t in params):
            continue
        label = "Conv writing '%s'" % conv.getOutputs()[0].getName()
        filt = _param(conv_inputs[1], label)
        channels = filt.shape[0] if filt.ndim else 0
        scale, beta, mean, var = (_param(t, label).reshape(-1) for t in bn_inputs[1:5])
        for what, value in (("scale", scale), ("bias", beta), ("mean", mean), ("var", var)):
            if value.size != channels:
                raise Caffe2Error("FuseConvBN: SpatialBN %s has %d values, the conv has %d output "
                                  "channels" % (what, value.size, channels))
        if len(conv_inputs) >= 3:
            bias = _param(conv_inputs[2], label).reshape(-1)
            if bias.size != channels:
                raise Caffe2Error("FuseConvBN: %s: bias has %d values for %d output channels"
                                  % (label, bias.size, channels))
        else:
            bias = np.zeros(channels, np.float32)
            stem = conv.getAnnotation().getOperatorDef().name + "_bias"
            bias_node = nn.dataFlow.createNode(NeuralNetData(_free_name(nn, stem)))
            nn.inputs.append(bias_node)
            nn.dataFlow.createEdge(bias_node, conv)
        epsilon = op_args(bn).get_float("epsilon", 1e-5)
        coeff = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
        new_filter = filt.astype(np.float64) * coeff.reshape((-1,) + (1,) * (filt.ndim - 1))
        new_bias = (bias.astype(np.float64) - mean) * coeff + beta
        workspace.FeedBlob(_own_blob(nn, conv, 1).getName(), new_filter.astype(np.float32))
        workspace.FeedBlob(_own_blob(nn, conv, 2).getName(), new_bias.astype(np.float32))
        bn_output = bn.getOutputs()[0]
        nn.dataFlow.deleteNode(conv.getOutputs()[0])
        nn.dataFlow.createEdge(conv, bn_output)
        nn.dataFlow.deleteNode(bn)
        return True
    return False


def fuse_conv_bn(nn):
    while _fold_one(nn):
        pass
