"""The Python net builder (caffe2.python.core): Net, BlobReference, CreateOperator,
scopes, execution steps and plans."""
import os
import sys
import zlib

import numpy as np

from . import lazy, registry, scope
from . import extension as C  # noqa: N812 - Caffe2's name for its C++ extension module
from .args import make_argument
from .errors import Caffe2Error
from .proto import caffe2_pb2
from .scope import DeviceScope, NameScope, CurrentNameScope, CurrentDeviceScope  # noqa: F401
from .blob_reference import BlobReference, unknown_op_message as _unknown_op_message  # noqa: F401
from . import gradients
from . import workspace  # noqa: F401 - Caffe2 code reaches it as core.workspace
from .gradients import IR, GradientRegistry, GradientSlice  # noqa: F401

DataType = caffe2_pb2.TensorProto.DataType
for _name in DataType.keys():
    setattr(DataType, _name, DataType.Value(_name))
del _name


def GlobalInit(args):
    from .workspace import GlobalInit as init
    return init(args)


def SetEnginePref(per_op_pref, global_pref):
    registry.set_engine_pref(per_op_pref, global_pref)


def IsGPUDeviceType(device_type):
    """Caffe2's core.IsGPUDeviceType: CUDA or HIP."""
    return device_type in (caffe2_pb2.CUDA, caffe2_pb2.HIP)


def IsCPUDeviceType(device_type):
    """Caffe2's core.IsCPUDeviceType: the host device types (CPU, MKLDNN, IDEEP)."""
    return device_type in (caffe2_pb2.CPU, caffe2_pb2.MKLDNN, caffe2_pb2.IDEEP)


def DeviceOption(device_type, device_id=0, random_seed=None, node_name=None,
                 numa_node_id=None, extra_info=None):
    option = caffe2_pb2.DeviceOption()
    option.device_type = device_type
    option.device_id = device_id
    if node_name is not None:
        option.node_name = node_name
    if random_seed is not None:
        option.random_seed = random_seed
    if numa_node_id is not None:
        option.numa_node_id = numa_node_id
    if extra_info is not None:
        option.extra_info.extend(extra_info)
    return option


def __getattr__(name):
    # Caffe2 keeps a snapshot set of registered op types; caffe2py's registry is live,
    # so the set is made when asked
    if name == "_REGISTERED_OPERATORS":
        return set(registry.registered_operator_keys())
    raise AttributeError("module 'caffe2py.core' has no attribute '%s'" % name)


def RefreshRegisteredOperators(trigger_lazy=True):
    """Caffe2 re-reads its op registry here; caffe2py's is always current, so this
    only runs the pending lazy imports (caffe2py.lazy, lazy_dyndep)."""
    if trigger_lazy:
        lazy.TriggerLazyImport()


def IsOperator(op_type):
    # Caffe2 looks the name up among its registry keys, which include the
    # engine-specific 'Type_ENGINE_X' ones (unique_ops_test asks for
    # 'Unique_ENGINE_SparseHash')
    return registry.has_op(op_type) or op_type in registry.registered_operator_keys()


def IsOperatorWithEngine(op_type, engine):
    # the DEFAULT engine is the op's plain registration key (C.op_registry_key)
    key = op_type if engine in ("", "DEFAULT") else "%s_ENGINE_%s" % (op_type, engine)
    return key in registry.registered_operator_keys()


def InferOpBlobDevices(op):
    """(input device options, output device options) of op's blobs: the op's own
    device unless its schema reads or writes another (the copy ops)."""
    own = op.device_option if op.HasField("device_option") else caffe2_pb2.DeviceOption()
    schema = registry.schema_for(op.type, op.domain)

    def on(device_type):
        if device_type is None or device_type == own.device_type:
            return own
        return caffe2_pb2.DeviceOption(device_type=device_type)
    inputs_device = schema.inputs_device if schema is not None else None
    outputs_device = schema.outputs_device if schema is not None else None
    return [on(inputs_device)] * len(op.input), [on(outputs_device)] * len(op.output)


def InferOpBlobDevicesAsDict(op):
    """InferOpBlobDevices as two {blob name: DeviceOption} dicts."""
    ins, outs = InferOpBlobDevices(op)
    return dict(zip(op.input, ins)), dict(zip(op.output, outs))


def ScopedName(name):
    return scope.CurrentNameScope() + name


def ScopedBlobReference(name, *args, **kwargs):
    return BlobReference(scope.CurrentNameScope() + str(name), *args, **kwargs)


