"""Workspaces of named blobs and nets, and Caffe2's module-level workspace API.

The module functions (FeedBlob, RunNet, ...) act on the current workspace, as
in caffe2.python.workspace. The Workspace class is usable on its own.
"""
import collections
import contextlib
import logging
import shutil
import tempfile
import threading

import numpy as np

from . import devices, fp_exceptions, lazy
from .benchmark import benchmark_net
from .cost_inference import infer_cost
from .errors import Caffe2Error, ProtoError
from .blob_scopes import SharedBlobs
from .execution_steps import run_step
from .executor import Net, compile_net
from . import int8_tensor, script_module, shared_storage
from . import serialization as _serialization
from .proto import caffe2_pb2
from .registry import CUDA, registered_operator_keys
from .schema_inference import infer_net, type_of_value
from .tensors import as_blob_value, fetched_value


# net name -> {op index: [(file, line)]} of the call that added the op (core.Net);
# Net.PopulateProtoWithFileName names ops after it
operator_tracebacks = collections.defaultdict(dict)

def _name(x):
    """Blob/net names may be str, bytes, BlobReference or Net objects."""
    if isinstance(x, bytes):
        try:
            return x.decode()
        except UnicodeDecodeError:
            raise Caffe2Error("blob and net names are UTF-8 text; got the bytes %r" % x[:40]) from None
    if hasattr(x, "Name") and callable(x.Name):
        return x.Name()
    return str(x)


def _size_text(value):
    nbytes = getattr(value, "nbytes", None)
    if nbytes is None:
        return type(value).__name__
    return "shape %s, %s, %.1f GiB" % (list(getattr(value, "shape", ())), getattr(value, "dtype", "?"),
                                       nbytes / float(1 << 30))


def _parsed(message_type, data, what):
    """A serialized proto (bytes, as Caffe2's workspace functions pass them on)."""
    try:
        return message_type.FromString(bytes(data))
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError
        raise ProtoError("not a serialized %s: %s" % (what, exc)) from None


def _net_proto(net):
    if isinstance(net, caffe2_pb2.NetDef):
        return net
    if hasattr(net, "Proto"):
        return net.Proto()
    if isinstance(net, (bytes, bytearray)):
        return _parsed(caffe2_pb2.NetDef, net, "NetDef")
    raise Caffe2Error("expected a NetDef or core.Net, got %s" % type(net).__name__)


def _op_proto(op):
    if isinstance(op, caffe2_pb2.OperatorDef):
        return op
    if isinstance(op, (bytes, bytearray)):
        return _parsed(caffe2_pb2.OperatorDef, op, "OperatorDef")
    raise Caffe2Error("expected an OperatorDef, got %s" % type(op).__name__)


