"""Caffe2's bound_shape_inference_test.cc cases, ported one by one.

Expected shapes are written out by hand from Caffe2's test (and the op
semantics), never taken from the code under test. Int8 ops use schemas only.
"""
import pytest

import caffe2py  # noqa: F401  (registers ops)
from caffe2py.core import CreateOperator
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.shape_inference import BoundShapeInferencer, BoundShapeSpec, DimType, ShapeInfo

DT = caffe2_pb2.TensorProto
C = DimType.CONSTANT
B = DimType.BATCH
BOFM = DimType.BATCH_OF_FEATURE_MAX
BOFMD = DimType.BATCH_OF_FEATURE_MAX_DEFAULT


def net_of(*ops):
    net = caffe2_pb2.NetDef(name="test")
    for op in ops:
        net.op.add().CopyFrom(op)
    return net


def op(op_type, inputs, outputs, **kwargs):
    return CreateOperator(op_type, inputs, outputs, **kwargs)


def info(types, dims, dtype=DT.FLOAT, quantized=False):
    return ShapeInfo(list(dims), list(types), dtype, quantized)


def infer(net, hints=None, batch=20, seq=1000):
    return BoundShapeInferencer(BoundShapeSpec(batch, seq)).infer(net, hints or {})


def check(out, name, types, dims, dtype=DT.FLOAT, quantized=False):
    assert name in out, "%s was not inferred" % name
    got = out[name]
    assert got.dims == list(dims), (name, got.dims)
    assert got.dim_types == list(types), (name, got.dim_types)
    assert got.dtype == dtype, (name, got.dtype)
    assert got.is_quantized == quantized, name


def test_sparse_lengths_sum():
    net = net_of(op("SparseLengthsSum", ["Weights", "Data", "Lengths"], ["Out"]))
    out = infer(net, {"Weights": info([C, C], [1000, 16])})
    check(out, "Weights", [C, C], [1000, 16])
    check(out, "Data", [BOFMD], [20 * 1000], DT.INT64)
    check(out, "Lengths", [B], [20], DT.INT32)
    check(out, "Out", [B, C], [20, 16])


def test_sparse_lengths_sum_sparse_lookup():
    net = net_of(op("SparseLengthsSumSparseLookup", ["Indices", "Lengths", "Remapping", "Weights"],
                    ["IndicesOut", "LengthsOut", "WeightsOut"]))
    hints = {"Remapping": info([C], [1000], DT.INT32), "Indices": info([BOFMD], [20000], DT.INT32),
             "Weights": info([BOFMD], [20000]), "Lengths": info([B], [20], DT.INT32)}
    out = infer(net, hints)
    check(out, "IndicesOut", [BOFMD], [20000], DT.INT32)
    check(out, "LengthsOut", [B], [20], DT.INT32)
    check(out, "WeightsOut", [BOFMD], [20000])


@pytest.mark.parametrize("op_type,width,extra", [
    ("SparseLengthsSumFused8BitRowwise", 58, None),
    ("SparseLengthsSum8BitRowwiseSparse", 58, "Mapping"),
    ("SparseLengthsSumFused4BitRowwise", 54, None),
])
def test_sparse_lengths_sum_fused_layouts(op_type, width, extra):
    inputs = ["Weights", "Data", "Lengths"] + ([extra] if extra else [])
    hints = {"Weights": info([C, C], [1000, width], DT.INT8)}
    if extra:
        hints[extra] = info([C], [2000], DT.INT32)
    out = infer(net_of(op(op_type, inputs, ["Out"])), hints)
    expected_width = width - 8 if "8Bit" in op_type else (width - 4) * 2
    assert expected_width == {58: 50, 54: 100}[width]
    check(out, "Data", [BOFMD], [20000], DT.INT64)
    check(out, "Lengths", [B], [20], DT.INT32)
    check(out, "Out", [B, C], [20, expected_width])


def test_lengths_range_fill():
    net = net_of(op("LengthsRangeFill", ["X"], ["Y"]), op("Copy", ["Y"], ["Z"]))
    out = infer(net)
    check(out, "X", [B], [20], DT.INT32)
    check(out, "Y", [BOFMD], [20000], DT.INT32)
    check(out, "Z", [BOFMD], [20000], DT.INT32)


