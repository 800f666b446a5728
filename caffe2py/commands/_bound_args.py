"""Arguments and net loading shared by `shapes`, `bench` and `run --report`."""
from caffe2py.demo import build_demo
from caffe2py.errors import Caffe2Error
from caffe2py.models import read_net
from caffe2py.shape_hints import parse_shape_hints
from caffe2py.shape_inference import BoundShapeSpec


def add_net_arguments(parser):
    parser.add_argument("--predict-net", help="predict NetDef (.pb binary or text, or an .onnx model)")
    parser.add_argument("--init-net", help="init NetDef with the parameters")


def add_bound_arguments(parser, default_batch=None):
    parser.add_argument("--max-batch-size", type=int, default=default_batch,
                        help="the batch bound B%s" % ("" if default_batch is None else " (default %d)" % default_batch))
    parser.add_argument("--max-seq-size", type=int, default=100, help="the sequence bound S (default 100)")
    parser.add_argument("--hint", action="append", default=[], metavar="'name,d1,d2[,type]#...'",
                        help="shape hints in Caffe2's format (repeatable); first dim is BATCH")


def spec_from(args, fallback_batch=1):
    batch = args.max_batch_size if args.max_batch_size is not None else fallback_batch
    return BoundShapeSpec(batch, args.max_seq_size)


def hints_from(args, spec=None):
    """--hint values, on top of the declared input shapes of an ONNX model."""
    hints = {}
    if getattr(args, "onnx_hints", None):
        hints.update(bind_onnx_hints(args.onnx_hints, spec or spec_from(args)))
    if args.hint:
        hints.update(parse_shape_hints("#".join(args.hint)))
    return hints


def _read_onnx(path):
    try:
        from caffe2py import onnx as c2onnx
        convert = c2onnx.convert
    except (ImportError, AttributeError):
        raise Caffe2Error("'%s' is an ONNX model but this build has no caffe2py.onnx.convert" % path) from None
    import onnx
    model = onnx.load(path)
    init_net, predict_net = convert(model)
    return init_net, predict_net, onnx_input_hints(model)


def onnx_input_hints(model, batch=None):
    """Hints from the graph inputs' declared types: a symbolic first dim is BATCH
    (filled in with the bound later), fixed dims are kept; inputs with other
    symbolic dims get no hint."""
    from caffe2py.onnx.convert import graph_inputs
    from caffe2py.tensors import data_type_of
    from onnx import helper
    wanted = set(graph_inputs(model))
    hints = {}
    for value in model.graph.input:
        if value.name not in wanted or not value.type.HasField("tensor_type"):
            continue
        t = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if not dims or any(d is None for d in dims[1:]):
            continue
        try:
            dtype = data_type_of(helper.tensor_dtype_to_np_dtype(t.elem_type))
        except Exception:  # noqa: BLE001 - an exotic element type: no hint
            continue
        hints[value.name] = (dims, dtype)
    return hints


def bind_onnx_hints(raw, spec):
    """{name: ShapeInfo} from onnx_input_hints with the batch dim set to the bound."""
    from caffe2py.shape_inference import with_default_dim_types
    out = {}
    for name, (dims, dtype) in raw.items():
        dims = [spec.max_batch_size] + [int(d) for d in dims[1:]]
        out[name] = with_default_dim_types(dims, dtype)
    return out


def load_nets(args):
    """(init_net or None, predict_net, demo inputs or {}, note or None)."""
    if args.predict_net is None:
        if args.init_net:
            raise Caffe2Error("--init-net given without --predict-net")
        init_net, predict_net, inputs = build_demo()
        return init_net, predict_net, inputs, "built-in demo net (LeNet-style CNN)"
    if args.predict_net.endswith(".onnx"):
        init_net, predict_net, raw_hints = _read_onnx(args.predict_net)
        args.onnx_hints = raw_hints
        return init_net, predict_net, {}, "ONNX model converted to Caffe2 nets"
    init_net = read_net(args.init_net) if args.init_net else None
    predict_net = read_net(args.predict_net)
    if not predict_net.name:
        predict_net.name = "predict"
    return init_net, predict_net, {}, None


# ----------------------------------------------------------------- run --report

def print_report_before_run(args, predict_net, ws, inputs, out):
    """The report of the net about to run: parameters are the workspace's blobs,
    fed inputs are bound at their dims with the batch raised to B."""
    from caffe2py.shape_report import build_report
    fallback = 1
    for value in inputs.values():
        shape = getattr(value, "shape", ())
        if len(shape):
            fallback = int(shape[0]) or 1
            break
    report = build_report(predict_net, spec_from(args, fallback), hints=hints_from(args),
                          workspace_blobs=ws.blobs, inputs=inputs)
    out.write(report.table())
    return report


def warn_out_of_bound(report, ws, out, err):
    """After the run: every actual shape must fit its bound; name the op whose rule was wrong."""
    from caffe2py.bound_execution import out_of_bound_blobs
    problems = out_of_bound_blobs(ws.blobs, report.shapes, report.spec, report.producers)
    for _, message in problems:
        err.write("warning: %s\n" % message)
    if not problems:
        out.write("report check: all %d bound shapes hold after the run\n" % len(report.shapes))
    return problems
