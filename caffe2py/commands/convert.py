"""`caffe2py convert`: an ONNX model becomes an init NetDef and a predict NetDef."""
from caffe2py.errors import Caffe2Error

NAME = "convert"
HELP = "convert an ONNX model into Caffe2 init and predict NetDefs"


def add_arguments(parser):
    parser.add_argument("model", help="ONNX model file (.onnx)")
    parser.add_argument("--init-net", required=True, help="where to write the init NetDef")
    parser.add_argument("--predict-net", required=True, help="where to write the predict NetDef")
    parser.add_argument("--text", action="store_true", help="write text-format protobuf instead of binary")
    parser.add_argument("--no-fold", action="store_true",
                        help="keep constant-only nodes in the predict net (no load-time folding)")


def _write(net, path, text):
    from google.protobuf import text_format
    data = text_format.MessageToString(net).encode() if text else net.SerializeToString()
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise Caffe2Error("cannot write '%s': %s" % (path, exc.strerror or exc)) from None


def run(args):
    from caffe2py.onnx import convert
    init_net, predict_net = convert(args.model, fold_constants=not args.no_fold)
    _write(init_net, args.init_net, args.text)
    _write(predict_net, args.predict_net, args.text)
    print("wrote init net '%s' (%d ops) to %s" % (init_net.name, len(init_net.op), args.init_net))
    print("wrote predict net '%s' (%d ops) to %s" % (predict_net.name, len(predict_net.op), args.predict_net))
    print("inputs: %s" % ", ".join(b for b in predict_net.external_input
                                   if b not in set(init_net.external_output)))
    print("outputs: %s" % ", ".join(predict_net.external_output))
    return 0
