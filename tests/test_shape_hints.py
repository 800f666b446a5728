"""Shape hints (Caffe2's string format, TensorBoundShapes protos, rescaling),
CheckAndSetTensorBoundShape precedence, the unknown-op path and bad input."""
import logging

import pytest

import caffe2py  # noqa: F401
from caffe2py.core import CreateOperator
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import OpSchema, register_schema
from caffe2py.shape_hints import (check_hints_against_net, extract_shape_info, format_shape_hints,
                                  from_tensor_bound_shapes, parse_shape_hints, rescale_shapes,
                                  to_tensor_bound_shapes)
from caffe2py.shape_inference import (NEW_WINS, NO_PRECEDENCE, OLD_WINS, BoundShapeInferencer, BoundShapeSpec,
                                      DimType, ShapeInfo, dim_type_precedence)

DT = caffe2_pb2.TensorProto
C, B = DimType.CONSTANT, DimType.BATCH
FM, FMD = DimType.FEATURE_MAX, DimType.FEATURE_MAX_DEFAULT
BOFM, BOFMD = DimType.BATCH_OF_FEATURE_MAX, DimType.BATCH_OF_FEATURE_MAX_DEFAULT
U = DimType.UNKNOWN


def net_of(*ops):
    net = caffe2_pb2.NetDef(name="hints")
    for op in ops:
        net.op.add().CopyFrom(op)
    return net


# ----------------------------------------------------------------- parsing

def test_parse_dims_types_and_default_dim_types():
    hints = parse_shape_hints("x,20,16#ids,300,int64#h,4,half#s,2,string")
    assert hints["x"].dims == [20, 16] and hints["x"].dim_types == [B, C] and hints["x"].dtype == DT.FLOAT
    assert hints["ids"].dims == [300] and hints["ids"].dtype == DT.INT64 and hints["ids"].dim_types == [B]
    assert hints["h"].dtype == DT.FLOAT16
    assert hints["s"].dtype == DT.STRING


def test_every_caffe2_type_name():
    expected = {"uint8": DT.UINT8, "int8": DT.INT8, "uint16": DT.UINT16, "int16": DT.INT16,
                "int32": DT.INT32, "int64": DT.INT64, "float16": DT.FLOAT16, "half": DT.FLOAT16,
                "float": DT.FLOAT, "double": DT.DOUBLE, "byte": DT.BYTE, "string": DT.STRING,
                "bool": DT.BOOL, "hash": DT.ZERO_COLLISION_HASH}
    for name, dtype in expected.items():
        assert parse_shape_hints("b,3,%s" % name)["b"].dtype == dtype, name


def test_int8_names_default_to_uint8_and_unknown_types_to_float(caplog):
    hints = parse_shape_hints("table_int8,100,24#w,5")
    assert hints["table_int8"].dtype == DT.UINT8
    assert hints["w"].dtype == DT.FLOAT
    with caplog.at_level(logging.WARNING, logger="caffe2py"):
        assert parse_shape_hints("y,2,complex")["y"].dtype == DT.FLOAT
    assert "unknown type 'complex'" in caplog.text


def test_numeric_blob_names_are_allowed():
    assert parse_shape_hints("1,1,28,28")["1"].dims == [1, 28, 28]


def test_format_round_trip():
    text = "x,20,16,float#ids,300,int64"
    hints = parse_shape_hints(text)
    assert parse_shape_hints(format_shape_hints(hints)) == hints
    assert format_shape_hints(hints) == text


@pytest.mark.parametrize("text,message", [
    (",3,4", "must start with a blob name"),
    ("x,3,four,5", "dim 'four' is not an integer"),
    ("x,3,-4", "dim -4 is negative"),
    ("x,3##y,4", "is empty"),
    ("x,3#x,4", "inconsistent shape hints for 'x'"),
])
def test_malformed_hint_strings(text, message):
    with pytest.raises(Caffe2Error, match=message):
        parse_shape_hints(text)


def test_hint_for_a_blob_the_net_does_not_use():
    net = net_of(CreateOperator("Relu", ["input"], ["out"]))
    with pytest.raises(Caffe2Error, match="shape hint for blob 'inptu'.*did you mean 'input'"):
        check_hints_against_net(parse_shape_hints("inptu,3"), net)
    check_hints_against_net(parse_shape_hints("input,3"), net)


