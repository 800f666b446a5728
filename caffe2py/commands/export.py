"""`caffe2py export`: Caffe2 init and predict NetDefs become one ONNX model."""
from collections import OrderedDict

from caffe2py.errors import Caffe2Error

NAME = "export"
HELP = "export Caffe2 init and predict NetDefs to an ONNX model"


def add_arguments(parser):
    parser.add_argument("--predict-net", help="predict NetDef (.pb, binary or text)")
    parser.add_argument("--init-net", help="init NetDef with the parameters")
    parser.add_argument("--input", action="append", default=[], metavar="NAME:TYPE:DIMS",
                        help="a graph input, e.g. data:float32:1x3x224x224; a dim may be a name to stay "
                             "symbolic (batchx13, or batch,13 when a name holds an x) or ? (repeatable)")
    parser.add_argument("-o", "--output", help="the .onnx file to write")
    parser.add_argument("--opset", type=int, default=None,
                        help="target ai.onnx opset (default %s)" % _default_opset())
    parser.add_argument("--list", action="store_true", help="list the ops caffe2py exports and their ONNX forms")


def _default_opset():
    from caffe2py.onnx.frontend import DEFAULT_OPSET
    return DEFAULT_OPSET


def parse_input(text):
    """(name, type name, dims) from NAME:TYPE:DIMS; dims split on ',' if there is
    one, else on 'x'; a dim is an int, a symbolic name, or ? (unnamed)."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise Caffe2Error("--input %r: expected NAME:TYPE:DIMS, e.g. data:float32:1x3x224x224" % text)
    name, type_name, dims_text = parts
    dims = []
    if dims_text.strip():
        tokens = dims_text.split(",") if "," in dims_text else dims_text.split("x")
        for token in tokens:
            token = token.strip()
            if not token:
                raise Caffe2Error("--input %r: empty dim in '%s'" % (text, dims_text))
            if token.lstrip("-").isdigit():
                dims.append(int(token))
            else:
                dims.append(None if token == "?" else token)
    return name, type_name, dims


def _value_info(specs):
    value_info = OrderedDict()
    for text in specs:
        name, type_name, dims = parse_input(text)
        if name in value_info:
            raise Caffe2Error("--input '%s' is given twice" % name)
        value_info[name] = (type_name, dims)
    return value_info


def _dims_text(dims):
    if dims is None:
        return "[?]"
    return "[%s]" % ", ".join("?" if d is None else str(d) for d in dims)


def _print_list():
    from caffe2py.onnx.export_registry import exported_domains, translators
    import caffe2py.onnx.frontend  # noqa: F401 - registers the ai.onnx translator
    for t in translators(""):
        print("%-44s %s" % (t.op_type, t.onnx_form))
    for domain in exported_domains():
        print("%-44s %s" % ("every %s op" % domain, "the same op, at the target opset"))


def _print_mapping(mapped):
    groups = OrderedDict()
    for _, op_type, emitted in mapped:
        forms = groups.setdefault(op_type, OrderedDict())
        key = " + ".join(OrderedDict.fromkeys(emitted)) or "(nothing)"
        forms[key] = forms.get(key, 0) + 1
    print("mapped %d op(s):" % len(mapped))
    for op_type, forms in groups.items():
        for form, count in forms.items():
            print("  %-40s x%-4d -> %s" % (op_type, count, form))


def _print_unmapped(predict_net, unsupported):
    from caffe2py.onnx.export_registry import translator_for
    can = [op.type for op in predict_net.op if translator_for(op.type, op.domain) is not None]
    print("could map %d of %d op(s); could not map %d:" % (len(can), len(predict_net.op), len(unsupported)))
    for index, op_type in unsupported:
        print("  %s #%d" % (op_type, index))


def run(args):
    from caffe2py.models import read_net
    from caffe2py.onnx import frontend
    from caffe2py.onnx.export_op import ExportError
    if args.list:
        _print_list()
        return 0
    if not args.predict_net or not args.output:
        raise Caffe2Error("--predict-net and -o/--output are required (see --help)")
    predict_net = read_net(args.predict_net)
    init_net = read_net(args.init_net) if args.init_net else None
    try:
        result = frontend.export(predict_net, init_net, _value_info(args.input), args.opset)
    except ExportError as exc:
        if exc.unsupported:
            _print_unmapped(predict_net, exc.unsupported)
        raise
    frontend.save_model(result.model, args.output)
    _print_mapping(result.mapped)
    for name, t in result.inputs:
        print("input  %s: %s %s" % (name, t.dtype, _dims_text(t.dims)))
    for name, t in result.outputs:
        print("output %s: %s" % (name, "?" if t is None else "%s %s" % (t.dtype, _dims_text(t.dims))))
    for note in result.notes:
        print("note: %s" % note)
    opset = next(o.version for o in result.model.opset_import if o.domain == "")
    print("wrote %s: opset %d, IR version %d, %d initializer(s), %.1f MB of weights"
          % (args.output, opset, result.model.ir_version, result.initializers, result.initializer_bytes / 1e6))
    return 0
