"""Shapes and element types of every value of the net being exported.

value_info gives the graph inputs; the BoundShapeInferencer fills in the rest
(caffe2py/shape_inference.py). A dim may be symbolic (a name such as "batch",
or None for an unnamed one): inference then runs twice with different sizes
standing in for the symbols, and a dim that differs between the two runs
depends on them, so it stays symbolic in the export (named after its symbol
when it equals it). Translators see static dims as ints and symbolic ones as
None, and never bake a symbolic size into the graph.
"""
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import numpy as np

from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import ONNX_DOMAIN
from caffe2py.shape_inference import BoundShapeInferencer, BoundShapeSpec, DimType, ShapeInfo
from caffe2py.tensors import data_type_of, numpy_dtype

# Sizes that stand in for symbolic dims: two runs, distinct primes per symbol.
_PRIMES = [7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97]
_SEQ_BOUND = 5
_SLS_LENGTHS = {"SparseLengthsSum": 2, "SparseLengthsMean": 2, "SparseLengthsWeightedSum": 3,
                "SparseLengthsSumFused8BitRowwise": 2, "SparseLengthsMeanFused8BitRowwise": 2,
                "SparseLengthsWeightedSumFused8BitRowwise": 3}


@dataclass(frozen=True)
class ValueType:
    """dims: a tuple of int (static), str (a named symbolic dim) or None (an
    unnamed symbolic dim); dims None when even the rank is unknown."""
    dims: Optional[tuple]
    dtype: Optional[np.dtype]

    @property
    def static_dims(self):
        """The dims with every symbolic one as None."""
        if self.dims is None:
            return None
        return tuple(d if isinstance(d, int) else None for d in self.dims)


def _symbols(inputs):
    """Distinct symbolic dims of the inputs: names, and one per unnamed (None) dim."""
    symbols, keyed = [], {}
    for name, (_, dims) in inputs.items():
        for i, d in enumerate(dims):
            if isinstance(d, int):
                continue
            key = d if isinstance(d, str) else "?%s[%d]" % (name, i)
            if key not in keyed:
                keyed[key] = len(symbols)
                symbols.append(key)
    return symbols


def _hints(inputs, sizes):
    hints = {}
    for name, (dtype, dims) in inputs.items():
        concrete = []
        for i, d in enumerate(dims):
            if isinstance(d, int):
                concrete.append(d)
            else:
                concrete.append(sizes[d if isinstance(d, str) else "?%s[%d]" % (name, i)])
        types = [DimType.BATCH] + [DimType.CONSTANT] * (len(dims) - 1) if dims else []
        hints[name] = ShapeInfo(concrete, types, data_type_of(dtype))
    return hints


def _batch_bound(ops, hints):
    """The batch size to bind: the LENGTHS of the first embedding lookup (its rule
    binds LENGTHS to it), else the most common first dim of the inputs."""
    for op in ops:
        k = _SLS_LENGTHS.get(op.type)
        if k is not None and k < len(op.input) and op.input[k] in hints and hints[op.input[k]].dims:
            return hints[op.input[k]].dims[0]
    firsts = Counter(h.dims[0] for h in hints.values() if h.dims)
    return firsts.most_common(1)[0][0] if firsts else 1


