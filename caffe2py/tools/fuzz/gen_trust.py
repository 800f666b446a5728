"""The `trust` family: model files that try what the model-trust policy forbids
(caffe2py/model_trust.py, docs/security.md), loaded the ways users load them.

A case is a net of one op (plus a Relu that makes the output) written to files in a
sandbox:

    S/model/   the model files (readable by the model)
    S/data/    the --data-root (readable and writable); data/link -> S/outside,
               data/linkfile -> S/outside/secret.minidb
    S/outside/ everything else, with S/cwd the current folder while the case runs

and loaded by the command line (`run`, `bench`), models.read_net + a Workspace, the
predictor loader, the scoring service's PreparedModel or onnx.backend.prepare of a
file with the op as a caffe2-domain node, with data_roots = [S/data].

Kinds: `pickle` (a Python* op carrying a pickled builder whose unpickling creates
S/MARKER), `path` (every file-touching op with a path outside the allowed folders:
absolute, `..`, through a non-existent folder, symlinked, relative to the current
folder, a Checkpoint pattern that only leaves when formatted, a DBReader blob naming
an outside db), `network` (store handlers, common worlds), and `good` cases the
policy must let through (paths in the data root, reads beside the model, a Python
op by token). A few pickle cases run trusted, so the oracle proves it sees a payload.

Outcomes: a forbidden case must end in caffe2py's error naming the op and the way
to allow it (else `silent_accept` when it ran, `raw_text` when it failed otherwise);
MARKER appearing is `code_executed`, a file created or changed outside S/data is
`file_escaped`; a good case refused by the policy is a `wrong_result`.
"""
import contextlib
import io
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np

from . import values
from .cases import Case

LOADERS = ("read_net", "cli_run", "cli_bench", "predictor", "score", "onnx")
PYTHON_OPS = ("Python", "PythonGradient", "PythonDLPack", "PythonDLPackGradient")
NETWORK_OPS = ("FileStoreHandlerCreate", "StoreSet", "StoreGet", "StoreAdd", "StoreWait",
               "CreateCommonWorld", "CloneCommonWorld", "Allreduce", "Broadcast", "Barrier", "SendTensor")
# op -> (inputs, outputs, the argument naming its path, extra arguments, writes)
FILE_OPS = {
    "Save": (["x"], [], "db", {"db_type": "minidb"}, True),
    "Checkpoint": (["it", "x"], [], "db", {"db_type": "minidb", "every": 1}, True),
    "Snapshot": (["it", "x"], [], "db", {"db_type": "minidb"}, True),
    "Load": ([], ["w"], "db", {"db_type": "minidb", "source_blob_names": ["x"]}, False),
    "LoadDbs": ([], ["w"], "dbs", {"db_type": "minidb", "source_blob_names": ["x"]}, False),
    "DBExists": ([], ["e"], "db_name", {"db_type": "minidb"}, False),
    "CreateDB": ([], ["r"], "db", {"db_type": "minidb"}, False),
    "CreateTextFileReader": ([], ["r"], "filename", {"field_types": [1]}, False),
    "Print": (["x"], [], None, {"to_file": 1}, True),
    "Summarize": (["x"], [], None, {"to_file": 1}, True),
}
_CWD_OPS = ("Print", "Summarize")           # their path is the current folder's <blob>.log
_TAKES_ABSOLUTE = ("Save", "Checkpoint", "Snapshot", "Load", "LoadDbs", "DBExists")
# places (see _place) the policy must refuse, and places it must let through ("model":
# beside the model files, drawn for reading ops only)
HOSTILE = ("outside", "dotdot", "newdotdot", "link_dir", "link_file", "relative", "relative_dotdot",
           "absolute_as_relative", "nul", "pattern_c", "dbreader_blob")
GOOD = ("inside", "inside_dotdot", "model")


