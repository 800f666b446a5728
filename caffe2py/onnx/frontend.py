"""Caffe2 NetDefs -> ONNX models (Caffe2's `caffe2.python.onnx.frontend`).

    from caffe2py.onnx import frontend          # or: from caffe2.python.onnx import frontend
    model = frontend.caffe2_net_to_onnx_model(predict_net, init_net,
                                              {"data": (onnx.TensorProto.FLOAT, (1, 3, 224, 224))})

How a net becomes a graph:
* the init net runs once in a private workspace; the blobs it writes become
  initializers (those the graph reads), names unchanged. Blobs named in
  value_info are graph inputs even when the init net fills them (Caffe2's
  "fake init" of the input);
* inputs of the predict net that the init net does not fill become graph
  inputs, typed from value_info (name -> (elem_type, shape); a dim may be a
  name or None to stay symbolic); shapes missing there are inferred by the
  BoundShapeInferencer where its rules can tell;
* blobs written more than once get SSA names (caffe2py/onnx/export_ssa.py);
* each op goes through the translator registered for its type
  (caffe2py/onnx/export_registry.py; Caffe2 ops in operators/*_export.py,
  ai.onnx ops in export_onnx_ops.py). Ops without one stop the export with an
  ExportError naming them, their index and the ops that are supported.
"""
from dataclasses import dataclass, field

import numpy as np

from caffe2py.errors import Caffe2Error, describe_op
from caffe2py.int8_tensor import Int8TensorCPU
from caffe2py.proto import caffe2_pb2

from . import export_onnx_ops  # noqa: F401 - registers the ai.onnx translator
from .export_op import ExportError, ExportOp, GraphBuilder
from .export_registry import exported_domains, exported_op_types, translator_for
from .export_shapes import infer_value_types
from . import export_model, export_ssa
from .export_ssa import NameScope, all_names
from .export_types import onnx_elem_type, numpy_of_onnx, parse_elem_type

DEFAULT_OPSET = 17
MIN_OPSET = 13
_TWO_GB = 2 ** 31 - 1


@dataclass
class ExportResult:
    """The model and what became of each op: `mapped` holds (op index, Caffe2 op
    type, ONNX op types written); `notes` things the user should know."""
    model: object
    mapped: list
    inputs: list
    outputs: list
    initializers: int
    initializer_bytes: int
    notes: list = field(default_factory=list)


# --------------------------------------------------------------------------- inputs

def _net_proto(net, what):
    if net is None:
        return None
    proto = net.Proto() if hasattr(net, "Proto") else net
    if not isinstance(proto, caffe2_pb2.NetDef):
        raise ExportError("%s must be a caffe2_pb2.NetDef or core.Net, got %s" % (what, type(net).__name__))
    copy = caffe2_pb2.NetDef()
    copy.CopyFrom(proto)
    return copy


def max_opset():
    import onnx
    return onnx.defs.onnx_opset_version()


def check_opset(opset):
    if opset is None:
        return DEFAULT_OPSET
    if isinstance(opset, bool) or not isinstance(opset, (int, np.integer)):
        raise ExportError("opset must be an integer, got %r" % (opset,))
    if not MIN_OPSET <= int(opset) <= max_opset():
        raise ExportError("opset %d is not supported: caffe2py exports ai.onnx opsets %d to %d"
                          % (opset, MIN_OPSET, max_opset()))
    return int(opset)


def parse_value_info(value_info):
    """{name: (numpy dtype, dims)} from Caffe2's {name: (elem_type, shape)}."""
    if value_info is None:
        return {}
    if not isinstance(value_info, dict):
        raise ExportError("value_info must be a dict name -> (elem_type, shape), got %s"
                          % type(value_info).__name__)
    parsed = {}
    for name, entry in value_info.items():
        what = "value_info['%s']" % name
        try:
            elem_type, shape = entry
        except (TypeError, ValueError):
            raise ExportError("%s must be a pair (elem_type, shape), got %r" % (what, entry)) from None
        dtype = numpy_of_onnx(parse_elem_type(elem_type, what))
        if shape is None or isinstance(shape, (str, bytes)):
            raise ExportError("%s: shape must be a sequence of dims, got %r" % (what, shape))
        dims = []
        for d in shape:
            if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
                if d < 0:
                    raise ExportError("%s: dim %d is negative" % (what, d))
                dims.append(int(d))
            elif d is None or (isinstance(d, str) and d):
                dims.append(d)
            else:
                raise ExportError("%s: dim %r must be an int, a name (symbolic) or None" % (what, d))
        parsed[name] = (dtype, tuple(dims))
    return parsed


