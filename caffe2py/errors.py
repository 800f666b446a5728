"""The project's exception types.

Everything caffe2py raises on bad input is a Caffe2Error. It derives from
RuntimeError because Caffe2's Python layer raised RuntimeError for operator
failures and existing scripts and tests catch that.
"""


class Caffe2Error(RuntimeError):
    """Any error caffe2py reports about a net, an op, a blob or a file."""


class OperatorError(Caffe2Error):
    """An operator failed to build or run. Names the op (index, type, name)."""

    def __init__(self, message, op_index=None, op_type=None, op_name=None, cause=None):
        self.op_index = op_index
        self.op_type = op_type
        self.op_name = op_name
        self.cause = cause
        super().__init__(message)


class ProtoError(Caffe2Error):
    """A protobuf file or message could not be read."""


class SerializationError(ProtoError):
    """A blob cannot be serialized or a serialized blob cannot be read back."""


class ModelTrustError(Caffe2Error):
    """A net from a model file asked for something the model-trust policy does not
    allow (code, a path outside the allowed folders, the network): caffe2py/model_trust.py.
    Names the op, the argument, the path and the option that would allow it."""


def describe_op(index, op_def):
    """'Conv #3 'conv1'' style label used in every op error message."""
    label = op_def.type if index is None else "%s #%d" % (op_def.type, index)
    name = op_def.name or (op_def.output[0] if len(op_def.output) else "")
    return "%s '%s'" % (label, name) if name else label


def out_of_memory_text(exc):
    """What a MemoryError means for the user, without NumPy's wording: the size it
    could not get when NumPy says so."""
    import re
    match = re.search(r"allocate ([\d.]+ \w+) for an array with shape (\(.*?\)) and data type (\w+)", str(exc))
    if match:
        return ("ran out of memory: an array of %s (shape %s, %s) does not fit in the memory this "
                "process may use; smaller inputs or shape arguments would" % match.groups())
    return ("ran out of memory: the op needs more memory than this process may use (check the "
            "input sizes and the shape arguments)")