def generate(case_id, rng):
    what = rng.random()
    loader = values.pick(rng, LOADERS)
    data = {"loader": loader, "placement": "init" if rng.random() < 0.2 and loader != "predictor" else "predict",
            "nest": rng.random() < 0.15 and loader != "onnx", "trusted": False}
    if what < 0.3:
        data.update(kind="pickle", op=values.pick(rng, PYTHON_OPS),
                    arg=values.pick(rng, ("pickled_builder", "pickled_builder", "pickled_grad_builder")),
                    token=rng.random() < 0.3, trusted=rng.random() < 0.05 and loader in ("read_net", "cli_run"))
        if data["trusted"]:         # the control: the builder the op reads, no token before it
            data.update(arg="pickled_grad_builder" if data["op"].endswith("Gradient") else "pickled_builder",
                        token=False)
    elif what < 0.4:
        data.update(kind="network", op=values.pick(rng, NETWORK_OPS))
    elif what < 0.85:
        op = values.pick(rng, sorted(FILE_OPS))
        where = values.pick(rng, HOSTILE)
        data.update(kind="path", op=op, where=_fit(op, where, rng))
    else:
        op = values.pick(rng, sorted(FILE_OPS) + ["Python"])
        reads = op in FILE_OPS and not FILE_OPS[op][4]
        data.update(kind="good", op=op, where="cwd_data" if op in _CWD_OPS else
                    values.pick(rng, GOOD if reads else GOOD[:2]))
    if data["nest"] and data["placement"] == "init":
        data["nest"] = False
    summary = "%s %s %s%s via %s" % (data["kind"], data["op"], data.get("where", data.get("arg", "")),
                                     " (nested in If)" if data["nest"] else "", loader)
    return Case(case_id, "trust", data, summary + (" (trusted)" if data["trusted"] else ""))


def _fit(op, where, rng):
    """A hostile place the op can be sent to: the formatted pattern is Checkpoint's,
    the DBReader blob Load's, and the cwd ops only go where their blob name leads."""
    if op in _CWD_OPS:
        return "cwd"
    if where == "pattern_c" and op not in ("Checkpoint", "Snapshot"):
        return "outside"
    if where == "dbreader_blob" and op != "Load":
        return "dotdot"
    if where in ("relative", "relative_dotdot", "absolute_as_relative") and op not in _TAKES_ABSOLUTE:
        return values.pick(rng, ("link_dir", "newdotdot"))
    return where


# ------------------------------------------------------------------ the sandbox

def _sandbox(root):
    for name in ("model", "data", "outside", "cwd", "data/sub"):
        (root / name).mkdir(parents=True, exist_ok=True)
    os.symlink(root / "outside", root / "data" / "link")
    _write_db(root / "outside" / "secret.minidb", {"x": np.ones((1, 3), np.float32)})
    os.symlink(root / "outside" / "secret.minidb", root / "data" / "linkfile")
    _write_db(root / "data" / "in.minidb", {"x": np.full((1, 3), 2.0, np.float32)})
    _write_db(root / "model" / "params.minidb", {"x": np.full((1, 3), 3.0, np.float32)})
    (root / "outside" / "secret.txt").write_text("1\n2\n")
    (root / "data" / "in.txt").write_text("1\n2\n")
    (root / "model" / "in.txt").write_text("1\n2\n")
    # a db inside the data root whose blob is a reader of a db outside it
    from caffe2py import core
    from caffe2py.workspace import Workspace
    ws = Workspace("trust_fuzz_setup")
    ws.run_operator_once(core.CreateOperator("CreateDB", [], ["w"], db=str(root / "outside" / "secret.minidb"),
                                             db_type="minidb"))
    ws.run_operator_once(core.CreateOperator("Save", ["w"], [], db=str(root / "data" / "reader.minidb"),
                                             db_type="minidb", absolute_path=1))


def _write_db(path, blobs):
    from caffe2py import core
    from caffe2py.workspace import Workspace
    ws = Workspace("trust_fuzz_setup")
    for name, value in blobs.items():
        ws.feed_blob(name, value)
    ws.run_operator_once(core.CreateOperator("Save", list(blobs), [], db=str(path), db_type="minidb",
                                             absolute_path=1))