def _onnx_node_types(op, shapes, constants):
    """{output: ShapeInfo} of an ai.onnx op from onnx's own shape inference, with
    small constant inputs as initializers (Reshape's shape); {} when it cannot tell."""
    import onnx
    from onnx import helper, numpy_helper
    from .export_onnx_ops import onnx_node
    try:
        node, _ = onnx_node(op, op.op_version or 13)
    except Caffe2Error:
        return {}
    inputs, inits = [], []
    for name in dict.fromkeys(n for n in op.input):
        info = shapes[name]
        inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(numpy_dtype(info.dtype)), list(info.dims)))
        value = constants.get(name)
        if value is not None and getattr(value, "size", 1 << 30) <= 4096 and value.dtype.kind in "iub":
            inits.append(numpy_helper.from_array(np.asarray(value), name))
    graph = helper.make_graph([node], "node", inputs, [helper.make_empty_tensor_value_info(n) for n in op.output],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", op.op_version or 13)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx raises several types; the value stays unknown
        return {}
    found = {}
    for value in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = value.type.tensor_type
        if value.name not in op.output or not t.elem_type or not t.HasField("shape") \
                or any(not d.HasField("dim_value") for d in t.shape.dim):
            continue
        dims = [d.dim_value for d in t.shape.dim]
        found[value.name] = ShapeInfo(dims, [DimType.CONSTANT] * len(dims),
                                      data_type_of(helper.tensor_dtype_to_np_dtype(t.elem_type)))
    return found


def _onnx_fill(ops, shapes, constants):
    """Types of ai.onnx ops' outputs the inferencer left unknown (a Reshape whose
    shape is a constant input), found by onnx's shape inference, in op order."""
    known, found = dict(shapes), {}
    for op in ops:
        if op.domain != ONNX_DOMAIN or all(o in known for o in op.output) \
                or any(i not in known for i in op.input):
            continue
        for name, info in _onnx_node_types(op, known, constants).items():
            if name not in known:
                known[name] = found[name] = info
    return found


def _run(ops, name, hints, constants):
    net = caffe2_pb2.NetDef(name=name)
    net.op.extend(ops)
    net.external_input.extend(list(hints) + [c for c in constants if c not in hints])
    spec = BoundShapeSpec(_batch_bound(ops, hints), _SEQ_BOUND)
    hints = dict(hints)
    for _ in range(8):      # each round lets the inferencer go on past what onnx found
        inferencer = BoundShapeInferencer(spec, log_warnings=False)
        try:
            shapes = inferencer.infer(net, hints, constants)
        except Caffe2Error as exc:
            raise Caffe2Error("shape inference of the net failed: %s" % exc) from None
        found = _onnx_fill(ops, shapes, constants)
        if not found:
            break
        hints.update(found)
    return shapes, inferencer.unknown


def infer_value_types(ops, net_name, inputs, constants):
    """({value name: ValueType}, {value name: why unknown}).

    ops: the SSA-renamed ops; inputs: {name: (numpy dtype, dims)} of the graph
    inputs; constants: {name: ndarray} (initializers)."""
    symbols = _symbols(inputs)
    sizes_a = {s: _PRIMES[i % len(_PRIMES)] + 100 * (i // len(_PRIMES)) for i, s in enumerate(symbols)}
    shapes_a, unknown = _run(ops, net_name, _hints(inputs, sizes_a), constants)
    shapes_b = None
    if symbols:
        sizes_b = {s: v * 2 + 3 for s, v in sizes_a.items()}
        shapes_b, _ = _run(ops, net_name, _hints(inputs, sizes_b), constants)
    names_of = {}
    if symbols:
        for s in symbols:
            if not s.startswith("?"):
                names_of[(sizes_a[s], sizes_b[s])] = s

    types = {}
    for name, info in shapes_a.items():
        dims = list(info.dims)
        other = shapes_b.get(name) if shapes_b is not None else None
        if other is not None and len(other.dims) == len(dims):
            dims = [a if a == b else names_of.get((a, b)) for a, b in zip(dims, other.dims)]
        elif shapes_b is not None:
            dims = None    # the rank itself depends on a symbolic size
        try:
            dtype = numpy_dtype(info.dtype)
        except Caffe2Error:
            dtype = None
        types[name] = ValueType(tuple(dims) if dims is not None else None, dtype)
    for name, (dtype, dims) in inputs.items():   # inputs exactly as given
        types[name] = ValueType(tuple(dims), np.dtype(dtype))
    for name, value in constants.items():
        if hasattr(value, "shape"):
            types[name] = ValueType(tuple(int(d) for d in value.shape), value.dtype)
    return types, {k: v for k, v in unknown.items() if k not in types}
