"""`caffe2py draw`: a picture of a net as Caffe2's net_drawer drew it (op boxes,
blob octagons), as DOT text, or SVG/PNG/PDF through Graphviz's `dot`; with
--shapes, each edge carries its blob's bound shape."""
import os
import sys

from caffe2py.errors import Caffe2Error

from ._bound_args import add_bound_arguments, add_net_arguments, hints_from, load_nets, spec_from

NAME = "draw"
HELP = "draw a net (ops as boxes, blobs as octagons) as .dot, .svg, .png or .pdf (Graphviz)"
FORMATS = ("dot", "svg", "png", "pdf")


def add_arguments(parser):
    add_net_arguments(parser)
    parser.add_argument("-o", "--output", metavar="FILE.{dot,svg,png,pdf}",
                        help="where to write the drawing (format from the extension); default: DOT text on stdout")
    parser.add_argument("--minimal", action="store_true", help="ops only, an edge where one op feeds another")
    parser.add_argument("--minimal-dependency", action="store_true",
                        help="with --minimal: leave out edges implied by longer paths")
    parser.add_argument("--append-output", action="store_true", help="list each op's output blobs in its box")
    parser.add_argument("--rankdir", default="LR", choices=("LR", "TB", "RL", "BT"),
                        help="direction of the layout (default LR, as Caffe2)")
    parser.add_argument("--shapes", action="store_true",
                        help="label edges with the blobs' bound shapes (inputs need --hint, the demo's and an "
                             "ONNX model's declared inputs have theirs)")
    add_bound_arguments(parser, default_batch=1)


def output_format(path):
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    ext = "dot" if ext == "gv" else ext
    if ext not in FORMATS:
        raise Caffe2Error("cannot tell the format of '%s': use a .dot, .svg, .png or .pdf file name" % path)
    return ext


def build_graph(args):
    from caffe2py import net_drawer
    init_net, predict_net, inputs, note = load_nets(args)
    shapes = None
    if args.shapes:
        from caffe2py.shape_report import build_report
        report = build_report(predict_net, spec_from(args), init_net=init_net, hints=hints_from(args),
                              inputs=inputs)
        shapes = report.shapes
    producer = net_drawer.GetOpNodeProducer(args.append_output, **net_drawer.OP_STYLE)
    name = predict_net.name or "net"
    if args.minimal:
        graph = net_drawer.GetPydotGraphMinimal(predict_net, name=name, rankdir=args.rankdir,
                                                minimal_dependency=args.minimal_dependency,
                                                op_node_producer=producer, shapes=shapes)
    else:
        graph = net_drawer.GetPydotGraph(predict_net, name=name, rankdir=args.rankdir, op_node_producer=producer,
                                         shapes=shapes)
    return graph, predict_net, note


def run(args):
    if args.minimal_dependency and not args.minimal:
        raise Caffe2Error("--minimal-dependency goes with --minimal")
    fmt = output_format(args.output) if args.output else "dot"
    graph, predict_net, note = build_graph(args)
    if not args.output:
        sys.stdout.write(graph.to_string())
        return 0
    data = graph.create(format=fmt)
    try:
        with open(args.output, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise Caffe2Error("cannot write '%s': %s" % (args.output, exc.strerror or exc)) from None
    if note:
        print("note: %s" % note)
    print("drew net '%s' (%d ops, %d nodes, %d edges) to %s"
          % (predict_net.name, len(predict_net.op), len(graph.get_nodes()), len(graph.get_edges()), args.output))
    return 0
