"""Static single assignment for export: ONNX values are written once, Caffe2 blobs
are rewritten in place (Relu over its own input, a net that updates `data`).

Each write of a blob makes a new version. One version per blob keeps the plain
name, so that names users know survive: the value before the net (a graph
input or initializer) if there is one, else the last version when the blob is
a net output, else the first. The other versions are `name_<k>` (made unique).
"""
from dataclasses import dataclass, field

from caffe2py.errors import Caffe2Error, describe_op
from caffe2py.proto import caffe2_pb2


@dataclass
class SSANet:
    ops: list                      # OperatorDefs with SSA names
    outputs: dict                  # Caffe2 output name -> its final SSA name
    original: dict = field(default_factory=dict)   # SSA name -> Caffe2 name
    renamed_outputs: list = field(default_factory=list)   # outputs that could not keep their name


class NameScope:
    """Unique names: every name handed out differs from all names seen so far."""

    def __init__(self, taken=()):
        self._taken = set(taken)

    def take(self, name):
        self._taken.add(name)

    def __contains__(self, name):
        return name in self._taken

    def unique(self, base):
        name, k = base, 1
        while name in self._taken:
            name = "%s_%d" % (base, k)
            k += 1
        self._taken.add(name)
        return name


def all_names(net):
    names = set(net.external_input) | set(net.external_output)
    for op in net.op:
        names.update(op.input)
        names.update(op.output)
    return names


def ssa_rewrite(net, defined, scope):
    """SSANet for `net`'s ops. `defined`: names that hold a value before the first
    op (graph inputs and initializers). `scope` (a NameScope holding every name of
    the net) hands out the names of extra versions."""
    defined = set(defined)
    outputs = list(net.external_output)
    writes = {}
    for op in net.op:
        for name in op.output:
            writes[name] = writes.get(name, 0) + 1

    def plain_version(name):
        if name in defined:
            return 0
        if name in outputs:
            return writes[name]
        return 1

    version = {name: 0 for name in defined}
    names = {(name, 0): name for name in defined}
    original = {name: name for name in defined}

    def name_of(blob, v):
        key = (blob, v)
        if key not in names:
            new = blob if v == plain_version(blob) else scope.unique("%s_%d" % (blob, v))
            names[key] = new
            original[new] = blob
        return names[key]

    ops = []
    for index, op in enumerate(net.op):
        new = caffe2_pb2.OperatorDef()
        new.CopyFrom(op)
        for k, blob in enumerate(op.input):
            if blob not in version:
                raise Caffe2Error("%s: reads '%s', which is neither an input of the net (external_input, "
                                  "value_info or the init net) nor written by an earlier op"
                                  % (describe_op(index, op), blob))
            new.input[k] = name_of(blob, version[blob])
        for k, blob in enumerate(op.output):
            version[blob] = version.get(blob, 0) + 1
            new.output[k] = name_of(blob, version[blob])
        ops.append(new)

    final, renamed = {}, []
    for name in outputs:
        if name not in version:
            raise Caffe2Error("net '%s': output '%s' is never written and is not an input"
                              % (net.name or "<unnamed>", name))
        final[name] = name_of(name, version[name])
        if final[name] != name:
            renamed.append(name)
    return SSANet(ops, final, original, renamed)
