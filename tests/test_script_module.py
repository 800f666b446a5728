"""TorchScript modules in blobs: FeedBlob / FetchBlob keep the module, the ScriptModule
op calls its methods, ScriptModuleLoad reads torch.jit.save bytes, Save / Load round-trip
it; a model file may not load one (it is code). References: NumPy formulas."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from caffe2py import core, model_trust, workspace  # noqa: E402
from caffe2py.errors import Caffe2Error, ModelTrustError  # noqa: E402
from caffe2py.model_trust_ops import check_net  # noqa: E402


class Affine(torch.jit.ScriptModule):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([[1.0, -2.0, 0.5]]))

    @torch.jit.script_method
    def forward(self, x):
        return self.weight.mm(x)

    @torch.jit.script_method
    def add3(self, x: torch.Tensor, y: torch.Tensor, z: int = 3) -> torch.Tensor:
        return x + y + z

    @torch.jit.script_method
    def total(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return xs[0] + xs[1] * 2

    @torch.jit.script_method
    def pair(self, x):
        return (x, x * x)


WEIGHT = np.array([[1.0, -2.0, 0.5]], np.float32)


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()


def _run(*args, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(*args, **kwargs))


def _bytes(module):
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


def test_methods_of_a_fed_module_run_on_blobs():
    module = Affine()
    workspace.FeedBlob("m", module)
    assert workspace.FetchBlob("m") is module
    rng = np.random.default_rng(0)
    x, y = rng.random((3, 4), np.float32), rng.random((3, 4), np.float32)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("y", y)
    _run("ScriptModule", ["m", "x"], ["out"])
    np.testing.assert_allclose(workspace.FetchBlob("out"), WEIGHT @ x, rtol=1e-6)
    _run("ScriptModule", ["m", "x", "y"], ["sum"], method="add3")
    np.testing.assert_allclose(workspace.FetchBlob("sum"), x + y + 3, rtol=1e-6)
    _run("ScriptModule", ["m", "x", "y"], ["total"], method="total", pass_inputs_as_tensor_list=True)
    np.testing.assert_allclose(workspace.FetchBlob("total"), x + 2 * y, rtol=1e-6)
    _run("ScriptModule", ["m", "x"], ["a", "b"], method="pair")
    np.testing.assert_allclose(workspace.FetchBlob("b"), x * x, rtol=1e-6)
    # the outputs are the op's own arrays, not views of torch memory the module keeps
    assert not np.shares_memory(workspace.FetchBlob("a"), x)


def test_script_module_load_and_save_load_round_trip(tmp_path):
    _run("ScriptModuleLoad", [], ["m"], serialized_binary=_bytes(Affine()))
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    workspace.FeedBlob("x", x)
    db = str(tmp_path / "db")
    _run("Save", ["m"], [], absolute_path=1, db=db, db_type="minidb")
    workspace.ResetWorkspace()
    _run("Load", [], [], absolute_path=1, db=db, db_type="minidb", load_all=1)
    workspace.FeedBlob("x", x)
    _run("ScriptModule", ["m", "x"], ["out"])
    np.testing.assert_allclose(workspace.FetchBlob("out"), WEIGHT @ x, rtol=1e-6)


def test_named_errors():
    workspace.FeedBlob("not_a_module", np.zeros(3, np.float32))
    with pytest.raises(Caffe2Error, match="ScriptModule.*must hold a TorchScript module"):
        _run("ScriptModule", ["not_a_module"], ["y"])
    workspace.FeedBlob("m", Affine())
    workspace.FeedBlob("x", np.zeros((3, 2), np.float32))
    with pytest.raises(Caffe2Error, match="no method 'missing'"):
        _run("ScriptModule", ["m", "x"], ["y"], method="missing")
    with pytest.raises(Caffe2Error, match="returned 2 value\\(s\\) for 1 output"):
        _run("ScriptModule", ["m", "x"], ["y"], method="pair")
    with pytest.raises(Caffe2Error, match="method 'forward' failed"):
        workspace.FeedBlob("bad", np.zeros((5, 5), np.float32))     # 1x3 @ 5x5
        _run("ScriptModule", ["m", "bad"], ["y"])
    with pytest.raises(Caffe2Error, match="not a TorchScript module saved by torch.jit.save"):
        _run("ScriptModuleLoad", [], ["m2"], serialized_binary=b"not an archive")
    assert not workspace.HasBlob("m2") or workspace.FetchBlob("m2") is None


def test_a_model_file_may_not_load_torchscript(tmp_path):
    net = core.Net("model")
    net.ScriptModuleLoad([], ["m"], serialized_binary=_bytes(Affine()))
    policy = model_trust.policy_for(model_files=[str(tmp_path / "model.pb")])
    with pytest.raises(ModelTrustError, match="TorchScript module, which is code"):
        check_net(net.Proto(), policy)
    check_net(net.Proto(), model_trust.TRUSTED)         # a trusted model may


def test_loading_a_module_blob_under_an_untrusted_policy_is_refused(tmp_path):
    workspace.FeedBlob("m", Affine())
    db = str(tmp_path / "db")
    _run("Save", ["m"], [], absolute_path=1, db=db, db_type="minidb")
    workspace.ResetWorkspace()
    policy = model_trust.policy_for(model_files=[db])
    with model_trust.applying(policy):
        with pytest.raises(Caffe2Error, match="nothing was loaded: blob 'm' holds a TorchScript module"):
            _run("Load", [], [], absolute_path=1, db=db, db_type="minidb", load_all=1)
    assert not workspace.HasBlob("m")