class Workspace:
    """Named blobs plus the nets created in them. root_folder is Caffe2's workspace
    root folder (kept for RootFolder(); caffe2py's ops resolve paths themselves).

    With a parent (Caffe2's Workspace(shared)): every blob of the parent is
    visible, writing one writes the parent's, new blobs stay here; a net of the
    parent run here is instantiated here, on this workspace's blobs."""

    def __init__(self, name="default", root_folder=".", parent=None):
        self.name = name
        self.root_folder = root_folder if parent is None else parent.root_folder
        self.parent = parent
        self.blobs = {} if parent is None else SharedBlobs(parent.blobs)
        self.nets = {}

    def child(self, name=None):
        """A new workspace with this one as its parent."""
        return Workspace(name or self.name + "/child", parent=self)

    # -- blobs
    def feed_blob(self, name, value, device_option=None):
        if int8_tensor.is_int8_feed(value):
            if device_option is not None and device_option.device_type != caffe2_pb2.PROTO_CPU:
                raise Caffe2Error("cannot feed Int8 blob '%s' to %s: Int8 tensors live on the CPU"
                                  % (_name(name), devices.device_name(device_option.device_type)))
            self.blobs[_name(name)] = int8_tensor.from_feed(value, _name(name))
            return True
        if script_module.is_script_module(value):
            self.blobs[_name(name)] = value     # a TorchScript module is held as itself
            return True
        try:
            array = as_blob_value(value)
            written = shared_storage.write_in_place(self.blobs.get(_name(name)), array, device_option)
            if written is not None:    # a buffer other blobs view (UnsafeCoalesce)
                self.blobs[_name(name)] = written
                return True
            if isinstance(value, np.ndarray) and array is value:
                array = array.copy()  # the blob must not alias the caller's array
            self.blobs[_name(name)] = devices.to_device(array, device_option)
        except MemoryError:
            raise Caffe2Error("cannot feed blob '%s' (%s): the workspace's copy does not fit in the "
                              "memory this process may use" % (_name(name), _size_text(value))) from None
        return True

    def fetch_blob(self, name):
        name = _name(name)
        try:
            value = self.blobs[name]
        except KeyError:
            raise Caffe2Error("Can't find blob: %s" % name) from None
        if isinstance(value, int8_tensor.Int8TensorCPU):
            return value.python_form()          # Caffe2's fetcher: (data, scale, zero_point)
        if script_module.is_script_module(value):
            return value
        try:
            return fetched_value(devices.to_host(value))
        except MemoryError:
            raise Caffe2Error("cannot fetch blob '%s' (%s): the copy handed to the caller does not fit "
                              "in the memory this process may use" % (name, _size_text(value))) from None

    def has_blob(self, name):
        return _name(name) in self.blobs

    def create_blob(self, name):
        self.blobs.setdefault(_name(name), None)
        return True

    def blob_names(self):
        return sorted(self.blobs)

    def remove_blob(self, name):
        self.blobs.pop(_name(name), None)
        return True

    def serialize_blob(self, name):
        """Caffe2's SerializeBlob: one unchunked BlobProto, laid out as Save writes it."""
        from .serialization import serialize_blob_proto
        name = _name(name)
        try:
            value = self.blobs[name]
        except KeyError:
            raise Caffe2Error("Can't find blob: %s" % name) from None
        return serialize_blob_proto(value, name).SerializeToString()

    def deserialize_blob(self, name, serialized, device_option=None):
        """Caffe2's DeserializeBlob: a serialized BlobProto (any type Load reads) into blob `name`."""
        from .serialization import deserialize_blob, parse_blob_proto
        name = _name(name)
        value = deserialize_blob(parse_blob_proto(serialized, name), name)
        if isinstance(value, np.ndarray):
            return self.feed_blob(name, value, device_option)
        self.blobs[name] = value
        return True

    # -- nets
    def create_net(self, net, overwrite=False, input_blobs=None, construct_operators=False):
        """Compile `net` and keep it by name. construct_operators (what CreateNet and
        C.Workspace.create_net ask for) also does what Caffe2's operator constructors do:
        refuse an input blob that does not exist yet, create the output blobs. Plans and
        nets inherited from a parent workspace are compiled without it."""
        net_def = _net_proto(net)
        # Caffe2 wants the name field set; an empty name set explicitly is a name
        # (NetBuilder's unnamed nets are "", "_1", ...)
        if not net_def.HasField("name"):
            raise Caffe2Error("a net must have a name to be created in a workspace")
        for blob in input_blobs or ():
            self.create_blob(blob)
        if net_def.name in self.nets and not overwrite:
            raise Caffe2Error("I respectfully refuse to overwrite an existing net of the same name "
                              "'%s', unless you explicitly specify overwrite=True." % net_def.name)
        # Compile (the net-level checks) before touching the map so a bad net leaves the
        # old one in place, and before creating blobs so a refused net changes nothing.
        compiled = Net(caffe2_pb2.NetDef.FromString(net_def.SerializeToString()), self)
        if construct_operators:
            self._construct_operators(net_def)
        self.nets[net_def.name] = compiled
        return True

    def _construct_operators(self, net_def):
        """What Caffe2's operator constructors do when a net is created, op by op: every
        input blob must exist already (fed, created, or an output of an earlier op of the
        net), and every output blob is created (empty until the net runs). Blobs are
        created only once every op passed."""
        created = set()
        for op in net_def.op:
            for name in op.input:
                if name not in created and not self.has_blob(name):
                    raise Caffe2Error("op %s: Encountered a non-existing input blob: %s (net '%s': "
                                      "feed it, or create it, before creating the net)"
                                      % (op.type, name, net_def.name))
            created.update(op.output)
        for name in sorted(created):
            self.create_blob(name)

    def get_net(self, name):
        name = _name(name)
        net = self.nets.get(name)
        if net is None and self.parent is not None:
            inherited = self.parent._net_def(name)
            if inherited is not None:
                self.create_net(inherited, overwrite=True)
                net = self.nets[name]
        if net is None:
            raise Caffe2Error("Network %s does not exist yet." % name)
        return net

    def _net_def(self, name):
        """The NetDef of net `name` here or in an ancestor, or None."""
        if name in self.nets:
            return self.nets[name].net_def
        return None if self.parent is None else self.parent._net_def(name)

    def run_net(self, name, num_iter=1, allow_fail=False):
        net = self.get_net(name)
        try:
            for _ in range(num_iter):
                net.run()
        except Caffe2Error:
            if allow_fail:
                return False
            raise
        return True

    def run_net_once(self, net):
        compile_net(_net_proto(net), self.blobs.keys()).run(self.blobs)
        return True

    def run_operator_once(self, op):
        net_def = caffe2_pb2.NetDef(name="RunOperatorOnce")
        net_def.op.add().CopyFrom(_op_proto(op))
        compile_net(net_def, self.blobs.keys()).run(self.blobs)
        return True

    def run_operators_once(self, ops):
        for op in ops:
            self.run_operator_once(op)
        return True

    def benchmark_net(self, name, warmup_runs, main_runs, run_individual, out=None):
        return benchmark_net(self.get_net(name), warmup_runs, main_runs, run_individual, out)

    # -- plans
    def run_plan(self, plan):
        plan_def = plan.Proto() if hasattr(plan, "Proto") else plan
        if isinstance(plan_def, (bytes, bytearray)):
            plan_def = _parsed(caffe2_pb2.PlanDef, plan_def, "PlanDef")
        if isinstance(plan_def, caffe2_pb2.ExecutionStep):
            steps, networks = [plan_def], []
        elif isinstance(plan_def, caffe2_pb2.PlanDef):
            steps, networks = list(plan_def.execution_step), list(plan_def.network)
        else:
            raise Caffe2Error("RunPlan expects a core.Plan, PlanDef (or its serialized bytes) or ExecutionStep")
        for net_def in networks:
            self.create_net(net_def, overwrite=True)
        for step in steps:
            self._run_step(step)
        return True

    def _run_step(self, step):
        run_step(self, step)


