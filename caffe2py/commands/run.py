"""`caffe2py run`: load an init net and a predict net, feed inputs, run, summarise outputs.
With no arguments it runs the built-in demo net."""
import sys

import numpy as np

from caffe2py.demo import build_demo
from caffe2py.errors import Caffe2Error
from caffe2py.models import read_input, read_net
from caffe2py.workspace import Workspace

from ._bound_args import add_bound_arguments, print_report_before_run, warn_out_of_bound

NAME = "run"
HELP = "run a net (NetDef files, or the built-in demo when none are given)"


def add_arguments(parser):
    parser.add_argument("model", nargs="?", help="an ONNX model (.onnx) to run instead of NetDef files; "
                        "inputs not given with --input get random values of their declared shapes")
    parser.add_argument("--init-net", help="init NetDef (.pb binary or text)")
    parser.add_argument("--predict-net", help="predict NetDef (.pb binary or text)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                        help="feed blob NAME from FILE (.npy, or a serialized TensorProto/BlobProto)")
    parser.add_argument("--output", action="append", default=[], metavar="NAME",
                        help="blob to print (default: the predict net's external outputs)")
    parser.add_argument("--iters", type=int, default=1, help="run the predict net this many times")
    parser.add_argument("--report", action="store_true",
                        help="print the bound shape report first; after the run, check every shape fits it")
    add_bound_arguments(parser)


def parse_inputs(specs):
    inputs = {}
    for spec in specs:
        if "=" not in spec:
            raise Caffe2Error("--input expects NAME=FILE, got '%s'" % spec)
        name, path = spec.split("=", 1)
        inputs[name] = read_input(path)
    return inputs


def summarize(name, value):
    arr = np.asarray(value)
    line = "%s: shape %s dtype %s" % (name, list(arr.shape), arr.dtype)
    if arr.size and arr.dtype.kind in "fiub":
        flat = arr.reshape(-1).astype(np.float64)
        line += "  min %.6g max %.6g mean %.6g" % (flat.min(), flat.max(), flat.mean())
        if arr.ndim >= 1 and arr.shape[-1] <= 16 and arr.size <= 64:
            line += "\n  " + np.array2string(arr, precision=5, max_line_width=100).replace("\n", "\n  ")
        elif arr.ndim >= 1:
            line += "  argmax(last axis) %s" % np.argmax(arr.reshape(-1, arr.shape[-1]), axis=1)[:8].tolist()
    return line


def load(args):
    """(init_net or None, predict_net, inputs, note) from the arguments or the demo."""
    if getattr(args, "model", None):
        if args.init_net or args.predict_net:
            raise Caffe2Error("give either an ONNX model or --init-net/--predict-net, not both")
        from caffe2py.onnx.inputs import load_for_run
        return load_for_run(args.model, parse_inputs(args.input))
    if args.predict_net is None:
        if args.init_net:
            raise Caffe2Error("--init-net given without --predict-net")
        init_net, predict_net, inputs = build_demo()
        return init_net, predict_net, inputs, "built-in demo net (LeNet-style CNN, random input)"
    init_net = read_net(args.init_net) if args.init_net else None
    return init_net, read_net(args.predict_net), parse_inputs(args.input), None


def net_inputs(predict_net):
    """The blobs a net reads from outside: its external inputs, or, when it declares
    none, what its ops read before any op writes them."""
    if len(predict_net.external_input):
        return list(predict_net.external_input)
    written, reads = set(), []
    for op in predict_net.op:
        reads += [b for b in op.input if b not in written and b not in reads]
        written.update(op.output)
    return reads


def check_inputs(predict_net, ws, inputs, require_all=True):
    """Every --input names an input of the net, and (require_all) every input has a
    value, from the init net or --input: the error lists what the net reads."""
    expected = net_inputs(predict_net)
    name = predict_net.name or "predict"
    unused = [n for n in inputs if n not in expected]
    if unused:
        raise Caffe2Error("--input %s: not an input of net '%s'; its inputs without a value from the init net "
                          "are: %s" % (", ".join("'%s'" % n for n in unused), name,
                                       ", ".join(b for b in expected if not ws.has_blob(b)) or "none"))
    missing = [b for b in expected if not ws.has_blob(b) and b not in inputs]
    if missing and require_all:
        raise Caffe2Error("net '%s' needs a value for %s: give --input NAME=FILE for each (the net's inputs "
                          "without a value from the init net: %s)"
                          % (name, ", ".join("'%s'" % b for b in missing),
                             ", ".join(b for b in expected if not ws.has_blob(b))))


def match_parameter_precision(ws, inputs, err=None):
    """float64 inputs of a float32 net (its initialised parameters are float32, none is
    float64) are cast to float32 with a note: Caffe2's float kernels would refuse
    doubles, and a silent float64 run computes and returns the wrong precision."""
    floats = {v.dtype for v in ws.blobs.values() if isinstance(v, np.ndarray) and v.dtype.kind == "f"}
    if np.dtype(np.float32) not in floats or np.dtype(np.float64) in floats:
        return inputs
    cast = dict(inputs)
    err = err or sys.stderr
    for name, value in inputs.items():
        if isinstance(value, np.ndarray) and value.dtype == np.float64:
            cast[name] = value.astype(np.float32)
            err.write("caffe2py: input '%s' is float64 and the net's parameters are float32: cast to float32 "
                      "(save the .npy as float32 to skip this)\n" % name)
    return cast


def prepare_workspace(init_net, predict_net, inputs):
    ws = Workspace("cli")
    if init_net is not None and len(init_net.op):   # an empty net has nothing to run
        ws.run_net_once(init_net)
    check_inputs(predict_net, ws, inputs)
    inputs = match_parameter_precision(ws, inputs)
    for name, value in inputs.items():
        ws.feed_blob(name, value)
    if not predict_net.name:
        predict_net.name = "predict"
    ws.create_net(predict_net)
    return ws


def run(args):
    init_net, predict_net, inputs, note = load(args)
    if note:
        print("note: %s" % note)
    ws = prepare_workspace(init_net, predict_net, inputs)
    report = print_report_before_run(args, predict_net, ws, inputs, sys.stdout) if args.report else None
    ws.run_net(predict_net.name, num_iter=max(args.iters, 1))
    if report is not None:
        warn_out_of_bound(report, ws, sys.stdout, sys.stderr)
    outputs = args.output or list(predict_net.external_output) or [predict_net.op[-1].output[0]]
    print("ran net '%s' (%d ops)" % (predict_net.name, len(predict_net.op)))
    for name in outputs:
        print(summarize(name, ws.fetch_blob(name)))
    return 0
