"""Caffe2's `caffe2.python.transformations`: graph passes on a net, in place.

`Transformer().AddNNPACK(net)` (any registered pass by name) converts net.Proto() to
an NNModule, runs the pass and writes the result back into net.Proto(). The
conversion refuses a net whose external_output names a blob no op produces or reads;
external inputs no op reads are allowed (and kept).

Passes: AddNNPACK, FuseNNPACKConvRelu, SinkMaxPool; FuseConvBN also rewrites the
conv parameters in the current workspace (caffe2py/nom/passes_*.py).
"""
from .errors import Caffe2Error
from .nom.module import NNModule
from .nom.passes_conv_bn import fuse_conv_bn
from .nom.passes_mobile import add_nnpack, fuse_nnpack_conv_relu
from .nom.passes_sink import sink_max_pool
from .proto import caffe2_pb2

# passes on the graph alone, and passes that also read and write workspace blobs
PASSES = {"AddNNPACK": add_nnpack, "FuseNNPACKConvRelu": fuse_nnpack_conv_relu,
          "SinkMaxPool": sink_max_pool}
WORKSPACE_PASSES = {"FuseConvBN": fuse_conv_bn}


def transform_exists(name):
    return name in PASSES


def workspace_transform_exists(name):
    return name in WORKSPACE_PASSES


def _proto(net):
    if isinstance(net, caffe2_pb2.NetDef):
        return net
    if callable(getattr(net, "Proto", None)):
        return net.Proto()
    raise Caffe2Error("transformations take a core.Net (or a NetDef), got %s" % type(net).__name__)


def run_pass(run, net):
    """Run pass function `run(nn)` on `net`, rewriting its NetDef in place."""
    net_def = _proto(net)
    nn = NNModule(net_def, strict_outputs=True)
    run(nn)
    net_def.CopyFrom(nn.convertToCaffe2Proto(net_def))


class Transformer:
    """`Transformer().<PassName>(net)` runs that pass on `net` in place."""

    @classmethod
    def runTransform(cls, transform_name, net):
        run = PASSES.get(transform_name) or WORKSPACE_PASSES.get(transform_name)
        if run is None:
            raise AttributeError("Transformation {} not found.".format(transform_name))
        run_pass(run, net)

    def __getattr__(self, transform_name):
        if transform_name.startswith("__"):
            raise AttributeError(transform_name)
        return lambda net: self.runTransform(transform_name, net)


def fuseNNPACKConvRelu(net):
    run_pass(fuse_nnpack_conv_relu, net)


def fuseConvBN(net):
    run_pass(fuse_conv_bn, net)


def optimizeForMKLDNN(net, training_mode=False):
    raise Caffe2Error("optimizeForMKLDNN needs Caffe2's IDEEP (MKL-DNN) build; caffe2py, like a "
                      "CPU build of Caffe2 without IDEEP, does not have it")
