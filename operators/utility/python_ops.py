"""The `Python` and `PythonDLPack` ops and their gradients: run a Python function
registered with core.Net.Python (caffe2py/python_op_registry.py).

The function is called as f(inputs, outputs) (plus the workspace with
pass_workspace=1). `Python` passes TensorCPU-like wrappers: `.data` (a NumPy
array; read-only for inputs, writable for outputs), `.shape`, `.reshape(dims)`,
`.init(dims, caffe2_type)`, `.feed(array)` and `.fetch()`. `PythonDLPack` passes
wrappers whose `.data` is a DLPack capsule and whose `.feed` takes one (or any
object with __dlpack__, such as a torch tensor).

The gradient op (PythonGradient, made by the gradient maker) receives the
forward inputs, the forward outputs and the output gradients
(grad_output_indices selects which), and writes the input gradients
(grad_input_indices selects which).
"""
import traceback

import numpy as np

from caffe2py import python_op_registry as P
from caffe2py.errors import Caffe2Error
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema
from caffe2py.tensors import as_blob_value, numpy_dtype

_ARGS = (Arg("token", "string", "", doc="key of the registered function"),
         Arg("pickled_builder", "string", "", doc="pickled (func, args, kwargs) making the function"),
         Arg("pickled_grad_builder", "string", "", doc="the same for the gradient function"),
         Arg("pass_workspace", "bool", False, doc="call f(inputs, outputs, workspace)"),
         Arg("grad_output_indices", "ints", [], doc="outputs whose gradients the gradient function takes"),
         Arg("grad_input_indices", "ints", [], doc="inputs whose gradients the gradient function makes"))

for _name in ("Python", "PythonGradient", "PythonDLPack", "PythonDLPackGradient"):
    register_schema(OpSchema(_name, num_inputs=(0, None), num_outputs=(0, None), args=_ARGS,
                             allow_inplace=lambda i, o: True,
                             doc="Runs a Python function on the op's inputs and outputs (see "
                                 "core.Net.Python)."))


class TensorCPU:
    """What f sees for each input and output of a `Python` op."""

    def __init__(self, value, writable):
        self._value = value if isinstance(value, np.ndarray) else None
        self._writable = writable
        self._owned = False          # outputs start from the blob's value, copied on first write

    @property
    def data(self):
        if self._value is None:
            if not self._writable:
                raise Caffe2Error("the input blob holds no tensor")
            self._value, self._owned = np.zeros((0,), np.float32), True
        if not self._writable:
            view = self._value.view()
            view.flags.writeable = False
            return view
        if not self._owned:
            self._value, self._owned = self._value.copy(), True
        return self._value

    @property
    def shape(self):
        return () if self._value is None else tuple(self._value.shape)

    def _check_writable(self, what):
        if not self._writable:
            raise Caffe2Error("cannot %s an input of a Python op" % what)

    def reshape(self, dims):
        self._check_writable("reshape")
        dims = tuple(int(d) for d in dims)
        dtype = self._value.dtype if self._value is not None else np.float32
        if self._value is not None and int(np.prod(dims)) == self._value.size:
            self._value, self._owned = self.data.reshape(dims), True
        else:
            self._value, self._owned = np.zeros(dims, dtype), True

    def init(self, dims, caffe_type):
        self._check_writable("init")
        self._value, self._owned = np.zeros(tuple(int(d) for d in dims), numpy_dtype(caffe_type)), True

    def feed(self, value):
        self._check_writable("feed")
        array = as_blob_value(value)
        self._value, self._owned = np.array(array, copy=True), True
        return True

    def fetch(self):
        return None if self._value is None else self._value.copy()

    @property
    def value(self):
        return self._value