def run_init_net(init_net, skip=(), quant=None):
    """{blob: ndarray} the init net writes (ops writing only `skip` blobs are left out).
    Int8 tensors give their data; `quant` (a dict) receives their (scale, zero point)."""
    if init_net is None:
        return {}
    from caffe2py.workspace import Workspace
    skip = set(skip)
    net = caffe2_pb2.NetDef()
    net.CopyFrom(init_net)
    del net.op[:]
    net.op.extend(op for op in init_net.op if not (op.output and set(op.output) <= skip))
    del net.external_output[:]
    ws = Workspace("caffe2py-onnx-export")
    try:
        ws.run_net_once(net)
    except Caffe2Error as exc:
        raise ExportError("the init net '%s' failed to run: %s" % (init_net.name or "<unnamed>", exc)) from None
    values = {}
    for op in net.op:
        for name in op.output:
            if name not in skip and name in ws.blobs:
                value = ws.blobs[name]      # read only: no copy of what may be gigabytes
                if isinstance(value, Int8TensorCPU):
                    values[name] = value.data
                    if quant is not None:
                        quant[name] = (value.scale, value.zero_point)
                    continue
                values[name] = value if isinstance(value, np.ndarray) else ws.fetch_blob(name)
    return values


def _read_before_written(net):
    """Blobs ops read before any op writes them, in order of first read."""
    written, needed = set(), []
    for op in net.op:
        for name in op.input:
            if name not in written and name not in needed:
                needed.append(name)
        written.update(op.output)
    return needed


# --------------------------------------------------------------------------- checks

def _supported_list():
    names = exported_op_types("")
    text = ", ".join(names)
    for domain in exported_domains():
        text += "; and every %s op" % domain
    return text


def _check_translatable(net, opset):
    missing, too_new = [], []
    for index, op in enumerate(net.op):
        translator = translator_for(op.type, op.domain)
        if translator is None:
            missing.append((index, op))
        elif translator.min_opset > opset:
            too_new.append((index, op, translator.min_opset))
    if missing:
        first = missing[0]
        others = "" if len(missing) == 1 else " (and %d more: %s)" % (
            len(missing) - 1, ", ".join("%s #%d" % (op.type, i) for i, op in missing[1:6])
            + (", ..." if len(missing) > 6 else ""))
        raise ExportError("%s has no ONNX translation%s. Ops caffe2py exports: %s"
                          % (describe_op(*first), others, _supported_list()),
                          unsupported=[(i, op.type) for i, op in missing])
    if too_new:
        index, op, need = too_new[0]
        raise ExportError("%s: its translation needs opset %d or later, the target is %d (--opset)"
                          % (describe_op(index, op), need, opset))


# --------------------------------------------------------------------------- graph

def _tensor_value_info(name, value_type):
    from onnx import helper
    dims = None if value_type.dims is None else list(value_type.dims)
    return helper.make_tensor_value_info(name, onnx_elem_type(value_type.dtype), dims)


def _graph_input_names(predict, given, constants, notes):
    """Blobs the graph takes as inputs: external inputs (and, when the net declares
    none, whatever ops read first) that the init net does not fill."""
    needed = [n for n in _read_before_written(predict) if n not in constants]
    declared = [n for n in dict.fromkeys(predict.external_input) if n not in constants]
    names = [n for n in declared if n in given or n in needed]
    # with external_input declared, a blob it does not list is an input only by value_info
    names += [n for n in needed if n not in names and (n in given or not declared)]
    for name in declared:
        if name not in names:
            notes.append("external input '%s' is not read by any op and has no value_info: left out" % name)
    return names


