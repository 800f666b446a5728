"""Conv's NNPACK engine, as a CPU build of Caffe2 with NNPACK has it.

caffe2py has no NNPACK library; what the engine changes in results is its
`activation` argument ("identity" or "Relu": the ReLU is fused into the conv, which
the FuseNNPACKConvRelu transformation relies on). The convolution itself is the
default CPU kernel; `algo` and `convolution_transform_strategy` only pick NNPACK's
internal algorithm and are accepted and ignored.
"""
from caffe2py.registry import register_kernel

from .nn import _conv_factory

_ACTIVATIONS = {"identity": None, "Relu": "relu"}
_KERNELS = {name: _conv_factory(activation) for name, activation in _ACTIVATIONS.items()}


@register_kernel("Conv", engine="NNPACK")
def _nnpack_conv_factory(ctx):
    activation = ctx.string("activation", "identity")
    if activation not in _ACTIVATIONS:
        raise ctx.error('unsupported activation type "%s" for the NNPACK engine (it takes '
                        '"identity" or "Relu")' % activation)
    return _KERNELS[activation](ctx)