# --------------------------------------------------------------------------- module API

_lock = threading.Lock()
_workspaces = {"default": Workspace("default")}
_current = ["default"]


def _ws():
    return _workspaces[_current[0]]


def CurrentWorkspace():
    return _current[0]


def Workspaces():
    return sorted(_workspaces)


def SwitchWorkspace(name, create_if_missing=None):
    name = _name(name)
    with _lock:
        if name not in _workspaces:
            if not create_if_missing:
                raise Caffe2Error("Workspace %s does not exist. Set create_if_missing=True to create it." % name)
            _workspaces[name] = Workspace(name)
        _current[0] = name


@contextlib.contextmanager
def WorkspaceGuard(workspace_name):
    """Run the block in workspace `workspace_name` (created if missing), then switch back."""
    previous = CurrentWorkspace()
    SwitchWorkspace(workspace_name, True)
    try:
        yield
    finally:
        SwitchWorkspace(previous)


def ResetWorkspace(root_folder=None):
    """Empty the current workspace; root_folder None keeps its root folder (Caffe2)."""
    name = _current[0]
    if root_folder is None:
        root_folder = _workspaces[name].root_folder
    _workspaces[name] = Workspace(name, _name(root_folder))
    return True


def RootFolder():
    return _ws().root_folder


def current_workspace():
    """The current Workspace object (for code that wants the class directly)."""
    return _ws()


