"""Caffe2's `caffe2.python.nomnigraph_transformations`: rewrites of an NNModule.

transpose_network(nn): every NCHW Conv becomes an NHWC Conv. Its data and filter
inputs go through NCHW2NHWC, its outputs come back through NHWC2NCHW, so the rest of
the net is unchanged. Transposes that would undo each other are shared: a tensor
transposed to NHWC several times is transposed once, and an NCHW tensor that is
itself the NHWC2NCHW of an NHWC Conv's output is read in its NHWC form directly.
"""
from .nom.representation import operator_def_of
from .proto import caffe2_pb2


def _layout_op(op_type, device_option):
    op = caffe2_pb2.OperatorDef()
    op.type = op_type
    op.device_option.CopyFrom(device_option)
    return op


def _is_nchw_conv(node):
    if not (node.isOperator() and node.getName() == "Conv"):
        return False
    for arg in operator_def_of(node).arg:
        if arg.name == "order":
            order = arg.s.decode() if isinstance(arg.s, bytes) else arg.s
            return order.upper() == "NCHW"
    return True                      # Conv's default order is NCHW


def _to_nhwc_conv(nn, node, nchw_of, to_nhwc):
    """Replace NCHW Conv `node` by an NHWC one between transposes."""
    if len(node.getInputs()) < 2 or not node.getOutputs():
        return
    op_def = operator_def_of(node)
    inputs, outputs = node.getInputs(), node.getOutputs()
    nn.deleteNode(node)
    for index in range(2):           # the data and the filter change layout; a bias does not
        original = inputs[index]
        transposed = nn.createUniqueDataNode(original.getName())
        transpose = nn.createNode(_layout_op("NCHW2NHWC", op_def.device_option))
        nn.createEdge(original, transpose)
        nn.createEdge(transpose, transposed)
        to_nhwc.setdefault(original, []).append(transpose)
        inputs[index] = transposed
    for index, original in enumerate(outputs):
        nhwc = nn.createUniqueDataNode(original.getName())
        transpose = nn.createNode(_layout_op("NHWC2NCHW", op_def.device_option))
        nn.createEdge(nhwc, transpose)
        nn.createEdge(transpose, original)
        nchw_of[original] = nhwc
        outputs[index] = nhwc
    for arg in [a for a in op_def.arg if a.name == "order"]:
        op_def.arg.remove(arg)
    op_def.arg.add(name="order", s=b"NHWC")
    conv = nn.createNode(op_def)
    for tensor in inputs:
        nn.createEdge(tensor, conv)
    for tensor in outputs:
        nn.createEdge(conv, tensor)


def transpose_network(nn):
    """Turn every NCHW Conv of NNModule `nn` into an NHWC Conv (in place)."""
    nchw_of = {}      # NCHW tensor written by an NHWC2NCHW we added -> its NHWC source
    to_nhwc = {}      # NCHW tensor -> the NCHW2NHWC ops we added that read it
    for node in nn.nodes:
        if nn.dataFlow.hasNode(node) and _is_nchw_conv(node):
            _to_nhwc_conv(nn, node, nchw_of, to_nhwc)
    for original, transposes in to_nhwc.items():
        if original in nchw_of:       # already had an NHWC form: drop every transpose
            nhwc, redundant = nchw_of[original], transposes
        else:                         # keep the first transpose, share its output
            nhwc, redundant = transposes[0].getOutputs()[0], transposes[1:]
        for transpose in redundant:
            for tensor in transpose.getOutputs():
                nn.replaceAllUsesWith(tensor, nhwc)
                nn.deleteNode(tensor)
            nn.deleteNode(transpose)
