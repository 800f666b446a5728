"""Where an op lives (`caffe2py ops --where OP`): the file and line of its schema, of
each kernel factory per device and engine and of the compiled or CUDA kernels the
factory calls, of its gradient maker and ONNX translator, and the tests that name it.

Everything is read from the registries (sites recorded at registration, function
code objects) and from the factories' bytecode; nothing is kept by hand, so a moved
or renamed op is found where it is now.
"""
import dis
import inspect
import os
import re
import types
from dataclasses import dataclass, field

from . import registry
from .definition_sites import function_site


@dataclass
class Site:
    what: str            # "schema", "CPU kernel", "  calls", "gradient", ...
    path: str
    line: int
    name: str = ""       # the function or kernel defined there ("" for a registration call)


@dataclass
class OpLocation:
    op_type: str
    domain: str
    sites: list = field(default_factory=list)
    tests: list = field(default_factory=list)     # (path, first line naming the op)


def source_root():
    """The folder that holds operators/, kernels/ and (in a checkout) tests/."""
    import caffe2py.operators as ops  # noqa: PLC0415 - loads every op first
    return os.path.dirname(os.path.dirname(os.path.abspath(ops.__file__)))


def shown_path(path, root=None):
    root = root or source_root()
    path = os.path.abspath(path)
    return os.path.relpath(path, root) if path.startswith(root + os.sep) else path


# --------------------------------------------------------------------------- kernels a factory calls

def _is_kernel_object(obj):
    module = getattr(getattr(obj, "py_func", obj), "__module__", "") or ""
    return module.startswith("caffe2py.kernels.") and callable(obj)


def _codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _resolve(name, namespace, local_modules):
    if name in local_modules:
        return local_modules[name]
    return namespace.get(name)


def _called(fn, depth=0, seen=None):
    """Kernel functions (caffe2py.kernels) that fn's code, its nested functions and the
    same-module helpers it calls reach, and the string constants they use."""
    seen = seen if seen is not None else set()
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None or code in seen:
        return [], []
    seen.add(code)
    namespace = getattr(fn, "__globals__", {})
    kernels, strings, helpers, local_modules = [], [], [], {}
    for co in _codes(code):
        instructions = list(dis.get_instructions(co))
        for i, ins in enumerate(instructions):
            if isinstance(ins.argval, str) and ins.opname == "LOAD_CONST":
                strings.append(ins.argval)
            if ins.opname == "IMPORT_NAME" and isinstance(ins.argval, str):
                # `from caffe2py.kernels.cpu.x import y as K` inside a factory
                module_name, names = ins.argval, []
                for nxt in instructions[i + 1:i + 6]:
                    if nxt.opname == "IMPORT_FROM":
                        names.append(nxt.argval)
                    elif nxt.opname in ("STORE_FAST", "STORE_DEREF") and names:
                        local_modules[nxt.argval] = _import_attr(module_name, names[-1], fn)
                continue
            if ins.opname not in ("LOAD_GLOBAL", "LOAD_FAST", "LOAD_DEREF"):
                continue
            obj = _resolve(ins.argval, namespace, local_modules)
            nxt = instructions[i + 1] if i + 1 < len(instructions) else None
            if isinstance(obj, types.ModuleType) and nxt is not None \
                    and nxt.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                obj = getattr(obj, nxt.argval, None)
            if obj is None:
                continue
            if _is_kernel_object(obj):
                kernels.append(obj)
            elif isinstance(obj, types.FunctionType) and obj.__module__ == getattr(fn, "__module__", None) \
                    and depth < 2:
                helpers.append(obj)
    for helper in helpers:
        k, s = _called(helper, depth + 1, seen)
        kernels += k
        strings += s
    return kernels, strings


def _import_attr(module_name, attr, fn):
    import importlib  # noqa: PLC0415
    try:
        package = getattr(fn, "__module__", "").rpartition(".")[0]
        module = importlib.import_module(module_name, package) if module_name else None
        return getattr(module, attr, None) if module is not None else None
    except ImportError:
        return None


_CUDA_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')


def _cuda_sites(strings):
    """Sites of the CUDA sources (by stem) and kernels (by name or name prefix) that a
    CUDA factory's string constants name."""
    from .cuda import compiler  # noqa: PLC0415 - no PyCUDA needed to list sources
    sources = compiler.source_paths()
    named = [s for s in strings if s in sources]
    sites = []
    for stem in dict.fromkeys(named):
        path = sources[stem]
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        sites.append(Site("  source", path, 1, stem + ".cu"))
        wanted = {s for s in strings if s and s not in sources}
        for number, text in enumerate(lines, 1):
            m = _CUDA_KERNEL.search(text)
            if m and any(m.group(1) == w or (w.endswith("_") and m.group(1).startswith(w)) for w in wanted):
                sites.append(Site("  kernel", path, number, m.group(1)))
    return sites