def _rectify(value, scoped):
    """str / BlobReference / list of them -> list of str names."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, BlobReference)):
        value = [value]
    out = []
    for v in value:
        if isinstance(v, BlobReference):
            out.append(str(v))
        elif isinstance(v, (str, bytes)):
            v = v.decode() if isinstance(v, bytes) else v
            out.append(scope.CurrentNameScope() + v if scoped else v)
        else:
            raise Caffe2Error("blob names must be str or BlobReference, got %s" % type(v).__name__)
    return out


def CreateOperator(operator_type, inputs, outputs, name="", control_input=None,
                   device_option=None, arg=None, engine=None, domain=None, op_version=None,
                   **kwargs):
    """An OperatorDef; kwargs become Arguments (random_seed goes to the device option)."""
    op = caffe2_pb2.OperatorDef()
    op.type = operator_type
    op.name = name
    op.input.extend(_rectify(inputs, scoped=True))
    op.output.extend(_rectify(outputs, scoped=True))
    if control_input:
        op.control_input.extend(_rectify(control_input, scoped=True))
    if device_option is not None:
        op.device_option.CopyFrom(device_option)
    elif scope.CurrentDeviceScope() is not None:
        op.device_option.CopyFrom(scope.CurrentDeviceScope())
    if engine is not None:
        op.engine = engine
    if domain is not None:
        op.domain = domain
    if op_version is not None:
        op.op_version = op_version
    if "random_seed" in kwargs:
        op.device_option.random_seed = kwargs.pop("random_seed")
    if arg is not None:
        op.arg.extend(arg)
    for key, value in kwargs.items():
        if value is not None:
            op.arg.add().CopyFrom(make_argument(key, value))
    if workspace.IsImmediate():
        workspace.RunOperatorImmediate(op)
    return op


# --------------------------------------------------------------------------- extension points
# Modules above core (net_builder, schema) plug in here when they are imported, so
# core imports none of them (docs/architecture.md, "Layers and imports").

def _no_builder_prefix():
    return ""


_net_name_prefix = [_no_builder_prefix]   # the active NetBuilder's name: nets built in it take it
_step_sources = {}                        # class -> obj -> (nets, stop blob or None)
_record_field_appender = [None]           # (output record, field name, record) -> output record
_record_tools = {}                        # schema: "new_record" (net, schema) -> record,
                                          # "rebind" (record, name -> name) -> record of other blobs


def set_net_name_prefix(prefix_of_current_builder):
    """net_builder: names of new nets start with the active builder's name."""
    _net_name_prefix[0] = prefix_of_current_builder


def register_step_source(cls, nets_and_stop_blob):
    """net_builder: to_execution_step accepts instances of cls, as the nets and stop
    blob nets_and_stop_blob(obj) returns."""
    _step_sources[cls] = nets_and_stop_blob


def set_record_field_appender(append):
    """schema: how Net.AppendOutputRecordField adds a field to an output record."""
    _record_field_appender[0] = append


def set_record_tools(new_record, rebind):
    """schema: how a net makes blobs for a record schema (set_input_record of a
    schema without blobs) and how Clone maps a record onto the renamed blobs."""
    _record_tools["new_record"] = new_record
    _record_tools["rebind"] = rebind


def _record_tool(name):
    tool = _record_tools.get(name)
    if tool is None:   # schema sets them on import; records are its Fields
        raise Caffe2Error("input/output records need caffe2py.schema")
    return tool


