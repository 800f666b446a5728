"""caffe2py as an onnx.backend: prepare() converts the model once (constant
folding included: the init net runs once here) and compiles the predict net;
BackendRep.run() only feeds inputs and runs the compiled plan.

    import caffe2py.onnx.backend as backend
    rep = backend.prepare(model)          # ModelProto, path or bytes
    outputs = rep.run([x])                # list, dict {name: array} or one array
"""
import logging
import os
import threading

import numpy as np
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from caffe2py import model_trust
from caffe2py.host_memory import hand_back_freed
from caffe2py.errors import Caffe2Error
from caffe2py.executor import compile_net
from caffe2py.kernels.cpu.runtime.packed_weights import stand_in
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import schema_for

from .convert import convert, graph_inputs, is_supported, node_domain, node_to_op
from .inputs import check_input, declared_inputs
from .loader import load_model

log = logging.getLogger("caffe2py")


def _as_value(value):
    """Feeds stay NumPy arrays (0-d included); sequences stay lists."""
    if isinstance(value, (list, tuple)):
        return [_as_value(v) for v in value]
    if value is None:
        return None
    return np.asarray(value)


def _root(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _roots(constants):
    """ids of the arrays the constants' values are views of (outputs sharing one are copied)."""
    return {id(_root(v)) for v in constants.values() if isinstance(v, np.ndarray)}


def _owned(value, shared_roots):
    if isinstance(value, np.ndarray) and id(_root(value)) in shared_roots:
        return value.copy()
    return value


def _optimizer():
    """caffe2py.optimize.optimize when that module exists (it is optional)."""
    try:
        from caffe2py import optimize as opt
    except ImportError:
        return None
    return getattr(opt, "optimize", None) if os.environ.get("CAFFE2PY_ONNX_OPTIMIZE", "1") != "0" else None


class Caffe2pyRep(BackendRep):
    """A prepared model: constant blobs computed once plus the compiled predict plan.

    After the first run, `constants` holds each conv filter that a kernel packed (and
    that nothing else reads) as a stand-in: an array of its shape holding no values,
    whose packed copy the kernels use (packed_weights.values_of(v) rebuilds the values;
    CAFFE2PY_KEEP_WEIGHTS=1 keeps the arrays)."""

    def __init__(self, init_net, predict_net, input_names, declared=None):
        self.declared = {name: (dims, dtype) for name, dims, dtype in (declared or [])}
        self.init_net = init_net
        self.predict_net = predict_net
        self.input_names = list(input_names)
        self.output_names = list(predict_net.external_output)
        self.constants = {}
        if init_net.op:   # the executor cannot render an empty net
            compile_net(init_net).run(self.constants)
        optimize = _optimizer()
        if optimize is not None:
            self.constants, self.predict_net = _apply_optimizer(optimize, self.constants, predict_net)
        self._constant_roots = _roots(self.constants)
        # run() returns only the outputs: the plan commits just those and drops every
        # intermediate after its last reader, so later ops reuse its memory while it is
        # still in cache (2 threads, alternating in one process: shufflenet 11% faster,
        # squeezenet, densenet121, inception_v2, resnet50 0-4%)
        self.plan = (compile_net(self.predict_net, known_blobs=self.constants.keys(), keep=self.output_names)
                     if self.predict_net.op else None)
        if self.plan is not None:   # warm runs as their recorded kernel calls (kernel_replay.py)
            self.plan.enable_replay(self.input_names)
        # weights a kernel packs on the first run are then held packed only (_hold_packed)
        self._packable = [] if os.environ.get("CAFFE2PY_KEEP_WEIGHTS", "0") not in ("", "0") else \
            packable_constants(self.predict_net, self.constants)
        self._packing = threading.Lock()

    def _feeds(self, inputs):
        if isinstance(inputs, dict):
            return {name: _as_value(v) for name, v in inputs.items()}
        if isinstance(inputs, np.ndarray) or np.isscalar(inputs):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) > len(self.input_names):
            raise Caffe2Error("the model takes %d inputs (%s) but %d were given"
                              % (len(self.input_names), ", ".join(self.input_names), len(inputs)))
        return {name: _as_value(v) for name, v in zip(self.input_names, inputs)}

    def _check_input(self, name, value):
        if name in self.declared:
            check_input(name, value, *self.declared[name])

    def run(self, inputs, **kwargs):
        feeds = self._feeds(inputs)
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise Caffe2Error("missing model input(s): %s" % ", ".join(missing))
        for name, value in feeds.items():
            self._check_input(name, value)
        blobs = dict(self.constants)
        blobs.update(feeds)
        if self.plan is not None:
            self.plan.run(blobs)
        # Ops may return views of their inputs: an output sharing memory with a
        # fed array or a constant is copied, so callers own what they get.
        shared = {id(_root(v)) for v in feeds.values() if isinstance(v, np.ndarray)} | self._constant_roots
        outputs = tuple(_owned(blobs[name], shared) for name in self.output_names)
        if self._packable and self.plan is not None:
            del blobs           # this run's references to the weights
            self._hold_packed()
        return outputs

    def _hold_packed(self):
        """After the first run: each weight only a packing kernel reads, and which it
        has packed into a layout that rebuilds it, is held as that packed copy alone
        (packed_weights.stand_in): the model owns its constants, as an onnxruntime
        session owns the initializers its pre-packing frees (light_resnet50: 87 of its
        97 MB of weights)."""
        with self._packing:
            names, self._packable = self._packable, []
            held = 0
            for name in names:
                standing = stand_in(self.constants[name])
                if standing is not None:
                    self.constants[name] = standing
                    held += standing.nbytes
            if held:
                hand_back_freed()      # the originals' pages: the heap keeps freed memory (host_memory.py)
            self._constant_roots = _roots(self.constants)