# --------------------------------------------------------------------------- the op

def _function_entry(what, fn):
    site = function_site(fn)
    return Site(what, *site) if site is not None else None


def locate(op_type, domain=""):
    """An OpLocation for a registered op; KeyError when the op is unknown."""
    from . import gradients  # noqa: PLC0415
    from .onnx import export_registry  # noqa: PLC0415
    root = source_root()
    schema = registry.schema_for(op_type, domain)
    if schema is None:
        raise KeyError(op_type)
    loc = OpLocation(op_type, schema.domain)
    for entry in registry._schemas.get((schema.domain, op_type), []):
        site = registry.schema_site(entry)
        if site is not None:
            label = "schema" if entry.since_version <= 1 else "schema (opset %d)" % entry.since_version
            loc.sites.append(Site(label, site[0], site[1]))
    for (dom, t, device), engines in sorted(registry._kernels.items(), key=lambda kv: kv[0][2]):
        if dom != schema.domain or t != op_type:
            continue
        for engine, entries in sorted(engines.items()):
            for k in entries:
                label = "%s kernel%s" % (registry.device_name(device), " [%s]" % engine if engine else "")
                if k.since_version > 1 or k.until_version is not None:
                    label += " (opset %d-%s)" % (k.since_version, k.until_version or "")
                entry = _function_entry(label, k.factory)
                if entry is None:
                    continue
                loc.sites.append(entry)
                kernels, strings = _called(k.factory)
                for kernel in dict.fromkeys(kernels):
                    sub = _function_entry("  calls", kernel)
                    if sub is not None:
                        loc.sites.append(sub)
                if device == registry.CUDA:
                    loc.sites += _cuda_sites(strings)
    maker = gradients.gradient_site(op_type) if schema.domain == registry.CAFFE2_DOMAIN else None
    if isinstance(maker, tuple):
        status = gradients.gradient_status(op_type)
        loc.sites.append(Site("gradient maker" if status == "gradient" else "gradient (%s)" % status,
                              maker[0], maker[1]))
    elif maker is not None:
        loc.sites.append(_function_entry("gradient maker", maker))
    translator = export_registry._translators.get((schema.domain, op_type))
    if translator is not None:
        entry = _function_entry("ONNX translator", translator.translate)
        if entry is not None:
            loc.sites.append(entry)
    loc.tests = tests_naming(op_type, os.path.join(root, "tests"))
    return loc


_test_texts = {}   # folder -> [(path, lines)], read once per process


def _test_files(folder):
    if folder not in _test_texts:
        files = []
        for fname in sorted(os.listdir(folder)):
            if fname.endswith(".py"):
                path = os.path.join(folder, fname)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                files.append((path, text, text.splitlines()))
        _test_texts[folder] = files
    return _test_texts[folder]


def tests_naming(op_type, folder):
    """(path, line) of the first line of each test file that names op_type: in quotes
    (an OperatorDef's type) or as a net-builder call (`net.Iter(`)."""
    if not os.path.isdir(folder):
        return []
    name = re.escape(op_type)
    pattern = re.compile(r"""["']%s["']|\.%s\(""" % (name, name))
    found = []
    for path, whole, lines in _test_files(folder):
        if op_type not in whole:        # cheap test first: most files never mention the op
            continue
        for number, text in enumerate(lines, 1):
            if pattern.search(text):
                found.append((path, number))
                break
    return found


def format_location(loc):
    root = source_root()
    lines = ["%s (domain %s)" % (loc.op_type, loc.domain or "caffe2")]
    width = max([len(s.what) for s in loc.sites] + [8])
    for s in loc.sites:
        where = "%s:%d" % (shown_path(s.path, root), s.line)
        lines.append("  %-*s  %s%s" % (width, s.what, where, "  " + s.name if s.name else ""))
    if loc.tests:
        lines.append("  %-*s  %s" % (width, "tests", ", ".join(
            "%s:%d" % (shown_path(p, root), n) for p, n in loc.tests)))
    elif not os.path.isdir(os.path.join(root, "tests")):
        lines.append("  %-*s  (no tests/ folder beside this installation: run from a checkout)" % (width, "tests"))
    else:
        lines.append("  %-*s  none name it" % (width, "tests"))
    return "\n".join(lines)
