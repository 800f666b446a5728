"""Small views of NetDef protos shared by the executor and the inference passes
(schema_inference, shape_inference), which the executor's DAG scheduling imports: a
module below all of them, so none imports another for these."""
from .proto import caffe2_pb2


def normalized_ops(net_def):
    """The net's ops with the net-level device option copied into ops that lack one."""
    ops = []
    for op in net_def.op:
        if net_def.HasField("device_option") and not op.HasField("device_option"):
            op = caffe2_pb2.OperatorDef.FromString(op.SerializeToString())
            op.device_option.CopyFrom(net_def.device_option)
        ops.append(op)
    return ops