class Net:
    """A NetDef under construction. `net.Relu(x, "y")` appends an op."""

    _net_names_used = set()

    @staticmethod
    def current_prefix():
        return _net_name_prefix[0]()

    @staticmethod
    def _get_next_net_name(basename):
        basename = "/".join(x for x in [Net.current_prefix(), basename] if x)
        name = basename
        i = 1
        while name in Net._net_names_used:
            name = "%s_%d" % (basename, i)
            i += 1
        Net._net_names_used.add(name)
        return name

    def __init__(self, name_or_proto, inplace=False):  # noqa: ARG002
        self._op_outputs = set()
        self._next_name_index = 0
        if isinstance(name_or_proto, caffe2_pb2.NetDef):
            self._net = caffe2_pb2.NetDef()
            self._net.CopyFrom(name_or_proto)
            for op in self._net.op:
                self._op_outputs.update(op.output)
            # Caffe2 names a net built from a NetDef like one built from a name: the
            # proto's name when unused, else name_1, name_2, ... so a copy can be
            # created beside its original. (An unnamed proto gets "net": CreateNet
            # here refuses empty names.)
            self._net.name = Net._get_next_net_name(self._net.name or "net")
        else:
            self._net = caffe2_pb2.NetDef()
            # no name: the active NetBuilder's name alone (Caffe2 drops the None)
            self._net.name = Net._get_next_net_name(None if name_or_proto is None else str(name_or_proto))
        self._external_input_map = set(self._net.external_input)

    # -- identity and proto
    def Name(self):
        return self._net.name

    def Proto(self):
        # the caller may change the proto (net.Proto().op.extend(...)): the lookup
        # tables are rebuilt from it before their next use, as in Caffe2
        self._lookup_tables_stale = True
        return self._net

    def _refreshed(self):
        if self.__dict__.get("_lookup_tables_stale"):
            self._lookup_tables_stale = False
            self._op_outputs_set = {o for op in self._net.op for o in op.output}
            self._external_inputs_set = set(self._net.external_input)

    @property
    def _op_outputs(self):
        """Every blob an op of this net writes."""
        self._refreshed()
        return self._op_outputs_set

    @_op_outputs.setter
    def _op_outputs(self, value):
        self._op_outputs_set = value

    @property
    def _external_input_map(self):
        """The net's external inputs, as a set."""
        self._refreshed()
        return self._external_inputs_set

    @_external_input_map.setter
    def _external_input_map(self, value):
        self._external_inputs_set = value

    def __str__(self):
        return self.Name()

    def __repr__(self):
        return "Net(%r)" % self.Name()

    # -- blobs
    def BlobIsDefined(self, blob):
        name = str(blob)
        return name in self._op_outputs or name in self._external_input_map

    def UsesBlob(self, blob):
        name = str(blob)
        return any(name in op.input or name in op.output for op in self._net.op) \
            or name in self._external_input_map

    def UsedBlobNames(self):
        """Every blob name the net's ops read or write, plus its external inputs/outputs."""
        names = set(self._net.external_input) | set(self._net.external_output)
        for op in self._net.op:
            names.update(op.input)
            names.update(op.output)
        return names

    # -- output record (a schema.Struct naming the blobs a net reports; net modifiers append)
    def output_record(self):
        return self.__dict__.get("_output_record")

    def set_output_record(self, record):
        if self.output_record() is not None:
            raise Caffe2Error("net '%s' already has an output record" % self.Name())
        for blob in record.field_blobs():
            if not self.BlobIsDefined(blob):
                raise Caffe2Error("output record of net '%s': blob '%s' is not defined" % (self.Name(), blob))
        self.__dict__["_output_record"] = record
        self.AddExternalOutput(*record.field_blobs())

    def input_record(self):
        return self.__dict__.get("_input_record")

    def set_input_record(self, input_record):
        """The record of the blobs this net reads: a record with blobs becomes the
        net's external inputs; a schema without blobs gets new blobs, named in
        the net's name scope."""
        current = self.input_record()
        if current is not None and not (input_record.has_blobs() and {str(b) for b in input_record.field_blobs()}
                                        == {str(b) for b in current.field_blobs()}):
            raise Caffe2Error("net '%s': its input record cannot be reset" % self.Name())
        if not input_record.has_blobs():
            with NameScope(self.Name()):
                input_record = _record_tool("new_record")(self, input_record)
        else:
            for blob in input_record.field_blobs():
                if not self.is_external_input(blob):
                    self.AddExternalInput(blob)
        self.__dict__["_input_record"] = input_record
        return input_record

    def is_external_input(self, blob):
        return str(blob) in self._external_input_map

    def AppendOutputRecordField(self, field_name, record):
        if self.output_record() is None:
            raise Caffe2Error("net '%s' has no output record to append '%s' to" % (self.Name(), field_name))
        append = _record_field_appender[0]
        if append is None:   # schema sets it on import; output records are its Structs
            raise Caffe2Error("net '%s': its output record is not a caffe2py.schema record" % self.Name())
        self.__dict__["_output_record"] = append(self.output_record(), field_name, record)
        self.AddExternalOutput(*record.field_blobs())

    def add_attribute(self, name, obj):
        self.__dict__.setdefault("_attr_dict", {}).setdefault(name, []).append(obj)

    def get_attributes(self, name):
        return self.__dict__.get("_attr_dict", {}).get(name, [])

    def LogInfo(self, *msg_or_blobs):
        """Print each blob, or each message (as a string constant), when the net runs."""
        for item in msg_or_blobs:
            blob = item if isinstance(item, BlobReference) else self.GivenTensorStringFill(
                [], self.NextName("log"), shape=[], values=[str(item)])
            self.Print(blob, [])

    def GetBlobRef(self, blob_name):
        if not self.BlobIsDefined(blob_name):
            raise Caffe2Error("net '%s' has no blob '%s'" % (self.Name(), blob_name))
        return BlobReference(blob_name, self)

    def NextName(self, prefix=None, output_id=None):
        if prefix:
            base = self._net.name + "/" + prefix
            suffix = "" if output_id is None else ":%d" % output_id
            name = base + suffix
            index = 2
            while self.BlobIsDefined(scope.CurrentNameScope() + name):
                name = "%s_%d%s" % (base, index, suffix)
                index += 1
            return name
        name = "%s_blob_%d" % (self._net.name, self._next_name_index)
        self._next_name_index += 1
        return name

    def NextBlob(self, prefix="unnamed"):
        """A new blob named `prefix` itself (Caffe2's rule), or `<prefix>_auto_<i>` when
        this net defines that name or handed it out before."""
        base = "unnamed" if prefix is None else str(prefix)
        handed_out = self.__dict__.setdefault("_registered_blob_names", set())
        name, index = base, 0
        while name in handed_out or self.BlobIsDefined(name):
            name = "%s_auto_%d" % (base, index)
            index += 1
        handed_out.add(name)
        return BlobReference(name, self)

    def NextScopedBlob(self, prefix="unnamed"):
        """NextBlob of `prefix` in the current name scope."""
        return self.NextBlob(scope.CurrentNameScope() + ("unnamed" if prefix is None else str(prefix)))

    # -- external inputs and outputs
    def AddExternalInput(self, *inputs):
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = inputs[0]
        refs = []
        for blob in inputs:
            name = str(blob)
            if name in self._external_input_map:
                raise Caffe2Error("net '%s' already has external input '%s'" % (self.Name(), name))
            self._external_input_map.add(name)
            self._net.external_input.append(name)
            refs.append(BlobReference(name, self))
        return refs[0] if len(refs) == 1 else refs

    def AddExternalInputs(self, *inputs):
        return self.AddExternalInput(*inputs)

    def AddScopedExternalInputs(self, *inputs):
        return self.AddExternalInput(*[scope.CurrentNameScope() + str(b) for b in inputs])

    def AddExternalOutput(self, *outputs):
        for blob in outputs:
            name = str(blob)
            if name not in self._net.external_output:
                self._net.external_output.append(name)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def AddExternalOutputs(self, *outputs):
        return self.AddExternalOutput(*outputs)

    @property
    def external_inputs(self):
        return [BlobReference(b, self) for b in self._net.external_input]

    @property
    def external_outputs(self):
        return [BlobReference(b, self) for b in self._net.external_output]

    # -- building
    def _CreateAndAddToSelf(self, op_type, inputs, outputs=None, **kwargs):
        inputs = _rectify(inputs, scoped=True)
        for name in inputs:
            if name not in self._op_outputs and name not in self._external_input_map:
                self._external_input_map.add(name)
                self._net.external_input.append(name)
        if outputs is None:
            outputs = [self.NextName(prefix=op_type)]
        elif isinstance(outputs, int):
            outputs = [self.NextName(prefix=op_type, output_id=i) for i in range(outputs)]
        # inputs are scoped names now: BlobReferences keep CreateOperator from scoping them again
        op = CreateOperator(op_type, [BlobReference(name) for name in inputs], outputs, **kwargs)
        self._net.op.add().CopyFrom(op)
        self._op_outputs.update(op.output)
        _record_op_site(self.Name(), len(self._net.op) - 1)
        refs = tuple(BlobReference(o, self) for o in op.output)
        if len(refs) == 0:
            return None
        return refs[0] if len(refs) == 1 else refs

    def __getattr__(self, op_type):
        if op_type.startswith("__"):
            raise AttributeError(op_type)
        if not IsOperator(op_type):
            raise AttributeError(_unknown_op_message(op_type))
        return lambda *args, **kwargs: self._CreateAndAddToSelf(op_type, *args, **kwargs)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(registry.op_types()))

    def Python(self, f, grad_f=None, python_func_type=None, pass_workspace=False,
               grad_output_indices=None, grad_input_indices=None):
        """Caffe2's Net.Python: returns a builder of `Python` ops running f(inputs,
        outputs[, workspace]) on TensorCPU-like wrappers. f and grad_f are callables
        (registered under a token in this process) or (func, args, kwargs) builder
        tuples (pickled into the op). See operators/utility/python_ops.py."""
        from . import python_op_registry as P
        f_builder, grad_builder = P.pickle_builder(f), P.pickle_builder(grad_f)
        if grad_f and bool(f_builder) != bool(grad_builder):
            raise Caffe2Error("A tuple has to be passed to both f and grad_f or neither.")
        if f_builder:
            core_kwargs = {"pickled_builder": f_builder, "pickled_grad_builder": grad_builder,
                           "pass_workspace": pass_workspace}
        else:
            core_kwargs = {"token": P.register(f, grad_f, python_func_type, pass_workspace=pass_workspace)}
        return lambda *args, **kwargs: self._CreateAndAddToSelf(
            "Python", *args, grad_output_indices=list(grad_output_indices or []),
            grad_input_indices=list(grad_input_indices or []), **dict(kwargs, **core_kwargs))

    def Const(self, array, blob_out=None, dtype=None):
        """A fill op holding `array`. As in Caffe2, a Python bool is a ConstantFill
        of a bool scalar, and an unnamed output is named like output 0 of the op
        (`<net>/<fill op>:0`)."""
        if isinstance(array, bool) and dtype is None:
            return self.ConstantFill([], blob_out or 1, dtype=DataType.BOOL, value=array)
        array = np.asarray(array, dtype=dtype)
        fills = {np.dtype(np.float32): "GivenTensorFill", np.dtype(np.float64): "GivenTensorDoubleFill",
                 np.dtype(np.int32): "GivenTensorIntFill", np.dtype(np.int64): "GivenTensorInt64Fill",
                 np.dtype(np.bool_): "GivenTensorBoolFill"}
        if array.dtype.kind in "SUO":
            fill = "GivenTensorStringFill"
            values = [str(v) for v in array.reshape(-1)]
        else:
            fill = fills.get(array.dtype)
            if fill is None:
                raise Caffe2Error("Const: unsupported dtype %s" % array.dtype)
            values = array.reshape(-1).tolist()
        return self.__getattr__(fill)([], blob_out or 1, shape=list(array.shape), values=values)

    def AppendNet(self, net):
        proto = net.Proto() if hasattr(net, "Proto") else net
        for op in proto.op:
            self._net.op.add().CopyFrom(op)
            self._op_outputs.update(op.output)
        for blob in proto.external_input:
            if blob not in self._external_input_map and blob not in self._op_outputs:
                self._external_input_map.add(blob)
                self._net.external_input.append(blob)
        return self

    def Clone(self, name, blob_remap=None, op_id_mask=None, remap_funcs=None,  # noqa: ARG002
              keep_schema=True, update_external_list=False):
        """A copy named `name` with blobs renamed by blob_remap, only the ops whose index
        is in op_id_mask (all by default). update_external_list: external inputs become
        the blobs an op reads before any op wrote them, external outputs the blobs
        written and never read (Caffe2's rule)."""
        remap = {str(k): str(v) for k, v in (blob_remap or {}).items()}
        proto = caffe2_pb2.NetDef()
        proto.CopyFrom(self._net)
        proto.name = name
        del proto.op[:]
        ops = [op for i, op in enumerate(self._net.op) if op_id_mask is None or i in op_id_mask]
        for op in ops:
            new = proto.op.add()
            new.CopyFrom(op)
            new.input[:] = [remap.get(b, b) for b in op.input]
            new.output[:] = [remap.get(b, b) for b in op.output]
        proto.external_input[:] = [remap.get(b, b) for b in self._net.external_input]
        proto.external_output[:] = [remap.get(b, b) for b in self._net.external_output]
        if update_external_list:
            written, read_after_write, inputs = [], set(), []
            for op in proto.op:
                for blob in op.input:
                    if blob in written:
                        read_after_write.add(blob)
                    elif blob not in inputs:
                        inputs.append(blob)
                written.extend(b for b in op.output if b not in written)
            proto.external_input[:] = inputs
            proto.external_output[:] = [b for b in written if b not in read_after_write]
        clone = Net(proto)
        if keep_schema:
            for key in ("_input_record", "_output_record"):
                record = self.__dict__.get(key)
                if record is not None:
                    clone.__dict__[key] = _record_tool("rebind")(record, lambda b: remap.get(b, b))
        return clone

    def ClonePartial(self, name, inputs, outputs, remap_funcs=None):
        """(new_net, [output refs]): a copy named `name` of only the ops needed to
        compute `outputs` from `inputs` (a list, or a dict / list of pairs mapping each
        input to its name in the copy). Blobs the copied ops read and nothing there
        writes keep their names; every other blob gets the prefix `name/`."""
        if isinstance(inputs, dict):
            pairs = list(inputs.items())
        elif isinstance(inputs, list) and inputs and all(isinstance(i, tuple) and len(i) == 2 for i in inputs):
            pairs = list(inputs)
        else:
            pairs = [(i, i) for i in inputs]
        for output in outputs:
            if not self.BlobIsDefined(output):
                # AssertionError, as Caffe2's (callers catch that type)
                raise AssertionError("ClonePartial: net '%s' does not define '%s'" % (self.Name(), output))
        input_names = {str(k): str(v) for k, v in pairs}
        output_names = [str(o) for o in outputs]
        ssa, versions = get_ssa(self._net, {name_: 0 for name_ in input_names})
        used = get_op_ids_in_path(ssa, versions, list(input_names), output_names)
        producing_inputs = get_op_ids_in_path(ssa, versions, [], list(input_names))
        if set(used) & set(producing_inputs):
            raise AssertionError("ClonePartial: some of the ops needed for %s would write the given inputs"
                              % output_names)
        undefined = get_undefined_blobs([op for i, op in enumerate(ssa) if i in used]) - set(input_names)
        prefix = name + "/" if name else ""

        def renamed(blob):
            if blob in input_names:
                return input_names[blob]
            return blob if blob in undefined else prefix + blob

        mapping = {blob: renamed(blob) for blob in versions}
        clone = self.Clone(name, mapping, used, remap_funcs)
        new_inputs = [mapping[i] for i in input_names] + sorted(undefined)
        new_outputs = [mapping[o] for o in output_names]
        del clone.Proto().external_input[:]
        clone.Proto().external_input.extend(new_inputs)
        del clone.Proto().external_output[:]
        clone.Proto().external_output.extend(new_outputs)
        return clone, [clone.GetBlobRef(o) for o in new_outputs]

    def set_rand_seed(self, seed=100, sequence_seed=True, seed_on_op_def=False):
        """Give every op a random seed: seed + its index (sequence_seed), a hash of the
        op and seed (seed_on_op_def), or seed itself."""
        if sequence_seed and seed_on_op_def:
            raise AssertionError("sequence_seed and seed_on_op_def cannot be both set to True.")
        for i, op in enumerate(self.Proto().op):
            if sequence_seed:
                op_seed = seed + i
            elif seed_on_op_def:
                op_seed = zlib.crc32((str(op) + str(seed)).encode()) % np.iinfo(np.uint32).max
            else:
                op_seed = seed
            op.device_option.random_seed = op_seed

    def PopulateProtoWithFileName(self):
        """Name each op `file:line` of the call that added it (kept in
        workspace.operator_tracebacks), as Caffe2 does to point at a failing op."""
        sites = workspace.operator_tracebacks.get(self.Name())
        if sites:
            for index, op in enumerate(self.Proto().op):
                if index in sites:
                    op.name = ":".join(str(part) for part in sites[index][0])

    def _CheckLookupTables(self):
        """For tests: the cached sets of op outputs and external inputs cover the proto."""
        outputs = {o for op in self._net.op for o in op.output}
        assert outputs <= self._op_outputs, outputs - self._op_outputs
        assert set(self._net.external_input) <= self._external_input_map

    def _ExtendOps(self, new_ops):
        self._net.op.extend(new_ops)
        for op in new_ops:
            self._op_outputs.update(op.output)

    def AddGradientOperators(self, ys, skip=0):
        """Append the gradient ops of this net's ops (from `skip` on) for ys (a list:
        gradients seeded with 1.0; a dict: blob -> its gradient blob, None = 1.0).
        Returns {blob: gradient BlobReference or GradientSlice}; see caffe2py.gradients."""
        return gradients.add_gradient_operators(self, ys, skip)

    # -- observers of this net's instance in the current workspace (create it first)
    def _instance(self):
        return workspace.current_workspace().get_net(self.Name())

    def AddObserver(self, observer_type):
        """Attach an observer (a name such as "TimeObserver", or an executor.NetObserver)
        to the net created in the current workspace; returns how many it has now."""
        instance = self._instance()
        instance.add_observer(observer_type)
        return instance.num_observers()

    def GetObserver(self, index):
        return self._instance().observers[index]

    def RemoveObserver(self, observer):
        self._instance().remove_observer(observer)

    def NumObservers(self):
        return self._instance().num_observers()

    def RunAllOnGPU(self, gpu_id=0, use_cudnn=False):
        self._net.device_option.CopyFrom(DeviceOption(caffe2_pb2.CUDA, gpu_id))
        for op in self._net.op:
            op.device_option.CopyFrom(DeviceOption(caffe2_pb2.CUDA, gpu_id))
            if use_cudnn:
                op.engine = "CUDNN"

    def RunAllOnCPU(self):
        self._net.device_option.CopyFrom(DeviceOption(caffe2_pb2.CPU))
        for op in self._net.op:
            op.device_option.CopyFrom(DeviceOption(caffe2_pb2.CPU))


