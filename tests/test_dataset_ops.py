"""Dataset ops against a reference: records kept as Python nested structures and
flattened to columns by the test itself, following CreateTreeCursor's documented
layout (lengths fields open domains, values follow in record order)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error, OperatorError

FIELDS = ["a", "b:lengths", "b:values:lengths", "b:values:values", "c:lengths", "c:c1",
          "c:c2:lengths", "c:c2:values"]


def make_records(n, seed=0):
    """n records of Struct(a=int, b=List(List(int)), c=List(Struct(c1=str, c2=List(int))))."""
    rng = np.random.default_rng(seed)
    records = []
    for r in range(n):
        b = [list(rng.integers(0, 100, rng.integers(0, 4))) for _ in range(rng.integers(0, 3))]
        c = [(("s%d_%d" % (r, k)).encode(), list(rng.integers(0, 100, rng.integers(0, 3))))
             for k in range(rng.integers(0, 3))]
        records.append((int(rng.integers(0, 1000)), b, c))
    return records


def flatten(records):
    """The column layout of CreateTreeCursor's documentation."""
    cols = {f: [] for f in FIELDS}
    for a, b, c in records:
        cols["a"].append(a)
        cols["b:lengths"].append(len(b))
        for inner in b:
            cols["b:values:lengths"].append(len(inner))
            cols["b:values:values"].extend(inner)
        cols["c:lengths"].append(len(c))
        for c1, c2 in c:
            cols["c:c1"].append(c1)
            cols["c:c2:lengths"].append(len(c2))
            cols["c:c2:values"].extend(c2)
    out = {}
    for f, v in cols.items():
        if f == "c:c1":
            arr = np.empty(len(v), dtype=object)
            arr[:] = v
            out[f] = arr
        elif f.endswith("lengths"):
            out[f] = np.array(v, dtype=np.int32)
        else:
            out[f] = np.array(v, dtype=np.int64)
    return out


def domain_sizes(ref):
    """Entries per domain: records, then one domain per lengths field."""
    return [len(ref["a"]), len(ref["b:values:lengths"]), len(ref["b:values:values"]), len(ref["c:c1"]),
            len(ref["c:c2:values"])]


def assert_columns(got, ref):
    for f, g in zip(FIELDS, got):
        assert np.asarray(g).tolist() == ref[f].tolist(), f
        assert np.asarray(g).dtype == ref[f].dtype, f


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def feed_dataset(records, prefix="d/"):
    cols = flatten(records)
    names = [prefix + f for f in FIELDS]
    for n, f in zip(names, FIELDS):
        workspace.FeedBlob(n, cols[f])
    return names


def run(op, inputs, outputs, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(op, inputs, outputs, **kwargs))


def test_read_next_batch_walks_every_record():
    records = make_records(11)
    names = feed_dataset(records)
    run("CreateTreeCursor", [], ["cursor"], fields=FIELDS)
    net = core.Net("read")
    outs = ["o/" + f for f in FIELDS]
    net.ReadNextBatch(["cursor"] + names, outs, batch_size=4)
    workspace.CreateNet(net)
    for start in (0, 4, 8, 11, 11):
        workspace.RunNet(net.Name())
        assert_columns([workspace.FetchBlob(o) for o in outs], flatten(records[start:start + 4]))
    run("GetCursorOffset", ["cursor"], ["off"])
    ref = flatten(records)
    assert workspace.FetchBlob("off").tolist() == domain_sizes(ref)
    run("ResetCursor", ["cursor"], [])
    workspace.RunNet(net.Name())
    assert_columns([workspace.FetchBlob(o) for o in outs], flatten(records[:4]))


def test_enforce_batch_size_empties_a_short_last_batch():
    records = make_records(5)
    names = feed_dataset(records)
    run("CreateTreeCursor", [], ["cursor"], fields=FIELDS)
    outs = ["o/" + f for f in FIELDS]
    run("ReadNextBatch", ["cursor"] + names, outs, batch_size=3, enforce_batch_size=True)
    assert_columns([workspace.FetchBlob(o) for o in outs], flatten(records[:3]))
    run("ReadNextBatch", ["cursor"] + names, outs, batch_size=3, enforce_batch_size=True)
    assert all(workspace.FetchBlob(o).size == 0 for o in outs)


def test_compute_offset_and_read_random_batch():
    records = make_records(9, seed=1)
    names = feed_dataset(records)
    run("CreateTreeCursor", [], ["cursor"], fields=FIELDS)
    run("ComputeOffset", ["cursor"] + names, ["offsets"])
    offsets = workspace.FetchBlob("offsets")
    assert offsets.shape == (10, 5) and offsets.dtype == np.int64
    for k in range(10):        # reference: the column sizes of the first k records
        assert offsets[k].tolist() == domain_sizes(flatten(records[:k]))
    order = np.array([7, 2, 8, 0, 5, 1, 3, 6, 4], np.int64)
    workspace.FeedBlob("idx", order)
    outs = ["o/" + f for f in FIELDS]
    for start in (0, 4, 8):
        run("ReadRandomBatch", ["cursor", "idx", "offsets"] + names, outs, batch_size=4)
        assert_columns([workspace.FetchBlob(o) for o in outs], flatten([records[i] for i in order[start:start + 4]]))
    run("ReadRandomBatch", ["cursor", "idx", "offsets"] + names, outs, batch_size=4, loop_over=True)
    assert_columns([workspace.FetchBlob(o) for o in outs], flatten([records[i] for i in order[:4]]))