def _input_types(input_names, given, types, notes):
    """[(name, ValueType)] of the graph inputs: value_info's, else inferred ones."""
    found = []
    for name in input_names:
        if name in given:
            found.append((name, _given_type(given[name])))
            continue
        t = types.get(name)
        if t is None or t.dims is None or t.dtype is None:
            raise ExportError("input '%s' has no shape: give it in value_info as name -> (elem_type, shape) "
                              "(caffe2py export: --input %s:TYPE:D1xD2...); the shape rules of the ops "
                              "that read it cannot tell it" % (name, name))
        notes.append("input '%s' has no value_info: its shape %s was inferred" % (name, list(t.dims)))
        found.append((name, t))
    return found


def _translate(builder, ssa, predict, defined):
    """Run every op's translator; [(index, op type, ONNX op types written)]."""
    mapped, produced = [], set(defined)
    for index, (op, original) in enumerate(zip(ssa.ops, predict.op)):
        ex = ExportOp(builder, op, index, original)
        start = len(builder.nodes)
        try:
            translator_for(op.type, op.domain).translate(ex)
        except Caffe2Error:
            raise
        except Exception as exc:  # noqa: BLE001 - a translator's own bug still names the op
            raise ExportError("%s: the ONNX translation failed: %s: %s"
                              % (ex.label, type(exc).__name__, exc)) from exc
        produced.update(o for node in builder.nodes[start:] for o in node.output)
        for k, name in enumerate(ex.outputs):
            if name not in produced and ex.is_read(k):
                raise ExportError("%s: the translation did not write output '%s'" % (ex.label, original.output[k]))
        mapped.append((index, op.type, ex.emitted))
    return mapped


def _output_infos(predict, ssa, types):
    """(graph output ValueInfoProtos, {untyped value: Caffe2 name})."""
    from onnx import helper
    outputs, untyped = [], {}
    for name in predict.external_output:
        final = ssa.outputs[name]
        t = types.get(final)
        if t is None or t.dtype is None:
            outputs.append(helper.make_empty_tensor_value_info(final))
            untyped[final] = name
        else:
            outputs.append(_tensor_value_info(final, t))
    return outputs, untyped


def export(predict_net, init_net=None, value_info=None, opset=None):
    """ExportResult for the nets (the model and what became of each op)."""
    import caffe2py.operators  # noqa: F401 - registers ops and their translators

    opset = check_opset(opset)
    predict = _net_proto(predict_net, "predict_net")
    if predict is None:
        raise ExportError("predict_net is required")
    init = _net_proto(init_net, "init_net")
    given = parse_value_info(value_info)
    notes = []

    _check_translatable(predict, opset)
    quant = {}
    constants = run_init_net(init, skip=given, quant=quant)
    input_names = _graph_input_names(predict, given, constants, notes)
    scope = NameScope(all_names(predict) | (all_names(init) if init is not None else set())
                      | set(constants) | set(given))
    ssa = export_ssa.ssa_rewrite(predict, set(input_names) | set(constants), scope)
    for name in ssa.renamed_outputs:
        notes.append("output '%s' overwrites an input of the same name: exported as '%s'"
                     % (name, ssa.outputs[name]))
    types, _ = infer_value_types(ssa.ops, predict.name or "predict",
                                 {n: given[n] for n in input_names if n in given}, constants)
    ins = _input_types(input_names, given, types, notes)

    reads = {}
    for op in ssa.ops:
        for name in op.input:
            reads[name] = reads.get(name, 0) + 1
    builder = GraphBuilder(opset, scope, types, dict(constants), reads,
                           [ssa.outputs[n] for n in predict.external_output], ssa.original)
    builder.quant.update(quant)
    mapped = _translate(builder, ssa, predict, set(input_names) | set(constants))
    _constant_outputs(builder, ssa, predict, constants, notes)

    used = {name for node in builder.nodes for name in node.input if name}
    initializers = {n: v for n, v in builder.constants.items() if n in used and n not in set(input_names)}
    total = sum(np.asarray(v).nbytes for v in initializers.values())
    dropped = sorted(n for n in constants if n not in used)
    if dropped:
        notes.append("%d init net blob(s) the exported graph does not read were left out: %s"
                     % (len(dropped), ", ".join(dropped[:8]) + (", ..." if len(dropped) > 8 else "")))

    outputs, untyped = _output_infos(predict, ssa, types)
    model = export_model.make_model(builder.nodes, predict.name or "caffe2py_export",
                                    [_tensor_value_info(n, t) for n, t in ins], outputs, builder.opsets,
                                    _version())
    export_model.check_and_type_outputs(model, initializers, untyped)
    export_model.add_initializers(model, initializers)
    if total >= _TWO_GB:
        notes.append("the initializers hold %.1f GB, over protobuf's 2 GB: save_model writes them as "
                     "external data" % (total / 1e9))
    outs = [(ssa.outputs[n], types.get(ssa.outputs[n])) for n in predict.external_output]
    return ExportResult(model, mapped, ins, outs, len(initializers), total, notes)


