"""`caffe2py shapes`: the bound-shape report of a net (the built-in demo when no
files are given): every blob's dims, dim types, dtype, bytes and producer, the
blobs left unknown with the reason, and memory totals at the bound."""
import sys

from caffe2py.shape_report import build_report

from ._bound_args import add_bound_arguments, add_net_arguments, hints_from, load_nets, spec_from

NAME = "shapes"
HELP = "print the bound shape inference report of a net"


def add_arguments(parser):
    add_net_arguments(parser)
    add_bound_arguments(parser, default_batch=32)
    parser.add_argument("--format", choices=("table", "json"), default="table")


def run(args):
    init_net, predict_net, inputs, note = load_nets(args)
    report = build_report(predict_net, spec_from(args), init_net=init_net, hints=hints_from(args), inputs=inputs)
    if args.format == "json":
        print(report.json_text())
        return 0
    if note:
        print("note: %s" % note)
    sys.stdout.write(report.table())
    return 0