def _place(op, where, root):
    """(path argument value, absolute_path) for `where`; Print/Summarize use the cwd."""
    ext = {"CreateTextFileReader": ".txt"}.get(op, ".minidb")
    reads = not FILE_OPS[op][4]
    name = "in" + ext if reads else "new" + ext
    places = {
        "outside": (str(root / "outside" / ("secret" + ext)), 1),
        "dotdot": (str(root / "data" / ".." / "outside" / ("secret" + ext)), 1),
        "newdotdot": (str(root / "data" / "nothere" / ".." / ".." / "outside" / ("secret" + ext)), 1),
        "link_dir": (str(root / "data" / "link" / ("secret" + ext)), 1),
        "link_file": (str(root / "data" / "linkfile"), 1),
        "relative": ("secret" + ext, 0),
        "relative_dotdot": ("../outside/secret" + ext, 0),
        "absolute_as_relative": (str(root / "data" / name), 0),
        "nul": (str(root / "data" / ("a\x00b" + ext)), 1),
        "pattern_c": (str(root / "data") + "/..%coutside_ckpt", 1),
        "dbreader_blob": (str(root / "data" / "reader.minidb"), 1),
        "inside": (str(root / "data" / name), 1),
        "inside_dotdot": (str(root / "data" / "sub" / ".." / name), 1),
        "model": (str(root / "model" / ("params" + ext if ext == ".minidb" else "in.txt")), 1),
    }
    return places[where]


class _Touch:
    """Unpickling this creates the marker file: what a crafted builder can do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def _op_spec(case, root):
    """(type, inputs, outputs, {arg: value}, engine) of the case's op."""
    d = case.data
    if d["kind"] == "pickle" or (d["kind"] == "good" and d["op"] == "Python"):
        args = {}
        if d["kind"] == "pickle":
            args[d["arg"]] = pickle.dumps((_Touch(root / "MARKER"), (), {}))
        if d["kind"] == "good" or d.get("token"):
            args["token"] = "no_such_token_%s" % case.case_id.replace(":", "_")
        return d["op"], ["x"], ["p"], args, ""
    if d["kind"] == "network":
        store = str(root / "data" / "store")
        if d["op"] == "FileStoreHandlerCreate":
            return d["op"], [], ["h"], {"path": store}, ""
        if d["op"].startswith("Store"):
            return d["op"], ["h"] + (["x"] if d["op"] == "StoreSet" else []), \
                [] if d["op"] in ("StoreSet", "StoreWait") else ["s"], {"blob_name": "k"}, ""
        if d["op"] == "CreateCommonWorld":
            return d["op"], ["h"], ["cw"], {"size": 1, "rank": 0}, "GLOO"
        return d["op"], ["h", "x"], ([] if d["op"] in ("Barrier", "SendTensor") else ["x"]), {}, "GLOO"
    op = d["op"]
    inputs, outputs, path_arg, extra, _ = FILE_OPS[op]
    args = dict(extra)
    if d["where"] not in ("cwd", "cwd_data"):
        value, absolute = _place(op, d["where"], root)
        args[path_arg] = [value] if path_arg == "dbs" else value
        if op in _TAKES_ABSOLUTE:
            args["absolute_path"] = absolute
    if op == "Load" and d["where"] == "dbreader_blob":
        args.pop("source_blob_names")
        outputs = ["w"]
    return ("Load" if op == "LoadDbs" else op), list(inputs), list(outputs), args, ""


def _nets(case, root):
    """(init net, predict net, names to feed): the op (in an If when nested) in the
    init or the predict net, then Relu(x) -> y."""
    from caffe2py import core
    from caffe2py.proto import caffe2_pb2
    op_type, inputs, outputs, args, engine = _op_spec(case, root)
    body = core.CreateOperator(op_type, inputs, outputs, engine=engine, **args)
    feeds = ["x"] + [b for b in inputs if b in FEED_VALUES and b != "x"]
    if case.data["nest"]:
        sub = caffe2_pb2.NetDef(name="then")
        sub.op.append(body)
        body = core.CreateOperator("If", ["cond"] + inputs, outputs, then_net=sub)
        feeds.append("cond")
    init = caffe2_pb2.NetDef(name="trust_init")
    predict = caffe2_pb2.NetDef(name="trust_predict")
    if case.data["placement"] == "init":
        init.op.extend([core.CreateOperator("ConstantFill", [], ["x"], shape=[1, 3], value=1.0),
                        core.CreateOperator("ConstantFill", [], ["h"], shape=[1], value=0.0),
                        core.CreateOperator("ConstantFill", [], ["it"], shape=[1], value=47,
                                            dtype=caffe2_pb2.TensorProto.INT64), body])
        feeds = []
    else:
        predict.op.append(body)
    predict.op.append(core.CreateOperator("Relu", ["x"], ["y"]))
    predict.external_input.extend(feeds if feeds else ["x"])
    predict.external_output.append("y")
    return init, predict, feeds


