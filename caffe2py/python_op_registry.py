"""Python functions run by the `Python` / `PythonDLPack` ops, registered under a
token (Caffe2's _RegisterPythonImpl): core.Net.Python(f, grad_f) registers f
(and its gradient function) and puts the token into the op's arguments.

Tokens are only valid in the process that registered them (as in Caffe2); a net
meant to travel between processes passes (func, args, kwargs) builder tuples
instead, which are pickled into the op and called once where the op is built."""
import itertools
import pickle
import threading

from .errors import Caffe2Error

_lock = threading.Lock()
_counter = itertools.count()
_impls = {}          # token -> PythonImpl


class PythonImpl:
    def __init__(self, forward, backward, pass_workspace):
        self.forward = forward
        self.backward = backward
        self.pass_workspace = pass_workspace


def register(f, grad_f=None, python_func_type=None, pass_workspace=False, prefix=""):
    """A new token for f (and grad_f). python_func_type(f) may instead provide
    .forward and .backward (a stateful op). prefix starts the token (Caffe2's
    register_python_op `name`)."""
    if python_func_type is not None:
        obj = python_func_type(f)
        forward, backward = obj.forward, getattr(obj, "backward", None)
    else:
        forward, backward = f, grad_f
    if not callable(forward):
        raise Caffe2Error("Python op: the function must be callable, got %s" % type(forward).__name__)
    with _lock:
        token = "%spython_op_%d" % (prefix + ":" if prefix else "", next(_counter))
        _impls[token] = PythonImpl(forward, backward, pass_workspace)
    return token


def set_gradient(token, grad_f):
    """Give the function registered under token its gradient function (Caffe2's
    register_python_gradient_op)."""
    if not callable(grad_f):
        raise Caffe2Error("Python op: the gradient function must be callable, got %s" % type(grad_f).__name__)
    with _lock:
        impl = lookup(token)
        impl.backward = grad_f


def lookup(token):
    try:
        return _impls[token]
    except KeyError:
        raise Caffe2Error("Python op: no function registered under token '%s' (tokens are valid only in "
                          "the process that registered them)" % token) from None


def build(pickled):
    """The function made by a pickled (func, args, kwargs) builder."""
    try:
        func, args, kwargs = pickle.loads(pickled)
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign argument
        raise Caffe2Error("Python op: cannot unpickle the function builder: %s" % exc) from None
    return func(*args, **kwargs)


def pickle_builder(t):
    if not isinstance(t, tuple):
        return b""
    if len(t) != 3:
        raise Caffe2Error("Python op: expected a builder tuple (func, args, kwargs)")
    func, args, kwargs = t
    return pickle.dumps((func, tuple(args), dict(kwargs)))
