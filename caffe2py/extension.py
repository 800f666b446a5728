"""caffe2py's stand-in for Caffe2's C++ extension module, as scripts and tests use it:
`workspace.C`, `core.C` and `import caffe2.python._import_c_extension as C` all give
this module.

- build facts answer as a CPU build of Caffe2 would (`has_mkldnn`, `use_ideep`,
  `has_hip_support`, `is_asan`, ... are False); `has_cuda_support` and
  `has_gpu_support` are True only while caffe2py's CUDA device is usable (the
  values of `workspace.has_gpu_support`);
- `Workspace()` is a workspace of its own (not one of the named ones
  `SwitchWorkspace` knows); `Workspace.current` is the current named one. Its
  `create_blob(name)` gives a `Blob` with `feed`/`fetch`, `blobs` and `nets` map names
  to `Blob` and `Net` objects, `run(net | op | plan)` runs a NetDef once, an operator
  or a plan;
- the module functions Caffe2's `workspace.py` wraps (`create_net`, `run_net`,
  `feed_blob`, `fetch_blob`, `benchmark_net`, `infer_shapes_and_types_from_map`, ...)
  act on the current workspace, taking serialized protos where Caffe2's do (a proto
  object is accepted too).

What only a C++ build has (MKL-DNN, ideep, NUMA, transforms, TensorRT, ONNXIFI) is
absent or answers "not there", as in a CPU build without those options.
"""
import difflib
import sys

import numpy as np

from . import python_op_registry, registry, workspace
from .benchmark import benchmark_net as _benchmark_net
from .db import base as _db
from .errors import Caffe2Error
from .proto import caffe2_pb2
from .tensors import numpy_dtype

# ----------------------------------------------------------------- build facts (CPU build)

is_asan = False
has_mkldnn = False
use_mkldnn = False
use_ideep = False
use_trt = False
has_fbgemm = workspace.has_fbgemm          # bfloat16 records, as an FBGEMM build writes them
has_hip_support = False
define_caffe2_no_operator_schema = False
_GPU_FACTS = ("has_cuda_support", "has_gpu_support")


def __getattr__(name):
    # read when asked: the CUDA device may become usable (or not) after import
    if name in _GPU_FACTS:
        return bool(getattr(workspace, name))
    raise AttributeError("module 'caffe2py.extension' (Caffe2's C extension) has no attribute '%s'" % name)


def get_build_options():
    """Caffe2's build options (name -> value, strings) for this build of caffe2py."""
    cuda = "ON" if workspace.has_cuda_support else "OFF"
    return {"BUILD_TYPE": "Release", "BLAS": "OpenBLAS (NumPy)", "USE_CUDA": cuda, "USE_ROCM": "OFF",
            "USE_CUDNN": "OFF", "USE_NCCL": "OFF", "USE_MPI": "OFF", "USE_GFLAGS": "OFF",
            "USE_GLOG": "OFF", "USE_GLOO": "OFF", "USE_NNPACK": "OFF", "USE_OPENMP": "OFF",
            "USE_MKLDNN": "OFF", "USE_FBGEMM": "ON" if has_fbgemm else "OFF"}


def builtin_cpu_supports_avx2():
    """Whether this machine's CPU has AVX2 (Linux: /proc/cpuinfo; elsewhere False)."""
    try:
        with open("/proc/cpuinfo") as fh:
            return any(line.startswith("flags") and " avx2" in line for line in fh)
    except OSError:
        return False


def num_cuda_devices():
    return workspace.NumCudaDevices()


def get_cuda_version():
    return workspace.GetCUDAVersion()


def get_cudnn_version():
    return workspace.GetCuDNNVersion()


def is_numa_enabled():
    return workspace.IsNUMAEnabled()


def get_num_numa_nodes():
    return workspace.GetNumNUMANodes()


def get_blob_numa_node(name):
    return workspace.GetBlobNUMANode(name)


def get_blob_size_bytes(name):
    return workspace.GetBlobSizeBytes(name)


def transform_exists(name):
    from . import transforms
    return transforms.transform_exists(name)


