"""Operator schemas and kernel registration.

A schema describes an op type independently of devices: arity, arguments with
defaults, in-place rules, tensor (shape/dtype) inference, cost and docs. A kernel
is a factory registered per (domain, op type, device type, engine) and opset
version range; at plan time it receives an OpContext and returns the callable
that computes outputs from inputs. Caffe2 ops live in the empty domain; ONNX-
semantics ops live in domain "ai.onnx" with op_version taken from the model.
"""
import difflib
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from .args import ArgumentHelper
from .definition_sites import caller_site
from .errors import Caffe2Error, describe_op
from .proto import caffe2_pb2
from .schema_rules import verify_arguments

log = logging.getLogger("caffe2py")

CPU = caffe2_pb2.PROTO_CPU
CUDA = caffe2_pb2.PROTO_CUDA
DEVICE_NAMES = {CPU: "CPU", CUDA: "CUDA"}
CAFFE2_DOMAIN = ""
ONNX_DOMAIN = "ai.onnx"
_DOMAIN_ALIASES = {"caffe2": CAFFE2_DOMAIN, "": CAFFE2_DOMAIN, "ai.onnx": ONNX_DOMAIN,
                   "onnx": ONNX_DOMAIN}


def normalize_domain(domain):
    return _DOMAIN_ALIASES.get(domain, domain)


def device_name(device_type):
    return DEVICE_NAMES.get(device_type, "device type %d" % device_type)


# --------------------------------------------------------------------------- types

@dataclass(frozen=True)
class TensorType:
    """A tensor's static description for inference: dims (None = unknown) and dtype."""
    dims: Optional[tuple]
    dtype: Optional[int] = caffe2_pb2.TensorProto.FLOAT

    @property
    def known(self):
        return self.dims is not None


UNKNOWN = TensorType(None, None)


@dataclass
class Cost:
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    params_bytes: float = 0.0


@dataclass(frozen=True)
class Arg:
    """One declared argument. type is one of int, float, bool, string, ints, floats,
    strings, tensor, net, any."""
    name: str
    type: str = "any"
    default: Any = None
    required: bool = False
    doc: str = ""
    # schema_rules rule(s) the value must meet: Range, OneOf, Axis, Permutation, ...
    check: Any = None


def _arity_ok(spec, n):
    if spec is None:
        return True
    if isinstance(spec, int):
        return n == spec
    if isinstance(spec, tuple):
        lo, hi = spec
        return n >= lo and (hi is None or n <= hi)
    if isinstance(spec, (set, frozenset)):
        return n in spec
    return bool(spec(n))


def _arity_text(spec):
    if isinstance(spec, int):
        return "exactly %d" % spec
    if isinstance(spec, tuple):
        lo, hi = spec
        return "at least %d" % lo if hi is None else "between %d and %d" % (lo, hi)
    if isinstance(spec, (set, frozenset)):
        return "one of %s" % sorted(spec)
    return "a count accepted by the schema"