FEED_VALUES = {"x": np.ones((1, 3), np.float32), "it": np.array([47], np.int64), "cond": np.array([True]),
               "h": np.zeros((1,), np.float32)}


# ------------------------------------------------------------------ loaders

def _write_files(case, root, init, predict, feeds):
    """The model files (and input files) the loader reads, written before the run."""
    (root / "model" / "init_net.pb").write_bytes(init.SerializeToString())
    (root / "model" / "predict_net.pb").write_bytes(predict.SerializeToString())
    for name in feeds:
        np.save(root / ("%s.npy" % name), FEED_VALUES[name])
    if case.data["loader"] == "predictor":
        from caffe2py import workspace
        from caffe2py.predictor import predictor_exporter as pe
        workspace.ResetWorkspace()
        meta = pe.PredictorExportMeta(predict_net=predict, parameters=[], inputs=feeds, outputs=["y"],
                                      shapes=dict({name: list(FEED_VALUES[name].shape) for name in feeds}, y=[1, 3]))
        pe.save_to_db("minidb", str(root / "model" / "predictor.minidb"), meta)
        workspace.ResetWorkspace()
    if case.data["loader"] == "onnx":
        (root / "model" / "model.onnx").write_bytes(_onnx_model(init, predict))


def _run_loader(case, root, feeds):
    """Load and run the model files the case's way; raises what the loader raised."""
    loader, trusted = case.data["loader"], case.data["trusted"]
    data_roots = [str(root / "data")]
    init_path, predict_path = str(root / "model" / "init_net.pb"), str(root / "model" / "predict_net.pb")
    trust = dict(trusted=True) if trusted else dict(data_roots=data_roots)
    if loader == "read_net":
        from caffe2py.models import read_net
        from caffe2py.workspace import Workspace
        ws = Workspace("trust_fuzz")
        init = read_net(init_path, **trust)
        if len(init.op):
            ws.run_net_once(init)
        for name in feeds:
            ws.feed_blob(name, FEED_VALUES[name])
        ws.run_net_once(read_net(predict_path, **trust))
    elif loader in ("cli_run", "cli_bench"):
        _run_cli(case, root, init_path, predict_path, feeds, data_roots)
    elif loader == "predictor":
        from caffe2py import workspace
        from caffe2py.predictor import predictor_exporter as pe
        net = pe.prepare_prediction_net(str(root / "model" / "predictor.minidb"), "minidb", data_roots=data_roots)
        for name in feeds:
            workspace.FeedBlob(name, FEED_VALUES[name])
        workspace.RunNet(net.Proto().name)
    elif loader == "score":
        from caffe2py.scoring import ModelSpec
        model = ModelSpec(predict_net=predict_path, init_net=init_path, data_roots=tuple(data_roots),
                          trusted=trusted).prepare()
        model.run({name: FEED_VALUES[name] for name in model.input_names})
    elif loader == "onnx":
        from caffe2py.onnx import backend
        rep = backend.prepare(str(root / "model" / "model.onnx"), data_roots=data_roots)
        rep.run({name: FEED_VALUES[name] for name in rep.input_names})
    else:
        raise ValueError(loader)