def test_constant_fill():
    net = net_of(op("ConstantFill", ["X"], ["Y"]))
    out = infer(net, {"X": info([B, C], [20, 1024])})
    check(out, "Y", [B, C], [20, 1024])


def test_reshape():
    net = net_of(op("FC", ["X0", "W0", "B0"], ["X1"]),
                 op("Reshape", ["X1"], ["Y1", "old_shape"], shape=[-1, 8]),
                 op("Reshape", ["X1"], ["Y2", "old_shape2"], shape=[2, 8]))
    out = infer(net, {"W0": info([C, C], [16, 1024]), "B0": info([C], [16])})
    check(out, "X0", [B, C], [20, 1024])
    check(out, "X1", [B, C], [20, 16])
    check(out, "Y1", [B, C], [20 * 16 // 8, 8])
    assert "Y2" not in out   # 2x8 cannot hold 20x16 values


def test_concat_missing_input():
    net = net_of(op("Concat", ["I0", "I1"], ["Cout", "split_info"], axis=1, add_axis=1))
    out = infer(net, {"I0": info([B, C], [20, 60])})
    check(out, "I0", [B, C], [20, 60])
    check(out, "I1", [B, C], [20, 60])
    check(out, "Cout", [B, C, C], [20, 2, 60])


def test_int8_quantize_infer_input_backwards():
    net = net_of(op("Int8Quantize", ["I0"], ["Cout"]),
                 op("Int8FC", ["Cout", "W0", "B0"], ["Y"], Y_scale=0.05, Y_zero_point=0))
    hints = {"W0": info([C, C], [16, 101], DT.INT8, True), "B0": info([C], [16], DT.INT32, True)}
    out = infer(net, hints)
    check(out, "I0", [B, C], [20, 101], DT.FLOAT, False)
    check(out, "Cout", [B, C], [20, 101], DT.UINT8, True)
    check(out, "Y", [B, C], [20, 16], DT.UINT8, True)
    assert out["Y"].q_info.scale == [pytest.approx(0.05)]


def test_concat_infer_input_backwards():
    net = net_of(op("Concat", ["I0", "I1"], ["Cout", "split_info"], axis=1),
                 op("FCTransposed", ["Cout", "W0", "B0"], ["Y"]))
    out = infer(net, {"I0": info([B, C], [20, 60]), "W0": info([C, C], [101, 16]), "B0": info([C], [16])})
    check(out, "Cout", [B, C], [20, 101])
    check(out, "Y", [B, C], [20, 16])
    check(out, "I1", [B, C], [20, 101 - 60])


def test_elementwise_infer_input_backwards():
    net = net_of(op("Mul", ["I0", "I1"], ["Out"], broadcast=1),
                 op("Add", ["I00", "I11"], ["Outt"], broadcast=1))
    out = infer(net, {"Out": info([B, C], [20, 60]), "Outt": info([B, C], [20, 50])})
    for name in ("I0", "I1"):
        check(out, name, [B, C], [20, 60])
    for name in ("I00", "I11"):
        check(out, name, [B, C], [20, 50])


def test_elementwise_op():
    net = net_of(op("Mul", ["I0", "I1"], ["Out"], broadcast=1),
                 op("Mul", ["I3", "I4"], ["Out3"]),
                 op("Add", ["I00", "I11"], ["Outt"], broadcast=1))
    hints = {"I0": info([B, C], [20, 60]), "I00": info([B, C], [20, 50]),
             "I3": info([B, C], [20, 40]), "I4": info([B, C], [20, 40])}
    out = infer(net, hints)
    check(out, "I1", [B, C], [20, 60])
    check(out, "Out", [B, C], [20, 60])
    check(out, "I11", [B, C], [20, 50])
    check(out, "Outt", [B, C], [20, 50])
    check(out, "Out3", [B, C], [20, 40])


def test_bucketize():
    net = net_of(op("Bucketize", ["In"], ["Out"], boundaries=[1.0, 2.0]))
    out = infer(net, {"In": info([BOFM, C], [20, 60])})
    check(out, "Out", [BOFM, C], [20, 60], DT.INT32)


def test_split():
    net = net_of(op("Split", ["X"], ["Y0", "Y1"], axis=1),
                 op("Split", ["X"], ["Y2", "Y3", "Y4"], axis=1, split=[4, 30, 14]),
                 op("Split", ["X1"], ["Y5", "Y6"], axis=1, add_axis=1))
    out = infer(net, {"X": info([B, C], [20, 48]), "X1": info([B, C, C], [20, 2, 48])})
    check(out, "Y0", [B, C], [20, 24])
    check(out, "Y1", [B, C], [20, 24])
    check(out, "Y2", [B, C], [20, 4])
    check(out, "Y3", [B, C], [20, 30])
    check(out, "Y4", [B, C], [20, 14])
    check(out, "Y5", [B, C], [20, 48])
    check(out, "Y6", [B, C], [20, 48])


def test_fc():
    net = net_of(op("FC", ["X0", "W0", "B0"], ["Out0"]),
                 op("FCTransposed", ["X1", "W1", "B1"], ["Out1"]),
                 op("Int8FC", ["X2", "W2", "B2", "quant_param"], ["Out2"]))
    hints = {"W0": info([C, C], [16, 1024]), "B0": info([C], [16]),
             "W1": info([C, C], [16, 1024]), "B1": info([C], [1024]),
             "W2": info([C, C], [16, 1024]), "B2": info([C], [16]), "quant_param": info([C], [1])}
    out = infer(net, hints)
    check(out, "X0", [B, C], [20, 1024])
    check(out, "Out0", [B, C], [20, 16])
    check(out, "X1", [B, C], [20, 16])
    check(out, "Out1", [B, C], [20, 1024])
    check(out, "X2", [B, C], [20, 1024], DT.UINT8, True)
    check(out, "Out2", [B, C], [20, 16], DT.UINT8, True)


def test_fc_3d_weights():
    net = net_of(op("FC", ["X0", "W0", "B0"], ["Out0"], axis_w=1))
    out = infer(net, {"W0": info([C, C, C], [16, 1, 1024]), "B0": info([C], [16])})
    check(out, "X0", [B, C], [20, 1024])
    check(out, "Out0", [B, C], [20, 16])


def test_quantization():
    net = net_of(op("FloatToFused8BitRowwiseQuantized", ["w"], ["Out_w"]))
    out = infer(net, {"w": info([C, C], [16, 64])})
    check(out, "Out_w", [C, C], [16, 64 + 8], DT.UINT8)


@pytest.mark.parametrize("batch", [32, 8])
def test_tile(batch):
    net = net_of(op("Tile", ["blob"], ["blob_tile"], tiles=32, axis=0, dynamic=1))
    out = infer(net, {"blob": info([C, C], [1, 16])}, batch=batch)
    check(out, "blob_tile", [B, C], [batch, 16])


def test_combo0():
    net = net_of(op("SparseLengthsSum", ["Weights0", "Data0", "Lengths0"], ["EB0"]),
                 op("SparseLengthsSum", ["Weights1", "Data1", "Lengths1"], ["EB1"]),
                 op("Concat", ["EB0", "EB1"], ["Cout", "split_info"], axis=1, add_axis=1),
                 op("BatchMatMul", ["Cout", "Cout"], ["Bout"], trans_b=1),
                 op("Flatten", ["Bout"], ["Fout"]),
                 op("BatchGather", ["Fout", "Indices"], ["Gout"]))
    hints = {"Weights0": info([C, C], [1000, 16]), "Weights1": info([C, C], [20000, 16]),
             "Indices": info([C], [2], DT.INT64)}
    out = infer(net, hints)
    check(out, "Cout", [B, C, C], [20, 2, 16])
    check(out, "Bout", [B, C, C], [20, 2, 2])
    check(out, "Fout", [B, C], [20, 4])
    check(out, "Gout", [B, C], [20, 2])


def test_softmax():
    net = net_of(op("Softmax", ["input"], ["output"], axis=1))
    out = infer(net, {"input": info([C, C], [1, 16])}, batch=32)
    check(out, "output", [C, C], [1, 16])


def test_lp_norm():
    net = net_of(op("LpNorm", ["input"], ["output"], p=1))
    out = infer(net, {"input": info([C, C], [1, 16])}, batch=32)
    check(out, "output", [C], [1])


def test_transpose():
    net = net_of(op("Transpose", ["input"], ["output"], axes=[1, 0]))
    out = infer(net, {"input": info([C, C], [1, 16])}, batch=32)
    check(out, "output", [C, C], [16, 1])


def test_clip():
    net = net_of(op("Clip", ["input"], ["output"], min=10.0, max=20.0))
    out = infer(net, {"input": info([C, C], [8, 16])}, batch=32)
    check(out, "output", [C, C], [8, 16])


def test_mean():
    net = net_of(op("Mean", ["input0", "input1", "input2"], ["output"]))
    hints = {"input%d" % i: info([C, C], [8, 16]) for i in range(3)}
    out = infer(net, hints, batch=32)
    check(out, "output", [C, C], [8, 16])


def test_div():
    net = net_of(op("Div", ["input0", "input1"], ["output"]))
    out = infer(net, {"input0": info([C], [16]), "input1": info([C], [16])}, batch=32)
    check(out, "output", [C], [16])


# ----------------------------------------------------------------- errors the rules raise

def test_sls_without_data_shape_is_an_error():
    with pytest.raises(Caffe2Error, match="Shape of DATA input of SparseLengthsSum 'W' needs to be presented"):
        infer(net_of(op("SparseLengthsSum", ["W", "I", "L"], ["Out"])))


def test_fc_without_weight_shape_is_an_error():
    with pytest.raises(Caffe2Error, match="Shape of WEIGHT input of FC 'W' needs to be presented"):
        infer(net_of(op("FC", ["X", "W", "b"], ["Y"])))


def test_core_net_and_workspace_blobs_as_constant_hints():
    import numpy as np
    from caffe2py import core
    net = core.Net("fc")
    net.FC(["x", "w", "b"], "y")
    ws = {"w": np.zeros((7, 5), np.float32), "b": np.zeros(7, np.float32)}
    out = BoundShapeInferencer(BoundShapeSpec(3, 10)).infer(net, workspace=ws)
    check(out, "w", [C, C], [7, 5])
    check(out, "x", [B, C], [3, 5])
    check(out, "y", [B, C], [3, 7])


# ----------------------------------------------------------------- shape-annotated execution

def _fc_workspace(batch_fed):
    import numpy as np
    from caffe2py.workspace import Workspace
    ws = Workspace("bound")
    rng = np.random.default_rng(1)
    ws.feed_blob("w", rng.random((7, 100), dtype=np.float32))
    ws.feed_blob("b", rng.random(7, dtype=np.float32))
    ws.feed_blob("x", rng.random((batch_fed, 100), dtype=np.float32))
    net = caffe2_pb2.NetDef(name="fc_net")
    net.op.add().CopyFrom(op("FC", ["x", "w", "b"], ["y"]))
    net.external_input.extend(["x", "w", "b"])
    net.external_output.append("y")
    return ws, net


def test_bound_net_runs_within_the_bound_and_rejects_bigger_inputs():
    import numpy as np
    from caffe2py.bound_execution import create_bound_net
    ws, net = _fc_workspace(batch_fed=12)
    bound = create_bound_net(ws, net, BoundShapeSpec(20, 1),
                             {"x": ShapeInfo([20, 100], [B, C])})
    assert bound.shapes["y"].dims == [20, 7]
    ws.run_net("fc_net")
    ref = ws.fetch_blob("x").astype(np.float64) @ ws.fetch_blob("w").T.astype(np.float64) + ws.fetch_blob("b")
    np.testing.assert_allclose(ws.fetch_blob("y"), ref, rtol=1e-5)
    ws.feed_blob("x", np.zeros((32, 100), np.float32))
    with pytest.raises(Caffe2Error, match=r"blob 'x' was fed \[32, 100\] but the net was bound for at most "
                                          r"\[20, 100\] \(BATCH=20\)"):
        ws.run_net("fc_net")
    ws.feed_blob("x", np.zeros((4, 100, 1), np.float32))
    with pytest.raises(Caffe2Error, match=r"blob 'x' was fed \[4, 100, 1\] \(3-D\)"):
        ws.run_net("fc_net")


def test_kernel_factories_see_inferred_input_types():
    from caffe2py.bound_execution import create_bound_net
    from caffe2py.registry import OpSchema, register_kernel, register_schema
    seen = {}
    register_schema(OpSchema("TestRecordInputTypes", num_inputs=1, num_outputs=1,
                             inference=lambda ctx, ins: [ins[0]]))

    @register_kernel("TestRecordInputTypes")
    def factory(ctx):
        seen["types"] = ctx.input_types
        return lambda x: x
    ws, net = _fc_workspace(batch_fed=3)
    net.op.add().CopyFrom(op("TestRecordInputTypes", ["y"], ["z"]))
    create_bound_net(ws, net, BoundShapeSpec(16, 1), {"x": ShapeInfo([16, 100], [B, C])})
    assert seen["types"][0].dims == (16, 7)
    assert seen["types"][0].dtype == DT.FLOAT


def test_memory_summary_at_the_bound():
    from caffe2py.bound_execution import memory_summary
    net = net_of(op("FC", ["x", "w", "b"], ["h"]), op("Relu", ["h"], ["r"]), op("FC", ["r", "w2", "b2"], ["y"]))
    net.external_output.append("y")
    hints = {"w": info([C, C], [64, 100]), "b": info([C], [64]), "w2": info([C, C], [10, 64]), "b2": info([C], [10])}
    shapes = infer(net, hints, batch=32)
    mem = memory_summary(net, shapes, parameters=hints)
    params = 4 * (64 * 100 + 64 + 10 * 64 + 10)
    x, h, r, y = 4 * 32 * 100, 4 * 32 * 64, 4 * 32 * 64, 4 * 32 * 10
    assert mem["parameter_bytes"] == params
    assert mem["activation_bytes"] == x + h + r + y
    assert mem["total_bytes"] == params + x + h + r + y
    # op 1 holds h and r live (x was freed after op 0); op 0 holds x and h
    assert mem["peak_live_activation_bytes"] == max(x + h, h + r, r + y)


def test_print_shape_info_format():
    inf = BoundShapeInferencer(BoundShapeSpec(20, 1000))
    inf.infer(net_of(op("Relu", ["x"], ["y"])), {"x": info([B, C], [20, 16])})
    text = inf.print_shape_info()
    assert "x: dim_type: BATCH, CONSTANT, dims: [20, 16, ], dtype: 1" in text
    assert "y: dim_type: BATCH, CONSTANT, dims: [20, 16, ], dtype: 1" in text


def test_recommendation_net_runs_within_its_bound():
    """SLS -> FC -> Relu inferred at B=8, S=5, then run on a smaller batch with the
    real kernels: every actual shape fits its bound; a bigger batch is refused."""
    import numpy as np
    from caffe2py import registry
    from caffe2py.bound_execution import create_bound_net, out_of_bound_blobs
    from caffe2py.workspace import Workspace
    if not registry.has_op("SparseLengthsSum"):
        pytest.skip("SparseLengthsSum kernel not available")
    rng = np.random.default_rng(0)
    ws = Workspace("recsys")
    ws.feed_blob("table", rng.random((50, 16), dtype=np.float32))
    ws.feed_blob("w", rng.random((4, 16), dtype=np.float32))
    ws.feed_blob("b", rng.random(4, dtype=np.float32))
    lengths = np.array([5, 0, 3, 2, 4, 1], np.int32)
    ws.feed_blob("lengths", lengths)
    ws.feed_blob("ids", rng.integers(0, 50, lengths.sum()).astype(np.int64))
    net = net_of(op("SparseLengthsSum", ["table", "ids", "lengths"], ["emb"]),
                 op("FC", ["emb", "w", "b"], ["fc"]), op("Relu", ["fc"], ["out"]))
    net.name = "recsys"
    spec = BoundShapeSpec(8, 5)
    bound = create_bound_net(ws, net, spec, {"ids": info([BOFMD], [40], DT.INT64),
                                             "lengths": info([B], [8], DT.INT32)})
    check(bound.shapes, "emb", [B, C], [8, 16])
    check(bound.shapes, "out", [B, C], [8, 4])
    ws.run_net("recsys")
    assert ws.fetch_blob("out").shape == (6, 4)
    assert out_of_bound_blobs(ws.blobs, bound.shapes, spec) == []
    ws.feed_blob("lengths", np.ones(9, np.int32))
    with pytest.raises(Caffe2Error, match=r"blob 'lengths' was fed \[9\] but the net was bound for at most "
                                          r"\[8\] \(BATCH=8\)"):
        ws.run_net("recsys")
