"""Index ops (IntIndexCreate, LongIndexCreate, StringIndexCreate, IndexGet,
IndexLoad, IndexStore, IndexFreeze, IndexSize) and IndexHash. An index maps
keys to ids 1, 2, ... in order of first appearance (0 is reserved for unknown
keys); it lives in a blob (caffe2py.runtime_objects.Index)."""
import numpy as np

from caffe2py.kernels.cpu.recsys import index_hash as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.runtime_objects import Index

DT = caffe2_pb2.TensorProto
_MAX_INT32 = 2 ** 31 - 1
_KINDS = {"IntIndexCreate": ("int32", np.int32), "LongIndexCreate": ("int64", np.int64),
          "StringIndexCreate": ("string", object)}


def _key_kind(value):
    if value.dtype == np.int32:
        return "int32"
    if value.dtype == np.int64:
        return "int64"
    if value.dtype == object:
        return "string"
    return None


def _keys(ctx, index, value, slot):
    """The keys of a tensor as a list, checked against the index's key type."""
    if not isinstance(value, np.ndarray) or _key_kind(value) is None:
        raise ctx.input_error(slot, "keys must be an int32, int64 or string tensor")
    if _key_kind(value) != index.key_kind:
        raise ctx.input_error(slot, "wrong dictionary type given input keys: the index holds %s keys, got %s"
                              % (index.key_kind, value.dtype))
    flat = value.reshape(-1)
    if index.key_kind == "string":      # keys are bytes, as Caffe2's std::string: b"a" and "a" are one key
        return [v if isinstance(v, bytes) else str(v).encode() for v in flat]
    return flat.tolist()


def _index(ctx, value):
    if not isinstance(value, Index):
        raise ctx.input_error(0, "expected an index (IntIndexCreate, ...), got %s" % type(value).__name__)
    return value


for _name, (_kind, _) in _KINDS.items():
    register_schema(OpSchema(
        _name, num_inputs=0, num_outputs=1,
        args=(Arg("max_elements", "int", _MAX_INT32, doc="max number of ids, including the zero entry"),),
        doc="Creates an index mapping %s keys to ids 1 .. max_elements - 1 (0: unknown key)." % _kind))

    def _make(kind):
        def create(ctx):
            max_elements = ctx.int("max_elements")
            return lambda: Index(kind, max_elements)
        return create
    register_kernel(_name)(_make(_kind))

register_schema(OpSchema(
    "IndexGet", num_inputs=2, num_outputs=1,
    inference=lambda ctx, ins: [TensorType(ins[1].dims, DT.INT64)],
    doc="The int64 ids of the keys (same shape); unknown keys are added unless the index is frozen "
        "(then they get 0). Fails when max_elements is reached."))
# IndexFreeze and IndexLoad change the index they are given; Caffe2 first declared them
# without outputs, later with the handle as an in-place output: both forms are taken.
register_schema(OpSchema("IndexFreeze", num_inputs=1, num_outputs=(0, 1), enforce_inplace={(0, 0)},
                         doc="Freezes the index: unknown keys get id 0 from now on. Output (optional): "
                             "the handle, in place."))
register_schema(OpSchema(
    "IndexLoad", num_inputs=2, num_outputs=(0, 1), enforce_inplace={(0, 0)},
    args=(Arg("skip_first_entry", "int", 0, doc="skip element 0 (the unknown-key entry of an embedding)"),),
    doc="Replaces the index by the 1-D keys given: key k gets id k + 1. Fails on repeated keys. "
        "Output (optional): the handle, in place."))
register_schema(OpSchema("IndexStore", num_inputs=1, num_outputs=1,
                         doc="The keys of the index in id order (id 1 first), 1-D."))
register_schema(OpSchema("IndexSize", num_inputs=1, num_outputs=1,
                         inference=lambda ctx, ins: [TensorType((), DT.INT64)],
                         doc="Number of entries of the index, the reserved 0 entry included (int64 scalar)."))


@register_kernel("IndexGet")
def index_get(ctx):
    def run(index, keys):
        index = _index(ctx, index)
        values = _keys(ctx, index, keys, 1)
        try:
            ids = index.get(values)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
        return np.array(ids, np.int64).reshape(keys.shape)
    return run


@register_kernel("IndexFreeze")
def index_freeze(ctx):
    def run(index):
        _index(ctx, index).frozen = True
        return index if ctx.n_outputs else None
    return run


@register_kernel("IndexLoad")
def index_load(ctx):
    skip = bool(ctx.int("skip_first_entry"))

    def run(index, items):
        index = _index(ctx, index)
        values = _keys(ctx, index, items, 1)
        if skip:
            if not values:
                raise ctx.input_error(1, "skip_first_entry needs at least one element")
            values = values[1:]
        try:
            index.load(values)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
        return index if ctx.n_outputs else None
    return run


@register_kernel("IndexStore")
def index_store(ctx):
    dtypes = {"int32": np.int32, "int64": np.int64, "string": object}

    def run(index):
        index = _index(ctx, index)
        keys = index.keys()
        out = np.empty(len(keys), dtypes[index.key_kind])
        out[:] = keys
        return out
    return run


@register_kernel("IndexSize")
def index_size(ctx):
    return lambda index: np.array(_index(ctx, index).size, np.int64)


register_schema(OpSchema(
    "IndexHash", num_inputs=1, num_outputs=1, inference=lambda ctx, ins: [ins[0]],
    args=(Arg("seed", "int", 0, doc="hash seed"), Arg("modulo", "int", 0, doc="ids are hashed into [0, modulo)")),
    inputs=("Indices",), outputs=("HashedIndices",),
    doc="Hashes int32/int64 ids into [0, modulo) with a seeded byte-wise hash (Caffe2's IndexHash)."))


@register_kernel("IndexHash")
def index_hash(ctx):
    seed, modulo = ctx.int("seed"), ctx.int("modulo")
    if modulo <= 0:
        raise ctx.error("modulo should be > 0, got %d" % modulo)

    def run(ids):
        if not isinstance(ids, np.ndarray) or ids.dtype.type not in (np.int32, np.int64):
            raise ctx.input_error(0, "must be an int32 or int64 tensor")
        if modulo > np.iinfo(ids.dtype).max:
            raise ctx.error("modulo %d is larger than the numeric limit of the %s indices" % (modulo, ids.dtype))
        return K.index_hash(ids, seed, modulo)
    return run


try:
    from caffe2py.gradients import no_gradient, should_not_do_gradient
except ImportError:          # a build without the gradient registry
    no_gradient = None

if no_gradient is not None:
    no_gradient("IndexGet", "IntIndexCreate", "LongIndexCreate", "StringIndexCreate", "IndexHash")
    should_not_do_gradient("IndexFreeze", "IndexLoad", "IndexStore", "IndexSize")
