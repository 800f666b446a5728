"""Building Arguments from Python values and reading them back."""
import numpy as np

from google.protobuf.message import Message

from .errors import Caffe2Error
from .proto import caffe2_pb2


def _is_int(v):
    return isinstance(v, (bool, int, np.integer, np.bool_))


def _is_float(v):
    return isinstance(v, (float, np.floating))


def _is_str(v):
    return isinstance(v, (str, bytes))


def _to_bytes(v):
    return v.encode() if isinstance(v, str) else bytes(v)


def make_argument(name, value):
    """Caffe2's utils.MakeArgument: a Python value becomes a typed Argument."""
    arg = caffe2_pb2.Argument(name=name)
    if isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if isinstance(value, caffe2_pb2.TensorProto):
        arg.t.CopyFrom(value)
    elif isinstance(value, caffe2_pb2.NetDef):
        arg.n.CopyFrom(value)
    elif _is_int(value):
        arg.i = int(value)
    elif _is_float(value):
        arg.f = float(value)
    elif _is_str(value):
        arg.s = _to_bytes(value)
    elif isinstance(value, Message):
        arg.s = value.SerializeToString()
    elif isinstance(value, (list, tuple, range)):   # Caffe2 takes any iterable; tests pass range
        items = list(value)
        if all(_is_int(v) for v in items):
            arg.ints.extend(int(v) for v in items)
        elif all(_is_int(v) or _is_float(v) for v in items):
            arg.floats.extend(float(v) for v in items)
        elif all(_is_str(v) for v in items):
            arg.strings.extend(_to_bytes(v) for v in items)
        elif all(isinstance(v, caffe2_pb2.NetDef) for v in items):
            arg.nets.extend(items)
        elif all(isinstance(v, caffe2_pb2.TensorProto) for v in items):
            arg.tensors.extend(items)
        elif all(hasattr(v, "Proto") for v in items):  # core.Net objects
            arg.nets.extend(v.Proto() for v in items)
        else:
            raise Caffe2Error("argument '%s': cannot mix types in list %r" % (name, value))
    elif hasattr(value, "Proto"):
        arg.n.CopyFrom(value.Proto())
    else:
        raise Caffe2Error("argument '%s': unsupported value type %s" % (name, type(value).__name__))
    return arg


def argument_value(arg):
    """The Python value an Argument carries (whichever field is set)."""
    for field in ("f", "i", "s", "t", "n"):
        if arg.HasField(field):
            value = getattr(arg, field)
            return value.decode("utf-8", "replace") if field == "s" else value
    for field in ("floats", "ints", "strings", "tensors", "nets", "qtensors"):
        values = getattr(arg, field)
        if len(values):
            if field == "strings":
                return [v.decode("utf-8", "replace") for v in values]
            return list(values)
    return []  # an Argument with only a name: an empty list in Caffe2's reading


# Caffe2 stores ints as int64: a whole float beyond that is no int argument
_INT64_LIMIT = 2.0 ** 63

class ArgumentHelper:
    """Reads an OperatorDef's arguments by name, with defaults and type checks."""

    def __init__(self, op_def):
        self._op = op_def
        self._args = {a.name: a for a in op_def.arg}

    def has(self, name):
        return name in self._args

    def names(self):
        return list(self._args)

    def _fail(self, name, expected, arg):
        raise Caffe2Error("op %s '%s': argument '%s' should be %s, got %r"
                          % (self._op.type, self._op.name or (self._op.output[0] if self._op.output else ""),
                             name, expected, argument_value(arg)))

    def get_int(self, name, default=None):
        arg = self._args.get(name)
        if arg is None:
            return default
        if arg.HasField("i"):
            return int(arg.i)
        if arg.HasField("f") and float(arg.f).is_integer() and abs(arg.f) < _INT64_LIMIT:
            return int(arg.f)
        self._fail(name, "an int", arg)

    def get_float(self, name, default=None):
        arg = self._args.get(name)
        if arg is None:
            return default
        if arg.HasField("f"):
            return float(arg.f)
        if arg.HasField("i"):
            return float(arg.i)
        self._fail(name, "a float", arg)

    def get_bool(self, name, default=False):
        value = self.get_int(name, None)
        return default if value is None else bool(value)

    def get_string(self, name, default=None):
        arg = self._args.get(name)
        if arg is None:
            return default
        if arg.HasField("s"):
            return arg.s.decode("utf-8", "replace")
        self._fail(name, "a string", arg)

    def get_ints(self, name, default=None):
        arg = self._args.get(name)
        if arg is None:
            return default
        if len(arg.ints):
            return list(arg.ints)
        if arg.HasField("i"):
            return [int(arg.i)]
        if len(arg.floats) and all(float(v).is_integer() and abs(v) < _INT64_LIMIT for v in arg.floats):
            return [int(v) for v in arg.floats]
        if not arg.floats and not arg.strings and not arg.HasField("f") and not arg.HasField("s"):
            return []
        self._fail(name, "a list of ints", arg)

    def get_floats(self, name, default=None):
        arg = self._args.get(name)
        if arg is None:
            return default
        if len(arg.floats):
            return list(arg.floats)
        if len(arg.ints):
            return [float(v) for v in arg.ints]
        if arg.HasField("f"):
            return [float(arg.f)]
        return []

    def get_strings(self, name, default=None):
        arg = self._args.get(name)
        if arg is None:
            return default
        return [v.decode("utf-8", "replace") for v in arg.strings]

    def get_tensor(self, name, default=None):
        arg = self._args.get(name)
        if arg is None:
            return default
        if not arg.HasField("t"):             # present but not a tensor (a damaged file: fuzz mutate:10:27846)
            self._fail(name, "a tensor", arg)
        return arg.t

    def get_net(self, name, default=None):
        arg = self._args.get(name)
        if arg is None or not arg.HasField("n"):
            return default
        return arg.n

    def get(self, name, default=None):
        arg = self._args.get(name)
        return default if arg is None else argument_value(arg)