def _feed_device_option(device_option):
    if device_option is not None:
        return device_option
    from .scope import CurrentDeviceScope
    return CurrentDeviceScope()


def FeedBlob(name, arr, device_option=None):
    return _ws().feed_blob(name, arr, _feed_device_option(device_option))


def FetchBlob(name):
    return _ws().fetch_blob(name)


def FetchInt8Blob(name):
    """Caffe2's FetchInt8Blob: Int8Tensor(data, scale, zero_point) of an Int8 blob."""
    result = FetchBlob(name)
    if not isinstance(result, tuple):
        raise Caffe2Error("blob '%s' is not an Int8 blob (it holds %s); use FetchBlob"
                          % (_name(name), type(result).__name__))
    return int8_tensor.Int8Tensor(*result)


Int8Tensor = int8_tensor.Int8Tensor


def FetchTorch(name):
    """A torch tensor sharing blob `name`'s memory (C.Blob.to_torch); torch must be installed."""
    return C.Workspace.current.blobs[_name(name)].to_torch()


def FetchBlobs(names):
    return [FetchBlob(n) for n in names]


def HasBlob(name):
    return _ws().has_blob(name)


def CreateBlob(name):
    return _ws().create_blob(name)


def Blobs():
    return _ws().blob_names()


def CreateNet(net, overwrite=False, input_blobs=None):
    lazy.TriggerLazyImport()          # pending op libraries first, as Caffe2's CreateNet
    return _ws().create_net(net, overwrite, input_blobs, construct_operators=True)


def RunNet(name, num_iter=1, allow_fail=False):
    return _ws().run_net(name, num_iter, allow_fail)


def RunNetOnce(net):
    return _ws().run_net_once(_net_proto(net))


def RunOperatorOnce(op):
    return _ws().run_operator_once(op)


def GetOperatorCost(operator, blobs):
    """Caffe2's cost inference of one operator (an OperatorDef or its serialized bytes)
    on the shapes of the named blobs of the current workspace, as its inputs:
    (flops, bytes_written, bytes_read). Ops without a Caffe2 cost function are an error."""
    op_def = _op_proto(operator)
    ws = _ws()
    types = []
    for name in blobs:
        name = _name(name)
        if not ws.has_blob(name):
            raise Caffe2Error("GetOperatorCost: blob '%s' does not exist in workspace '%s'"
                              % (name, ws.name))
        types.append(type_of_value(ws.blobs[name]))
    cost = infer_cost(op_def, types)
    return (int(cost.flops), int(cost.bytes_written), int(cost.bytes_read))


def RunOperatorsOnce(ops):
    return _ws().run_operators_once(ops)


def ApplyTransform(transform_key, net):
    """The NetDef `net` rewritten by the registered transform `transform_key`
    (caffe2py.transforms); RuntimeError for an unknown name."""
    from . import transforms
    return transforms.apply_transform(str(transform_key), _net_proto(net))


def ApplyTransformIfFaster(transform_key, net, init_net, warmup_runs=5, main_runs=10,
                           improvement_threshold=1.01):
    """The transformed net when it runs improvement_threshold times faster than `net`
    (timed after init_net, in a scratch child of the current workspace), else `net`."""
    from . import transforms
    return transforms.apply_transform_if_faster(_ws(), str(transform_key), _net_proto(net), _net_proto(init_net),
                                                warmup_runs, main_runs, improvement_threshold)


def RunPlan(plan_or_step):
    return _ws().run_plan(_as_plan(plan_or_step))