def workspace_transform_exists(name):  # noqa: ARG001 - caffe2py has no workspace-level transforms
    return False


def apply_transform(transform_key, net_def):
    from . import transforms
    return transforms.apply_transform(transform_key, _parse(caffe2_pb2.NetDef, net_def, "the net proto"))


# ----------------------------------------------------------------- protos given as bytes

def _parse(message_type, data, what):
    """A proto from its serialized bytes (Caffe2's form) or the message itself."""
    if isinstance(data, message_type):
        return data
    if hasattr(data, "Proto"):
        return data.Proto()
    if isinstance(data, str):
        data = data.encode("latin-1")
    try:
        return message_type.FromString(bytes(data))
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and type errors alike
        raise Caffe2Error("cannot parse %s: %s" % (what, exc)) from None


def _device_option(option):
    return None if option is None else _parse(caffe2_pb2.DeviceOption, option, "the DeviceOption")


# ----------------------------------------------------------------- engines and operators

def set_per_op_engine_pref(pref):
    registry.set_engine_pref(pref, registry.engine_pref()[1])


def set_global_engine_pref(pref):
    registry.set_engine_pref(registry.engine_pref()[0], pref)


def set_engine_pref(per_op_pref, global_pref):
    registry.set_engine_pref(per_op_pref, global_pref)


def set_op_engine_pref(op_type, op_pref):
    """op_pref: {device type: [engines]} for one op type."""
    per_op, global_pref = registry.engine_pref()
    for device, engines in op_pref.items():
        per_op.setdefault(device, {})[op_type] = list(engines)
    registry.set_engine_pref(per_op, global_pref)


def op_registry_key(op_type, engine):
    """The key RegisteredOperators() lists an op's engine under."""
    return op_type if engine in ("", "DEFAULT") else "%s_ENGINE_%s" % (op_type, engine)


def registered_operators():
    return workspace.RegisteredOperators()


def nearby_opnames(name):
    """Registered op types within a few edits of `name` (for 'did you mean' messages)."""
    return difflib.get_close_matches(name, registry.op_types(), n=10, cutoff=0.6)


def global_init(args):
    workspace.GlobalInit(args)


def on_module_exit():
    """Caffe2 drops every workspace when the module unloads; here: start afresh."""
    for name in workspace.Workspaces():
        workspace.SwitchWorkspace(name)
        workspace.ResetWorkspace()
    workspace.SwitchWorkspace("default", True)


# ----------------------------------------------------------------- the current workspace

def switch_workspace(name, create_if_missing=None):
    workspace.SwitchWorkspace(name, create_if_missing)


def reset_workspace(root_folder=None):
    return workspace.ResetWorkspace(root_folder)


def root_folder():
    return workspace.RootFolder()


def current_workspace():
    return workspace.CurrentWorkspace()


def workspaces():
    return workspace.Workspaces()


def blobs():
    return workspace.Blobs()


def local_blobs():
    return workspace.Blobs()


def has_blob(name):
    return workspace.HasBlob(name)


def create_blob(name):
    return workspace.CreateBlob(name)


def fetch_blob(name):
    return workspace.FetchBlob(name)


def feed_blob(name, arg, device_option=None):
    return workspace.FeedBlob(name, arg, _device_option(device_option))


def reset_blob(name):
    workspace.current_workspace().blobs[str(name)] = None
    return True


def serialize_blob(name):
    return workspace.SerializeBlob(name)


def deserialize_blob(name, serialized):
    workspace.DeserializeBlob(name, serialized)


def create_net(net_def, overwrite=False):
    return workspace.CreateNet(_parse(caffe2_pb2.NetDef, net_def, "the net proto"), overwrite)


def run_net(name, num_iter=1, allow_fail=False):
    return workspace.RunNet(name, num_iter, allow_fail)


def run_net_once(net_def):
    return workspace.RunNetOnce(_parse(caffe2_pb2.NetDef, net_def, "the net proto"))


def run_operator_once(op_def):
    return workspace.RunOperatorOnce(_parse(caffe2_pb2.OperatorDef, op_def, "the operator proto"))