class ExecutionStep:
    """Builder for caffe2_pb2.ExecutionStep."""

    def __init__(self, name, nets=None, num_iter=None):
        self._step = caffe2_pb2.ExecutionStep(name=name or "")
        self._nets = []
        self._substeps = []
        if nets is not None:
            for net in nets if isinstance(nets, (list, tuple)) else [nets]:
                self.AddNet(net)
        if num_iter is not None:
            self._step.num_iter = num_iter

    def Proto(self):
        return self._step

    def Name(self):
        return self._step.name

    def Nets(self):
        return list(self._nets)

    def Substeps(self):
        return list(self._substeps)

    def HasNets(self):
        return len(self._step.network) > 0

    def HasSubsteps(self):
        return len(self._step.substep) > 0

    def get_net_by_name(self, name):
        return next((net for net in self._nets if net.Name() == name), None)

    def get_net(self, name):
        """The Net object of this step (or a substep) named `name`."""
        net = self.get_net_by_name(name)
        if net is None:
            raise KeyError("execution step '%s' has no net '%s'" % (self.Name(), name))
        return net

    def __str__(self):
        return self.Name()

    def get_all_attributes(self, name):
        """The attributes `name` of every net of this step and of its substeps."""
        seen, found = set(), []
        for net in self._nets:
            if id(net) not in seen and hasattr(net, "get_attributes"):
                seen.add(id(net))
                found.extend(net.get_attributes(name))
        return found

    def SetIter(self, num_iter):
        self._step.num_iter = num_iter

    def SetOnlyOnce(self, only_once):
        self._step.only_once = only_once

    def SetShouldStopBlob(self, blob):
        self._step.should_stop_blob = str(blob)

    def RunEveryMillis(self, interval):
        self._step.run_every_ms = interval

    def SetReportNet(self, report_net, report_interval):
        self._nets.append(report_net)
        self._step.report_net = report_net.Name() if hasattr(report_net, "Name") else str(report_net)
        self._step.report_interval = report_interval

    def SetConcurrentSubsteps(self, concurrent):
        self._step.concurrent_substeps = concurrent

    def SetCreateWorkspace(self, create):
        self._step.create_workspace = create

    def SetNumConcurrentInstances(self, n):
        self._step.num_concurrent_instances = n

    def AddSubstep(self, substep):
        if len(self._step.network):
            raise Caffe2Error("execution step '%s' already has nets; it cannot also have substeps" % self.Name())
        proto = substep.Proto() if hasattr(substep, "Proto") else substep
        self._step.substep.add().CopyFrom(proto)
        self._substeps.append(substep)
        if hasattr(substep, "Nets"):
            self._nets.extend(substep.Nets())
        return self

    def AddNet(self, net):
        if len(self._step.substep):
            raise Caffe2Error("execution step '%s' already has substeps; it cannot also have nets" % self.Name())
        self._step.network.append(net.Name() if hasattr(net, "Name") else str(net))
        if hasattr(net, "Proto"):
            self._nets.append(net)
        return self


