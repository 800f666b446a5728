"""Bound shape inference speed and the cost of bound-checked runs.

Rows:
  infer MLP      ours: BoundShapeInferencer over an MLP of N FC+Relu layers (2N ops);
                 peer: onnx.shape_inference.infer_shapes over the same MLP as an ONNX
                 graph (MatMul+Add+Relu per layer, symbolic batch), same process
  bound run      ours: one run of the demo net as a BoundNet (inputs checked against
                 the bound) vs the same net as a plain Net (ratio = check overhead)
Usage: python benchmarks/shape_inference_bench.py [--layers 300] [--repeat 7]
"""
import argparse
import platform

from _timing import median_ms

from caffe2py.bound_execution import create_bound_net
from caffe2py.demo import build_demo
from caffe2py.proto import caffe2_pb2
from caffe2py.shape_inference import BoundShapeInferencer, BoundShapeSpec, DimType, ShapeInfo
from caffe2py.workspace import Workspace

C, B = DimType.CONSTANT, DimType.BATCH


def median_time(fn, repeat):
    """Seconds (this script's unit)."""
    return median_ms(fn, repeat, warmup=1) / 1e3


def caffe2_mlp(layers, width):
    net = caffe2_pb2.NetDef(name="mlp")
    hints = {}
    x = "x"
    for i in range(layers):
        net.op.add(type="FC", input=[x, "w%d" % i, "b%d" % i], output=["h%d" % i])
        net.op.add(type="Relu", input=["h%d" % i], output=["r%d" % i])
        hints["w%d" % i] = ShapeInfo([width, width], [C, C])
        hints["b%d" % i] = ShapeInfo([width], [C])
        x = "r%d" % i
    return net, hints


def onnx_mlp(layers, width):
    from onnx import TensorProto, helper
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        inits.append(helper.make_tensor_value_info("w%d" % i, TensorProto.FLOAT, [width, width]))
        inits.append(helper.make_tensor_value_info("b%d" % i, TensorProto.FLOAT, [width]))
        nodes += [helper.make_node("MatMul", [x, "w%d" % i], ["m%d" % i]),
                  helper.make_node("Add", ["m%d" % i, "b%d" % i], ["h%d" % i]),
                  helper.make_node("Relu", ["h%d" % i], ["r%d" % i])]
        x = "r%d" % i
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])]
                              + inits, [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print("machine: %s, python %s" % (platform.processor() or platform.machine(), platform.python_version()))

    net, hints = caffe2_mlp(args.layers, 64)
    spec = BoundShapeSpec(32, 100)
    ours = median_time(lambda: BoundShapeInferencer(spec).infer(net, hints), args.repeat)
    try:
        import onnx
        model = onnx_mlp(args.layers, 64)
        peer = median_time(lambda: onnx.shape_inference.infer_shapes(model), args.repeat)
    except ImportError:
        peer = float("nan")
    print("%-12s %6d ops  ours %8.3f ms  onnx.shape_inference (%d nodes) %8.3f ms  ratio %.2f"
          % ("infer MLP", len(net.op), ours * 1e3, 3 * args.layers, peer * 1e3, ours / peer))

    init_net, predict_net, inputs = build_demo()
    ws = Workspace("bench")
    ws.run_net_once(init_net)
    for k, v in inputs.items():
        ws.feed_blob(k, v)
    plain = predict_net
    plain.name = "plain"
    ws.create_net(plain)
    bound_def = caffe2_pb2.NetDef.FromString(plain.SerializeToString())
    bound_def.name = "bound"
    hints = {"data": ShapeInfo([8] + list(inputs["data"].shape[1:]), [B, C, C, C])}
    create_bound_net(ws, bound_def, BoundShapeSpec(8, 1), hints)
    runs = 50
    t_plain = median_time(lambda: [ws.run_net("plain") for _ in range(runs)], args.repeat) / runs
    t_bound = median_time(lambda: [ws.run_net("bound") for _ in range(runs)], args.repeat) / runs
    print("%-12s demo net  bound %8.3f ms  plain %8.3f ms  ratio %.3f"
          % ("bound run", t_bound * 1e3, t_plain * 1e3, t_bound / t_plain))


if __name__ == "__main__":
    main()