@dataclass
class OpSchema:
    """Everything known about an op type that does not depend on the device.

    num_inputs / num_outputs: int, (min, max) with max None for unbounded, a set,
    or a predicate. allow_inplace / enforce_inplace: sets of (input, output) index
    pairs, or True for "any one-to-one pair" (input i with output i).
    inference(ctx, input_types) -> list of TensorType (UNKNOWN where it cannot tell).
    cost(ctx, input_types) -> Cost.
    """
    name: str
    num_inputs: Any = None
    num_outputs: Any = None
    args: tuple = ()
    allow_inplace: Any = frozenset()
    enforce_inplace: Any = frozenset()
    inference: Optional[Callable] = None
    cost: Optional[Callable] = None
    doc: str = ""
    inputs: tuple = ()
    outputs: tuple = ()
    domain: str = CAFFE2_DOMAIN
    since_version: int = 1
    inputs_outputs_check: Optional[Callable] = None
    # Device placement: copy ops read blobs from another device (True) and may write
    # their outputs to a device other than the op's own (outputs_device: a device type).
    inputs_can_cross_devices: bool = False
    outputs_device: Optional[int] = None
    # The device type an op reads its inputs from when not its own (CopyCPUToGPU: CPU);
    # core.InferOpBlobDevices reports it so tests feed inputs where the op expects them.
    inputs_device: Optional[int] = None
    # The kernel also receives each output's current workspace value (None when the
    # blob does not exist yet) after its inputs: ops that update their output
    # (Accumulate: Y = gamma * Y + X) without naming it as an input.
    reads_outputs: bool = False
    # schema_rules input rules checked on every call (DTypes, SameDType, Rank)
    checks: tuple = ()
    # Inputs the CPU kernel reads only through kernels/cpu/runtime/packed_weights (its
    # packed copy, or the values a stand-in rebuilds): a holder that owns a constant read
    # only there may let the packed copy stand in for it (the ONNX backend's prepared model)
    packed_inputs: frozenset = frozenset()
    arg_by_name: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.domain = normalize_domain(self.domain)
        self.arg_by_name = {a.name: a for a in self.args}

    def _inplace_allowed(self, pairs_spec, i, o):
        if pairs_spec is True:
            return i == o
        if callable(pairs_spec):
            return bool(pairs_spec(i, o))
        return (i, o) in pairs_spec

    def verify(self, op_def, label):
        """Caffe2's OpSchema::Verify: raise Caffe2Error naming the op on violation."""
        n_in, n_out = len(op_def.input), len(op_def.output)
        if not _arity_ok(self.num_inputs, n_in):
            raise Caffe2Error("%s: takes %s inputs, got %d" % (label, _arity_text(self.num_inputs), n_in))
        if not _arity_ok(self.num_outputs, n_out):
            raise Caffe2Error("%s: produces %s outputs, got %d" % (label, _arity_text(self.num_outputs), n_out))
        if self.inputs_outputs_check is not None and not self.inputs_outputs_check(n_in, n_out):
            raise Caffe2Error("%s: %d inputs with %d outputs is not a valid combination" % (label, n_in, n_out))
        for i, name_in in enumerate(op_def.input):
            for o, name_out in enumerate(op_def.output):
                if name_in == name_out and not (
                        self._inplace_allowed(self.allow_inplace, i, o)
                        or self._inplace_allowed(self.enforce_inplace, i, o)):
                    raise Caffe2Error("%s: input %d and output %d are both '%s' but the op cannot run in place"
                                      % (label, i, o, name_in))
        if self.enforce_inplace and not callable(self.enforce_inplace):
            pairs = ([(k, k) for k in range(min(n_in, n_out))] if self.enforce_inplace is True
                     else self.enforce_inplace)
            for i, o in pairs:
                if i < n_in and o < n_out and op_def.input[i] != op_def.output[o]:
                    raise Caffe2Error("%s: must run in place: input %d '%s' and output %d '%s' differ"
                                      % (label, i, op_def.input[i], o, op_def.output[o]))
        present = {a.name for a in op_def.arg}
        for a in self.args:
            if a.required and a.name not in present:
                raise Caffe2Error("%s: required argument '%s' is missing" % (label, a.name))
        verify_arguments(self, op_def, label)

    def default(self, name):
        a = self.arg_by_name.get(name)
        return None if a is None else a.default


# --------------------------------------------------------------------------- context

