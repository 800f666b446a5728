"""BlobReference: a blob name, optionally tied to the net that produces it. Below
core (which re-exports it) so the gradient builder can name blobs without the net
builder: `blob.Relu()` goes through the net the reference came from."""
from . import registry, scope
from .errors import Caffe2Error


def unknown_op_message(op_type):
    hints = registry.close_matches(op_type)
    return "Method %s is not a registered operator.%s" % (
        op_type, " Did you mean: [%s]" % ", ".join(hints) if hints else "")


class BlobReference:
    """A blob name, optionally tied to the net that produces it."""

    def __init__(self, name, net=None):
        self._name = name.decode() if isinstance(name, bytes) else str(name)
        self._from_net = net

    def __hash__(self):
        return hash(self._name)

    def __eq__(self, other):
        if isinstance(other, str):
            return self._name == other
        if isinstance(other, BlobReference):
            return self._name == other._name
        return False

    def __ne__(self, other):
        return not self == other

    def __str__(self):
        return self._name

    def __repr__(self):
        return "BlobReference(%r)" % self._name

    def __add__(self, other):
        if not isinstance(other, str):
            raise Caffe2Error("cannot add BlobReference and %s" % type(other).__name__)
        return BlobReference(self._name + other, self._from_net)

    def __radd__(self, other):
        if not isinstance(other, str):
            raise Caffe2Error("cannot add %s and BlobReference" % type(other).__name__)
        return BlobReference(other + self._name, self._from_net)

    def Net(self):
        return self._from_net

    def GetNameScope(self):
        return self._name[:self._name.rfind(scope._NAMESCOPE_SEPARATOR) + 1]

    def GetUnscopedName(self):
        return self._name[self._name.rfind(scope._NAMESCOPE_SEPARATOR) + 1:]

    def __getattr__(self, op_type):
        if op_type.startswith("__"):
            raise AttributeError(op_type)
        if self._from_net is None:
            raise AttributeError("BlobReference '%s' is not tied to a net; cannot call %s on it"
                                 % (self._name, op_type))
        if not registry.has_op(op_type):
            raise AttributeError(unknown_op_message(op_type))

        def call(inputs=None, *args, **kwargs):
            extra = [] if inputs is None else (list(inputs) if isinstance(inputs, (list, tuple)) else [inputs])
            return self._from_net.__getattr__(op_type)([self] + extra, *args, **kwargs)
        return call
