"""A small Graphviz DOT graph with pydot's method names (Dot, Node, Edge;
add_node, add_edge, to_string, create_png, write_svg, ...), so code written for
Caffe2's pydot graphs (`GetPydotGraph(net).create_png()`) runs unchanged, without
pydot. Rendering runs Graphviz's `dot` program (Debian/Ubuntu: apt-get install
graphviz); writing DOT text needs nothing.

Names and attribute values follow pydot's convention: a string already in
double quotes is used as it is (Caffe2 quotes blob names with json.dumps), any
other string that is not a plain DOT identifier is quoted here.
"""
import re
import shutil
import subprocess

from .errors import Caffe2Error

_PLAIN_ID = re.compile(r"^([A-Za-z_\x80-\uffff][A-Za-z_0-9\x80-\uffff]*|-?(\.[0-9]+|[0-9]+(\.[0-9]*)?))$")
_KEYWORDS = {"node", "edge", "graph", "digraph", "subgraph", "strict"}
RENDER_TIMEOUT_S = 120


def quote(text):
    """text as a DOT ID: unchanged when plain or already quoted, else in quotes."""
    text = str(text)
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text
    if _PLAIN_ID.match(text) and text.lower() not in _KEYWORDS:
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"%s"' % escaped


def unquote(text):
    """The text a DOT ID stands for (the inverse of quote for quoted strings)."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return re.sub(r'\\(["\\])', r"\1", text[1:-1])
    return text


def _attrs(attrs):
    if not attrs:
        return ""
    return " [%s]" % ", ".join("%s=%s" % (k, quote(v)) for k, v in attrs.items())


class Node:
    def __init__(self, name, **attrs):
        self.name = str(name)
        self.attrs = dict(attrs)

    def get_name(self):
        return self.name

    def get(self, key):
        return self.attrs.get(key)

    def set(self, key, value):
        self.attrs[key] = value

    def get_attributes(self):
        return self.attrs

    def to_string(self):
        return "%s%s;" % (quote(self.name), _attrs(self.attrs))


def _endpoint(x):
    return x.get_name() if hasattr(x, "get_name") else str(x)


class Edge:
    def __init__(self, src, dst, **attrs):
        self.src, self.dst = _endpoint(src), _endpoint(dst)
        self.attrs = dict(attrs)

    def get_source(self):
        return self.src

    def get_destination(self):
        return self.dst

    def get(self, key):
        return self.attrs.get(key)

    def set(self, key, value):
        self.attrs[key] = value

    def get_attributes(self):
        return self.attrs

    def to_string(self):
        return "%s -> %s%s;" % (quote(self.src), quote(self.dst), _attrs(self.attrs))


class Dot:
    """A directed graph. Nodes are kept once per name (adding a node again
    updates nothing, as pydot's output did for Caffe2's repeated blob nodes)."""

    def __init__(self, graph_name="G", graph_type="digraph", **attrs):
        self.name = graph_name if graph_name is not None else "G"
        self.graph_type = graph_type
        self.attrs = dict(attrs)
        self._nodes = {}
        self._edges = []

    def get_name(self):
        return self.name

    def set(self, key, value):
        self.attrs[key] = value

    def add_node(self, node):
        self._nodes.setdefault(_endpoint(node), node)

    def add_edge(self, edge):
        self._edges.append(edge)

    def get_nodes(self):
        return list(self._nodes.values())

    def get_node(self, name):
        node = self._nodes.get(name)
        return [node] if node is not None else []

    def get_edges(self):
        return list(self._edges)

    def to_string(self):
        lines = ["%s %s {" % (self.graph_type, quote(self.name))]
        lines += ["%s=%s;" % (k, quote(v)) for k, v in self.attrs.items()]
        lines += [n.to_string() for n in self._nodes.values()]
        lines += [e.to_string() for e in self._edges]
        lines.append("}")
        return "\n".join(lines) + "\n"

    __str__ = to_string

    def create(self, prog="dot", format="png"):  # noqa: A002 - pydot's argument name
        """The graph rendered by Graphviz as bytes (format: png, svg, pdf, ...)."""
        if format in ("raw", "dot"):
            return self.to_string().encode()
        return render(self.to_string(), format, prog)

    def create_png(self, prog="dot"):
        return self.create(prog, "png")

    def create_svg(self, prog="dot"):
        return self.create(prog, "svg")

    def create_pdf(self, prog="dot"):
        return self.create(prog, "pdf")

    def write(self, path, prog="dot", format="raw"):  # noqa: A002
        data = self.create(prog, format)
        with open(path, "wb") as f:
            f.write(data)
        return True

    def write_raw(self, path):
        return self.write(path, format="raw")

    write_dot = write_raw

    def write_png(self, path, prog="dot"):
        return self.write(path, prog, "png")

    def write_svg(self, path, prog="dot"):
        return self.write(path, prog, "svg")

    def write_pdf(self, path, prog="dot"):
        return self.write(path, prog, "pdf")


def render(dot_text, fmt, prog="dot"):
    """Run Graphviz's `prog` on DOT text; the output bytes in format `fmt`."""
    exe = shutil.which(prog)
    if exe is None:
        raise Caffe2Error("rendering a graph as %s needs Graphviz's '%s' program, which is not on PATH: install "
                          "Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz), or "
                          "write .dot text instead" % (fmt, prog))
    try:
        done = subprocess.run([exe, "-T%s" % fmt], input=dot_text.encode(), capture_output=True,
                              timeout=RENDER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise Caffe2Error("Graphviz's %s took over %d s to lay out the graph" % (prog, RENDER_TIMEOUT_S)) from None
    if done.returncode != 0:
        raise Caffe2Error("Graphviz's %s failed to render %s: %s"
                          % (prog, fmt, done.stderr.decode(errors="replace").strip() or "exit %d" % done.returncode))
    return done.stdout