class OpContext:
    """What a kernel factory sees at plan time: the def, its arguments (with the
    schema's defaults), the op's label for error messages and, when the net was
    shape-annotated, the inferred input types."""

    def __init__(self, op_def, schema=None, index=None, input_types=None):
        self.op_def = op_def
        self.schema = schema
        self.index = index
        self.type = op_def.type
        self.name = op_def.name
        self.inputs = list(op_def.input)
        self.outputs = list(op_def.output)
        self.n_inputs = len(op_def.input)
        self.n_outputs = len(op_def.output)
        self.engine = op_def.engine
        self.device_type = op_def.device_option.device_type if op_def.HasField("device_option") else CPU
        self.device_id = op_def.device_option.device_id if op_def.HasField("device_option") else 0
        self.op_version = op_def.op_version
        self.input_types = input_types
        self.label = describe_op(index, op_def)
        self._args = ArgumentHelper(op_def)
        self.wants_workspace = False

    def use_workspace(self):
        """The kernel will be called as run(blobs, *inputs): `blobs` is the mutable
        mapping of every blob the op sees at its point of the run (the workspace
        with this run's earlier writes on top; see blob_scopes.py). Writes to it
        become visible to the ops after this one and reach the workspace when the
        run succeeds. For ops that run subnets or act on the workspace itself."""
        self.wants_workspace = True

    def _default(self, name, default):
        if default is not None or self.schema is None:
            return default
        return self.schema.default(name)

    def has(self, name):
        return self._args.has(name)

    def arg(self, name, default=None):
        return self._args.get(name, self._default(name, default))

    def int(self, name, default=None):
        return self._args.get_int(name, self._default(name, default))

    def float(self, name, default=None):
        return self._args.get_float(name, self._default(name, default))

    def bool(self, name, default=None):
        d = self._default(name, default)
        return self._args.get_bool(name, bool(d) if d is not None else False)

    def string(self, name, default=None):
        return self._args.get_string(name, self._default(name, default))

    def ints(self, name, default=None):
        return self._args.get_ints(name, self._default(name, default))

    def floats(self, name, default=None):
        return self._args.get_floats(name, self._default(name, default))

    def strings(self, name, default=None):
        return self._args.get_strings(name, self._default(name, default))

    def tensor(self, name):
        return self._args.get_tensor(name)

    def net(self, name):
        return self._args.get_net(name)

    def error(self, message, blob=None):
        """A Caffe2Error that names this op (and the blob, when given)."""
        where = "%s: " % self.label
        if blob is not None:
            where += "blob '%s': " % blob
        return Caffe2Error(where + message)

    def input_error(self, index, message):
        name = self.inputs[index] if index < self.n_inputs else "#%d" % index
        return self.error(message, blob=name)


# --------------------------------------------------------------------------- registry

@dataclass
class KernelEntry:
    factory: Callable
    since_version: int = 1
    until_version: Optional[int] = None  # inclusive; None = open-ended
    doc: str = ""

    def covers(self, version):
        return version >= self.since_version and (self.until_version is None or version <= self.until_version)


_schemas = {}        # (domain, type) -> list of OpSchema sorted by since_version
_kernels = {}        # (domain, type, device) -> {engine: [KernelEntry]}
_schema_sites = {}   # (domain, type, since_version) -> (file, line) of the registering op module
_per_op_engine_pref = {}   # device -> {op type: [engines]}
_global_engine_pref = {}   # device -> [engines]


def register_schema(schema):
    entries = _schemas.setdefault((schema.domain, schema.name), [])
    entries[:] = [s for s in entries if s.since_version != schema.since_version] + [schema]
    entries.sort(key=lambda s: s.since_version)
    _schema_sites[(schema.domain, schema.name, schema.since_version)] = caller_site()
    return schema


def schema_site(schema):
    """(file, line) where `schema` was registered (`caffe2py ops --where`)."""
    return _schema_sites.get((schema.domain, schema.name, schema.since_version))


def register_kernel(op_type, device=CPU, engine="", domain=CAFFE2_DOMAIN,
                    versions=(1, None), doc=""):
    """Decorator: register a kernel factory for op_type on device (and engine)."""
    engine = "" if engine in ("", "DEFAULT") else engine
    domain = normalize_domain(domain)

    def wrap(factory):
        table = _kernels.setdefault((domain, op_type, device), {})
        table.setdefault(engine, []).append(KernelEntry(factory, versions[0], versions[1], doc))
        return factory
    return wrap