def packable_constants(net, constants):
    """Names of the float32 array constants that every op reading them reads at one of
    its schema's packed_inputs (the conv family's filter), that no op writes and that
    are not outputs of the net."""
    readers_ok = {}
    written = set(net.external_output)
    for op in net.op:
        schema = schema_for(op.type)
        packed = schema.packed_inputs if schema is not None else frozenset()
        for i, name in enumerate(op.input):
            if name in constants:
                readers_ok[name] = readers_ok.get(name, True) and i in packed
        written.update(op.output)
    return [name for name, ok in readers_ok.items()
            if ok and name not in written and isinstance(constants[name], np.ndarray)
            and constants[name].dtype == np.float32]


def _apply_optimizer(optimize, constants, predict_net):
    """Run the optional NetDef optimiser; if it fails, keep the unoptimised net
    (its results are the reference) and say why in the log."""
    before = dict(constants)
    try:
        result = optimize(constants, predict_net)
    except Exception as exc:  # noqa: BLE001 - an optimiser bug must not stop the model
        log.warning("caffe2py.optimize failed on net '%s' (%s: %s); running it unoptimised",
                    predict_net.name, type(exc).__name__, exc)
        return before, predict_net
    if isinstance(result, tuple) and len(result) == 2:
        constants, result = result
    return _without_replaced(constants, predict_net, result), result


def _without_replaced(constants, before, after):
    """The constants less those the optimiser replaced: read by the net before, named
    nowhere in the optimised net (an unfolded conv weight once its BN-folded copy
    exists). Kept, they doubled the weights' memory (light_resnet50: 196 MB, not 98)."""
    from caffe2py.optimize import _readers
    read_before = _readers(before)
    # the optimised net's external_input still lists every constant it started with
    named = _names(after, set(after.external_output)) | set(before.external_output)
    return {name: value for name, value in constants.items() if name not in read_before or name in named}


def _names(net, found):
    """Add every name the ops of a net (and of each net nested in their arguments)
    could mean a blob by: inputs, outputs, string arguments (a step net's links name
    blobs), nested nets' declared inputs and outputs."""
    for op in net.op:
        found.update(op.input, op.output)
        for a in op.arg:
            for text in ([a.s] if a.HasField("s") else []) + list(a.strings):
                found.add(text.decode("utf-8", "replace"))
            for sub in ([a.n] if a.HasField("n") else []) + list(a.nets):
                found.update(sub.external_input, sub.external_output)
                _names(sub, found)
    return found


def _trust_policy(model, trusted, data_roots):
    if isinstance(model, (str, os.PathLike)):
        return model_trust.loader_policy([os.fspath(model)], data_roots, trusted)
    if trusted is not None or data_roots is not None:
        return model_trust.policy_for((), data_roots or (), bool(trusted))
    return model_trust.current()


class Caffe2pyBackend(Backend):
    @classmethod
    def prepare(cls, model, device="CPU", trusted=None, data_roots=None, **kwargs):
        """A model file (a path) follows the model-trust policy unless trusted: its
        caffe2-domain nodes may not unpickle code nor touch files outside data_roots
        (caffe2py/model_trust.py). A ModelProto or bytes follows the caller's policy."""
        if not cls.supports_device(device):
            raise Caffe2Error("caffe2py's ONNX backend runs on CPU only, not '%s'" % device)
        with model_trust.applying(_trust_policy(model, trusted, data_roots)):
            model = load_model(model)
            init_net, predict_net = convert(model)
            return Caffe2pyRep(init_net, predict_net, graph_inputs(model), declared_inputs(model))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        import caffe2py.operators  # noqa: F401
        if not cls.supports_device(device):
            raise Caffe2Error("caffe2py's ONNX backend runs on CPU only, not '%s'" % device)
        opset = int(kwargs.get("opset_version", 0) or 0)
        if not opset:
            import onnx
            opset = onnx.defs.onnx_opset_version()
        domain = node_domain(node)
        if not is_supported(domain, node.op_type, opset):
            raise Caffe2Error("the model uses 1 op(s) caffe2py cannot run: %s-%d" % (node.op_type, opset))
        op = node_to_op(node, {node.domain or "": opset, "": opset})
        net = caffe2_pb2.NetDef(name="run_node_%s" % node.op_type)
        net.op.append(op)
        names = [n for n in node.input if n]
        if isinstance(inputs, dict):
            blobs = {k: _as_value(v) for k, v in inputs.items()}
        else:
            blobs = {n: _as_value(v) for n, v in zip(names, inputs)}
        net.external_input.extend(blobs)
        net.external_output.extend(o for o in op.output)
        compile_net(net, known_blobs=blobs.keys()).run(blobs)
        return tuple(blobs[o] for o in node.output if o)

    @classmethod
    def supports_device(cls, device):
        try:
            return Device(device).type == DeviceType.CPU
        except Exception:  # noqa: BLE001 - unknown device strings are simply unsupported
            return False


prepare = Caffe2pyBackend.prepare
run_model = Caffe2pyBackend.run_model
run_node = Caffe2pyBackend.run_node
supports_device = Caffe2pyBackend.supports_device
is_compatible = Caffe2pyBackend.is_compatible
