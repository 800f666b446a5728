"""caffe2.python.net_drawer: pictures of nets and plans, drawn as Caffe2 drew them.

Operators are green filled boxes labelled "name/Type (op#i)" (or "Type (op#i)"),
blobs are octagons labelled with the blob's name; a blob written again gets a new
node, so in-place ops and overwritten blobs read left to right. Graphs are
`caffe2py.dot_graph.Dot` objects with pydot's methods (to_string, create_png,
write_svg, ...); rendering needs Graphviz's `dot` program, DOT text does not.

caffe2py adds an optional `shapes` argument ({blob: dims}, e.g. from the
bound-shape inferencer) that labels each edge with its blob's dims; `caffe2py
draw` fills it in with --shapes.
"""
import argparse
import json
import logging
from collections import defaultdict

from . import dot_graph
from .dot_graph import Dot, Edge, Node
from .proto import caffe2_pb2

logger = logging.getLogger("caffe2py.net_drawer")

# Caffe2's drawing style
OP_STYLE = {"shape": "box", "color": "#0F9D58", "style": "filled", "fontcolor": "#FFFFFF"}
BLOB_STYLE = {"shape": "octagon"}

# What GetGraphPngSafe returns when drawing fails: a 1x1 PNG, as in Caffe2.
_DummyPngImage = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x01\x00\x00\x00\x00"
    b"7n\xf9$\x00\x00\x00\nIDATx\x9cc`\x00\x00\x00\x02\x00\x01H\xaf\xa4q\x00\x00\x00\x00IEND\xaeB`\x82")


class pydot:  # noqa: N801 - the name Caffe2's callers use for the graph classes
    """pydot's names for caffe2py's DOT classes (`net_drawer.pydot.Node(...)`)."""
    Dot = Dot
    Node = Node
    Edge = Edge


def _rectify_operator_and_name(operators_or_net, name):
    """(operators, graph name) from a NetDef, a core.Net or a list of OperatorDefs."""
    if isinstance(operators_or_net, caffe2_pb2.NetDef):
        return operators_or_net.op, name if name is not None else operators_or_net.name
    if hasattr(operators_or_net, "Proto"):
        net = operators_or_net.Proto()
        if not isinstance(net, caffe2_pb2.NetDef):
            raise TypeError("expected a NetDef from .Proto(), got %s" % type(net).__name__)
        return net.op, name if name is not None else net.name
    return operators_or_net, name if name is not None else "unnamed"


def _escape_label(name):
    # a DOT string in quotes; JSON's escapes are the ones DOT reads
    return json.dumps(name)


def op_node_name(op, op_id):
    return "%s/%s (op#%d)" % (op.name, op.type, op_id) if op.name else "%s (op#%d)" % (op.type, op_id)


def GetOpNodeProducer(append_output, **kwargs):
    """A function (op, op_id) -> Node; with append_output the output blob names
    are added to the op's label, one a line."""
    def ReallyGetOpNode(op, op_id):
        node_name = op_node_name(op, op_id)
        if append_output:
            for output_name in op.output:
                node_name += "\n" + output_name
        return Node(node_name, **kwargs)
    return ReallyGetOpNode


def GetBlobNodeProducer(**kwargs):
    """A function (node name, label) -> Node for blobs."""
    def ReallyGetBlobNode(node_name, label):
        return Node(node_name, label=label, **kwargs)
    return ReallyGetBlobNode


def _shape_label(shapes, blob):
    dims = shapes.get(blob) if shapes else None
    if dims is None:
        return {}
    dims = getattr(dims, "dims", dims)
    return {"label": "[%s]" % ", ".join(str(int(d)) for d in dims)}


class _BlobNodeIds:
    """Caffe2's blob node ids, json.dumps(name + version) ("data0"), made unique:
    blob "1" written 10 times and blob "11" would otherwise share "110"."""

    def __init__(self):
        self.owner = {}

    def get(self, blob, version):
        node_id = _escape_label(blob + str(version))
        k = 1
        while self.owner.setdefault(node_id, (blob, version)) != (blob, version):
            node_id = _escape_label("%s%d~%d" % (blob, version, k))
            k += 1
        return node_id