class _Capsule:
    """A raw DLPack capsule presented as an object NumPy can import."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, *args, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)                # kDLCPU


class DLPackTensor:
    """What f sees for each input and output of a `PythonDLPack` op."""

    def __init__(self, value, writable):
        self._value = value if isinstance(value, np.ndarray) else None
        self._writable = writable

    @property
    def data(self):
        if self._value is None:
            raise Caffe2Error("the blob holds no tensor")
        array = self._value if self._writable else self._value.copy()
        return np.ascontiguousarray(array).__dlpack__()

    def feed(self, value):
        if not self._writable:
            raise Caffe2Error("cannot feed an input of a PythonDLPack op")
        source = value if hasattr(value, "__dlpack__") else _Capsule(value)
        self._value = np.array(np.from_dlpack(source), copy=True)
        return True

    @property
    def value(self):
        return self._value


class BlobHandle:
    def __init__(self, blobs, name):
        self._blobs, self.name = blobs, name

    def fetch(self):
        value = self._blobs[self.name]
        return value.copy() if isinstance(value, np.ndarray) else value

    def feed(self, value):
        self._blobs[self.name] = np.array(as_blob_value(value), copy=True)
        return True


class WorkspaceHandle:
    """The workspace given to f with pass_workspace=1 (the run's view of it)."""

    def __init__(self, blobs):
        self._blobs = blobs

    @property
    def blobs(self):
        return {name: BlobHandle(self._blobs, name) for name in self._blobs}

    def has_blob(self, name):
        return str(name) in self._blobs

    def create_blob(self, name):
        if str(name) not in self._blobs:
            self._blobs[str(name)] = None
        return BlobHandle(self._blobs, str(name))

    def fetch_blob(self, name):
        return BlobHandle(self._blobs, str(name)).fetch()

    def feed_blob(self, name, value):
        return BlobHandle(self._blobs, str(name)).feed(value)


def _function(ctx, gradient):
    token = ctx.string("token")
    if token:
        impl = P.lookup(token)
        fn = impl.backward if gradient else impl.forward
        pass_workspace = impl.pass_workspace
    else:
        raw = next((a.s for a in ctx.op_def.arg
                    if a.name == ("pickled_grad_builder" if gradient else "pickled_builder")), b"")
        if not raw:
            raise ctx.error("needs a 'token' or a 'pickled_builder' argument")
        fn = P.build(raw)
        pass_workspace = ctx.bool("pass_workspace")
    if fn is None:
        raise ctx.error("no %s function was registered" % ("gradient" if gradient else "forward"))
    return fn, pass_workspace


def _python_op(wrapper, gradient):
    def factory(ctx):
        ctx.use_workspace()
        fn, pass_workspace = _function(ctx, gradient)
        outputs = ctx.outputs

        def run(blobs, *inputs):
            ins = [wrapper(v, writable=False) for v in inputs]
            outs = [wrapper(blobs.get(name), writable=True) for name in outputs]
            try:
                if pass_workspace:
                    fn(ins, outs, WorkspaceHandle(blobs))
                else:
                    fn(ins, outs)
            except Caffe2Error:
                raise
            except Exception as exc:  # noqa: BLE001 - user code: name the op, keep the trace
                trace = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                raise ctx.error("Exception from running Python op: %s" % trace) from exc
            values = tuple(o.value for o in outs)
            return values[0] if len(values) == 1 else (values or None)
        return run
    return factory


register_kernel("Python")(_python_op(TensorCPU, gradient=False))
register_kernel("PythonGradient")(_python_op(TensorCPU, gradient=True))
register_kernel("PythonDLPack")(_python_op(DLPackTensor, gradient=False))
register_kernel("PythonDLPackGradient")(_python_op(DLPackTensor, gradient=True))


def gradient_defs(op_def):
    """The PythonGradient op for a Python op (Caffe2's GetPythonGradient):
    inputs = forward inputs + forward outputs + output gradients, outputs =
    input gradients; `<blob>_grad` names. For the gradient registry."""
    from caffe2py import core
    from caffe2py.args import ArgumentHelper
    helper = ArgumentHelper(op_def)
    out_idx = helper.get_ints("grad_output_indices", []) or list(range(len(op_def.output)))
    in_idx = helper.get_ints("grad_input_indices", []) or list(range(len(op_def.input)))
    grad_type = op_def.type + "Gradient"
    inputs = list(op_def.input) + list(op_def.output) + [op_def.output[i] + "_grad" for i in out_idx]
    outputs = [op_def.input[i] + "_grad" for i in in_idx]
    grad = core.CreateOperator(grad_type, [core.BlobReference(b) for b in inputs],
                               [core.BlobReference(b) for b in outputs], arg=list(op_def.arg))
    if op_def.HasField("device_option"):
        grad.device_option.CopyFrom(op_def.device_option)
    grad.is_gradient_op = True
    return [grad]


try:
    from caffe2py.gradients import register_gradient
except ImportError:          # a build without the gradient registry
    register_gradient = None

if register_gradient is not None:
    @register_gradient("Python", "PythonDLPack")
    def _python_gradient(g):
        out_idx = [int(i) for i in (g.arg("grad_output_indices", []) or [])] or list(range(len(g.def_.output)))
        in_idx = [int(i) for i in (g.arg("grad_input_indices", []) or [])] or list(range(len(g.def_.input)))
        ins = list(g.def_.input) + list(g.def_.output) + [g.GO(i) for i in out_idx]
        return [g.op(g.def_.type + "Gradient", ins, [g.GI(i) for i in in_idx])]
