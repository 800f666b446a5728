"""No import cycles among caffe2py's modules (issue 30): a lower layer never imports a
higher one (docs/architecture.md, "Layers and imports").

The check is static: every module of caffe2py/, operators/ (installed as
caffe2py.operators) and kernels/ (caffe2py.kernels) is parsed, and each import
statement anywhere in it, a late import inside a function included, is an edge of
the module graph. Relative imports are resolved against the module's package;
`from pkg import name` is an edge to pkg.name when that is a module, else to pkg.
Imports of anything outside these trees (numpy, numba, pycuda) are ignored.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = (("caffe2py", "caffe2py"), ("operators", "caffe2py.operators"), ("kernels", "caffe2py.kernels"))


def module_files(trees):
    """{module name: path} for every .py file under each (folder, package name)."""
    modules = {}
    for folder, package in trees:
        folder = Path(folder)
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package,) + parts)] = path
    return modules


def _resolve_relative(name, is_package, level, module):
    """The absolute name `from <level dots><module> import ...` refers to in `name`."""
    parts = name.split(".") if is_package else name.split(".")[:-1]
    if level > 1:
        parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def import_edges(name, path, modules):
    """The modules (keys of `modules`) that module `name` at `path` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    edges = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = (_resolve_relative(name, is_package, node.level, node.module) if node.level
                    else node.module)
            for alias in node.names:
                submodule = base + "." + alias.name
                if submodule in modules:
                    edges.add(submodule)
                elif base in modules:
                    edges.add(base)
    edges.discard(name)
    return edges


def import_graph(trees):
    modules = module_files(trees)
    return {name: import_edges(name, path, modules) for name, path in modules.items()}


def import_cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: the graph has ~1000 modules), each a sorted list."""
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return sorted(cycles)


def describe(cycles, graph):
    lines = []
    for component in cycles:
        members = set(component)
        lines.append("import cycle among %s:" % ", ".join(component))
        lines += ["    %s -> %s" % (m, ", ".join(sorted(graph[m] & members))) for m in component]
    return "\n".join(lines)


def test_caffe2py_operators_and_kernels_have_no_import_cycles():
    graph = import_graph([(ROOT / folder, package) for folder, package in TREES])
    assert len(graph) > 300 and "caffe2py.core" in graph and "caffe2py.kernels.cpu.runtime.jit" in graph
    cycles = import_cycles(graph)
    assert not cycles, describe(cycles, graph)


def _write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_cycles_through_late_relative_and_package_imports(tmp_path):
    _write(tmp_path / "src", {
        # demo -> demo.top -> demo.top_importer -> demo.sub.leaf -> demo
        "__init__.py": "from . import top\nVERSION = 1\n",
        "top.py": "from .top_importer import *\n",
        # low -> high at module level; high -> low only inside a function
        "low.py": "from .high import run\n",
        "high.py": "def run():\n    from . import low\n    return low\n",
        # sub.leaf imports a name (not a module) of the root package: an edge to the package
        "sub/__init__.py": "",
        "sub/leaf.py": "from .. import VERSION\nimport os\n",
        "top_importer.py": "import demo.sub.leaf\n",
        # an acyclic chain that must not be reported
        "a.py": "from .b import x\n",
        "b.py": "from demo.c import y as x\n",
        "c.py": "y = 0\n",
    })
    graph = import_graph([(tmp_path / "src", "demo")])
    assert graph["demo.sub.leaf"] == {"demo"}
    assert graph["demo.high"] == {"demo.low"}
    assert graph["demo.b"] == {"demo.c"}
    cycles = import_cycles(graph)
    assert cycles == [
        ["demo", "demo.sub.leaf", "demo.top", "demo.top_importer"],
        ["demo.high", "demo.low"],
    ]
    text = describe(cycles, graph)
    assert "import cycle among demo.high, demo.low" in text and "demo.high -> demo.low" in text