def execution_step(name, steps_or_nets, num_iter=None, report_net=None, report_interval=None,
                   concurrent_substeps=None, should_stop_blob=None, only_once=None,
                   num_concurrent_instances=None, create_workspace=False, run_every_ms=None):
    step = ExecutionStep(name)
    items = steps_or_nets if isinstance(steps_or_nets, (list, tuple)) else [steps_or_nets]
    items = [item for item in items if item is not None]
    if not all(isinstance(item, Net) for item in items):
        # A mix of nets, steps and NetBuilders: every item becomes a substep.
        items = [item if isinstance(item, (ExecutionStep, caffe2_pb2.ExecutionStep))
                 else to_execution_step(item) for item in items]
    for item in items:
        if isinstance(item, (ExecutionStep, caffe2_pb2.ExecutionStep)):
            step.AddSubstep(item)
        else:
            step.AddNet(item)
    if num_iter is not None:
        step.SetIter(num_iter)
    if report_net is not None:
        step.SetReportNet(report_net, report_interval or 1)
    if concurrent_substeps is not None:
        step.SetConcurrentSubsteps(concurrent_substeps)
    if should_stop_blob is not None:
        step.SetShouldStopBlob(should_stop_blob)
    if only_once is not None:
        step.SetOnlyOnce(only_once)
    if num_concurrent_instances is not None:
        step.SetNumConcurrentInstances(num_concurrent_instances)
    if create_workspace:
        step.SetCreateWorkspace(True)
    if run_every_ms:
        step.RunEveryMillis(run_every_ms)
    return step


