"""The shape-inference report: one row per blob (dims, dim types, dtype, bytes,
producer), the blobs left unknown with the reason, and memory totals at the
bound. Shared by `caffe2py shapes`, `caffe2py run --report` and `caffe2py bench`."""
import json

from .bound_execution import memory_summary
from .proto import caffe2_pb2
from .schema_inference import infer_net
from .shape_hints import check_hints_against_net
from .shape_inference import (SHORT_DIM_NAMES, BoundShapeInferencer, DimType, ShapeInfo, constant_shape_info,
                              dtype_name, int8_q_info, is_quantized_int8_op, with_default_dim_types)


def parameter_shapes(init_net=None, workspace_blobs=None):
    """{name: ShapeInfo} of the parameters, all dims CONSTANT: from blobs already in
    a workspace, else from the init net's static schema inference (nothing runs)."""
    params = {}
    if workspace_blobs:
        for name, value in workspace_blobs.items():
            info = constant_shape_info(value)
            if info is not None:
                params[name] = info
    if init_net is not None:
        for name, t in infer_net([init_net], {}).items():
            if t.known and name not in params:
                params[name] = ShapeInfo(list(t.dims), [DimType.CONSTANT] * len(t.dims),
                                         t.dtype if t.dtype is not None else caffe2_pb2.TensorProto.FLOAT)
        for op in init_net.op:      # Int8GivenTensorFill and friends make quantized blobs
            if is_quantized_int8_op(op):
                for b in op.output:
                    if b in params and not params[b].is_quantized:
                        params[b].is_quantized, params[b].q_info = True, int8_q_info(op)
        produced = [b for op in init_net.op for b in op.output]
        if any(b not in params for b in produced):
            params.update(_run_init_net(init_net, [b for b in produced if b not in params]))
    return params


def _run_init_net(init_net, names):
    """Shapes the schemas cannot tell statically (e.g. folded constants): run the init net."""
    from .workspace import Workspace
    ws = Workspace("shape_report_init")
    ws.run_net_once(init_net)
    return {n: constant_shape_info(ws.blobs[n]) for n in names
            if n in ws.blobs and constant_shape_info(ws.blobs[n]) is not None}


def input_hints_at_bound(inputs, spec):
    """Hints for fed inputs: their dims with the first one raised to the batch bound."""
    hints = {}
    for name, value in inputs.items():
        shape = list(getattr(value, "shape", ()))
        info = constant_shape_info(value)
        if info is None:
            continue
        if shape:
            shape[0] = spec.max_batch_size
        hints[name] = with_default_dim_types(shape, info.dtype)
    return hints


