"""`caffe2py score`: run a model over a dataset of Parquet / .npz / .npy shards and
write its outputs next to the rows' ids, one Parquet file per shard; resumable.
Locally (in this process or --workers processes) or on a Ray cluster (--ray)."""
import sys

from caffe2py.errors import Caffe2Error

NAME = "score"
HELP = "score a dataset of Parquet/.npz/.npy shards with a model, locally or on Ray (resumable)"


def add_arguments(parser):
    parser.add_argument("dataset", nargs="+", help="folders, globs or files of .parquet, .npz and .npy shards")
    parser.add_argument("-o", "--output-dir", required=True,
                        help="where the outputs go: one Parquet file per input shard, named after it")
    parser.add_argument("--model", help="an ONNX model (.onnx)")
    parser.add_argument("--predict-net", help="Caffe2 predict NetDef (.pb binary or text; an .onnx file works too)")
    parser.add_argument("--init-net", help="Caffe2 init NetDef with the parameters")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per net run (default 64)")
    parser.add_argument("--keep", action="append", default=[], metavar="BLOB[,BLOB...]",
                        help="outputs to write (default: the net's external outputs)")
    parser.add_argument("--workers", type=int, default=1,
                        help="local worker processes (default 1: this process); with --ray, Ray actors")
    parser.add_argument("--id-column", default="id",
                        help="column (Parquet) or array (.npz) with the rows' ids (default 'id'; "
                             "absent: row numbers)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=d1,d2,...",
                        help="shape of one row of input NAME when the model does not declare it")
    parser.add_argument("--dtype", action="append", default=[], metavar="NAME=TYPE",
                        help="element type of input NAME (raw-bytes columns need it)")
    parser.add_argument("--ray", metavar="ADDRESS|auto",
                        help="run on Ray Data: a cluster address, or 'auto' (a running cluster, else a local one)")


def _pairs(specs, option):
    out = {}
    for spec in specs:
        if "=" not in spec:
            raise Caffe2Error("%s expects NAME=VALUE, got '%s'" % (option, spec))
        name, value = spec.split("=", 1)
        out[name] = value
    return out


def _shapes(specs):
    shapes = {}
    for name, value in _pairs(specs, "--shape").items():
        try:
            shapes[name] = tuple(int(d) for d in value.split(",") if d.strip())
        except ValueError:
            raise Caffe2Error("--shape %s=%s: dims must be integers, e.g. %s=1,28,28" % (name, value, name)) from None
    return shapes


def model_spec(args):
    from caffe2py.scoring import ModelSpec
    onnx_path, predict = args.model, args.predict_net
    if predict and predict.endswith(".onnx") and not args.init_net:
        onnx_path, predict = predict, None
    if onnx_path and predict:
        raise Caffe2Error("give either --model (ONNX) or --predict-net, not both")
    keep = tuple(b for item in args.keep for b in item.split(",") if b)
    # the workers (processes, Ray actors) get the command's model-trust policy from the spec
    from caffe2py.model_trust import env_trusts
    return ModelSpec(onnx=onnx_path, predict_net=predict, init_net=args.init_net, outputs=keep,
                     shapes=_shapes(args.shape), dtypes=_pairs(args.dtype, "--dtype"),
                     trusted=bool(getattr(args, "trust_model", False) or env_trusts()),
                     data_roots=tuple(getattr(args, "data_root", ())))


def run(args):
    from caffe2py.scoring import run_job
    spec = model_spec(args)
    where = "Ray (%s)" % args.ray if args.ray else "%d local worker%s" % (args.workers, "" if args.workers == 1 else "s")
    print("scoring with %s on %s, batch size %d" % (spec.describe(), where, args.batch_size))
    summary = run_job(spec, args.dataset, args.output_dir, batch_size=args.batch_size, workers=args.workers,
                      id_column=args.id_column, ray_address=args.ray)
    for result in summary.failed:
        sys.stderr.write("caffe2py score: error: %s\n" % result.error)
    print(summary.text())
    print("outputs in %s" % args.output_dir)
    return 1 if summary.failed else 0