def step_from_proto(step_proto, net_objects, net_protos):
    """An ExecutionStep rebuilt from its proto (Caffe2's core.create_from_proto):
    net_protos maps net names to NetDefs; net_objects caches the Net made of each, so
    steps sharing a net share its object."""
    def net_of(name):
        if name not in net_objects:
            if name not in net_protos:
                raise Caffe2Error("execution step '%s' runs net '%s', which the plan lacks" % (step_proto.name, name))
            net_objects[name] = Net(net_protos[name])
        return net_objects[name]

    step = ExecutionStep(step_proto.name)
    step._step.CopyFrom(step_proto)
    del step._step.network[:]
    del step._step.substep[:]
    if step_proto.network and step_proto.substep:
        raise Caffe2Error("execution step '%s' has both nets and substeps" % step_proto.name)
    for name in step_proto.network:
        step.AddNet(net_of(name))
    for substep in step_proto.substep:
        step.AddSubstep(step_from_proto(substep, net_objects, net_protos))
    if step_proto.HasField("report_net"):
        report = net_of(step_proto.report_net)
        step.SetReportNet(report, step_proto.report_interval)
    return step


create_from_proto = step_from_proto


def scoped_execution_step(name, *args, **kwargs):
    """execution_step with the name in the current name scope."""
    return execution_step(ScopedName(name) if name else name, *args, **kwargs)


