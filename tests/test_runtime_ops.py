"""Runtime ops: counters, atomics, Print/Assert/NanCheck/Summarize, timers, stats,
strings, workspace blobs, maps, LastNWindowCollector, ReservoirSampling, the
index ops and the Python ops. References are plain Python written here."""
import os

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def run(op_type, inputs, outputs, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **kwargs))


def fetch(name):
    return workspace.FetchBlob(name)


def strings(*values):
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


# --------------------------------------------------------------------------- counters and atomics

def test_counters_follow_caffe2s_count_down_semantics():
    run("CreateCounter", [], ["c"], init_count=2)
    results = []
    for _ in range(4):
        run("CountDown", ["c"], ["done"])
        results.append(bool(fetch("done")))
    assert results == [False, False, True, True]       # 2 -> 1 -> 0, then done
    run("RetrieveCount", ["c"], ["n"])
    assert fetch("n").dtype == np.int64 and int(fetch("n")) == -2
    run("CheckCounterDone", ["c"], ["done"])
    assert bool(fetch("done"))
    run("ResetCounter", ["c"], ["previous"], init_count=5)
    assert int(fetch("previous")) == -2
    run("CountUp", ["c"], ["before"])
    run("RetrieveCount", ["c"], ["n"])
    assert (int(fetch("before")), int(fetch("n"))) == (5, 6)
    with pytest.raises(Caffe2Error, match="negative init_count"):
        run("CreateCounter", [], ["c2"], init_count=-1)
    workspace.FeedBlob("not_counter", np.zeros(1, np.float32))
    with pytest.raises(Caffe2Error, match="expected a counter"):
        run("CountUp", ["not_counter"], ["x"])


def test_counter_survives_a_failed_run_like_caffe2s_atomics():
    run("CreateCounter", [], ["c"], init_count=0)
    net = core.Net("n")
    net.CountUp(["c"], ["before"])
    net.Assert(["zero"], [])
    workspace.FeedBlob("zero", np.array([0], np.int32))
    with pytest.raises(Caffe2Error, match="Assert failed"):
        workspace.RunNetOnce(net)
    assert not workspace.HasBlob("before")            # tensors: all or nothing
    run("RetrieveCount", ["c"], ["n"])
    assert int(fetch("n")) == 1                       # the counter object: changed in place


def test_atomic_bool_mutex_fetch_add_and_append():
    run("CreateAtomicBool", [], ["flag"])
    run("CheckAtomicBool", ["flag"], ["v"])
    assert fetch("v").tolist() == [False]
    workspace.FeedBlob("cond", np.array([False]))
    run("ConditionalSetAtomicBool", ["flag", "cond"], [])
    run("CheckAtomicBool", ["flag"], ["v"])
    assert fetch("v").tolist() == [False]
    workspace.FeedBlob("cond", np.array([True]))
    run("ConditionalSetAtomicBool", ["flag", "cond"], [])
    run("CheckAtomicBool", ["flag"], ["v"])
    assert fetch("v").tolist() == [True]

    run("CreateMutex", [], ["m"])
    workspace.FeedBlob("a", np.array(7, np.int32))
    workspace.FeedBlob("b", np.array(5, np.int32))
    run("AtomicFetchAdd", ["m", "a", "b"], ["a", "fetched"])
    assert (int(fetch("a")), int(fetch("fetched"))) == (12, 7)
    workspace.FeedBlob("b64", np.array(5, np.int64))
    with pytest.raises(Caffe2Error, match="int32 scalar"):
        run("AtomicFetchAdd", ["m", "a", "b64"], ["a", "fetched"])

    workspace.FeedBlob("acc", np.zeros((0, 2), np.float32))
    rows = [np.full((k, 2), k, np.float32) for k in (1, 3, 2)]
    for r in rows:
        workspace.FeedBlob("rows", r)
        run("AtomicAppend", ["m", "acc", "rows"], ["acc"])
    np.testing.assert_array_equal(fetch("acc"), np.concatenate(rows))
    workspace.FeedBlob("rows", np.zeros((1, 3), np.float32))
    with pytest.raises(Caffe2Error, match="cannot be appended"):
        run("AtomicAppend", ["m", "acc", "rows"], ["acc"])
    with pytest.raises(Caffe2Error, match="in-place"):
        run("AtomicAppend", ["m", "acc", "rows"], ["other"])


# --------------------------------------------------------------------------- debugging ops