def _as_plan(plan_or_step):
    """A core.ExecutionStep runs as a plan of its own, with the nets it holds (Caffe2's
    RunPlan wraps it in core.Plan); anything else is passed on as it is."""
    proto = plan_or_step.Proto() if hasattr(plan_or_step, "Proto") else None
    if isinstance(proto, caffe2_pb2.ExecutionStep) and hasattr(plan_or_step, "Nets"):
        plan = caffe2_pb2.PlanDef(name=proto.name)
        seen = set()
        for net in plan_or_step.Nets():
            if net.Name() not in seen:
                seen.add(net.Name())
                plan.network.add().CopyFrom(net.Proto())
        plan.execution_step.add().CopyFrom(proto)
        return plan
    return plan_or_step


class BackgroundPlan:
    """What RunPlanInBackground returns: is_done() and, once done, is_succeeded()."""

    def __init__(self, workspace, plan):
        self._succeeded = False
        self._thread = threading.Thread(target=self._run, args=(workspace, plan), daemon=True)
        self._thread.start()

    def _run(self, workspace, plan):
        try:
            self._succeeded = bool(workspace.run_plan(plan))
        except Exception:  # noqa: BLE001 - reported through is_succeeded(), as Caffe2's
            logging.getLogger(__name__).exception("plan run in the background failed")
            self._succeeded = False

    def is_done(self):
        return not self._thread.is_alive()

    def is_succeeded(self):
        if not self.is_done():
            raise Caffe2Error("the background plan has not finished yet")
        return self._succeeded

    def wait(self, timeout=None):
        self._thread.join(timeout)
        return self.is_done()


def RunPlanInBackground(plan_or_step):
    """Run a plan (or an ExecutionStep) in the current workspace on a thread of its own."""
    return BackgroundPlan(_ws(), _as_plan(plan_or_step))


def BenchmarkNet(name, warmup_runs, main_runs, run_individual):
    return _ws().benchmark_net(name, warmup_runs, main_runs, run_individual)


def GetNet(name):
    return _ws().get_net(name)


def InferShapesAndTypes(nets, blob_dimensions=None, nets_proto=False, blob_types=None):  # noqa: ARG001
    """(shapes, types): {blob: dims list} and {blob: TensorProto.DataType} from schema
    inference. Without blob_dimensions, the current workspace's blobs are the inputs."""
    from .registry import TensorType
    known = {}
    if blob_dimensions is None:
        for name, value in _ws().blobs.items():
            t = type_of_value(value)
            if t.known:
                known[name] = t
    else:
        for name, dims in blob_dimensions.items():
            dtype = (blob_types or {}).get(name, caffe2_pb2.TensorProto.FLOAT)
            known[name] = TensorType(tuple(int(d) for d in dims), dtype)
    types = infer_net([_net_proto(n) for n in nets], known)
    shapes = {n: list(t.dims) for n, t in types.items() if t.known}
    dtypes = {n: t.dtype for n, t in types.items() if t.known}
    return shapes, dtypes


def RegisteredOperators():
    return registered_operator_keys()


def SerializeBlob(name):
    return _ws().serialize_blob(name)


def DeserializeBlob(name, serialized):
    return _ws().deserialize_blob(name, serialized, _feed_device_option(None))


def StringifyProto(obj):
    """Caffe2's form: the serialized bytes of a message (or of obj.Proto()); a str or
    bytes is taken as already serialized and given back unchanged."""
    from google.protobuf.message import Message
    if isinstance(obj, (str, bytes)):
        return obj
    if isinstance(obj, Message):
        return obj.SerializeToString()
    if hasattr(obj, "Proto"):
        return obj.Proto().SerializeToString()
    raise ValueError("Unexpected argument to StringifyProto of type " + type(obj).__name__)


GpuDeviceType = CUDA  # a module constant in Caffe2, not a function


def NumGpuDevices():
    return devices.gpu_count()


def NumCudaDevices():
    return NumGpuDevices()


def _has_gpu_support():
    dev = devices.adapter(CUDA)
    return dev is not None and dev.available()


has_gpu_support = _has_gpu_support()
has_cuda_support = has_gpu_support