def register_alias(alias, op_type, domain=CAFFE2_DOMAIN, **schema_changes):
    """Register `alias` as another name of `op_type` (Caffe2's Conv2D for Conv, DepthConcat
    for Concat): a copy of the op's schema under the new name, with the fields in
    schema_changes replaced, and every kernel registered for op_type so far (all
    devices and engines), so both names share one kernel factory."""
    domain = normalize_domain(domain)
    schema = schema_for(op_type, domain)
    if schema is None:
        raise KeyError("cannot alias unknown op type '%s'" % op_type)
    register_schema(replace(schema, name=alias, **schema_changes))
    for (dm, t, device), engines in list(_kernels.items()):
        if dm == domain and t == op_type:
            table = _kernels.setdefault((domain, alias, device), {})
            for engine, entries in engines.items():
                table.setdefault(engine, []).extend(entries)


def schema_for(op_type, domain=CAFFE2_DOMAIN, version=None):
    entries = _schemas.get((normalize_domain(domain), op_type))
    if not entries:
        return None
    if version is None or version <= 0:
        return entries[-1]
    chosen = None
    for s in entries:
        if s.since_version <= version:
            chosen = s
    return chosen


def has_op(op_type, domain=CAFFE2_DOMAIN):
    domain = normalize_domain(domain)
    return (domain, op_type) in _schemas or any(
        k[0] == domain and k[1] == op_type for k in _kernels)


def op_types(domain=CAFFE2_DOMAIN):
    domain = normalize_domain(domain)
    names = {t for (d, t) in _schemas if d == domain}
    names.update(t for (d, t, _) in _kernels if d == domain)
    return sorted(names)


def close_matches(op_type, domain=CAFFE2_DOMAIN):
    return difflib.get_close_matches(op_type, op_types(domain), n=3, cutoff=0.6)


def registered_operator_keys():
    """Caffe2's RegisteredOperators(): 'Type' and 'Type_ENGINE_X' keys, all devices."""
    keys = set()
    for (domain, op_type, _device), engines in _kernels.items():
        if domain != CAFFE2_DOMAIN:
            continue
        for engine in engines:
            keys.add(op_type if not engine else "%s_ENGINE_%s" % (op_type, engine))
    return sorted(keys)


def kernel_coverage():
    """Rows (domain, op type, device name, engine, versions) for `caffe2py ops`."""
    rows = []
    for (domain, op_type, device), engines in sorted(_kernels.items()):
        for engine, entries in sorted(engines.items()):
            for e in entries:
                hi = "" if e.until_version is None else str(e.until_version)
                rows.append((domain or "caffe2", op_type, device_name(device), engine or "DEFAULT",
                             "%d-%s" % (e.since_version, hi)))
    return rows


def set_engine_pref(per_op_pref=None, global_pref=None):
    """Caffe2's SetEnginePref: per_op_pref {device: {op type: [engines]}},
    global_pref {device: [engines]}. Replaces the current preferences."""
    _per_op_engine_pref.clear()
    _global_engine_pref.clear()
    for device, prefs in (per_op_pref or {}).items():
        _per_op_engine_pref[device] = {op: list(engines) for op, engines in prefs.items()}
    for device, engines in (global_pref or {}).items():
        _global_engine_pref[device] = list(engines)


def engine_pref():
    """(per_op_pref, global_pref) as set_engine_pref took them (copies)."""
    return ({device: {op: list(engines) for op, engines in prefs.items()}
             for device, prefs in _per_op_engine_pref.items()},
            {device: list(engines) for device, engines in _global_engine_pref.items()})


def _engine_candidates(op_def, device):
    candidates = [e.strip() for e in op_def.engine.split(",") if e.strip()]
    candidates += _per_op_engine_pref.get(device, {}).get(op_def.type, [])
    candidates += _global_engine_pref.get(device, [])
    return candidates


