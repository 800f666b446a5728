"""Issue 33: running a model file never executes code it carries nor touches files the
user did not allow (caffe2py/model_trust.py, docs/security.md). Scripts that build
their own nets keep Caffe2's behaviour."""
import os
import pathlib
import pickle

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.args import make_argument
from caffe2py.cli import main
from caffe2py.errors import Caffe2Error, ModelTrustError
from caffe2py.models import read_net
from caffe2py.proto import caffe2_pb2

TRUST_HINT = "--trust-model"


class _Touch:
    """Unpickling this creates a marker file: what a crafted builder can do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def pickled_payload(marker):
    return pickle.dumps((_Touch(marker), (), {}))


def one_op_net(op_type, inputs, outputs, name="predict", **args):
    """A net of one op then Relu(x) -> y, reading x."""
    net = caffe2_pb2.NetDef(name=name)
    op = net.op.add(type=op_type, input=inputs, output=outputs)
    for key, value in args.items():
        op.arg.append(make_argument(key, value))
    net.op.add(type="Relu", input=["x"], output=["y"])
    net.external_input.extend(["x"] + [b for b in inputs if b != "x"])
    net.external_output.append("y")
    return net


def init_net(op_type, outputs, **args):
    """An init net of one op making `outputs`."""
    net = caffe2_pb2.NetDef(name="init")
    op = net.op.add(type=op_type, output=outputs)
    for key, value in args.items():
        op.arg.append(make_argument(key, value))
    return net


def evil_net(marker, op_type="Python"):
    return one_op_net(op_type, ["x"], ["p"], pickled_builder=pickled_payload(marker))


@pytest.fixture
def sandbox(tmp_path):
    """model/ (the model files), data/ (the --data-root), outside/, data/link -> outside."""
    for name in ("model", "data", "outside"):
        (tmp_path / name).mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "data" / "link")
    np.save(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    return tmp_path


def write(path, net):
    path.write_bytes(net.SerializeToString())
    return str(path)


def cli(sandbox, predict, *extra, init=None, command="run"):
    argv = [command, "--predict-net", write(sandbox / "model" / "predict.pb", predict)]
    if init is not None:
        argv += ["--init-net", write(sandbox / "model" / "init.pb", init)]
    if command in ("run", "bench"):
        argv += ["--input", "x=%s" % (sandbox / "x.npy")]
    if command == "bench":
        argv += ["--iters", "1"]
    if command == "export":
        argv += ["-o", str(sandbox / "model.onnx")]
    return main(argv + list(extra))


# ----------------------------------------------------------------- code in model files

@pytest.mark.parametrize("command", ["run", "shapes", "bench", "draw", "export"])
def test_cli_refuses_a_pickled_builder_before_unpickling(sandbox, capsys, command):
    marker = sandbox / "MARKER"
    assert cli(sandbox, evil_net(marker), command=command) == 1
    err = capsys.readouterr().err
    assert "Python #0 'p': argument 'pickled_builder'" in err and "without unpickling" in err and TRUST_HINT in err
    assert not marker.exists()


@pytest.mark.parametrize("op_type", ["PythonGradient", "PythonDLPack", "PythonDLPackGradient"])
def test_every_python_op_and_the_init_net_are_covered(sandbox, capsys, op_type):
    marker = sandbox / "MARKER"
    init = caffe2_pb2.NetDef(name="init")
    init.op.add(type=op_type, input=[], output=["q"]).arg.append(
        make_argument("pickled_grad_builder", pickled_payload(marker)))
    assert cli(sandbox, one_op_net("Relu", ["x"], ["r"]), init=init) == 1
    assert "%s #0 'q': argument 'pickled_grad_builder'" % op_type in capsys.readouterr().err
    assert not marker.exists()


def test_a_pickled_builder_in_a_subnet_is_refused(sandbox, capsys):
    marker = sandbox / "MARKER"
    then = caffe2_pb2.NetDef(name="then")
    then.op.add(type="Python", input=["x"], output=["p"]).arg.append(
        make_argument("pickled_builder", pickled_payload(marker)))
    net = one_op_net("If", ["c", "x"], ["p"], then_net=then)
    np.save(sandbox / "c.npy", np.array([True]))
    assert cli(sandbox, net, "--input", "c=%s" % (sandbox / "c.npy")) == 1
    assert "If #0 'p', argument 'then_net' (a net): Python #0 'p'" in capsys.readouterr().err
    assert not marker.exists()


def test_trust_model_unpickles_as_caffe2_does(sandbox, monkeypatch):
    marker = sandbox / "MARKER"
    cli(sandbox, evil_net(marker), "--trust-model")      # the payload is no function: the op then fails
    assert marker.exists()
    marker.unlink()
    monkeypatch.setenv("CAFFE2PY_TRUST_MODEL", "1")
    cli(sandbox, evil_net(marker))
    assert marker.exists()


def test_read_net_checks_and_marks_the_net_wherever_it_runs(sandbox):
    marker = sandbox / "MARKER"
    path = write(sandbox / "model" / "evil.pb", evil_net(marker))
    with pytest.raises(ModelTrustError, match="pickled_builder"):
        read_net(path)
    # a net from a file keeps the policy through core.Net and the workspace API
    net = read_net(write(sandbox / "model" / "save.pb", one_op_net(
        "Save", ["x"], [], db=str(sandbox / "data" / "a.minidb"), absolute_path=1)), data_roots=[str(sandbox / "data")])
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.ones((1, 3), np.float32))
    net.op[0].arg[0].s = str(sandbox / "outside" / "b.minidb").encode()     # the caller's edit is checked too
    with pytest.raises(Caffe2Error, match="Save #0: argument 'db'"):
        workspace.RunNetOnce(core.Net(net))
    assert not list((sandbox / "outside").iterdir())
    read_net(path, trusted=True)
    assert not marker.exists()            # reading trusted unpickles nothing; running it does
    with pytest.raises(Caffe2Error):
        workspace.RunNetOnce(read_net(path, trusted=True))
    assert marker.exists()


def test_score_refuses_a_pickled_builder_locally_and_in_worker_processes(sandbox, capsys):
    pytest.importorskip("pyarrow")
    from _scoring_data import demo_dataset

    from caffe2py.scoring import ModelSpec, run_job
    marker = sandbox / "MARKER"
    demo_dataset(sandbox / "shards", shards=2, rows=4)
    predict = write(sandbox / "model" / "predict.pb", evil_net(marker))
    assert main(["score", str(sandbox / "shards"), "-o", str(sandbox / "out"), "--predict-net", predict]) == 1
    assert "pickled_builder" in capsys.readouterr().err
    with pytest.raises(Caffe2Error, match="without unpickling"):
        run_job(ModelSpec(predict_net=predict), [str(sandbox / "shards")], str(sandbox / "out2"), workers=2,
                progress=False)
    assert not marker.exists()


def test_score_on_ray_refuses_a_pickled_builder(sandbox):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'caffe2py[ray]')")
    from _scoring_data import demo_dataset

    from caffe2py.scoring import ModelSpec, run_job
    from caffe2py.scoring.ray_job import ray_init_options
    marker = sandbox / "MARKER"
    demo_dataset(sandbox / "shards", shards=2, rows=4)
    predict = write(sandbox / "model" / "predict.pb", evil_net(marker))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **ray_init_options())
    try:
        with pytest.raises(Caffe2Error, match="without unpickling"):
            run_job(ModelSpec(predict_net=predict), [str(sandbox / "shards")], str(sandbox / "out"), workers=1,
                    ray_address="auto", progress=False)
    finally:
        if started:
            ray.shutdown()
    assert not marker.exists()


def _predictor_db(sandbox, predict):
    from caffe2py.predictor import predictor_exporter as pe
    workspace.ResetWorkspace()
    meta = pe.PredictorExportMeta(predict_net=predict, parameters=[], inputs=["x"], outputs=["y"],
                                  shapes={"x": (1, 3), "y": (1, 3)})
    path = str(sandbox / "model" / "predictor.minidb")
    pe.save_to_db("minidb", path, meta)
    workspace.ResetWorkspace()
    return path


def test_predictor_loaders_refuse_a_pickled_builder(sandbox):
    from caffe2py.predictor import predictor_exporter as pe
    marker = sandbox / "MARKER"
    path = _predictor_db(sandbox, evil_net(marker))
    for load in (pe.prepare_prediction_net, pe.load_from_db):
        workspace.ResetWorkspace()
        with pytest.raises(ModelTrustError, match="Python #0 'p': argument 'pickled_builder'"):
            load(path, "minidb")
        assert not marker.exists()
    workspace.ResetWorkspace()
    with pytest.raises(Caffe2Error):
        pe.prepare_prediction_net(path, "minidb", trusted=True)
    assert marker.exists()


def test_onnx_model_file_with_a_caffe2_python_node_is_refused(sandbox):
    from onnx import TensorProto, helper

    from caffe2py.onnx import backend
    marker = sandbox / "MARKER"
    node = helper.make_node("Python", ["x"], ["y"], domain="caffe2", pickled_builder=pickled_payload(marker))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("caffe2", 1)])
    model.ir_version = 8
    path = sandbox / "model" / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelTrustError, match="pickled_builder"):
        backend.prepare(str(path))
    assert not marker.exists()
    assert main(["run", str(path), "--input", "x=%s" % (sandbox / "x.npy")]) == 1
    assert not marker.exists()


# ----------------------------------------------------------------- files

OUTSIDE_PATHS = {
    "absolute": lambda s: s / "outside" / "a.minidb",
    "symlink": lambda s: s / "data" / "link" / "a.minidb",
    "dotdot": lambda s: pathlib.Path(str(s / "data") + "/../outside/a.minidb"),
    "through_a_missing_folder": lambda s: pathlib.Path(str(s / "data") + "/new/../../outside/a.minidb"),
}


@pytest.mark.parametrize("how", sorted(OUTSIDE_PATHS))
def test_save_outside_the_data_root_is_refused_before_any_file_is_opened(sandbox, capsys, how):
    path = OUTSIDE_PATHS[how](sandbox)
    net = one_op_net("Save", ["x"], [], db=str(path), absolute_path=1, db_type="minidb")
    assert cli(sandbox, net, "--data-root", str(sandbox / "data")) == 1
    err = capsys.readouterr().err
    assert "Save #0: argument 'db': writing '%s'" % path in err
    assert "--data-root DIR" in err and TRUST_HINT in err
    assert not list((sandbox / "outside").iterdir()) and not (sandbox / "data" / "new").exists()


def _saved(path, value):
    from caffe2py.workspace import Workspace
    ws = Workspace("setup")
    ws.feed_blob("x", value)
    ws.run_operator_once(core.CreateOperator("Save", ["x"], [], db=str(path), absolute_path=1, db_type="minidb"))


@pytest.mark.parametrize("how", sorted(OUTSIDE_PATHS))
def test_load_from_outside_the_allowed_folders_is_refused(sandbox, capsys, how):
    _saved(sandbox / "outside" / "a.minidb", np.ones((1, 3), np.float32))
    path = OUTSIDE_PATHS[how](sandbox)
    init = init_net("Load", ["w"], db=str(path), absolute_path=1, db_type="minidb",
                      source_blob_names=["x"])
    assert cli(sandbox, one_op_net("Relu", ["x"], ["r"]), "--data-root", str(sandbox / "data"), init=init) == 1
    assert "Load #0 'w': argument 'db': reading '%s'" % path in capsys.readouterr().err


def test_save_and_load_inside_the_data_root_work(sandbox, capsys):
    data = sandbox / "data"
    (data / "sub").mkdir()
    db = str(data / "sub" / ".." / "out.minidb")
    save = one_op_net("Save", ["x"], [], db=db, absolute_path=1, db_type="minidb")
    assert cli(sandbox, save, "--data-root", str(data)) == 0
    assert (data / "out.minidb").exists()
    load = init_net("Load", ["w"], db=db, absolute_path=1, db_type="minidb",
                      source_blob_names=["x"])
    assert cli(sandbox, one_op_net("Relu", ["x"], ["r"]), "--data-root", str(data), "--output", "w",
               init=load) == 0
    assert "w: shape [1, 3]" in capsys.readouterr().out


def test_an_init_net_loads_its_own_data_beside_it_without_any_flag(sandbox, capsys):
    _saved(sandbox / "model" / "params.minidb", np.full((1, 3), 2.0, np.float32))
    init = init_net("Load", ["w"], db=str(sandbox / "model" / "params.minidb"),
                      absolute_path=1, db_type="minidb", source_blob_names=["x"])
    assert cli(sandbox, one_op_net("Relu", ["x"], ["r"]), "--output", "w", init=init) == 0
    assert "min 2 max 2" in capsys.readouterr().out
    # reading beside the model is allowed; writing there is not
    save = one_op_net("Save", ["x"], [], db=str(sandbox / "model" / "new.minidb"), absolute_path=1)
    assert cli(sandbox, save) == 1
    assert not (sandbox / "model" / "new.minidb").exists()


def test_relative_names_are_resolved_against_the_current_folder(sandbox, capsys, monkeypatch):
    monkeypatch.chdir(sandbox / "outside")
    save = one_op_net("Save", ["x"], [], db="rel.minidb", db_type="minidb")       # Caffe2: './rel.minidb'
    assert cli(sandbox, save, "--data-root", str(sandbox / "data")) == 1
    assert "writing './rel.minidb' (resolved: '%s')" % (sandbox / "outside" / "rel.minidb") in capsys.readouterr().err
    assert cli(sandbox, save, "--data-root", str(sandbox / "outside")) == 0
    assert (sandbox / "outside" / "rel.minidb").exists()


def test_checkpoint_names_formatted_when_it_runs_are_checked_then(sandbox, capsys):
    # '%c' of iteration 47 is '/': the pattern lies in the data root, its name does not
    net = one_op_net("Checkpoint", ["it", "x"], [], db=str(sandbox / "data") + "/..%coutside_ckpt",
                     absolute_path=1, db_type="minidb")
    np.save(sandbox / "it.npy", np.array([47], np.int64))
    assert cli(sandbox, net, "--data-root", str(sandbox / "data"), "--input", "it=%s" % (sandbox / "it.npy")) == 1
    err = capsys.readouterr().err
    assert "Checkpoint #0: argument 'db': writing '%s/../outside_ckpt'" % (sandbox / "data") in err
    assert not (sandbox / "outside_ckpt").exists()


def test_a_db_reader_blob_naming_an_outside_db_is_refused_when_loaded(sandbox, capsys):
    from caffe2py.workspace import Workspace
    _saved(sandbox / "outside" / "secret.minidb", np.ones((1, 3), np.float32))
    ws = Workspace("setup")         # a script (trusted) saves a reader of the outside db into the data root
    ws.run_operator_once(core.CreateOperator("CreateDB", [], ["r"], db=str(sandbox / "outside" / "secret.minidb"),
                                             db_type="minidb"))
    ws.run_operator_once(core.CreateOperator("Save", ["r"], [], db=str(sandbox / "data" / "reader.minidb"),
                                             absolute_path=1, db_type="minidb"))
    init = init_net("Load", ["r"], db=str(sandbox / "data" / "reader.minidb"), absolute_path=1,
                      db_type="minidb")
    assert cli(sandbox, one_op_net("Relu", ["x"], ["q"]), "--data-root", str(sandbox / "data"), init=init) == 1
    err = capsys.readouterr().err
    assert "Load #0 'r'" in err and "reading '%s'" % (sandbox / "outside" / "secret.minidb") in err


@pytest.mark.parametrize("op_type,args", [
    ("CreateDB", dict(db="/etc/passwd", db_type="minidb")),
    ("DBExists", dict(db_name="/etc/passwd", absolute_path=1)),
    ("CreateTextFileReader", dict(filename="/etc/passwd", field_types=[4])),
    ("Load", dict(dbs=["/etc/passwd"], absolute_path=1, db_type="minidb")),
])
def test_every_reader_is_held_to_the_allowed_folders(sandbox, capsys, op_type, args):
    assert cli(sandbox, one_op_net(op_type, [], ["r"], **args)) == 1
    assert "%s #0 'r': argument '%s': reading '/etc/passwd'" % (op_type, sorted(set(args) & {"db", "db_name",
                                                                                        "filename", "dbs"})[0]) \
        in capsys.readouterr().err


@pytest.mark.parametrize("op_type", ["Print", "Summarize"])
def test_log_files_go_to_the_current_folder_only_when_it_is_allowed(sandbox, capsys, monkeypatch, op_type):
    monkeypatch.chdir(sandbox / "outside")
    net = one_op_net(op_type, ["x"], [], to_file=1)
    assert cli(sandbox, net) == 1
    assert "%s #0: argument 'to_file': writing '%s" % (op_type, sandbox / "outside" / "x.") in capsys.readouterr().err
    assert not list((sandbox / "outside").iterdir())        # Print truncates its log when built: not even that
    assert cli(sandbox, net, "--data-root", str(sandbox / "outside")) == 0


@pytest.mark.parametrize("op_type,args,engine", [
    ("FileStoreHandlerCreate", dict(path="STORE"), ""),
    ("CreateCommonWorld", dict(size=1, rank=0), "GLOO"),
])
def test_stores_and_common_worlds_are_refused_even_inside_the_data_root(sandbox, capsys, op_type, args, engine):
    args = {k: str(sandbox / "data" / "store") if v == "STORE" else v for k, v in args.items()}
    net = one_op_net(op_type, ["x"] if op_type == "CreateCommonWorld" else [], ["h"], **args)
    net.op[0].engine = engine
    assert cli(sandbox, net, "--data-root", str(sandbox / "data")) == 1
    err = capsys.readouterr().err
    assert "%s #0 'h': a model file may not open network connections" % op_type in err and TRUST_HINT in err
    assert not (sandbox / "data" / "store").exists()


def test_the_refusal_is_a_model_trust_error_that_names_op_argument_path_and_option(sandbox):
    from caffe2py.workspace import Workspace
    net = read_net(write(sandbox / "model" / "p.pb", one_op_net("Load", [], ["w"], db=str(sandbox / "outside"),
                                                                   absolute_path=1)), trusted=True)
    from caffe2py.model_trust import applying, policy_for
    with applying(policy_for([str(sandbox / "model" / "p.pb")], [str(sandbox / "data")])):
        with pytest.raises(ModelTrustError) as info:
            Workspace("w").run_net_once(net)
    assert isinstance(info.value, Caffe2Error)
    text = str(info.value)
    for part in ("Load #0 'w'", "argument 'db'", str(sandbox / "outside"), "--data-root DIR", TRUST_HINT):
        assert part in text


# ----------------------------------------------------------------- scripts are trusted code

def test_scripts_keep_caffe2_behaviour(tmp_path):
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.ones((1, 3), np.float32))
    net = core.Net("script")
    net.Save(["x"], [], db=str(tmp_path / "anywhere.minidb"), absolute_path=1, db_type="minidb")
    net.Python((_negate_builder, (), {}))(["x"], ["y"])        # a pickled builder: the script's own
    workspace.RunNetOnce(net)
    assert (tmp_path / "anywhere.minidb").exists()
    np.testing.assert_array_equal(workspace.FetchBlob("y"), -np.ones((1, 3), np.float32))


def _negate(inputs, outputs):
    outputs[0].feed(-inputs[0].data)


def _negate_builder():
    return _negate


def test_the_rules_name_registered_ops():
    from caffe2py import registry
    from caffe2py.model_trust_ops import FILE_OPS, NETWORK_OPS, PYTHON_OPS
    for op_type in set(FILE_OPS) | set(NETWORK_OPS) | set(PYTHON_OPS):
        assert registry.has_op(op_type) or op_type == "RedisStoreHandlerCreate", op_type


# ----------------------------------------------------------------- the fuzz family

def test_fuzz_trust_family_slice_finds_nothing():
    from caffe2py.tools.fuzz import run_campaign
    tally = run_campaign(60, seed=20261201, jobs=1, families=["trust"])
    assert not tally.bad(), tally.examples
    assert sum(tally.counts["trust"].values()) == 60