def save_model(model, path):
    """Write the model atomically (no partial file on failure); over 2 GB the
    initializers go to `<path>.data`. Returns the path."""
    return export_model.save_model(model, path)


def _constant_outputs(builder, ssa, predict, constants, notes):
    """A net output that is an init net blob no op rewrites: ONNX outputs must come
    from nodes (or inputs), so an Identity writes it under a new name."""
    from onnx import helper
    for name in predict.external_output:
        final = ssa.outputs[name]
        if final in constants:
            out = builder.scope.unique(final + "_output")
            builder.add_node(helper.make_node("Identity", [final], [out], name=builder.node_name(out)))
            builder.types[out] = builder.types[final]
            ssa.outputs[name] = out
            notes.append("output '%s' is an init net constant: exported as '%s' (an Identity of it)"
                         % (name, out))


def _given_type(spec):
    from .export_shapes import ValueType
    dtype, dims = spec
    return ValueType(tuple(dims), np.dtype(dtype))


def _version():
    from caffe2py import __version__
    return __version__


# --------------------------------------------------------------------------- Caffe2's API

def caffe2_net_to_onnx_graph(predict_net, init_net=None, value_info=None, opset=None):
    """onnx.GraphProto of the nets (Caffe2's signature; `opset` picks the target)."""
    return export(predict_net, init_net, value_info, opset).model.graph


def caffe2_net_to_onnx_model(predict_net, init_net=None, value_info=None, opset=None):
    """onnx.ModelProto of the nets, checked by onnx.checker (Caffe2's signature)."""
    return export(predict_net, init_net, value_info, opset).model


def caffe2_init_net_to_initializer(init_net):
    """onnx TensorProtos of every blob the init net writes, sorted by name."""
    from onnx import numpy_helper
    values = run_init_net(_net_proto(init_net, "init_net"))
    return [numpy_helper.from_array(np.asarray(values[name]), name) for name in sorted(values)]


def ssa_rewrite(net, init_net=None, value_info=None):
    """Rewrite `net` in place so every blob is written once (Caffe2's ssa_rewrite;
    inputs and the blobs the init net writes keep their names)."""
    defined = set(net.external_input) | set(value_info or {})
    if init_net is not None:
        defined |= {o for op in init_net.op for o in op.output}
    scope = NameScope(all_names(net))
    ssa = export_ssa.ssa_rewrite(net, defined, scope)
    del net.op[:]
    net.op.extend(ssa.ops)
    net.external_output[:] = [ssa.outputs[n] for n in net.external_output]
    return net


class Caffe2Frontend:
    """Caffe2's class spelling of the same entry points."""
    target_opset_version = DEFAULT_OPSET

    @classmethod
    def caffe2_net_to_onnx_graph(cls, predict_net, init_net=None, value_info=None):
        return caffe2_net_to_onnx_graph(predict_net, init_net, value_info, cls.target_opset_version)

    @classmethod
    def caffe2_net_to_onnx_model(cls, predict_net, init_net=None, value_info=None):
        return caffe2_net_to_onnx_model(predict_net, init_net, value_info, cls.target_opset_version)

    caffe2_init_net_to_initializer = staticmethod(caffe2_init_net_to_initializer)
    ssa_rewrite = staticmethod(ssa_rewrite)