def GetPydotGraph(operators_or_net, name=None, rankdir="LR", op_node_producer=None, blob_node_producer=None,
                  shapes=None):
    """The net as ops and blobs: an edge from each input blob to its op and from
    each op to its output blobs. shapes ({blob: dims or ShapeInfo}) labels edges."""
    op_node_producer = op_node_producer or GetOpNodeProducer(False, **OP_STYLE)
    blob_node_producer = blob_node_producer or GetBlobNodeProducer(**BLOB_STYLE)
    operators, name = _rectify_operator_and_name(operators_or_net, name)
    graph = Dot(name, rankdir=rankdir)
    blob_nodes = {}                    # blob -> its current (latest written) node
    versions = defaultdict(int)        # blob -> times it was written over
    ids = _BlobNodeIds()
    for op_id, op in enumerate(operators):
        op_node = op_node_producer(op, op_id)
        graph.add_node(op_node)
        for input_name in op.input:
            node = blob_nodes.get(input_name)
            if node is None:
                node = blob_node_producer(ids.get(input_name, versions[input_name]), label=_escape_label(input_name))
                blob_nodes[input_name] = node
            graph.add_node(node)
            graph.add_edge(Edge(node, op_node, **_shape_label(shapes, input_name)))
        for output_name in op.output:
            if output_name in blob_nodes:
                versions[output_name] += 1     # a write over an existing blob: a new node
            node = blob_node_producer(ids.get(output_name, versions[output_name]), label=_escape_label(output_name))
            blob_nodes[output_name] = node
            graph.add_node(node)
            graph.add_edge(Edge(op_node, node, **_shape_label(shapes, output_name)))
    return graph


def GetPydotGraphMinimal(operators_or_net, name=None, rankdir="LR", minimal_dependency=False,
                         op_node_producer=None, shapes=None):
    """Ops only: an edge from the op that last wrote a blob to each op that reads
    it. With minimal_dependency, an edge implied by a longer path is left out
    (a -> c is not drawn when a -> b -> c is)."""
    op_node_producer = op_node_producer or GetOpNodeProducer(False, **OP_STYLE)
    operators, name = _rectify_operator_and_name(operators_or_net, name)
    graph = Dot(name, rankdir=rankdir)
    producer = {}                      # blob -> (node name of the op that wrote it last)
    ancestors = defaultdict(set)       # op node name -> every op node name it depends on
    for op_id, op in enumerate(operators):
        op_node = op_node_producer(op, op_id)
        me = op_node.get_name()
        graph.add_node(op_node)
        parents = {}                   # parent op -> the first blob through which it feeds this op
        for input_name in op.input:
            if input_name in producer:
                parents.setdefault(producer[input_name], input_name)
        for parent in parents:
            ancestors[me].add(parent)
            ancestors[me].update(ancestors[parent])
        for parent, blob in parents.items():
            if minimal_dependency and any(parent in ancestors[other] for other in parents if other != parent):
                continue
            graph.add_edge(Edge(parent, me, **_shape_label(shapes, blob)))
        for output_name in op.output:
            producer[output_name] = me
    return graph


def GetOperatorMapForPlan(plan_def):
    """{'<plan>_<net>': operators} for each net of a PlanDef (unnamed nets:
    '<plan>_network_<i>')."""
    operator_map = {}
    for net_id, net in enumerate(plan_def.network):
        key = "%s_%s" % (plan_def.name, net.name) if net.HasField("name") else \
            "%s_network_%d" % (plan_def.name, net_id)
        operator_map[key] = net.op
    return operator_map


_MAX_PARALLEL_STEPS = 3


def _step_label(step):
    label = [step.name + "\n"]
    if step.report_net:
        label.append("Reporter: %s" % step.report_net)
    if step.should_stop_blob:
        label.append("Stopper: %s" % step.should_stop_blob)
    if step.concurrent_substeps:
        label.append("Concurrent")
    if step.only_once:
        label.append("Once")
    return "\n".join(label)


def _draw_nets(nets, graph):
    nodes = []
    for i, net in enumerate(nets):
        nodes.append(Node(_escape_label(net)))
        graph.add_node(nodes[-1])
        if i > 0:
            graph.add_edge(Edge(nodes[-2], nodes[-1]))
    return nodes


def _substep_edge(start, end):
    return Edge(start, end, arrowhead="dot", style="dashed")


def _draw_steps(steps, graph, skip_step_edges=False):
    nodes = []
    for i, step in enumerate(steps):
        parallel = step.concurrent_substeps
        nodes.append(Node(_escape_label(_step_label(step)), **OP_STYLE))
        graph.add_node(nodes[-1])
        if i > 0 and not skip_step_edges:
            graph.add_edge(Edge(nodes[-2], nodes[-1]))
        if step.network:
            children = _draw_nets(step.network, graph)
        elif step.substep:
            shown = step.substep[:_MAX_PARALLEL_STEPS] if parallel else step.substep
            children = _draw_steps(shown, graph, skip_step_edges=parallel)
        else:
            raise ValueError("execution step '%s' has neither nets nor substeps" % step.name)
        if parallel:
            for child in children:
                graph.add_edge(_substep_edge(nodes[-1], child))
            if len(step.substep) > _MAX_PARALLEL_STEPS:
                more = Node("%d more steps" % (len(step.substep) - _MAX_PARALLEL_STEPS), **OP_STYLE)
                graph.add_node(more)
                graph.add_edge(_substep_edge(nodes[-1], more))
        else:
            graph.add_edge(_substep_edge(nodes[-1], children[0]))
    return nodes