class ShapeReport:
    """Bound shapes of one net plus what a reader needs to judge them."""

    def __init__(self, net_def, spec, shapes, unknown, producers, parameters, warnings=()):
        self.net_def = net_def
        self.spec = spec
        self.shapes = shapes
        self.unknown = unknown
        self.producers = producers
        self.parameters = set(parameters)
        self.warnings = list(warnings)
        self.memory = memory_summary(net_def, shapes, self.parameters)

    def blob_order(self):
        """External inputs, then blobs in the order ops touch them."""
        seen = []
        for name in list(self.net_def.external_input):
            if name not in seen:
                seen.append(name)
        for op in self.net_def.op:
            for name in list(op.input) + list(op.output):
                if name not in seen:
                    seen.append(name)
        return seen

    def source(self, name):
        if name in self.producers:
            return self.producers[name]
        return "(parameter)" if name in self.parameters else "(input)"

    def rows(self):
        out = []
        for name in self.blob_order():
            info = self.shapes.get(name)
            if info is None:
                continue
            out.append({"name": name, "dims": list(info.dims),
                        "dim_types": [DimType(t).name for t in info.dim_types],
                        "dtype": dtype_name(info.dtype), "quantized": info.is_quantized,
                        "bytes": info.nbytes, "producer": self.source(name),
                        "kind": "parameter" if name in self.parameters else "activation"})
        return out

    def unknown_rows(self):
        return [{"name": n, "reason": self.unknown[n], "producer": self.source(n)}
                for n in self.blob_order() if n in self.unknown]

    def to_json(self):
        return {"net": self.net_def.name,
                "spec": {"max_batch_size": self.spec.max_batch_size, "max_seq_size": self.spec.max_seq_size},
                "blobs": self.rows(), "unknown": self.unknown_rows(), "totals": dict(self.memory),
                "warnings": self.warnings}

    def json_text(self):
        return json.dumps(self.to_json(), indent=2)

    def table(self):
        rows = self.rows()
        head = ("blob", "dims", "dim types", "dtype", "bytes", "producer")
        cells = [(r["name"], "[%s]" % ", ".join(str(d) for d in r["dims"]),
                  "(%s)" % ",".join(SHORT_DIM_NAMES[DimType[t]] for t in r["dim_types"]),
                  r["dtype"] + (" q" if r["quantized"] else ""), str(r["bytes"]), r["producer"])
                 for r in rows]
        widths = [max([len(head[i])] + [len(c[i]) for c in cells]) for i in range(len(head))]
        fmt = "  ".join("%%-%ds" % w if i != 4 else "%%%ds" % w for i, w in enumerate(widths))
        lines = ["bound shapes of net '%s' (max batch size %d, max sequence size %d)"
                 % (self.net_def.name or "<unnamed>", self.spec.max_batch_size, self.spec.max_seq_size),
                 "dim types: B batch, S max sequence, BxS batch of sequences, FM feature max, C constant", "",
                 (fmt % head).rstrip(), fmt % tuple("-" * w for w in widths)]
        lines += [(fmt % c).rstrip() for c in cells]
        unknown = self.unknown_rows()
        lines.append("")
        if unknown:
            lines.append("unknown blobs (%d):" % len(unknown))
            lines += ["  %s: %s" % (u["name"], u["reason"]) for u in unknown]
        else:
            lines.append("unknown blobs: none")
        if self.warnings:
            lines += ["", "warnings (%d):" % len(self.warnings)] + ["  " + w for w in self.warnings]
        m = self.memory
        n_params = sum(1 for r in rows if r["kind"] == "parameter")
        lines += ["", "totals:",
                  "  parameters:  %d blobs, %s" % (n_params, _bytes(m["parameter_bytes"])),
                  "  activations: %d blobs, %s at the bound" % (len(rows) - n_params, _bytes(m["activation_bytes"])),
                  "  all blobs:   %s; peak live activations %s" % (_bytes(m["total_bytes"]),
                                                                  _bytes(m["peak_live_activation_bytes"]))]
        return "\n".join(lines) + "\n"


def _bytes(n):
    return "%d bytes (%.3f MB)" % (n, n / 1e6)


def build_report(predict_net, spec, init_net=None, hints=None, workspace_blobs=None, inputs=None):
    """Infer bound shapes of predict_net and wrap them in a ShapeReport.

    hints: {name: ShapeInfo} from the user (checked against the net); inputs:
    {name: array} fed inputs (bound at their dims with batch raised to B);
    parameters come from workspace_blobs or the init net."""
    net_def = predict_net.Proto() if hasattr(predict_net, "Proto") else predict_net
    hints = dict(hints or {})
    check_hints_against_net(hints, net_def)
    params = parameter_shapes(init_net, {k: v for k, v in (workspace_blobs or {}).items()
                                         if k not in (inputs or {})})
    all_hints = dict(params)
    all_hints.update(input_hints_at_bound(inputs or {}, spec))
    all_hints.update(hints)
    inferencer = BoundShapeInferencer(spec, log_warnings=False)     # the report lists them
    shapes = inferencer.infer(net_def, all_hints)
    return ShapeReport(net_def, spec, shapes, inferencer.unknown, inferencer.producer,
                       [n for n in params if n not in hints], inferencer.warnings)
