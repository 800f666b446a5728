"""Where an op's pieces are defined: the (file, line) of the op module that registers
a schema, a gradient maker or a translator, recorded at registration time for
`caffe2py ops --where`.

Registrations often go through shared helpers (operators/onnx_base.py's decorator, a
family module's own `_register_x(name)` loop); the site worth showing is the line in
the op family's module that names the op, so the walk skips the registries and the
shared helpers and takes the outermost frame of the first op-family module it meets.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# the registries themselves: a site is never inside them
_REGISTRIES = {os.path.join(_HERE, name) for name in (
    "definition_sites.py", "registry.py", "gradients.py", os.path.join("onnx", "export_registry.py"))}


def _in_op_family(path):
    """True for operators/<family>/<module>.py (checkout or installed package)."""
    return os.path.basename(os.path.dirname(os.path.dirname(path))) == "operators"


def caller_site(depth=2):
    """(file, line) of the registering op module, `depth` frames above this call."""
    frame = sys._getframe(depth)
    fallback = None
    while frame is not None:
        path = frame.f_code.co_filename
        if _in_op_family(path):
            # the outermost consecutive frame of the same module: a module-level
            # `_register_sls("Sum", ...)` rather than the register call inside it
            while frame.f_back is not None and frame.f_back.f_code.co_filename == path:
                frame = frame.f_back
            return path, frame.f_lineno
        if fallback is None and path not in _REGISTRIES \
                and os.path.basename(os.path.dirname(path)) != "operators":   # shared helpers
            fallback = (path, frame.f_lineno)
        frame = frame.f_back
    return fallback


def function_site(fn):
    """(file, first line, name in its `def`) of a Python function, of the function a
    wrapper wraps (`__wrapped__`), or of a compiled kernel's Python body."""
    import inspect  # noqa: PLC0415 - only `ops --where` needs it
    fn = inspect.unwrap(getattr(fn, "py_func", fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return code.co_filename, code.co_firstlineno, code.co_name