def _run_cli(case, root, init_path, predict_path, feeds, data_roots):
    from caffe2py.cli import main
    from caffe2py.errors import Caffe2Error
    argv = [case.data["loader"][4:], "--init-net", init_path, "--predict-net", predict_path]
    for name in feeds:
        argv += ["--input", "%s=%s" % (name, root / ("%s.npy" % name))]
    if case.data["loader"] == "cli_bench":
        argv += ["--iters", "1", "--warmup", "1"] + (["--run-individual"] if case.case_id.endswith("0") else [])
    argv += ["--trust-model"] if case.data["trusted"] else ["--data-root", data_roots[0]]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    if code:
        text = err.getvalue().strip().splitlines()
        raise Caffe2Error(text[-1].split(": error: ", 1)[-1] if text else "exit status %d" % code)


def _onnx_model(init, predict):
    """The nets' ops as nodes of an ONNX model (caffe2-domain but Relu); inputs fed."""
    from onnx import TensorProto, helper
    nodes = []
    for op in [op for op in list(init.op) + list(predict.op) if op.type != "ConstantFill"]:
        attrs = {}
        for a in op.arg:
            attrs[a.name] = (a.s if a.HasField("s") else a.i if a.HasField("i") else list(a.ints) if len(a.ints)
                             else list(a.strings))
        nodes.append(helper.make_node(op.type, list(op.input), list(op.output),
                                      domain="" if op.type == "Relu" else "caffe2", **attrs))
    types = {"x": TensorProto.FLOAT, "it": TensorProto.INT64, "h": TensorProto.FLOAT}
    used = [n for n in types if any(n in node.input for node in nodes)]
    graph = helper.make_graph(nodes, "trust",
                              [helper.make_tensor_value_info(n, types[n], list(FEED_VALUES[n].shape)) for n in used],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("caffe2", 1)])
    model.ir_version = 8
    return model.SerializeToString()


# ------------------------------------------------------------------ the oracle

def _snapshot(root):
    """{path: (size, mtime)} of everything outside S/data (symlinks as links)."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        if rel == "data" or rel.startswith("data" + os.sep):
            continue
        for name in dirs + files:
            path = os.path.join(folder, name)
            if path == str(root / "data"):
                continue
            st = os.lstat(path)
            seen[path] = (st.st_size, st.st_mtime_ns)
    return seen


def refused_by_policy(message, op_type):
    return "--trust-model" in message and op_type in message


def run(case, workdir):
    from .outcomes import classify_exception, outcome
    d = case.data
    with tempfile.TemporaryDirectory(dir=workdir, prefix="trust-") as tmp:
        root = Path(tmp).resolve()
        _sandbox(root)
        init, predict, feeds = _nets(case, root)
        _write_files(case, root, init, predict, feeds)
        before = _snapshot(root)
        here = os.getcwd()
        # Print/Summarize write into the current folder: outside the data root, but
        # for their good cases inside it
        os.chdir(root / ("data" if d.get("where") == "cwd_data" else "cwd"))
        error = None
        try:
            _run_loader(case, root, feeds)
        except Exception as exc:  # noqa: BLE001
            error = exc
        finally:
            os.chdir(here)
        marker = (root / "MARKER").exists()
        after = _snapshot(root)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p) and p != str(root / "MARKER"))
    op_type = "Load" if d["op"] == "LoadDbs" else d["op"]
    if d["trusted"]:
        if not marker:
            return outcome("wrong_result", "a trusted model's pickled builder did not run: the oracle cannot see it")
        return outcome("ran", note="trusted_payload_ran")
    if marker:
        return outcome("code_executed", "the pickled builder was unpickled (%s)" % case.summary)
    if changed:
        return outcome("file_escaped", "files outside the data root changed: %s" % ", ".join(changed[:5]))
    cls, message = classify_exception(error) if error is not None else ("ran", "")
    if d["kind"] == "good":
        if error is not None and refused_by_policy(message, op_type) and "outside the folders" in message:
            return outcome("wrong_result", "a path the policy allows was refused: " + message)
        return outcome(cls, message)
    if error is None:
        return outcome("silent_accept", "the policy let it run: %s" % case.summary)
    if cls == "our_error" and not refused_by_policy(message, op_type):
        return outcome("raw_text", "refused, but not by the model-trust policy by name: " + message)
    return outcome(cls, message, note="refused")