def _refresh_gpu_support():
    # module constants in Caffe2: keep them true to the device in use
    global has_gpu_support, has_cuda_support
    has_gpu_support = has_cuda_support = _has_gpu_support()


devices.on_devices_changed(_refresh_gpu_support)

# What a CPU (or CUDA) build of Caffe2 answers for the parts caffe2py has no
# counterpart of: no ROCm, no address sanitizer, no cuDNN, no NUMA. FBGEMM's one
# part caffe2py has, bfloat16 records, makes it answer as an FBGEMM build there.
has_hip_support = False
is_asan = False
has_fbgemm = _serialization.WRITES_BFLOAT16


def GetCUDAVersion():
    return 0


def GetCuDNNVersion():
    return 0


def IsNUMAEnabled():
    return False


def GetNumNUMANodes():
    return -1          # Caffe2 built without NUMA


def GetBlobNUMANode(name):
    _ws().fetch_blob(name)      # an unknown blob is still an error
    return -1


def GetBlobSizeBytes(name):
    """The bytes a blob's data takes (a tensor's elements; strings count their length)."""
    value = _ws().fetch_blob(name)
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            return int(sum(len(v) if isinstance(v, (bytes, str)) else 8 for v in value.reshape(-1)))
        return int(value.nbytes)
    return 0


# workspace.C: caffe2py/extension.py (a module above this one, standing for Caffe2's
# C++ extension) fills this in when it is imported; caffe2py/__init__ imports it.
C = None


def set_extension_module(module):
    global C
    C = module


_LOG_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR}


def GlobalInit(args):
    """Caffe2's process initialisation from command-line style flags, e.g.
    ['caffe2', '--caffe2_log_level=1']. caffe2_log_level sets the 'caffe2py' logger
    (<0 debug, 0 info, 1 warning, 2 error, 3 fatal);
    caffe2_operator_throw_if_fp_exceptions=1 makes ops fail on division by zero, overflow
    and invalid results (caffe2py.fp_exceptions); the C++ runtime's other flags have no
    meaning here and are ignored."""
    if isinstance(args, (str, bytes)) or not all(isinstance(a, (str, bytes)) for a in args):
        raise Caffe2Error("GlobalInit expects a list of strings such as ['caffe2', '--caffe2_log_level=0'], "
                          "got %r" % (args,))
    for arg in args:
        arg = arg.decode() if isinstance(arg, bytes) else arg
        key, _, value = arg.lstrip("-").partition("=")
        if key == "caffe2_log_level":
            try:
                level = int(value)
            except ValueError:
                raise Caffe2Error("GlobalInit: caffe2_log_level must be an integer, got %r" % value) from None
            logging.getLogger("caffe2py").setLevel(
                logging.DEBUG if level < 0 else _LOG_LEVELS.get(level, logging.CRITICAL))
        elif key == "caffe2_operator_throw_if_fp_exceptions":
            fp_exceptions.set_enabled(value.lower() not in ("0", "false", "no"))
    return True


def _net_def(net):
    """A NetDef from a serialized NetDef (what Caffe2's binding takes), a NetDef or a Net."""
    if isinstance(net, (bytes, bytearray)):
        try:
            return caffe2_pb2.NetDef.FromString(bytes(net))
        except Exception as exc:  # noqa: BLE001
            raise ProtoError("Predictor: not a serialized NetDef: %s" % exc) from None
    return _net_proto(net)