def get_operator_cost(op_def, input_blobs):
    return workspace.GetOperatorCost(op_def, input_blobs)


def run_plan(plan_def):
    return workspace.RunPlan(_parse(caffe2_pb2.PlanDef, plan_def, "the plan proto"))


def benchmark_net(name, warmup_runs, main_runs, run_individual):
    return workspace.BenchmarkNet(name, warmup_runs, main_runs, run_individual)


def nets():
    return sorted(workspace.current_workspace().nets)


def delete_net(name):
    workspace.current_workspace().nets.pop(str(name), None)
    return True


def _tensor_shapes(shapes, types):
    """Caffe2's TensorShapes proto for InferShapesAndTypes's two dicts."""
    out = caffe2_pb2.TensorShapes()
    for name in sorted(set(shapes) | set(types)):
        shape = out.shapes.add(name=name)
        if name in shapes:
            shape.dims.extend(int(d) for d in shapes[name])
        else:
            shape.unknown_shape = True
        if types.get(name) is not None:
            shape.data_type = types[name]
    return out.SerializeToString()


def infer_shapes_and_types_from_workspace(net_protos):
    nets_ = [_parse(caffe2_pb2.NetDef, n, "the net proto") for n in net_protos]
    return _tensor_shapes(*workspace.InferShapesAndTypes(nets_))


def infer_shapes_and_types_from_map(net_protos, blob_dimensions, blob_types=None):
    nets_ = [_parse(caffe2_pb2.NetDef, n, "the net proto") for n in net_protos]
    return _tensor_shapes(*workspace.InferShapesAndTypes(nets_, blob_dimensions, blob_types=blob_types))


# ----------------------------------------------------------------- Python ops

def register_python_op(func, pass_workspace, name=""):
    """A token for `func` (the `Python` op's `token` argument)."""
    if func is None:
        raise Caffe2Error("register_python_op: the function must not be None")
    return python_op_registry.register(func, pass_workspace=bool(pass_workspace), prefix=name)


def register_python_gradient_op(token, func):
    python_op_registry.set_gradient(token, func)


# ----------------------------------------------------------------- dbs

class Mode:
    """Caffe2's db modes (C.Mode.read / write / new)."""
    read = _db.READ
    write = _db.WRITE
    new = _db.NEW


def registered_dbs():
    return _db.db_types()


def create_db(db_type, source, mode):
    return _db.create_db(db_type, source, mode)


# ----------------------------------------------------------------- objects

class Blob:
    """A named blob of one workspace: fetch() its value, feed() a new one."""

    def __init__(self, ws, name):
        self._ws, self.name = ws, str(name)

    def fetch(self):
        return self._ws.fetch_blob(self.name)

    def feed(self, arg, device_option=None):
        return self._ws.feed_blob(self.name, arg, _device_option(device_option))

    _feed = feed

    def is_tensor(self):
        value = self._ws.blobs.get(self.name)
        return value is not None and hasattr(value, "shape") and hasattr(value, "dtype")

    def tensor(self):
        """The blob as a TensorCPU: its `.data` is the blob's array itself (writes go through)."""
        return TensorCPU(self._ws, self.name)

    as_tensor = tensor

    def to_torch(self):
        if not self.is_tensor():
            raise Caffe2Error("Blob '%s' has to be a tensor to be viewed as a torch tensor" % self.name)
        return self.tensor().to_torch()

    def serialize(self, name):
        return self._ws.serialize_blob(self.name) if name == self.name else _renamed_blob(
            self._ws.serialize_blob(self.name), name)

    def deserialize(self, serialized):
        self._ws.deserialize_blob(self.name, serialized)

    def __repr__(self):
        return "<Blob %r>" % self.name


