"""Embedding lookups exported as standard ONNX (Gather, masks built from LENGTHS,
ReduceSum; fused 8-bit tables dequantised with Cast and Mul): onnxruntime matches
caffe2py and the formulas written out in NumPy, for empty segments, int32 / int64
indices, float16 tables and symbolic sizes; and a recommendation-style net."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from _onnx_export import (check_export, init_net_of, onnx_op_types, predict_net,  # noqa: E402
                          run_onnxruntime)
from caffe2py.onnx import frontend  # noqa: E402

RNG = np.random.default_rng(99)
ROWS, DIM = 30, 6
FLOAT_OPS = ["SparseLengthsSum", "SparseLengthsWeightedSum", "SparseLengthsMean"]
FUSED_OPS = [op + "Fused8BitRowwise" for op in FLOAT_OPS]
STANDARD_OPS = {"Cast", "CumSum", "Sub", "Concat", "ReduceMax", "Range", "Unsqueeze", "Add", "Less", "Where",
                "Gather", "Mul", "ReduceSum", "Max", "Div", "Shape", "ConstantOfShape", "ScatterND", "Slice"}
OPSETS = [13, 17]       # the ReduceSum grid form before opset 16, ScatterND add from 16


def lookup_reference(table, indices, lengths, weights=None, mean=False):
    """Segment sums of table rows, written out."""
    out = np.zeros((len(lengths),) + table.shape[1:], np.float64)
    start = 0
    for i, n in enumerate(lengths):
        for j in range(start, start + n):
            out[i] += table[indices[j]] * (1.0 if weights is None else weights[j])
        if mean and n:
            out[i] /= n
        start += n
    return out.astype(np.float32)


def fused8_reference(fused):
    """Dequantised rows of a fused 8-bit table: q * scale + bias per row."""
    scale_bias = np.ascontiguousarray(fused[:, -8:]).view(np.float32)
    return fused[:, :-8].astype(np.float32) * scale_bias[:, :1] + scale_bias[:, 1:]


def _feeds(lengths, index_dtype):
    lengths = np.asarray(lengths, np.int32)
    n = int(lengths.sum())
    return {"idx": RNG.integers(0, ROWS, n).astype(index_dtype), "len": lengths,
            "w": RNG.random(n).astype(np.float32)}


def _lookup_net(op, table_name="table"):
    weighted = "Weighted" in op
    ins = [table_name, "w", "idx", "len"] if weighted else [table_name, "idx", "len"]
    return predict_net(lambda n: getattr(n, op)(ins, "out"), [table_name, "idx", "len", "w"], ["out"]), weighted


LENGTHS = [[2, 0, 3, 1], [0, 0, 0], [4], []]


@pytest.mark.parametrize("op", FLOAT_OPS)
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda v: "lengths=%s" % v)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("opset", OPSETS)
def test_float_lookups(op, lengths, index_dtype, opset):
    table = RNG.standard_normal((ROWS, DIM)).astype(np.float32)
    pred, weighted = _lookup_net(op)
    feeds = _feeds(lengths, index_dtype)
    model = check_export(pred, init_net_of({"table": table}), feeds,
                         value_info={"idx": (7 if index_dtype == np.int64 else 6, ["n"]),
                                     "len": (6, ["batch"]), "w": (1, ["n"])}, opset=opset)
    assert set(onnx_op_types(model)) <= STANDARD_OPS
    assert ("ScatterND" in onnx_op_types(model)) == (opset >= 16)
    got = run_onnxruntime(model, feeds)[0]
    expected = lookup_reference(table, feeds["idx"], feeds["len"], feeds["w"] if weighted else None,
                                mean=op.endswith("Mean"))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", FUSED_OPS)
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda v: "lengths=%s" % v)
@pytest.mark.parametrize("opset", OPSETS)
def test_fused8_lookups(op, lengths, opset):
    table = RNG.standard_normal((ROWS, DIM)).astype(np.float32) * 3
    init = init_net_of({"table_f": table},
                       extra=lambda n: n.FloatToFused8BitRowwiseQuantized(["table_f"], "table"))
    pred, weighted = _lookup_net(op)
    feeds = _feeds(lengths, np.int64)
    model = check_export(pred, init, feeds, value_info={"idx": (7, ["n"]), "len": (6, ["batch"]),
                                                        "w": (1, ["n"])}, opset=opset)
    assert set(onnx_op_types(model)) <= STANDARD_OPS
    names = {t.name: t for t in model.graph.initializer}
    assert names["table_quantized"].data_type == 2           # the values stay uint8
    from caffe2py.workspace import Workspace
    ws = Workspace("fused")
    ws.run_net_once(init)
    dequantised = fused8_reference(ws.fetch_blob("table"))
    got = run_onnxruntime(model, feeds)[0]
    expected = lookup_reference(dequantised, feeds["idx"], feeds["len"], feeds["w"] if weighted else None,
                                mean="Mean" in op)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", OPSETS)
def test_float16_tables(opset):
    table = RNG.standard_normal((ROWS, DIM)).astype(np.float32)
    init = init_net_of({"t32": table}, extra=lambda n: n.FloatToHalf(["t32"], "t16"))
    pred = predict_net(lambda n: (n.SparseLengthsSum(["t16", "idx", "len"], "h"),
                                  n.SparseLengthsWeightedSum(["t32", "w", "idx", "len"], "f")),
                       ["t16", "t32", "idx", "len", "w"], ["h", "f"])
    check_export(pred, init, _feeds([1, 3, 0], np.int64), rtol=1e-5, atol=1e-5, opset=opset)


def test_a_shared_fused_table_is_split_once():
    table = RNG.standard_normal((ROWS, DIM)).astype(np.float32)
    init = init_net_of({"f": table}, extra=lambda n: n.FloatToFused8BitRowwiseQuantized(["f"], "q"))
    pred = predict_net(lambda n: (n.SparseLengthsSumFused8BitRowwise(["q", "idx", "len"], "a"),
                                  n.SparseLengthsMeanFused8BitRowwise(["q", "idx", "len"], "b")),
                       ["q", "idx", "len"], ["a", "b"])
    model = check_export(pred, init, {k: v for k, v in _feeds([2, 2], np.int64).items() if k != "w"})
    names = sorted(t.name for t in model.graph.initializer if t.name.startswith("q_"))
    assert names == ["q_bias", "q_quantized", "q_scale"]


def test_a_fused_table_fed_at_run_time_is_refused():
    from caffe2py.errors import Caffe2Error
    pred, _ = _lookup_net("SparseLengthsSumFused8BitRowwise")
    with pytest.raises(Caffe2Error, match=r"SparseLengthsSumFused8BitRowwise #0 'out': blob 'table': .*init net"):
        frontend.caffe2_net_to_onnx_model(pred, None, {"table": (2, [ROWS, DIM + 8]), "idx": (7, [5]),
                                                       "len": (6, [2]), "w": (1, [5])})


# ----------------------------------------------------------------- a recommendation net

def rec_nets(dense_dim=5, dim=4):
    """Dense FC tower, a float and a fused 8-bit lookup, dot interaction
    (Concat add_axis -> BatchMatMul -> Flatten -> BatchGather of the upper
    triangle), top FCs, Sigmoid."""
    r = np.random.default_rng(3)
    f = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    constants = {"w0": f(dim, dense_dim), "b0": f(dim), "emb_a": f(40, dim), "emb_b_f": f(50, dim),
                 "pairs_idx": np.array([1, 2, 5], np.int64), "w1": f(8, dim + 3), "b1": f(8),
                 "w2": f(1, 8), "b2": f(1)}
    init = init_net_of(constants, extra=lambda n: n.FloatToFused8BitRowwiseQuantized(["emb_b_f"], "emb_b"))

    def build(n):
        n.FC(["dense", "w0", "b0"], "d0")
        n.Relu("d0", "d")
        n.SparseLengthsSum(["emb_a", "ids_a", "len_a"], "ea")
        n.SparseLengthsWeightedSumFused8BitRowwise(["emb_b", "wt_b", "ids_b", "len_b"], "eb")
        n.Concat(["d", "ea", "eb"], ["stacked", "stacked_info"], axis=1, add_axis=1)
        n.BatchMatMul(["stacked", "stacked"], "dots", trans_b=1)
        n.Flatten("dots", "dots_flat")
        n.BatchGather(["dots_flat", "pairs_idx"], "pairs")
        n.Concat(["d", "pairs"], ["top", "top_info"], axis=1)
        n.FC(["top", "w1", "b1"], "h")
        n.Relu("h", "h")
        n.FC(["h", "w2", "b2"], "logit")
        n.Sigmoid("logit", "prob")
    params = [n for n in constants if n != "emb_b_f"] + ["emb_b"]
    pred = predict_net(build, ["dense", "ids_a", "len_a", "wt_b", "ids_b", "len_b"] + params, ["prob"], name="rec")
    return pred, init


def rec_feeds(batch, seed):
    r = np.random.default_rng(seed)
    len_a = r.integers(0, 4, batch).astype(np.int32)
    len_b = r.integers(0, 5, batch).astype(np.int32)
    return {"dense": r.standard_normal((batch, 5)).astype(np.float32),
            "ids_a": r.integers(0, 40, len_a.sum()).astype(np.int64), "len_a": len_a,
            "wt_b": r.random(len_b.sum()).astype(np.float32),
            "ids_b": r.integers(0, 50, len_b.sum()).astype(np.int32), "len_b": len_b}


REC_VALUE_INFO = {"dense": (1, ["batch", 5]), "ids_a": (7, ["n_a"]), "len_a": (6, ["batch"]),
                  "wt_b": (1, ["n_b"]), "ids_b": (6, ["n_b"]), "len_b": (6, ["batch"])}


@pytest.mark.parametrize("opset", OPSETS)
def test_recommendation_net_exports_and_matches_for_any_batch(opset):
    import onnx
    from _onnx_export import run_caffe2
    pred, init = rec_nets()
    model = frontend.caffe2_net_to_onnx_model(pred, init, REC_VALUE_INFO, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    out = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in out] == ["batch", 1]
    for batch, seed in ((6, 0), (1, 1), (9, 2)):
        feeds = rec_feeds(batch, seed)
        expected = run_caffe2(pred, init, feeds)[0]
        got = run_onnxruntime(model, feeds)[0]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_recommendation_net_with_static_shapes():
    pred, init = rec_nets()
    check_export(pred, init, rec_feeds(4, 5))