class Predictor:
    """Caffe2's workspace.Predictor: a model ready to answer requests.

    Predictor(init_net, predict_net) takes the two nets (serialized NetDefs, as
    Caffe2's binding does, or NetDef / core.Net objects), runs init_net once in a
    workspace of its own and keeps predict_net there. run(inputs) feeds a list of
    arrays into the first external inputs of predict_net, in order, or a dict
    {input name: array}, runs the net and returns the arrays of its external
    outputs, in order."""

    def __init__(self, init_net, predict_net):
        self._init_net = _net_def(init_net)
        self._predict_net = _net_def(predict_net)
        self._ws = Workspace("predictor")
        self._ws.run_net_once(self._init_net)
        self._inputs = list(self._predict_net.external_input)
        self._outputs = list(self._predict_net.external_output)
        for name in self._inputs:
            self._ws.create_blob(name)
        self._ws.create_net(self._predict_net, overwrite=True)

    @property
    def input_names(self):
        return list(self._inputs)

    @property
    def output_names(self):
        return list(self._outputs)

    def run(self, inputs):
        if isinstance(inputs, dict):
            unknown = [name for name in inputs if name not in self._inputs]
            if unknown:
                raise Caffe2Error("Predictor: '%s' is not an input of the predict net (inputs: %s)"
                                  % (unknown[0], ", ".join(self._inputs)))
            feeds = list(inputs.items())
        else:
            inputs = list(inputs)
            if len(inputs) > len(self._inputs):
                raise Caffe2Error("Predictor: %d inputs given, the predict net has %d external inputs"
                                  % (len(inputs), len(self._inputs)))
            feeds = list(zip(self._inputs, inputs))
        for name, value in feeds:
            self._ws.feed_blob(name, value)
        self._ws.run_net(self._predict_net.name)
        return [self._ws.fetch_blob(name) for name in self._outputs]


# --------------------------------------------------------------------------- immediate mode
# Caffe2's debugging aid: between StartImmediate() and StopImmediate() every operator
# core.CreateOperator makes (so every op added to a core.Net) also runs at once in a
# workspace of its own, whose root folder is a temporary folder removed at the stop.

_immediate_mode = False
_immediate_workspace_name = "_CAFFE2_IMMEDIATE"
_immediate_root_folder = ""

_IMMEDIATE_WARNING = """
    Immediate mode runs every operator you create at once, in a workspace of its own.
    It is a debugging aid: the ops must be runnable in the order you create them (an
    input must exist before an op reads it), they all share one workspace, and what
    they hold stays alive until StopImmediate(). Pass i_know=True to hide this note."""


def IsImmediate():
    return _immediate_mode


def StartImmediate(i_know=False):
    """Turn immediate mode on, with a fresh immediate workspace (a running one is stopped first)."""
    global _immediate_mode, _immediate_root_folder
    if _immediate_mode:
        StopImmediate()
    _immediate_mode = True
    with WorkspaceGuard(_immediate_workspace_name):
        _immediate_root_folder = tempfile.mkdtemp()
        ResetWorkspace(_immediate_root_folder)
    if not i_know:
        print(_IMMEDIATE_WARNING)


def StopImmediate():
    """Turn immediate mode off: empty its workspace and delete its root folder."""
    global _immediate_mode, _immediate_root_folder
    if not _immediate_mode:
        return
    with WorkspaceGuard(_immediate_workspace_name):
        ResetWorkspace()
    shutil.rmtree(_immediate_root_folder, ignore_errors=True)
    _immediate_root_folder = ""
    _immediate_mode = False


def ImmediateBlobs():
    with WorkspaceGuard(_immediate_workspace_name):
        return Blobs()


def RunOperatorImmediate(op):
    with WorkspaceGuard(_immediate_workspace_name):
        RunOperatorOnce(op)


def FetchImmediate(*args, **kwargs):
    with WorkspaceGuard(_immediate_workspace_name):
        return FetchBlob(*args, **kwargs)


def FeedImmediate(*args, **kwargs):
    with WorkspaceGuard(_immediate_workspace_name):
        return FeedBlob(*args, **kwargs)


class _BlobsView:
    """workspace.blobs: dict-like access to the current workspace."""

    def __getitem__(self, name):
        return FetchBlob(name)

    def __setitem__(self, name, value):
        FeedBlob(name, value)

    def __contains__(self, name):
        return HasBlob(name)

    def __len__(self):
        return len(Blobs())

    def __iter__(self):
        return iter(Blobs())


blobs = _BlobsView()