class TensorCPU:
    """Caffe2's TensorCPU view of one blob of a workspace: `.data` is the blob's NumPy
    array (no copy: writing into it writes the blob), `init(dims, data_type)` gives the
    blob a new zero-filled tensor of that shape and type."""

    def __init__(self, ws, name):
        self._ws, self._name = ws, name

    def _array(self):
        value = self._ws.blobs.get(self._name)
        if not isinstance(value, np.ndarray):
            raise Caffe2Error("Blob '%s' does not hold a CPU tensor (it holds %s)"
                              % (self._name, type(value).__name__))
        return value

    @property
    def data(self):
        return self._array()

    @property
    def _shape(self):
        return list(self._array().shape)

    shape = _shape

    def init(self, dims, data_type):
        if data_type == caffe2_pb2.TensorProto.STRING:
            raise Caffe2Error("Blob '%s': string tensors cannot be initialized from Python" % self._name)
        dims = [int(d) for d in dims]
        if any(d < 0 for d in dims):
            raise Caffe2Error("Blob '%s': init needs non-negative dims, got %s" % (self._name, dims))
        self._ws.blobs[self._name] = np.zeros(dims, dtype=numpy_dtype(data_type))

    def fetch(self):
        return self._ws.fetch_blob(self._name)

    def feed(self, value):
        return self._ws.feed_blob(self._name, value)

    def to_torch(self):
        """A torch tensor sharing the blob's memory (torch.from_numpy). Its storage is
        NumPy's, so torch cannot resize it (resize_ to a larger size raises)."""
        import torch  # noqa: PLC0415 - optional dependency, imported when asked for
        return torch.from_numpy(self._array())


def _renamed_blob(serialized, name):
    proto = caffe2_pb2.BlobProto.FromString(serialized)
    proto.name = name
    return proto.SerializeToString()


class Net:
    """A net created in a workspace: run() runs it once."""

    def __init__(self, ws, name):
        self._ws, self.name = ws, name

    def run(self):
        self._ws.run_net(self.name)

    def __repr__(self):
        return "<Net %r>" % self.name


class _ClassProperty:
    def __init__(self, getter):
        self.getter = getter

    def __get__(self, obj, owner):
        return self.getter(owner)


class Workspace:
    """Caffe2's C.Workspace: Workspace() is a new empty workspace of its own;
    Workspace.current the current named workspace (workspace.SwitchWorkspace's)."""

    def __init__(self):
        self._ws = workspace.Workspace("<C.Workspace %x>" % id(self))

    @classmethod
    def _of(cls, ws):
        obj = cls.__new__(cls)
        obj._ws = ws
        return obj

    current = _ClassProperty(lambda cls: cls._of(workspace.current_workspace()))

    @property
    def workspace(self):
        """The caffe2py workspace.Workspace behind this object."""
        return self._ws

    def __eq__(self, other):
        return isinstance(other, Workspace) and other._ws is self._ws

    def __hash__(self):
        return id(self._ws)

    # -- blobs
    @property
    def blobs(self):
        return {name: Blob(self._ws, name) for name in self._ws.blob_names()}

    def create_blob(self, name):
        self._ws.create_blob(name)
        return Blob(self._ws, name)

    def has_blob(self, name):
        return self._ws.has_blob(name)

    def fetch_blob(self, name):
        return self._ws.fetch_blob(name)

    def feed_blob(self, name, arr, device_option=None):
        return self._ws.feed_blob(name, arr, _device_option(device_option))

    def remove_blob(self, blob):
        self._ws.remove_blob(str(blob))

    def serialize_blob(self, name):
        return self._ws.serialize_blob(name)

    def deserialize_blob(self, name, serialized):
        return self._ws.deserialize_blob(name, serialized)

    # -- nets, operators, plans
    @property
    def nets(self):
        return {name: Net(self._ws, name) for name in sorted(self._ws.nets)}

    def create_net(self, net, overwrite=False):
        if isinstance(net, str):
            # Caffe2's binding takes a net object or its serialized bytes, never text
            raise TypeError("create_net expects a core.Net, a NetDef or its serialized bytes, got str")
        net_def = _parse(caffe2_pb2.NetDef, net, "the net proto")
        self._ws.create_net(net_def, overwrite, construct_operators=True)
        return Net(self._ws, net_def.name)

    def run(self, obj):
        """Run a NetDef once, an OperatorDef, or a PlanDef (or what has them as
        .Proto(): core.Net, core.Plan, core.ExecutionStep)."""
        proto = obj.Proto() if hasattr(obj, "Proto") else obj
        if isinstance(proto, (caffe2_pb2.PlanDef, caffe2_pb2.ExecutionStep)):
            return self._ws.run_plan(proto)
        if isinstance(proto, caffe2_pb2.NetDef):
            return self._ws.run_net_once(proto)
        if isinstance(proto, caffe2_pb2.OperatorDef):
            return self._ws.run_operator_once(proto)
        raise ValueError("Don't know how to do Workspace.run() on %s" % type(obj))

    def _create_net(self, net_def, overwrite=False):
        return self.create_net(net_def, overwrite)

    def _run_net(self, net_def):
        self._ws.run_net_once(_parse(caffe2_pb2.NetDef, net_def, "the net proto"))

    def _run_operator(self, op_def):
        self._ws.run_operator_once(_parse(caffe2_pb2.OperatorDef, op_def, "the operator proto"))

    def _run_plan(self, plan_def):
        self._ws.run_plan(_parse(caffe2_pb2.PlanDef, plan_def, "the plan proto"))

    def benchmark_net(self, name, warmup_runs, main_runs, run_individual):
        return _benchmark_net(self._ws.get_net(name), warmup_runs, main_runs, run_individual)

    def __repr__(self):
        return "<C.Workspace %s>" % self._ws.name