# ----------------------------------------------------------------- protos and rescaling

def test_tensor_bound_shapes_round_trip():
    shapes = {"x": ShapeInfo([20, 16], [B, C]), "ids": ShapeInfo([20000], [BOFMD], DT.INT64)}
    msg = to_tensor_bound_shapes(shapes, BoundShapeSpec(20, 1000))
    wire = caffe2_pb2.TensorBoundShapes.FromString(msg.SerializeToString())
    assert wire.max_batch_size == 20 and wire.max_feature_len == 1000
    assert [s.name for s in wire.shapes] == ["x", "ids"]
    assert list(wire.shapes[1].dim_type) == [caffe2_pb2.TensorBoundShape.BATCH_OF_FEATURE_MAX_DEFAULT]
    back = from_tensor_bound_shapes(wire)
    assert back["x"].dims == [20, 16] and back["x"].dim_types == [B, C]
    assert back["ids"].dtype == DT.INT64


def test_rescale_batch_and_sequence_dims():
    shapes = {"x": ShapeInfo([20, 16], [B, C]), "ids": ShapeInfo([20 * 1000], [BOFMD]),
              "seq": ShapeInfo([1000, 4], [FMD, C]), "w": ShapeInfo([7, 3], [C, C])}
    out = rescale_shapes(shapes, 20, 1000, 8, 50)
    assert out["x"].dims == [8, 16]
    assert out["ids"].dims == [8 * 50]
    assert out["seq"].dims == [50, 4]
    assert out["w"].dims == [7, 3]
    assert shapes["x"].dims == [20, 16]   # the input map is not modified
    msg = to_tensor_bound_shapes(shapes, BoundShapeSpec(20, 1000))
    assert extract_shape_info(msg, new_batch=4)["ids"].dims == [4 * 1000]


def test_rescale_needs_divisible_dims():
    with pytest.raises(Caffe2Error, match="not a multiple of the old batch size 20"):
        rescale_shapes({"x": ShapeInfo([30], [B])}, 20, 10, 8, 10)


# ----------------------------------------------------------------- precedence

@pytest.mark.parametrize("old,new,winner", [
    ([], [B, C], NEW_WINS),
    ([U, C], [B, C], NEW_WINS),
    ([B, C], [U, C], OLD_WINS),
    ([FMD], [FM], NEW_WINS),
    ([FM], [FMD], OLD_WINS),
    ([BOFMD], [BOFM], NEW_WINS),
    ([BOFM], [BOFMD], OLD_WINS),
    ([B], [B, C], NEW_WINS),
    ([B, C], [B, C], NO_PRECEDENCE),
    ([B, C], [C, C], NO_PRECEDENCE),
    ([U, FM], [B, FMD], NO_PRECEDENCE),
])
def test_dim_type_precedence_table(old, new, winner):
    assert dim_type_precedence(old, new) == winner


def _inferencer():
    inf = BoundShapeInferencer(BoundShapeSpec(20, 1000))
    inf.infer(caffe2_pb2.NetDef(name="empty"))
    return inf


def test_check_and_set_precedence_overwrites_or_keeps():
    inf = _inferencer()
    inf.check_and_set("t", [FMD], [1000], DT.FLOAT)
    inf.check_and_set("t", [FM], [37], DT.FLOAT)          # better type wins even with other dims
    assert inf.shape_info["t"].dims == [37] and inf.shape_info["t"].dim_types == [FM]
    inf.check_and_set("t", [FMD], [1000], DT.FLOAT)       # worse type: kept as it was
    assert inf.shape_info["t"].dims == [37]


def test_check_and_set_inconsistencies_are_errors():
    inf = _inferencer()
    inf.check_and_set("t", [B, C], [20, 16], DT.FLOAT)
    with pytest.raises(Caffe2Error, match="Dim size inconsistency found in tensor 't'"):
        inf.check_and_set("t", [B], [20], DT.FLOAT)
    with pytest.raises(Caffe2Error, match=r"Shape inconsistency found in tensor 't' on dim 1 \(16 vs 8\)"):
        inf.check_and_set("t", [B, C], [20, 8], DT.FLOAT)
    inf.set_if_not_exist("t", [B, C], [20, 8], DT.FLOAT)  # allowed: keeps the existing shape
    assert inf.shape_info["t"].dims == [20, 16]