def test_print_formats_like_caffe2s_tensor_printer(capsys, tmp_path, monkeypatch):
    workspace.FeedBlob("x", np.array([[1.5, 2], [3, 4]], np.float32))
    run("Print", ["x"], [])
    assert capsys.readouterr().err.strip() == "Tensor x of type float. Dims: (2,2,): 1.5,2,3,4"
    run("Print", ["x"], [], limit=2)
    assert capsys.readouterr().err.strip().endswith("): 1.5,2")
    net = core.Net("every")
    net.Print(["x"], [], every_n=2)
    workspace.CreateNet(net)
    workspace.RunNet(net.Name(), num_iter=5)
    assert capsys.readouterr().err.count("Tensor x") == 3          # runs 1, 3 and 5
    monkeypatch.chdir(tmp_path)
    workspace.FeedBlob("ints", np.array([7, 8], np.int64))
    run("Print", ["ints"], [], to_file=1)
    assert (tmp_path / "ints.log").read_text() == "Tensor ints of type long. Dims: (2,): 7,8\n"


def test_assert_and_nan_check():
    workspace.FeedBlob("ok", np.array([1, 2, 3], np.int64))
    run("Assert", ["ok"], [])
    workspace.FeedBlob("bad", np.array([True, False]))
    with pytest.raises(Caffe2Error, match="element 1 in tensor, value: 0\nError message: boom"):
        run("Assert", ["bad"], [], error_msg="boom")
    workspace.FeedBlob("f", np.ones(2, np.float32))
    with pytest.raises(Caffe2Error, match="int32, int64 or bool"):
        run("Assert", ["f"], [])
    x = np.array([1.0, 2.0, 3.0], np.float32)
    workspace.FeedBlob("x", x)
    run("NanCheck", ["x"], ["y"])
    np.testing.assert_array_equal(fetch("y"), x)
    workspace.FeedBlob("x", np.array([1.0, np.nan, np.inf], np.float32))
    with pytest.raises(Caffe2Error, match="NaN or inf: \\[x\\][\\s\\S]*NaN idxs: 1 2"):
        run("NanCheck", ["x"], ["x"])