class Plan:
    """Builder for caffe2_pb2.PlanDef."""

    def __init__(self, name_or_step):
        self._plan = caffe2_pb2.PlanDef()
        self._net_names = set()
        self._steps = []
        self._nets = []
        if isinstance(name_or_step, ExecutionStep):
            self._plan.name = name_or_step.Name()
            self.AddStep(name_or_step)
        else:
            self._plan.name = str(name_or_step)

    def Proto(self):
        return self._plan

    def AddNets(self, nets):
        for net in nets:
            if net.Name() not in self._net_names:
                self._net_names.add(net.Name())
                self._plan.network.add().CopyFrom(net.Proto())
                self._nets.append(net)

    def Steps(self):
        return list(self._steps)

    def get_all_attributes(self, name):
        """The attributes `name` of every net of the plan."""
        return [attr for net in self._nets if hasattr(net, "get_attributes") for attr in net.get_attributes(name)]

    def Nets(self):
        """The Net objects of the plan, in the order they were added."""
        return list(self._nets)

    @classmethod
    def create_from_proto(cls, plan_proto):
        """A Plan rebuilt from a PlanDef: each of its nets becomes a Net object (named
        afresh, with a suffix where the name is taken) and each step an ExecutionStep."""
        plan = cls(plan_proto.name)
        plan._plan.CopyFrom(plan_proto)
        del plan._plan.network[:]
        del plan._plan.execution_step[:]
        net_protos = {net.name: net for net in plan_proto.network}
        net_objects = {}
        for step_proto in plan_proto.execution_step:
            plan.AddStep(step_from_proto(step_proto, net_objects, net_protos))
        return plan

    def AddStep(self, step):
        self._plan.execution_step.add().CopyFrom(step.Proto())
        self._steps.append(step)
        self.AddNets(step.Nets())


def to_execution_step(step_or_nets, default_name=None):
    """An ExecutionStep from a step, a net or list of nets, or a NetBuilder (whose
    stop blob becomes the step's should_stop_blob)."""
    if isinstance(step_or_nets, ExecutionStep):
        return step_or_nets
    stop_blob = None
    if not default_name and hasattr(step_or_nets, "name"):
        default_name = step_or_nets.name
    for cls, nets_and_stop_blob in _step_sources.items():
        if isinstance(step_or_nets, cls):
            step_or_nets, stop_blob = nets_and_stop_blob(step_or_nets)
            break
    if isinstance(step_or_nets, Net):
        step_or_nets = [step_or_nets]
    return execution_step(default_name, step_or_nets, should_stop_blob=stop_blob)


