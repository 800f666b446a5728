"""Compiled kernels never reach an array they made themselves through its address.

numba frees an array after its last use *as an array*; an integer address taken from
it (simd.address, .ctypes.data) does not keep it alive. A kernel that made a buffer,
took its address and then wrote through the address wrote into freed heap: direct
conv's packed-input chunk did, and the ResNet trainer test crashed now and then
(glibc's heap-corruption abort in another thread, or corrupted image batches). The
rule (runtime/blas.py): buffers reached by address belong to the caller
(buffers.team_work, temp_buffer or an argument). This test reads every compiled
kernel's source and refuses an address of an array the kernel allocates or of a view
of one."""
import ast
import importlib
import inspect
import pkgutil
import textwrap

import pytest

import caffe2py.kernels as kernels_package
from caffe2py.kernels.cpu.runtime import jit

_ALLOCATORS = {"empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "array",
               "copy", "arange", "concatenate", "stack", "ascontiguousarray"}
_ADDRESS_CALLS = {"address", "address_of"}


def _root(node):
    """The name an expression's array comes from: x[...] -> x, x.reshape(...) -> x."""
    while True:
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not _is_numpy(node.func.value):
            node = node.func.value
        else:
            return node


def _is_numpy(node):
    return isinstance(node, ast.Name) and node.id in ("np", "numpy")


def _allocates(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_numpy(node.func.value)
            and node.func.attr in _ALLOCATORS)


def addresses_of_own_arrays(source):
    """[(line, expression)] where the function in `source` takes the address of an array
    it allocated (or of a view of one)."""
    fn = ast.parse(textwrap.dedent(source)).body[0]
    own = set()

    def bind(target, value):
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts):
                bind(t, v)
        elif isinstance(target, ast.Name):
            root = _root(value)
            if _allocates(value) or _allocates(root) or (isinstance(root, ast.Name) and root.id in own):
                own.add(target.id)

    for _ in range(2):           # a view may be bound before its base in source order (loops)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target, node.value)
    found = []
    for node in ast.walk(fn):
        target = None
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in _ADDRESS_CALLS \
                and node.args:
            target = node.args[0]
        elif isinstance(node, ast.Attribute) and node.attr == "ctypes":
            target = node.value
        if target is not None:
            root = _root(target)
            if _allocates(root) or (isinstance(root, ast.Name) and root.id in own):
                found.append((node.lineno, ast.unparse(target)))
    return found


def _all_compiled_kernels():
    for info in pkgutil.walk_packages(kernels_package.__path__, kernels_package.__name__ + "."):
        if ".cuda" in info.name:
            continue
        importlib.import_module(info.name)
    seen = {}
    for kernel in jit._all_kernels:
        seen.setdefault(kernel.py_func.__code__, kernel)
    return list(seen.values())


KERNELS = _all_compiled_kernels()


def test_the_scan_sees_the_kernels_that_work_on_addresses():
    names = {k.py_func.__name__ for k in KERNELS}
    assert len(KERNELS) > 50
    assert {"_direct_blocks", "_depthwise_phased", "_winograd_chunks", "packed_product"} <= names


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: "%s.%s" % (k.py_func.__module__.rsplit(".", 1)[-1],
                                                                      k.py_func.__name__))
def test_no_compiled_kernel_takes_the_address_of_an_array_it_made(kernel):
    found = addresses_of_own_arrays(inspect.getsource(kernel.py_func))
    assert not found, ("%s (%s) takes the address of arrays it allocates itself: %s; numba may free them before "
                       "the last access through the address. Take the buffer from the caller (buffers.team_work)."
                       % (kernel.py_func.__name__, inspect.getsourcefile(kernel.py_func),
                          ", ".join("line +%d: %s" % f for f in found)))


@pytest.mark.parametrize("source,expected", [
    # the shape of direct conv's old chunk buffer
    ("def k(work, chunk):\n    for t in prange(2):\n        panel = np.empty(chunk * 24 + 8, np.float32)\n"
     "        pk = (address(panel) + 31) // 32 * 32\n", ["panel"]),
    ("def k(n):\n    acc = np.zeros((4, n), np.int32)\n    row = acc[1]\n    f(row.ctypes.data)\n", ["row"]),
    ("def k(n):\n    a, b = np.empty(n), np.empty(n)\n    f(address(b))\n", ["b"]),
    # views of arguments and caller-owned regions are fine
    ("def k(work, stride, out):\n    mine = work[0:stride]\n    f(address(mine), address(out), out.ctypes.data)\n",
     []),
])
def test_the_scan_finds_addresses_of_arrays_a_kernel_made(source, expected):
    assert [expr for _, expr in addresses_of_own_arrays(source)] == expected
