"""Caffe2's mobile passes: AddNNPACK and FuseNNPACKConvRelu (caffe2/opt/mobile.cc)."""
from .activation_fusion import fuse_activation
from .op_args import kernel_shape, op_args, order, strides
from .representation import operator_def_of

CONV_TYPES = ("Conv", "ConvFusion")


def add_nnpack(nn, low_memory=False):
    """Give the NNPACK engine to every 2-D NCHW Conv with a bias and stride 1 (not
    Kx1 or 1xK); unless `low_memory`, also ask it to precompute filter transforms."""
    for node in nn.dataFlow.operators:
        if node.getName() not in CONV_TYPES or len(node.getInputs()) < 3:
            continue
        args = op_args(node)
        kernel = kernel_shape(args)
        if order(args) != "NCHW" or any(s != 1 for s in strides(args)) or len(kernel) != 2:
            continue
        if kernel[0] != kernel[1] and 1 in kernel:
            continue
        op = node.getAnnotation().mutableOperatorDef()
        op.engine = "NNPACK"
        if not low_memory:
            op.arg.add(name="convolution_transform_strategy", s=b"PRECOMPUTE")


def _nnpack_relu_is_fast(node):
    if operator_def_of(node).engine != "NNPACK":     # only the fast NNPACK convs
        return False
    args = op_args(node)
    algo = args.get_string("algo", "AUTO")
    if algo in ("AUTO", ""):
        return all(s <= 1 for s in strides(args)) and all(k >= 2 for k in kernel_shape(args))
    return algo in ("WINOGRAD", "WINOGRAD_FP16", "FT8x8", "FT16x16")


def _mark_relu(node):
    node.getAnnotation().mutableOperatorDef().arg.add(name="activation", s=b"Relu")


def fuse_nnpack_conv_relu(nn):
    """Fold a Relu into the NNPACK Conv before it (the conv gets activation="Relu")."""
    fuse_activation(nn, CONV_TYPES, "Relu", _nnpack_relu_is_fast, _mark_relu)