def test_summarize_matches_numpy(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    workspace.FeedBlob("x", x)
    monkeypatch.chdir(tmp_path)
    run("Summarize", ["x"], ["s"], to_file=1)
    flat = x.astype(np.float64).reshape(-1)
    expect = [flat.min(), flat.max(), flat.mean(), np.sqrt(((flat - flat.mean()) ** 2).sum() / (flat.size - 1))]
    np.testing.assert_allclose(fetch("s"), expect, rtol=1e-6)
    assert len((tmp_path / "x.summary").read_text().split()) == 4
    workspace.FeedBlob("one", np.array([3.0], np.float32))
    run("Summarize", ["one"], ["s"])
    assert fetch("s").tolist() == [3.0, 3.0, 3.0, 0.0]


# --------------------------------------------------------------------------- timers and stats

def test_timers_and_the_global_stat_registry():
    import time
    run("StatRegistryExport", [], ["k0", "v0", "t0"])      # clears earlier counts
    net = core.Net("timed")
    net.TimerBegin([], ["timer"], counter_name="my_timer")
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    time.sleep(0.02)
    run("TimerGet", ["timer"], ["ns"])
    assert fetch("ns").shape == () and fetch("ns") >= 20_000_000
    run("TimerGetAndEnd", ["timer"], ["ns_end"])
    assert fetch("ns_end").shape == (1,) and fetch("ns_end")[0] >= fetch("ns")
    with pytest.raises(Caffe2Error, match="not running"):
        run("TimerEnd", ["timer"], [])
    run("StatRegistryExport", [], ["keys", "values", "ts"], reset=False)
    stats = dict(zip(fetch("keys").tolist(), fetch("values").tolist()))
    assert stats[b"my_timer/time_ns"] == int(fetch("ns_end")[0])      # string tensors come back as bytes
    assert stats[b"my_timer/time_ns/count"] == 1
    before = time.time_ns()
    run("WallClockTime", [], ["now"])
    assert before <= int(fetch("now")) <= time.time_ns()


def test_stat_registry_update_export_and_reset():
    run("StatRegistryCreate", [], ["reg"])
    workspace.FeedBlob("keys", strings("a", "b", "a"))
    workspace.FeedBlob("vals", np.array([1, 10, 5], np.int64))
    run("StatRegistryUpdate", ["keys", "vals", "reg"], [])
    run("StatRegistryExport", ["reg"], ["k", "v", "t"], reset=False)
    assert fetch("k").tolist() == [b"a", b"b"] and fetch("v").tolist() == [6, 10]
    run("StatRegistryExport", ["reg"], ["k", "v", "t"])        # reset (default)
    run("StatRegistryExport", ["reg"], ["k", "v", "t"])
    assert fetch("v").tolist() == [0, 0]
    workspace.FeedBlob("util", np.array([0.5], np.float32))
    run("StatRegistryExport", [], ["k", "v", "t"])
    run("CpuUtilizationReport", ["util"], [], stats_name="cpu")
    run("StatRegistryExport", [], ["k", "v", "t"])
    assert dict(zip(fetch("k").tolist(), fetch("v").tolist()))[b"cpu/cpu_utilization"] == 50


# --------------------------------------------------------------------------- strings

def test_string_ops():
    workspace.FeedBlob("s", np.array([["hello", "hi"], ["", "caffe2"]], dtype=object))
    run("StringPrefix", ["s"], ["p"], length=3)
    assert fetch("p").tolist() == [[b"hel", b"hi"], [b"", b"caf"]]     # fetched as bytes, as Caffe2
    run("StringSuffix", ["s"], ["q"], length=2)
    assert fetch("q").tolist() == [[b"lo", b"hi"], [b"", b"e2"]]
    run("StringStartsWith", ["s"], ["b"], prefix="h")
    assert fetch("b").tolist() == [[True, True], [False, False]]
    run("StringEndsWith", ["s"], ["e"], suffix="2")
    assert fetch("e").tolist() == [[False, False], [False, True]]
    workspace.FeedBlob("m", np.array([[1.5, 2.0], [3.0, 4.25]], np.float32))
    run("StringJoin", ["m"], ["rows"], delimiter="|")
    assert fetch("rows").tolist() == [b"1.5|2|", b"3|4.25|"]       # every element is followed by it
    run("StringJoin", ["m"], ["cols"], axis=1)
    assert fetch("cols").tolist() == [b"1.5,3,", b"2,4.25,"]
    workspace.FeedBlob("v", np.array([1, 2, 3], np.int64))
    run("StringJoin", ["v"], ["j"])
    assert fetch("j").tolist() == [b"1,", b"2,", b"3,"]
    with pytest.raises(Caffe2Error, match="string tensor"):
        run("StringPrefix", ["m"], ["p"])


# --------------------------------------------------------------------------- workspace blobs, maps

def test_free_get_all_blob_names_and_feed_blob_op():
    workspace.FeedBlob("a", np.ones(2, np.float32))
    workspace.FeedBlob("b", np.ones(2, np.float32))
    run("Free", ["a"], ["a"])
    assert workspace.HasBlob("a") and workspace.FetchBlob("a") is None
    net = core.Net("names")
    net.Relu("b", "c")
    net.GetAllBlobNames([], ["names"])
    workspace.RunNetOnce(net)
    assert fetch("names").tolist() == [b"a", b"b", b"c"]     # 'c' was written earlier in the run
    run("FeedBlob", [], ["s"], value="hello")
    assert fetch("s") == b"hello"
    # In a Do child workspace, include_shared=0 lists only the child's own blobs.
    body = core.Net("body")
    body.Relu("x_in", "tmp")
    body.GetAllBlobNames([], ["own"], include_shared=0)
    body.GetAllBlobNames([], ["all"])
    body.Copy("own", "own_out")
    body.Copy("all", "all_out")
    outer = core.Net("outer")
    outer.CreateScope([], ["ws"])
    outer.Do(["b", "ws"], ["o1", "o2", "ws"], net=body.Proto(), inner_blobs=["x_in", "own_out", "all_out"],
             outer_blobs_idx=[0, 1, 2])
    workspace.RunNetOnce(outer)
    assert fetch("o1").tolist() == [b"tmp"]
    assert fetch("o2").tolist() == [b"own", b"tmp", b"x_in"]     # bound outputs do not exist yet


def test_maps_round_trip():
    workspace.FeedBlob("k", np.array([3, 1, 2], np.int64))
    workspace.FeedBlob("v", np.array([30, 10, 20], np.int32))
    run("KeyValueToMap", ["k", "v"], ["map"])
    run("MapToKeyValue", ["map"], ["k2", "v2"])
    pairs = dict(zip(fetch("k2").tolist(), fetch("v2").tolist()))
    assert pairs == {3: 30, 1: 10, 2: 20}
    assert fetch("k2").dtype == np.int64 and fetch("v2").dtype == np.int32
    run("CreateMap", [], ["empty"], key_dtype=caffe2_pb2.TensorProto.INT64,
        value_dtype=caffe2_pb2.TensorProto.INT32)
    run("MapToKeyValue", ["empty"], ["k3", "v3"])
    assert fetch("k3").shape == (0,) and fetch("k3").dtype == np.int64
    with pytest.raises(Caffe2Error, match="INT32 or INT64"):
        run("CreateMap", [], ["bad"], key_dtype=caffe2_pb2.TensorProto.FLOAT)


# --------------------------------------------------------------------------- collectors

def test_last_n_window_collector_keeps_the_last_rows():
    n = 6
    workspace.FeedBlob("buf", np.zeros((0, 2), np.float32))
    workspace.FeedBlob("next", np.array(0, np.int32))
    workspace.FeedBlob("visited", np.array([0], np.int64))
    run("CreateMutex", [], ["m"])
    seen = []
    for batch in (4, 3, 4, 9, 2):
        rows = np.arange(len(seen), len(seen) + batch, dtype=np.float32).repeat(2).reshape(batch, 2)
        seen.extend(rows.tolist())
        workspace.FeedBlob("data", rows)
        run("LastNWindowCollector", ["buf", "next", "data", "m", "visited"], ["buf", "next", "visited"],
            num_to_collect=n)
        buf, cursor = fetch("buf"), int(fetch("next"))
        expect = seen[-n:]
        # The buffer is a ring whose oldest row sits at the cursor once it is full.
        ordered = np.roll(buf, -cursor, axis=0) if len(buf) == n else buf
        assert ordered.tolist() == expect
        assert int(fetch("visited")[0]) == len(seen)
    with pytest.raises(Caffe2Error, match="num_to_collect must be > 0"):
        run("LastNWindowCollector", ["buf", "next", "data"], ["buf", "next"], num_to_collect=0)


def test_reservoir_sampling_is_uniform_and_deduplicates():
    run("CreateMutex", [], ["m"])
    counts = np.zeros(10, int)
    rng_seed = core.DeviceOption(caffe2_pb2.CPU, random_seed=7)
    op = core.CreateOperator("ReservoirSampling", ["res", "visited", "data", "m"], ["res", "visited"],
                             num_to_collect=2, device_option=rng_seed)
    for name in ("res", "visited", "data"):
        workspace.FeedBlob(name, np.zeros((0,), np.int64))
    workspace.CreateNet(caffe2_pb2.NetDef(name="rs", op=[op]))
    for _ in range(600):
        workspace.FeedBlob("res", np.zeros((0,), np.int64))
        workspace.FeedBlob("visited", np.array([0], np.int64))
        for chunk in np.array_split(np.arange(10, dtype=np.int64), 3):
            workspace.FeedBlob("data", chunk)
            workspace.RunNet("rs")
        res = fetch("res")
        assert len(set(res.tolist())) == 2 and int(fetch("visited")[0]) == 10
        counts[res] += 1
    # each item kept with probability 2/10: 120 of 600 expected
    assert counts.min() > 70 and counts.max() < 170, counts

    run("CreateMap", [], ["obj_to_pos"], key_dtype=caffe2_pb2.TensorProto.INT64,
        value_dtype=caffe2_pb2.TensorProto.INT32)
    workspace.FeedBlob("res", np.zeros((0, 1), np.float32))
    workspace.FeedBlob("visited", np.array([0], np.int64))
    workspace.FeedBlob("pos_to_obj", np.zeros((0,), np.int64))
    for ids in ([1, 2, 2, 3], [3, 4, 1, 5, 6]):
        workspace.FeedBlob("data", np.array(ids, np.float32).reshape(-1, 1))
        workspace.FeedBlob("ids", np.array(ids, np.int64))
        run("ReservoirSampling", ["res", "visited", "data", "m", "ids", "obj_to_pos", "pos_to_obj"],
            ["res", "visited", "obj_to_pos", "pos_to_obj"], num_to_collect=4)
    kept = fetch("res").reshape(-1).astype(int).tolist()
    assert len(kept) == 4 and len(set(kept)) == 4                  # no object twice
    assert fetch("pos_to_obj").tolist() == kept
    assert int(fetch("visited")[0]) == 6                           # objects 1..6 counted once each


# --------------------------------------------------------------------------- index ops

def test_index_ops_against_a_dict():
    run("StringIndexCreate", [], ["idx"], max_elements=5)
    reference = {}
    for batch in (["a", "b", "a"], ["c", "b"]):
        workspace.FeedBlob("keys", strings(*batch))
        run("IndexGet", ["idx", "keys"], ["ids"])
        for k in batch:
            reference.setdefault(k, len(reference) + 1)
        assert fetch("ids").tolist() == [reference[k] for k in batch]
    run("IndexSize", ["idx"], ["size"])
    assert int(fetch("size")) == len(reference) + 1                 # the 0 entry counts
    workspace.FeedBlob("keys", strings("d", "e"))
    with pytest.raises(Caffe2Error, match="Dict max size reached"):
        run("IndexGet", ["idx", "keys"], ["ids"])
    reference["d"] = 4                       # keys are added one by one until the limit, as in Caffe2
    run("IndexFreeze", ["idx"], ["idx"])
    workspace.FeedBlob("keys", strings("zz", "a"))
    run("IndexGet", ["idx", "keys"], ["ids"])
    assert fetch("ids").tolist() == [0, 1]
    run("IndexStore", ["idx"], ["stored"])
    assert fetch("stored").tolist() == [k.encode() for k in sorted(reference, key=reference.get)]
    run("LongIndexCreate", [], ["li"])
    workspace.FeedBlob("items", np.array([0, 40, 30], np.int64))
    run("IndexLoad", ["li", "items"], ["li"], skip_first_entry=1)
    workspace.FeedBlob("q", np.array([[30, 40], [99, 30]], np.int64))
    run("IndexGet", ["li", "q"], ["ids"])
    assert fetch("ids").tolist() == [[2, 1], [3, 2]]
    workspace.FeedBlob("items", np.array([1, 1], np.int64))
    with pytest.raises(Caffe2Error, match="Repeated elements"):
        run("IndexLoad", ["li", "items"], ["li"])
    workspace.FeedBlob("q32", np.array([1], np.int32))
    with pytest.raises(Caffe2Error, match="wrong dictionary type"):
        run("IndexGet", ["li", "q32"], ["ids"])


def test_index_load_and_freeze_without_outputs():
    # Caffe2's first form of IndexLoad / IndexFreeze: no output, the index blob changes
    run("IntIndexCreate", [], ["idx"], max_elements=10)
    keys = np.array([7, -3, 11], np.int32)
    workspace.FeedBlob("items", keys)
    run("IndexLoad", ["idx", "items"], [])
    workspace.FeedBlob("q", np.array([11, 5, 7, 5], np.int32))
    run("IndexGet", ["idx", "q"], ["ids"])
    reference = {int(k): i + 1 for i, k in enumerate(keys)}           # loaded keys: 1, 2, 3
    for k in (11, 5, 7, 5):
        reference.setdefault(k, len(reference) + 1)                    # then new keys in order
    assert fetch("ids").tolist() == [reference[k] for k in (11, 5, 7, 5)]
    run("IndexFreeze", ["idx"], [])
    workspace.FeedBlob("q", np.array([99, -3], np.int32))
    run("IndexGet", ["idx", "q"], ["ids"])
    assert fetch("ids").tolist() == [0, reference[-3]]
    with pytest.raises(Caffe2Error):        # an output other than the handle is still refused
        run("IndexFreeze", ["idx"], ["other"])


def _reference_index_hash(value, bits, seed, modulo):
    def wrap(v):
        v &= (1 << bits) - 1
        return v - (1 << bits) if v >= 1 << (bits - 1) else v
    h = wrap(wrap_64(seed * 0xDEADBEEF))        # int64 product, then the id's own width
    for byte in (value & ((1 << bits) - 1)).to_bytes(bits // 8, "little"):
        signed = byte - 256 if byte >= 128 else byte
        h = wrap(h * 65537 + signed)
    return h % modulo


def wrap_64(v):
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


@pytest.mark.parametrize("dtype, bits", [(np.int32, 32), (np.int64, 64)])
@pytest.mark.parametrize("seed", [0, 3, -5, 2 ** 40])
def test_index_hash_matches_the_byte_wise_formula(dtype, bits, seed):
    ids = np.array([0, 1, -1, 12345, np.iinfo(dtype).max, np.iinfo(dtype).min], dtype)
    workspace.FeedBlob("ids", ids)
    run("IndexHash", ["ids"], ["hashed"], seed=seed, modulo=1000)
    expect = [_reference_index_hash(int(v), bits, seed, 1000) for v in ids]
    assert fetch("hashed").dtype == dtype and fetch("hashed").tolist() == expect
    with pytest.raises(Caffe2Error, match="modulo should be > 0"):
        run("IndexHash", ["ids"], ["hashed"])


# --------------------------------------------------------------------------- Python ops

def test_python_op_forward_inplace_and_gradient_op():
    def double(inputs, outputs):
        outputs[0].reshape(inputs[0].shape)
        outputs[0].data[...] = inputs[0].data * 2

    def double_grad(inputs, outputs):
        # inputs: x, y, dy; outputs: dx
        outputs[0].feed(inputs[2].data * 2)

    net = core.Net("py")
    net.Python(double, double_grad)(["x"], ["y"])
    net.Python(double)(["y"], ["y"])                   # in place
    x = np.arange(4, dtype=np.float32)
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(fetch("y"), x * 4)
    np.testing.assert_array_equal(fetch("x"), x)
    from caffe2py.operators.utility.python_ops import gradient_defs
    (grad_op,) = gradient_defs(net.Proto().op[0])
    assert list(grad_op.input) == ["x", "y", "y_grad"] and list(grad_op.output) == ["x_grad"]
    workspace.FeedBlob("y_grad", np.ones(4, np.float32))
    workspace.RunOperatorOnce(grad_op)
    np.testing.assert_array_equal(fetch("x_grad"), np.full(4, 2, np.float32))


class _Scale:
    """A stateful python_func_type: counts calls."""

    def __init__(self, factor):
        self.factor = factor
        self.calls = 0

    def forward(self, inputs, outputs):
        self.calls += 1
        outputs[0].feed(inputs[0].data * self.factor + self.calls)

    def backward(self, inputs, outputs):
        outputs[0].feed(inputs[-1].data * self.factor)


def _make_adder(amount):
    def add(inputs, outputs):
        outputs[0].feed(inputs[0].data + amount)
    return add


def test_python_op_workspace_builders_and_errors():
    def use_workspace(inputs, outputs, ws):
        outputs[0].feed(ws.fetch_blob("side") + inputs[0].data)
        ws.feed_blob("written_by_f", np.array([9], np.int32))

    workspace.FeedBlob("x", np.ones(2, np.float32))
    workspace.FeedBlob("side", np.full(2, 10, np.float32))
    net = core.Net("py")
    net.Python(use_workspace, pass_workspace=True)(["x"], ["y"])
    net.Python(3.0, python_func_type=_Scale)(["y"], ["z"])
    net.Python((_make_adder, [100], {}))(["z"], ["w"])       # pickled builder
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    workspace.RunNet(net.Name())
    np.testing.assert_array_equal(fetch("y"), np.full(2, 11, np.float32))
    np.testing.assert_array_equal(fetch("z"), np.full(2, 35, np.float32))   # second call: 11 * 3 + 2
    np.testing.assert_array_equal(fetch("w"), np.full(2, 135, np.float32))
    assert fetch("written_by_f").tolist() == [9]

    def broken(inputs, outputs):
        raise ValueError("nope")

    def writes_input(inputs, outputs):
        inputs[0].data[0] = 5

    for fn, message in ((broken, "Exception from running Python op: ValueError: nope"),
                        (writes_input, "read-only")):
        bad = core.Net("bad")
        bad.Relu("x", "r")
        bad.Python(fn)(["x"], ["out"])
        with pytest.raises(Caffe2Error, match=message):
            workspace.RunNetOnce(bad)
        assert not workspace.HasBlob("r")
    with pytest.raises(Caffe2Error, match="no function registered under token"):
        run("Python", ["x"], ["y"], token="nonexistent")


def test_python_dlpack_op_with_torch():
    torch = pytest.importorskip("torch")
    from caffe2py import python_op_registry

    def torch_sin(inputs, outputs):
        t = torch.utils.dlpack.from_dlpack(inputs[0].data)
        outputs[0].feed(torch.utils.dlpack.to_dlpack(torch.sin(t)))

    x = np.linspace(-1, 1, 5).astype(np.float32)
    workspace.FeedBlob("x", x)
    run("PythonDLPack", ["x"], ["y"], token=python_op_registry.register(torch_sin))
    np.testing.assert_allclose(fetch("y"), np.sin(x), rtol=1e-6)
    np.testing.assert_array_equal(fetch("x"), x)
