"""caffe2py.net_drawer and `caffe2py draw`: the real MNIST net rendered to SVG by
Graphviz has one node per op and per blob and one edge per op input and output,
in Caffe2's style (ops green boxes, blobs octagons); shapes on the edges are the
shapes an actual run produces. Expected graphs are built here from the NetDef."""
import importlib
import os
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from caffe2py import net_drawer, workspace
from caffe2py.cli import main
from caffe2py.errors import Caffe2Error
from caffe2py.models import read_net
from caffe2py.proto import caffe2_pb2

# ../shared/models next to the checkout; CAFFE2PY_MODELS_DIR points elsewhere (a worktree)
MODELS = os.environ.get("CAFFE2PY_MODELS_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                                                               "models")
MNIST_PREDICT = os.path.join(MODELS, "caffe2_mnist_predict_net.pb")
MNIST_INIT = os.path.join(MODELS, "caffe2_mnist_init_net.pb")
needs_mnist = pytest.mark.skipif(not (os.path.exists(MNIST_PREDICT) and os.path.exists(MNIST_INIT)),
                                 reason="../shared/models/caffe2_mnist_*.pb not available")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot not installed (apt-get install graphviz)")
SVG = "{http://www.w3.org/2000/svg}"


def svg_graph(svg_bytes):
    """({node title: (label text, shape element)}, [(edge source, target, label)]) of a Graphviz SVG."""
    root = ET.fromstring(svg_bytes)
    nodes, edges = {}, []
    for g in root.iter(SVG + "g"):
        kind = g.get("class")
        title = g.findtext(SVG + "title")
        texts = [t.text or "" for t in g.iter(SVG + "text")]
        if kind == "node":
            shape = g.find(SVG + "polygon")
            nodes[title] = ("\n".join(texts), shape)
        elif kind == "edge":
            src, dst = title.split("->")
            edges.append((src, dst, texts[0] if texts else None))
    return nodes, edges


def op_title(op, i):
    return "%s (op#%d)" % (op.type, i) if not op.name else "%s/%s (op#%d)" % (op.name, op.type, i)


def expected_edges(net):
    """[(from, to)] by label: each input blob into its op, the op into each output blob."""
    edges = []
    for i, op in enumerate(net.op):
        edges += [(b, op_title(op, i)) for b in op.input]
        edges += [(op_title(op, i), b) for b in op.output]
    return edges


@needs_mnist
@needs_dot
def test_mnist_svg_has_the_nets_nodes_and_edges_in_caffe2s_style():
    net = read_net(MNIST_PREDICT)
    nodes, edges = svg_graph(net_drawer.GetPydotGraph(net).create_svg())
    ops = {op_title(op, i) for i, op in enumerate(net.op)}
    blobs = {b for op in net.op for b in list(op.input) + list(op.output)}
    assert len(nodes) == len(ops) + len(blobs)          # MNIST writes no blob twice: one node per blob
    label_of = {title: (label if title not in ops else title) for title, (label, _) in nodes.items()}
    assert sorted(t for t in nodes if t in ops) == sorted(ops)
    assert sorted(label_of[t] for t in nodes if t not in ops) == sorted(blobs)
    got = sorted((label_of[s], label_of[d]) for s, d, _ in edges)
    assert got == sorted(expected_edges(net))
    for title, (_, polygon) in nodes.items():
        points = polygon.get("points").split()
        if title in ops:                                 # a filled green box
            assert polygon.get("fill").lower() == "#0f9d58" and len(points) == 5
        else:                                            # an octagon (closed: 9 points)
            assert len(points) == 9


@needs_mnist
@needs_dot
def test_draw_shapes_on_edges_are_the_shapes_a_run_produces(tmp_path, capsys):
    batch = 3
    out = tmp_path / "mnist.svg"
    assert main(["draw", "--predict-net", MNIST_PREDICT, "--init-net", MNIST_INIT, "--shapes",
                 "--max-batch-size", str(batch), "--hint", "1,%d,1,28,28" % batch, "-o", str(out)]) == 0
    assert "drew net" in capsys.readouterr().out
    net, init = read_net(MNIST_PREDICT), read_net(MNIST_INIT)
    workspace.ResetWorkspace()
    workspace.RunNetOnce(init)
    workspace.FeedBlob("1", np.random.RandomState(0).rand(batch, 1, 28, 28).astype(np.float32))
    workspace.RunNetOnce(net)
    real = {b: list(workspace.FetchBlob(b).shape) for op in net.op for b in list(op.input) + list(op.output)}
    workspace.ResetWorkspace()
    nodes, edges = svg_graph(out.read_bytes())
    assert len(edges) == len(expected_edges(net))
    blob_label = {t: label for t, (label, poly) in nodes.items() if "(op#" not in t}
    for src, dst, label in edges:
        blob = blob_label.get(src, blob_label.get(dst))
        assert label == "[%s]" % ", ".join(str(d) for d in real[blob]), (src, dst)


def _net(ops):
    net = caffe2_pb2.NetDef(name="toy")
    for kind, inputs, outputs in ops:
        net.op.add(type=kind, input=inputs, output=outputs)
    return net


def test_blob_written_again_gets_a_new_node_and_dot_text_needs_no_graphviz():
    net = _net([("Relu", ["x"], ["x"]), ("Relu", ["x"], ["y"])])      # in place: x, then x again
    graph = net_drawer.GetPydotGraph(net)
    names = [n.get_name() for n in graph.get_nodes()]
    assert names.count('"x0"') == 1 and names.count('"x1"') == 1
    pairs = [(e.get_source(), e.get_destination()) for e in graph.get_edges()]
    assert pairs == [('"x0"', "Relu (op#0)"), ("Relu (op#0)", '"x1"'), ('"x1"', "Relu (op#1)"),
                     ("Relu (op#1)", '"y0"')]
    text = graph.to_string()
    assert text.startswith("digraph toy {") and "octagon" in text and "#0F9D58" in text


def test_minimal_graph_and_minimal_dependency():
    # a -> b -> c and a -> c: the minimal graph links ops; minimal_dependency drops a -> c
    net = _net([("Relu", ["in"], ["a"]), ("Relu", ["a"], ["b"]), ("Add", ["a", "b"], ["c"])])
    a, b, c = (op_title(op, i) for i, op in enumerate(net.op))
    full = net_drawer.GetPydotGraphMinimal(net)
    assert sorted((e.get_source(), e.get_destination()) for e in full.get_edges()) == sorted(
        [(a, b), (a, c), (b, c)])
    least = net_drawer.GetPydotGraphMinimal(net, minimal_dependency=True)
    assert sorted((e.get_source(), e.get_destination()) for e in least.get_edges()) == sorted([(a, b), (b, c)])


def test_operator_map_for_plan_and_compat_alias():
    plan = caffe2_pb2.PlanDef(name="plan")
    plan.network.add(name="init").op.add(type="ConstantFill", output=["w"])
    plan.network.add().op.add(type="Relu", input=["w"], output=["y"])
    got = net_drawer.GetOperatorMapForPlan(plan)
    assert sorted(got) == ["plan_init", "plan_network_1"]
    assert [op.type for op in got["plan_network_1"]] == ["Relu"]
    import caffe2py.compat  # noqa: F401 - installs the caffe2.python aliases
    assert importlib.import_module("caffe2.python.net_drawer") is net_drawer


def test_draw_rejects_an_unknown_format(tmp_path, capsys):
    assert main(["draw", "-o", str(tmp_path / "net.jpeg")]) == 1
    assert "cannot tell the format" in capsys.readouterr().err
    with pytest.raises(Caffe2Error):
        from caffe2py.commands.draw import output_format
        output_format("net.bmp")