def clone_and_bind_net(net, name, prefix, blob_remap=None, inputs=None, keep_schema=True):
    """(clone, blob_remap): a copy of net named `name` whose blobs are renamed
    `prefix` + name, except the blobs it reads before writing (kept) and those
    in blob_remap; with `inputs` (a record holding at least the fields of the
    net's input record) the input record's blobs become the inputs' blobs.
    blob_remap is filled in with every renaming."""
    if not isinstance(net, Net):
        raise Caffe2Error("clone_and_bind_net expects a core.Net, got %s" % type(net).__name__)
    blob_remap = {} if blob_remap is None else blob_remap
    if inputs is not None:
        original = net.input_record()
        if original is None:
            raise Caffe2Error("net '%s' has no input record to bind the inputs to" % net.Name())
        extra = set(original.field_names()) - set(inputs.field_names())
        if extra:
            raise Caffe2Error("Schemas don't match, extra fields %s found in the net %s. original: %s; inputs: %s"
                              % (sorted(extra), net.Name(), original.field_names(), inputs.field_names()))
        by_field = dict(zip(original.field_names(), original.field_blobs()))
        for field, blob in zip(inputs.field_names(), inputs.field_blobs()):
            if field in by_field:
                blob_remap[str(by_field[field])] = str(blob)
    ssa, versions = get_ssa(net.Proto())
    read_first = get_undefined_blobs(ssa)
    for blob in versions:
        if blob not in blob_remap:
            blob_remap[blob] = blob if blob in read_first else prefix + blob
    cloned = net.Clone(name, blob_remap, keep_schema=keep_schema)
    if not keep_schema and inputs:
        cloned.set_input_record(inputs)
    return cloned, blob_remap


# --------------------------------------------------------------------------- SSA helpers

def get_ssa(net, blob_versions=None):
    """(ssa, blob_versions): per op, its inputs and outputs as (name, version) pairs;
    a blob's version counts the writes before that point (0: never written)."""
    if isinstance(net, list):
        versions = {} if blob_versions is None else blob_versions
        return [get_ssa(n, versions)[0] for n in net], versions
    proto = net.Proto() if isinstance(net, Net) else net
    if not isinstance(proto, caffe2_pb2.NetDef):
        raise Caffe2Error("get_ssa expects a Net or NetDef, got %s" % type(proto).__name__)
    versions = {} if blob_versions is None else blob_versions
    for name in proto.external_input:
        versions.setdefault(str(name), 0)
    ssa = []
    for op in proto.op:
        if not proto.external_input:
            for name in op.input:
                versions.setdefault(str(name), 0)
        inputs = [(str(i), versions.get(str(i), 0)) for i in op.input]
        for o in op.output:
            versions[str(o)] = versions.get(str(o), 0) + 1
        ssa.append((inputs, [(str(o), versions[str(o)]) for o in op.output]))
    return ssa, versions


def get_undefined_blobs(ssa):
    """The blobs some op reads before any op of the net wrote them (version 0)."""
    return {name for inputs, _ in ssa for name, version in inputs if version == 0}


def get_op_ids_in_path(ssa, blob_versions, inputs, outputs):
    """Sorted indices of the ops needed to compute `outputs` (their latest versions)
    when `inputs` are given at their latest versions."""
    given = {(str(i), blob_versions[str(i)]) for i in inputs}
    producers = get_output_producers(ssa)
    pending = [(str(o), blob_versions[str(o)]) for o in outputs]
    used = set()
    while pending:
        blob = pending.pop()
        if blob not in given and blob in producers and producers[blob] not in used:
            used.add(producers[blob])
            pending.extend(ssa[producers[blob]][0])
    return sorted(used)


def _record_op_site(net_name, op_index):
    """Remember where (file, line) the caller outside caffe2py added op #op_index."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is not None:
        workspace.operator_tracebacks[net_name][op_index] = [(frame.f_code.co_filename, frame.f_lineno)]


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def get_output_producers(ssa):
    """{(blob, version): index of the op that wrote that version}."""
    return {out: i for i, (_, outputs) in enumerate(ssa) for out in outputs}


def _built(f):
    """A (func, args, kwargs) builder tuple stands for the function it builds."""
    return f[0](*f[1], **f[2]) if isinstance(f, tuple) else f


def _RegisterPythonImpl(f, grad_f=None, python_func_type=None, pass_workspace=False):
    from .python_op_registry import register
    if python_func_type is None:
        f, grad_f = _built(f), _built(grad_f)
    return register(f, grad_f or None, python_func_type, pass_workspace)


def CreatePythonOperator(f, inputs, outputs, grad_f=None, pass_workspace=False, python_func_type=None,
                         *args, **kwargs):
    """A `Python` op running f(inputs, outputs) (f(inputs, outputs, workspace) with
    pass_workspace): f (and grad_f) are registered under the token the op carries."""
    kwargs["token"] = _RegisterPythonImpl(f, grad_f, python_func_type, pass_workspace=pass_workspace)
    return CreateOperator("Python", inputs, outputs, *args, **kwargs)