def unwrap(ws):
    """The caffe2py workspace.Workspace behind ws (a C.Workspace or a workspace.Workspace)."""
    return ws.workspace if isinstance(ws, Workspace) else ws


# ----------------------------------------------------------------- operator schemas

class OpSchema:
    """Caffe2's C.OpSchema: OpSchema.get(op_type) is None for an op with no schema."""

    class Argument:
        def __init__(self, arg):
            self.name, self.description, self.required = arg.name, arg.doc, arg.required

    def __init__(self, schema):
        self._schema = schema
        lo_in, hi_in = _arity_bounds(schema.num_inputs)
        lo_out, hi_out = _arity_bounds(schema.num_outputs)
        self.min_input, self.max_input, self.min_output, self.max_output = lo_in, hi_in, lo_out, hi_out

    @staticmethod
    def get(op_type):
        schema = registry.schema_for(op_type)
        return None if schema is None else OpSchema(schema)

    @property
    def doc(self):
        return self._schema.doc

    @property
    def args(self):
        return [OpSchema.Argument(a) for a in self._schema.args]

    @property
    def input_desc(self):
        return [_desc(d) for d in self._schema.inputs]

    @property
    def output_desc(self):
        return [_desc(d) for d in self._schema.outputs]

    @property
    def private(self):
        return False

    @property
    def inf(self):
        return _INF

    @property
    def file(self):
        return (registry.schema_site(self._schema) or ("", 0))[0]

    @property
    def line(self):
        return (registry.schema_site(self._schema) or ("", 0))[1]

    def num_inputs_allowed(self, n):
        return registry._arity_ok(self._schema.num_inputs, n)

    def num_outputs_allowed(self, n):
        return registry._arity_ok(self._schema.num_outputs, n)

    def num_inputs_outputs_allowed(self, n_in, n_out):
        check = self._schema.inputs_outputs_check
        return self.num_inputs_allowed(n_in) and self.num_outputs_allowed(n_out) and (
            check is None or bool(check(n_in, n_out)))


_INF = 2 ** 31 - 1      # Caffe2's "no upper bound" (std::numeric_limits<int>::max())


def _arity_bounds(spec):
    if spec is None:
        return 0, _INF
    if isinstance(spec, int):
        return spec, spec
    if isinstance(spec, tuple):
        lo, hi = spec
        return lo, _INF if hi is None else hi
    if isinstance(spec, (set, frozenset)) and spec:
        return min(spec), max(spec)
    return 0, _INF       # a predicate: only num_inputs_allowed can tell


def _desc(entry):
    """(name, description) for a schema's input/output entry."""
    if isinstance(entry, (tuple, list)):
        return (str(entry[0]), str(entry[1]) if len(entry) > 1 else "")
    return (str(entry), "")


workspace.set_extension_module(sys.modules[__name__])