def GetPlanGraph(plan_def, name=None, rankdir="TB"):
    """A plan's execution steps: step boxes, their nets in order, dashed edges to substeps."""
    graph = Dot(name if name is not None else plan_def.name, rankdir=rankdir)
    _draw_steps(plan_def.execution_step, graph)
    return graph


def GetGraphInJson(operators_or_net, output_filepath):
    """Writes {"nodes": [...], "edges": [...]} of the op/blob graph as JSON."""
    operators, _ = _rectify_operator_and_name(operators_or_net, None)
    blob_ids, versions = {}, defaultdict(int)
    nodes, edges = [], []

    def blob_node(blob):
        key = (blob, versions[blob])
        if key not in blob_ids:
            blob_ids[key] = len(nodes)
            nodes.append({"id": len(nodes), "label": blob, "type": "blob"})
        return blob_ids[key]

    for op_id, op in enumerate(operators):
        op_node = len(nodes)
        nodes.append({"id": op_node, "label": op.name + "/" + op.type if op.name else op.type,
                      "op_id": op_id, "type": "op"})
        for input_name in op.input:
            edges.append({"source": blob_node(input_name), "target": op_node})
        for output_name in op.output:
            if (output_name, versions[output_name]) in blob_ids:
                versions[output_name] += 1
            edges.append({"source": op_node, "target": blob_node(output_name)})
    with open(output_filepath, "w") as f:
        json.dump({"nodes": nodes, "edges": edges}, f)


def GetGraphPngSafe(func, *args, **kwargs):
    """func(*args, **kwargs) (e.g. GetPydotGraph) rendered as PNG bytes; on any
    failure a 1x1 placeholder PNG and an error in the log."""
    try:
        graph = func(*args, **kwargs)
        if not isinstance(graph, Dot):
            raise ValueError("func is expected to return a Dot graph")
        return graph.create_png()
    except Exception as exc:  # noqa: BLE001 - the contract: never raise
        logger.error("Failed to draw graph: %s", exc)
        return _DummyPngImage


# ---------------------------------------------------------------- Caffe2's script

def _read_graphs(path):
    """{name: operators} from a NetDef or PlanDef file (text or binary)."""
    from google.protobuf import text_format
    with open(path, "rb") as f:
        data = f.read()
    for kind in (caffe2_pb2.NetDef, caffe2_pb2.PlanDef):
        msg = kind()
        try:
            text_format.Parse(data.decode("utf-8"), msg)
        except Exception:  # noqa: BLE001 - try binary next
            try:
                msg.ParseFromString(data)
            except Exception:  # noqa: BLE001
                continue
        if isinstance(msg, caffe2_pb2.NetDef) and len(msg.op):
            return {msg.name: msg.op}
        if isinstance(msg, caffe2_pb2.PlanDef) and len(msg.network):
            return GetOperatorMapForPlan(msg)
    from .errors import Caffe2Error
    raise Caffe2Error("'%s' is neither a NetDef nor a PlanDef (text or binary) with ops" % path)


def main(argv=None):
    """Caffe2's net_drawer script: `python -m caffe2py.net_drawer --input net.pbtxt`
    writes <prefix><graph name>.dot and, with Graphviz, a .pdf next to it."""
    parser = argparse.ArgumentParser(description="Caffe2 net drawer.")
    parser.add_argument("--input", type=str, required=True, help="The input protobuf file.")
    parser.add_argument("--output_prefix", type=str, default="", help="The prefix to be added to the output filename.")
    parser.add_argument("--minimal", action="store_true", help="If set, produce a minimal visualization.")
    parser.add_argument("--minimal_dependency", action="store_true", help="If set, only draw minimal dependency.")
    parser.add_argument("--append_output", action="store_true",
                        help="If set, append the output blobs to the operator names.")
    parser.add_argument("--rankdir", type=str, default="LR", help="The rank direction of the pydot graph.")
    args = parser.parse_args(argv)
    for key, operators in _read_graphs(args.input).items():
        producer = GetOpNodeProducer(args.append_output, **OP_STYLE)
        if args.minimal:
            graph = GetPydotGraphMinimal(operators, name=key, rankdir=args.rankdir,
                                         minimal_dependency=args.minimal_dependency, op_node_producer=producer)
        else:
            graph = GetPydotGraph(operators, name=key, rankdir=args.rankdir, op_node_producer=producer)
        filename = args.output_prefix + graph.get_name() + ".dot"
        graph.write(filename, format="raw")
        print("wrote %s" % filename)
        try:
            graph.write_pdf(filename[:-3] + "pdf")
            print("wrote %s" % (filename[:-3] + "pdf"))
        except Exception as exc:  # noqa: BLE001 - the .dot is written; say why the pdf is not
            print("could not write the pdf (%s); the .dot file is written" % exc)
    return 0


render = dot_graph.render

if __name__ == "__main__":
    raise SystemExit(main())