def test_read_random_batch_rejects_out_of_range_indices():
    names = feed_dataset(make_records(3))
    run("CreateTreeCursor", [], ["cursor"], fields=FIELDS)
    run("ComputeOffset", ["cursor"] + names, ["offsets"])
    workspace.FeedBlob("idx", np.array([0, 3], np.int64))
    with pytest.raises(OperatorError, match="index 3 is out of range"):
        run("ReadRandomBatch", ["cursor", "idx", "offsets"] + names, ["o" + str(i) for i in range(8)], batch_size=2)


def test_pack_unpack_and_trim():
    records = make_records(7, seed=2)
    names = feed_dataset(records)
    run("PackRecords", names, ["packed"], fields=FIELDS)
    packed = workspace.FetchBlob("packed")
    assert packed.shape == (7,)
    for rec, ref in zip(packed, records):
        assert_columns(rec, flatten([ref]))
    outs = ["u/" + f for f in FIELDS]
    run("UnPackRecords", ["packed"], outs, fields=FIELDS)
    assert_columns([workspace.FetchBlob(o) for o in outs], flatten(records))
    run("TrimDataset", names, names, fields=FIELDS, multiple_of=3)
    assert_columns([workspace.FetchBlob(n) for n in names], flatten(records[:6]))
    run("CheckDatasetConsistency", names, [], fields=FIELDS)


def test_unpack_empty_needs_prototypes():
    workspace.FeedBlob("packed", np.empty(0, dtype=object))
    workspace.FeedBlob("p0", np.zeros((0, 3), np.float32))
    with pytest.raises(OperatorError, match="without prototype"):
        run("UnPackRecords", ["packed"], ["x"], fields=["x"])
    run("UnPackRecords", ["packed", "p0"], ["x"], fields=["x"])
    assert workspace.FetchBlob("x").shape == (0, 3) and workspace.FetchBlob("x").dtype == np.float32


def test_consistency_errors():
    cols = flatten(make_records(4, seed=3))
    for f in FIELDS:
        workspace.FeedBlob(f, cols[f])
    bad = cols["b:values:lengths"].copy()
    bad[0] += 50                                  # lengths that run past the values
    workspace.FeedBlob("b:values:lengths", bad)
    with pytest.raises(OperatorError, match="past the end"):
        run("CheckDatasetConsistency", FIELDS, [], fields=FIELDS)
    workspace.FeedBlob("b:values:lengths", cols["b:values:lengths"])
    workspace.FeedBlob("c:c1", cols["c:c1"][:-1])  # one domain, two sizes
    with pytest.raises(OperatorError, match="inconsistent sizes"):
        run("CheckDatasetConsistency", FIELDS, [], fields=FIELDS)
    with pytest.raises(Caffe2Error, match="depends on a field defined afterwards"):
        run("CreateTreeCursor", [], ["c"], fields=["x:values", "x:lengths"])


def test_read_with_a_non_cursor_is_an_error():
    workspace.FeedBlob("notcursor", np.zeros(1, np.float32))
    workspace.FeedBlob("a", np.zeros(3, np.float32))
    with pytest.raises(OperatorError, match="must be a TreeCursor"):
        run("ReadNextBatch", ["notcursor", "a"], ["b"])


def test_tensor_vectors_and_collect_tensor():
    run("CreateTensorVector", [], ["v"])
    run("CreateTensorVector", [], ["w"])
    net = core.Net("collect")
    net.CollectTensor(["v", "w", "x", "y"], ["v", "w"], num_to_collect=3)
    net.Proto().op[0].device_option.random_seed = 7
    for name in ("x", "y"):      # Caffe2's CreateNet refuses inputs that do not exist yet
        workspace.CreateBlob(name)
    workspace.CreateNet(net)
    seen = []
    for i in range(50):
        workspace.FeedBlob("x", np.full((1, 2), i, np.float32))
        workspace.FeedBlob("y", np.array([i], np.int64))
        workspace.RunNet(net.Name())
        seen.append(i)
    v, w = workspace.FetchBlob("v"), workspace.FetchBlob("w")
    assert len(v) == len(w) == 3
    # all-or-none: both vectors hold the same samples at the same positions, each seen once
    assert [int(t[0, 0]) for t in v] == [int(t[0]) for t in w]
    assert len({int(t[0]) for t in w}) == 3 and all(0 <= int(t[0]) < 50 for t in w)
    run("TensorVectorSize", ["v"], ["n"])
    assert workspace.FetchBlob("n").tolist() == 3 and workspace.FetchBlob("n").dtype == np.int32
    run("ConcatTensorVector", ["v"], ["cat"])
    np.testing.assert_array_equal(workspace.FetchBlob("cat"), np.concatenate(list(v)))


def test_collect_tensor_reservoir_is_uniform():
    """Reservoir sampling keeps each of the N items with probability k/N: 200 ops with
    their own seeds and vectors collect 5 of 20 items."""
    trials = 200
    net = core.Net("c")
    workspace.FeedBlob("x", np.array([0], np.int32))
    for seed in range(trials):
        run("CreateTensorVector", [], ["v%d" % seed])
        op = core.CreateOperator("CollectTensor", ["v%d" % seed, "x"], ["v%d" % seed], num_to_collect=5)
        op.device_option.random_seed = seed
        net.Proto().op.extend([op])
    workspace.CreateNet(net)
    for i in range(20):
        workspace.FeedBlob("x", np.array([i], np.int32))
        workspace.RunNet(net.Name())
    counts = np.zeros(20)
    for seed in range(trials):
        for t in workspace.FetchBlob("v%d" % seed):
            counts[int(t[0])] += 1
    freq = counts / trials
    assert abs(freq.mean() - 0.25) < 1e-9 and np.all(np.abs(freq - 0.25) < 0.1)


def test_concat_tensor_vector_shape_errors():
    run("CreateTensorVector", [], ["v"])
    with pytest.raises(OperatorError, match="empty"):
        run("ConcatTensorVector", ["v"], ["out"])