def select_kernel(op_def, index=None):
    """Pick the kernel for op_def in Caffe2's order and return (KernelEntry, engine, schema).

    Raises Caffe2Error for an unknown op type, an unsupported opset version or a
    device without a kernel. Unknown engines fall back to the default kernel.
    """
    domain = normalize_domain(op_def.domain)
    device = op_def.device_option.device_type if op_def.HasField("device_option") else CPU
    version = op_def.op_version if op_def.op_version > 0 else None
    label = describe_op(index, op_def)
    if not has_op(op_def.type, domain):
        hint = close_matches(op_def.type, domain)
        raise Caffe2Error("%s: unknown operator type '%s'%s%s" % (
            label, op_def.type, " in domain '%s'" % domain if domain else "",
            "; did you mean %s?" % " or ".join(hint) if hint else ""))
    schema = schema_for(op_def.type, domain, version)
    if schema is None and version is not None:
        raise Caffe2Error("%s: no schema of '%s' for opset version %d" % (label, op_def.type, version))
    table = _kernels.get((domain, op_def.type, device))
    if not table:
        devices = sorted(device_name(d) for (dm, t, d) in _kernels if dm == domain and t == op_def.type)
        raise Caffe2Error("%s: cannot create operator of type '%s' on the device '%s'; kernels exist for: %s"
                          % (label, op_def.type, device_name(device), ", ".join(devices) or "none"))
    for engine in _engine_candidates(op_def, device) + [""]:
        for entry in table.get("" if engine == "DEFAULT" else engine, ()):
            if version is None or entry.covers(version):
                return entry, engine, schema
        if engine and engine not in table:
            log.debug("Engine %s is not available for operator %s", engine, op_def.type)
    raise Caffe2Error("%s: no %s kernel of '%s' covers opset version %s"
                      % (label, device_name(device), op_def.type, version))


def takes_blobs(run):
    """Mark a kernel callable that needs the blob dict of the run: the executor then
    calls run(blobs, *inputs). Blobs it writes there are committed at once, not at the
    end of the net (for ops like Load with load_all that create blobs no output names)."""
    run.takes_blobs = True
    return run


def fast_form(run, fast, keeps_dtypes=False):
    """Give kernel `run` a cheaper callable the compiled plan calls instead (the NumPy
    ufunc a kernel wraps, with none of the kernel's Python around it). `fast` must
    return what `run` returns whenever it returns at all, and change nothing when it
    raises: the plan then calls `run` itself, so errors are still the kernel's own,
    naming the op and its blobs (executor.Plan._render).

    keeps_dtypes: inputs whose dtypes are all in the op's DTypes rule's set give
    outputs whose dtypes are in that set too (a NumPy ufunc over numbers); the plan
    then treats the outputs as having passed that check (no second look at them)."""
    run.fast_form = fast
    run.keeps_dtypes = keeps_dtypes
    return run


def commits_outputs(run):
    """Mark a kernel that writes its outputs into the workspace itself, inside its
    own lock (AtomicAppend): it gets the run's blob view first, as a takes_blobs
    kernel does, and the executor leaves its outputs out of the commit at the end
    of the run, where a value computed before a concurrent net's newer write would
    overwrite it. Such writes stay even when a later op of the run fails."""
    run.takes_blobs = True
    run.commits_outputs = True
    return run


_left_out = {}     # op type -> why caffe2py does not provide it (catalogue coverage)


def leave_out(op_type, reason):
    """Declare that a Caffe2 op is left out on purpose; `caffe2py ops --catalogue`
    prints the reason. An op that is registered later is simply covered."""
    _left_out[op_type] = reason


def left_out_reasons():
    return dict(_left_out)


def all_schemas():
    return [s for entries in _schemas.values() for s in entries]