def test_final_shapes_never_change():
    inf = _inferencer()
    inf.check_and_set("t", [B], [20], DT.FLOAT, in_place=True)
    inf.check_and_set("t", [FM], [5], DT.FLOAT)
    assert inf.shape_info["t"].dims == [20] and inf.shape_info["t"].shape_is_final


def test_inconsistent_hint_against_an_op_rule_is_an_error():
    net = net_of(CreateOperator("SparseLengthsSum", ["table", "ids", "lengths"], ["out"]))
    hints = {"table": ShapeInfo([100, 8], [C, C]), "lengths": ShapeInfo([10], [C], DT.INT32)}
    with pytest.raises(Caffe2Error, match="SparseLengthsSum #0 'out': Shape inconsistency found in tensor "
                                          "'lengths' on dim 0 \\(10 vs 20\\)"):
        BoundShapeInferencer(BoundShapeSpec(20, 1000)).infer(net, hints)


def test_hint_with_wrong_number_of_dim_types():
    net = net_of(CreateOperator("Relu", ["x"], ["y"]))
    with pytest.raises(Caffe2Error, match="shape hint for 'x' has 2 dims but 1 dim types"):
        BoundShapeInferencer(BoundShapeSpec(2, 3)).infer(net, {"x": ShapeInfo([2, 3], [B])})


@pytest.mark.parametrize("batch,seq", [(-1, 10), (4, -2)])
def test_negative_bounds(batch, seq):
    with pytest.raises(Caffe2Error, match="must be a non-negative integer"):
        BoundShapeSpec(batch, seq)


def test_hints_win_over_workspace_blobs():
    import numpy as np
    net = net_of(CreateOperator("Relu", ["x"], ["y"]))
    out = BoundShapeInferencer(BoundShapeSpec(8, 3)).infer(
        net, {"x": ShapeInfo([8, 5], [B, C])}, workspace={"x": np.zeros((2, 5), np.float32)})
    assert out["y"].dims == [8, 5] and out["y"].dim_types == [B, C]


# ----------------------------------------------------------------- the unknown-op path

def test_unregistered_op_leaves_outputs_unknown_with_a_warning(caplog):
    net = net_of(CreateOperator("Relu", ["x"], ["y"]),
                 CreateOperator("NoSuchOpAnywhere", ["y"], ["z"]),
                 CreateOperator("Relu", ["z"], ["w"]))
    inf = BoundShapeInferencer(BoundShapeSpec(4, 10))
    with caplog.at_level(logging.DEBUG, logger="caffe2py"):
        out = inf.infer(net, {"x": ShapeInfo([4, 3], [B, C])})
    assert out["y"].dims == [4, 3]
    assert "z" not in out and "w" not in out
    assert "not registered" in inf.unknown["z"]
    assert "input 'z' has no shape" in inf.unknown["w"]
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    debugged = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("NoSuchOpAnywhere" in m for m in warned)
    # a skipped op is recorded in `unknown` (above), so it is only a debug line
    assert "Cannot find shape info for z. Skipping Relu" in debugged
    assert not any("Cannot find shape info" in m for m in warned)


def test_op_with_schema_but_no_inference():
    register_schema(OpSchema("TestOpWithoutInference", num_inputs=1, num_outputs=1))
    net = net_of(CreateOperator("TestOpWithoutInference", ["x"], ["y"]))
    inf = BoundShapeInferencer(BoundShapeSpec(4, 10))
    out = inf.infer(net, {"x": ShapeInfo([4], [B])})
    assert "y" not in out and "has no shape inference" in inf.unknown["y"]
    assert any("TestOpWithoutInference" in w for w in inf.warnings)


def test_failing_inference_is_caught():
    net = net_of(CreateOperator("Reshape", ["x"], ["y"], shape=[7, -1]))
    inf = BoundShapeInferencer(BoundShapeSpec(4, 10))
    out = inf.infer(net, {"x": ShapeInfo([4, 3], [B, C])})
    assert "y" not in out and "shape inference failed" in inf.unknown["y"]
