"""caffe2.python.schema: typed records with nested structure over flat columns.

A schema is a tree of Fields: Scalar (a leaf: one tensor, with a numpy dtype that
may carry an inner shape), Struct (named children sharing a domain) and List
(a `lengths` scalar plus the values, one domain down). Its columns are named by
joining the path with ':', the layout the dataset ops read ("a", "b:lengths",
"b:values", ...). A record is a schema whose scalars hold blobs (BlobReferences or
numpy arrays). This module keeps the parts of Caffe2's schema that datasets,
readers and writers use.
"""
from collections import OrderedDict, namedtuple

import numpy as np

from . import core, workspace
from .core import BlobReference

FIELD_SEPARATOR = ":"


def _join(prefix, suffix):
    return FIELD_SEPARATOR.join(p for p in (prefix, suffix) if p)


def _normalize_field(field_or_type_or_blob, keep_blobs=True):
    if isinstance(field_or_type_or_blob, Field):
        return field_or_type_or_blob.clone(keep_blobs=keep_blobs)
    if type(field_or_type_or_blob) in (type, np.dtype):
        return Scalar(dtype=field_or_type_or_blob)
    return Scalar(blob=field_or_type_or_blob)


class Metadata(namedtuple("Metadata", ["categorical_limit", "expected_value", "feature_specs"])):
    """Extra facts about a scalar: categorical_limit (max value + 1 of a non-negative
    integer field), expected_value (e.g. the mean length of a list), feature_specs."""
    __slots__ = ()


Metadata.__new__.__defaults__ = (None, None, None)


class FeatureSpec(namedtuple("FeatureSpec", [
        "feature_type", "feature_names", "feature_ids", "feature_is_request_only",
        "desired_hash_size", "feature_to_index"])):
    """What a scalar's features are (Metadata.feature_specs): their type, names and
    ids, whether they come with the request only (layers use that), the hash size
    wanted for them and a feature -> column index map."""
    __slots__ = ()


FeatureSpec.__new__.__defaults__ = (None,) * len(FeatureSpec._fields)


class Field:
    """A node of a schema. Subclasses call Field.__init__(children) last."""

    def __init__(self, children):
        self._parent = (None, 0)
        self._field_offsets = [0]
        for child in children:
            self._field_offsets.append(self._field_offsets[-1] + len(child.field_names()))

    def clone_schema(self):
        return self.clone(keep_blobs=False)

    def field_names(self):
        raise NotImplementedError

    def field_types(self):
        raise NotImplementedError

    def field_metadata(self):
        raise NotImplementedError

    def field_blobs(self):
        raise NotImplementedError

    def all_scalars(self):
        raise NotImplementedError

    def has_blobs(self):
        raise NotImplementedError

    def clone(self, keep_blobs=True):
        raise NotImplementedError

    def _set_parent(self, parent, relative_id):
        self._parent = (parent, relative_id)

    def _child_base_id(self, child_index=None):
        parent, index = self._parent
        pos = 0 if child_index is None else self._field_offsets[child_index]
        return pos + (parent._child_base_id(index) if parent else 0)

    def slice(self):
        """The range of column ids of this field within the whole schema."""
        base = self._child_base_id()
        return slice(base, base + len(self.field_names()))

    def __eq__(self, other):
        return (isinstance(other, Field) and self.field_names() == other.field_names()
                and self.field_types() == other.field_types()
                and self.field_metadata() == other.field_metadata())

    __hash__ = object.__hash__

    def __repr__(self):
        lines = []
        self._describe(0, lines)
        return "\n".join(lines)


class List(Field):
    """A variable-length list: `lengths` (int32, one entry per parent entry) + values."""

    def __init__(self, values, lengths_blob=None):
        if isinstance(lengths_blob, Field):
            assert isinstance(lengths_blob, Scalar), "lengths must be a Scalar"
            self.lengths = _normalize_field(lengths_blob)
        else:
            self.lengths = Scalar(np.int32, lengths_blob)
        self._items = _normalize_field(values)
        self.lengths._set_parent(self, 0)
        self._items._set_parent(self, 1)
        super().__init__([self.lengths, self._items])

    def field_names(self):
        return ["lengths"] + [_join("values", v) for v in self._items.field_names()]

    def field_types(self):
        return self.lengths.field_types() + self._items.field_types()

    def field_metadata(self):
        return self.lengths.field_metadata() + self._items.field_metadata()

    def field_blobs(self):
        return self.lengths.field_blobs() + self._items.field_blobs()

    def all_scalars(self):
        return self.lengths.all_scalars() + self._items.all_scalars()

    def has_blobs(self):
        return self.lengths.has_blobs() and self._items.has_blobs()

    def clone(self, keep_blobs=True):
        return type(self)(_normalize_field(self._items, keep_blobs), _normalize_field(self.lengths, keep_blobs))

    def _describe(self, indent, lines):
        lines.append("  " * indent + "List(")
        self.lengths._describe(indent + 1, lines)
        self._items._describe(indent + 1, lines)
        lines.append("  " * indent + ")")

    def __getattr__(self, item):
        if item.startswith("__") or item in ("lengths", "_items"):
            raise AttributeError(item)
        if isinstance(self._items, Struct):
            return getattr(self._items, item)
        if item in ("value", "items"):
            return self._items
        raise AttributeError("Field not found in list: %s." % item)

    def __getitem__(self, item):
        names = item.split(FIELD_SEPARATOR, 1)
        if len(names) == 1 and item == "lengths":
            return self.lengths
        if len(names) == 1 and item == "values":
            return self._items
        if len(names) == 2 and names[0] == "values":
            return self._items[names[1]]
        raise KeyError("Field not found in list: %s." % item)


class Struct(Field):
    """Named fields sharing one domain. Names may be nested ('a:b' is field b of a)."""

    def __init__(self, *fields):
        for field in fields:
            assert len(field) == 2 and field[0], "fields are (non-empty name, field) pairs"
            assert field[0] != "lengths", "Struct cannot contain a field named `lengths`."
        self.__dict__["fields"] = OrderedDict()
        for name, field in ((n, _normalize_field(f)) for n, f in fields):
            if FIELD_SEPARATOR in name:
                head, rest = name.split(FIELD_SEPARATOR, 1)
                name, field = head, Struct((rest, field))
            if name not in self.fields:
                self.fields[name] = field
            elif isinstance(field, Struct) and isinstance(self.fields[name], Struct):
                self.fields[name] = self.fields[name] + field
            else:
                raise ValueError("Duplicate field name: %s" % name)
        for i, field in enumerate(self.fields.values()):
            field._set_parent(self, i)
        super().__init__(self.fields.values())
        self.__dict__["_frozen"] = True

    def get_children(self):
        return list(self.fields.items())

    def field_names(self):
        return [_join(name, f) for name, field in self.fields.items() for f in field.field_names()]

    def field_types(self):
        return [t for field in self.fields.values() for t in field.field_types()]

    def field_metadata(self):
        return [m for field in self.fields.values() for m in field.field_metadata()]

    def field_blobs(self):
        return [b for field in self.fields.values() for b in field.field_blobs()]

    def all_scalars(self):
        return [s for field in self.fields.values() for s in field.all_scalars()]

    def has_blobs(self):
        return all(field.has_blobs() for field in self.fields.values())

    def clone(self, keep_blobs=True):
        return type(self)(*[(k, _normalize_field(v, keep_blobs)) for k, v in self.fields.items()])

    def _get_field_by_nested_name(self, nested_name):
        names = nested_name.split(FIELD_SEPARATOR, 1)
        field = self.fields.get(names[0])
        if field is None or len(names) == 1:
            return field
        try:
            return field[names[1]]
        except (KeyError, TypeError):
            return None

    def _describe(self, indent, lines):
        lines.append("  " * indent + "Struct(")
        for name, field in self.fields.items():
            lines.append("  " * (indent + 1) + name + "=")
            field._describe(indent + 2, lines)
        lines.append("  " * indent + ")")

    def __contains__(self, item):
        return self._get_field_by_nested_name(item) is not None

    def __len__(self):
        return len(self.fields)

    def __getitem__(self, item):
        if isinstance(item, (list, tuple)):
            keys = list(self.fields.keys())
            return Struct(*[(keys[k] if isinstance(k, int) else k, self[k]) for k in item])
        if isinstance(item, int):
            return list(self.fields.values())[item]
        field = self._get_field_by_nested_name(item)
        if field is None:
            raise KeyError('field "%s" not found' % item)
        return field

    def get(self, item, default_value):
        return getattr(self, item, default_value)

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        try:
            return self.__dict__["fields"][item]
        except KeyError:
            raise AttributeError(item) from None

    def __setattr__(self, key, value):
        if self.__dict__.get("_frozen") and not key.startswith("_"):
            raise TypeError("Struct.__setattr__() is disabled after __init__()")
        super().__setattr__(key, value)

    def __add__(self, other):
        """Merge two Structs (recursively where both have a Struct of the same name)."""
        if not isinstance(other, Struct):
            return NotImplemented
        children = OrderedDict(self.get_children())
        for name, right in other.get_children():
            if name not in children:
                children[name] = right
            elif isinstance(children[name], Struct) and isinstance(right, Struct):
                children[name] = children[name] + right
            else:
                raise TypeError("field %s is in both Structs and is not a Struct in both" % name)
        return Struct(*children.items())

    def __sub__(self, other):
        """Remove the fields of other (recursively) from self."""
        if not isinstance(other, Struct):
            return NotImplemented
        children = OrderedDict(self.get_children())
        for name, right in other.get_children():
            if name not in children:
                continue
            left = children[name]
            if type(left) is not type(right):
                raise TypeError("field %s has different types in the two Structs" % name)
            if isinstance(left, Struct):
                rest = left - right
                if rest.get_children():
                    children[name] = rest
                    continue
            children.pop(name)
        return Struct(*children.items())


class Scalar(Field):
    """A leaf: one tensor of `dtype` (numpy; a subarray dtype adds inner dims), with an
    optional blob (BlobReference or numpy array) and Metadata."""

    def __init__(self, dtype=None, blob=None, metadata=None):
        self._metadata = None
        self.set(dtype, blob, metadata, unsafe=True)
        super().__init__([])

    def field_names(self):
        return [""]

    def field_type(self):
        return self.dtype

    def field_types(self):
        return [self.dtype]

    def field_metadata(self):
        return [self._metadata]

    def has_blobs(self):
        return self._blob is not None

    def field_blobs(self):
        assert self._blob is not None, "Value is not set for this field."
        return [self._blob]

    def all_scalars(self):
        return [self]

    def clone(self, keep_blobs=True):
        return Scalar(dtype=self._original_dtype, blob=self._blob if keep_blobs else None,
                      metadata=self._metadata)

    def get(self):
        assert self._blob is not None, "Value is not set for this field."
        return self._blob

    def __call__(self):
        return self.get()

    @property
    def metadata(self):
        return self._metadata

    def set_metadata(self, value):
        assert isinstance(value, Metadata), "metadata must be Metadata, got %s" % type(value)
        self._metadata = value
        self._validate_metadata()

    def _validate_metadata(self):
        if self._metadata is not None and self._metadata.categorical_limit is not None and self.dtype is not None:
            assert np.issubdtype(self.dtype, np.integer), \
                "`categorical_limit` can be specified only in integral fields but got %s" % self.dtype

    def set_value(self, blob, throw_on_type_mismatch=False, unsafe=False):
        if self.dtype.base != np.void and throw_on_type_mismatch:
            assert isinstance(blob, np.ndarray), "Got %r" % (blob,)
            assert blob.dtype.base == self.dtype.base, "Expected %s, got %s" % (self.dtype.base, blob.dtype.base)
        self.set(dtype=self._original_dtype, blob=blob, unsafe=unsafe)

    def set(self, dtype=None, blob=None, metadata=None, unsafe=False):  # noqa: ARG002 - Caffe2's signature
        if isinstance(blob, (str, bytes)):
            raise ValueError("Passing str blob to Scalar.set() is ambiguous. Do either "
                             "set(blob=np.array(blob)) or set(blob=BlobReference(blob))")
        self._original_dtype = dtype
        if isinstance(dtype, tuple) and dtype[1] == 1:
            dtype = (dtype[0], (1,))          # numpy would drop a trailing shape of 1
        if dtype is not None:
            if isinstance(dtype, tuple) and dtype[0] == np.void:
                raise TypeError("Cannot set the Scalar with type %s for blob %s" % (dtype, blob))
            dtype = np.dtype(dtype)
        if blob is not None and not isinstance(blob, BlobReference):
            preserve_shape = isinstance(blob, np.ndarray)
            if dtype is not None and dtype != np.void:
                blob = np.array(blob, dtype=dtype.base)
                if blob.size == 0 and not preserve_shape:
                    blob = blob.reshape((0,) + dtype.shape)
            else:
                assert isinstance(blob, np.ndarray), "Invalid blob type: %s" % type(blob)
            if blob.ndim == 0 and not preserve_shape:
                blob = blob.reshape((1,))
            if blob.ndim > 1 and dtype is not None and dtype.base != np.void:
                dtype = np.dtype((dtype.base, blob.shape[1:]))
        if dtype is None:
            dtype = np.dtype(np.void)
        assert not dtype.fields, "Cannot create Scalar with a structured dtype. Use from_dtype instead."
        self.dtype = dtype
        self._blob = blob
        if metadata is not None:
            self.set_metadata(metadata)
        self._validate_metadata()

    def set_type(self, dtype):
        self._original_dtype = dtype
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.void)
        self._validate_metadata()

    def _describe(self, indent, lines):
        lines.append("  " * indent + "Scalar(%r, %r, %r)" % (self.dtype, self._blob, self._metadata))

    def id(self):
        """This scalar's column index in its schema."""
        return self._child_base_id()


def Map(keys, values, keys_name="keys", values_name="values", lengths_blob=None):
    """A List of Struct(keys, values)."""
    return List(Struct((keys_name, keys), (values_name, values)), lengths_blob=lengths_blob)


def NamedTuple(name_prefix, *fields):
    return Struct(*[("%s_%d" % (name_prefix, i), field) for i, field in enumerate(fields)])


def Tuple(*fields):
    """A Struct with fields named field_0, field_1, ..."""
    return NamedTuple("field", *fields)


def RawTuple(num_fields, name_prefix="field"):
    """num_fields untyped scalars."""
    assert isinstance(num_fields, int) and num_fields >= 0
    return NamedTuple(name_prefix, *([np.void] * num_fields))


def from_dtype(dtype, _outer_shape=()):
    """A schema from a numpy dtype: structured dtypes become Structs."""
    if not isinstance(dtype, np.dtype):
        dtype = np.dtype((dtype, _outer_shape))
    else:
        shape = _outer_shape + dtype.shape
        if shape != dtype.shape:
            dtype = np.dtype((dtype.base, shape))
    if not dtype.fields:
        return Scalar(dtype)
    fields = []
    for name in dtype.names:
        fdtype, offset = dtype.fields[name][:2]
        fields.append((name, from_dtype(fdtype, _outer_shape=dtype.shape)))
    return Struct(*fields)


class _SchemaNode:
    """A column-name tree node while rebuilding a schema from column names."""

    def __init__(self, name, type_str=""):
        self.name = name
        self.children = []
        self.type_str = type_str
        self.field = None

    def add_child(self, name, type_str=""):
        for child in self.children:
            if child.name == name and child.type_str == type_str:
                return child
        child = _SchemaNode(name, type_str)
        self.children.append(child)
        return child

    def get_field(self):
        if not self.children or self.field is not None:
            return self.field if self.field is not None else Struct()
        by_name = {child.name: child for child in self.children}
        names = set(by_name)
        if names == {"lengths", "values"}:
            self.field = List(by_name["values"].get_field(), lengths_blob=by_name["lengths"].get_field())
        elif names == {"lengths", "keys", "values"}:
            self.field = Map(by_name["keys"].get_field(), by_name["values"].get_field(),
                             lengths_blob=by_name["lengths"].get_field())
        else:
            self.field = Struct(*[(child.name, child.get_field()) for child in self.children])
        return self.field


def from_column_list(col_names, col_types=None, col_blobs=None, col_metadata=None):
    """The schema whose columns are col_names (optionally typed, with blobs/metadata)."""
    n = len(col_names)
    col_types = col_types if col_types is not None else [None] * n
    col_blobs = col_blobs if col_blobs is not None else [None] * n
    col_metadata = col_metadata if col_metadata is not None else [None] * n
    assert len(col_types) == len(col_blobs) == len(col_metadata) == n, \
        "col_names, col_types, col_blobs and col_metadata must have the same length"
    root = _SchemaNode("root", "Struct")
    for name, dtype, blob, meta in zip(col_names, col_types, col_blobs, col_metadata):
        parts = name.split(FIELD_SEPARATOR)
        current = root
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            current = current.add_child(part, dtype if last else "")
            if last:
                current.field = Scalar(dtype=dtype, blob=blob, metadata=meta)
    return root.get_field()


def from_blob_list(schema, values, throw_on_type_mismatch=False):
    """A copy of schema holding `values`, one per scalar in column order."""
    assert isinstance(schema, Field), "Argument `schema` must be a Field."
    if isinstance(values, BlobReference):
        values = [values]
    record = schema.clone_schema()
    scalars = record.all_scalars()
    assert len(scalars) == len(values), "Values must have %d elements, got %d." % (len(scalars), len(values))
    for scalar, value in zip(scalars, values):
        scalar.set_value(value, throw_on_type_mismatch, unsafe=True)
    return record


def as_record(value):
    if isinstance(value, Field):
        return value
    if isinstance(value, (list, tuple)):
        if all(isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str) for f in value):
            return Struct(*[(k, as_record(v)) for k, v in value])
        return Tuple(*[as_record(f) for f in value])
    if isinstance(value, dict):
        return Struct(*[(k, as_record(v)) for k, v in value.items()])
    return _normalize_field(value)


def FetchRecord(blob_record, ws=None, throw_on_type_mismatch=False):
    """The record with each BlobReference replaced by the fetched array."""
    assert isinstance(blob_record, Field)
    blobs = blob_record.field_blobs()
    assert all(isinstance(v, BlobReference) for v in blobs)
    fetch = workspace.FetchBlob if ws is None else (lambda b: ws.fetch_blob(b))
    return from_blob_list(blob_record, [fetch(str(b)) for b in blobs], throw_on_type_mismatch)


def FeedRecord(blob_record, arrays, ws=None):
    """Feed arrays (a list, or a record of arrays) into the record's blobs."""
    assert isinstance(blob_record, Field)
    blobs = blob_record.field_blobs()
    assert all(isinstance(v, BlobReference) for v in blobs)
    if isinstance(arrays, Field):
        arrays = arrays.field_blobs()
    assert len(arrays) == len(blobs), "Values must contain exactly %d ndarrays." % len(blobs)
    feed = workspace.FeedBlob if ws is None else (lambda b, v: ws.feed_blob(b, v))
    for blob, array in zip(blobs, arrays):
        feed(str(blob), array)


def NewRecord(net, schema):
    """A record of fresh, uniquely named BlobReferences for schema's columns."""
    if isinstance(schema, Scalar):
        result = schema.clone()
        result.set_value(blob=net.NextScopedBlob("unnamed_scalar"), unsafe=True)
        return result
    assert isinstance(schema, Field), "Record must be a schema.Field instance."
    return from_blob_list(schema, [net.NextScopedBlob(prefix=name) for name in schema.field_names()])


def ConstRecord(net, array_record):
    """A record of blobs initialized with net.Const from a record of arrays."""
    blob_record = NewRecord(net, array_record)
    for blob, array in zip(blob_record.field_blobs(), array_record.field_blobs()):
        net.Const(array, blob)
    return blob_record


def InitEmptyRecord(net, schema_or_record, enforce_types=False):
    """ConstantFill every column with an empty tensor of its type."""
    record = schema_or_record if schema_or_record.has_blobs() else NewRecord(net, schema_or_record)
    for blob_type, blob in zip(record.field_types(), record.field_blobs()):
        try:
            net.ConstantFill([], blob, shape=[0] + list(blob_type.shape), dtype=data_type_for_dtype(blob_type))
        except TypeError:
            if enforce_types:
                raise
            net.ConstantFill([], blob, shape=[0])
    return record


_DATA_TYPE_FOR_DTYPE = [
    (str, core.DataType.STRING), (np.float16, core.DataType.FLOAT16), (np.float32, core.DataType.FLOAT),
    (np.float64, core.DataType.DOUBLE), (bool, core.DataType.BOOL), (np.int8, core.DataType.INT8),
    (np.int16, core.DataType.INT16), (np.int32, core.DataType.INT32), (np.int64, core.DataType.INT64),
    (np.uint8, core.DataType.UINT8), (np.uint16, core.DataType.UINT16),
]


def data_type_for_dtype(dtype):
    for np_type, dt in _DATA_TYPE_FOR_DTYPE:
        if dtype.base == np_type:
            return dt
    raise TypeError("Unknown dtype: " + str(dtype.base))


def dtype_for_core_type(core_type):
    for np_type, dt in _DATA_TYPE_FOR_DTYPE:
        if dt == core_type:
            return np_type
    raise TypeError("Unknown core type: " + str(core_type))


def is_schema_subset(schema, original_schema):
    return set(schema.field_names()).issubset(set(original_schema.field_names()))


def equal_schemas(schema, original_schema, check_field_names=True, check_field_types=True,
                  check_field_metas=False):
    assert isinstance(schema, Field) and isinstance(original_schema, Field)
    if check_field_names and schema.field_names() != original_schema.field_names():
        return False
    if check_field_types and schema.field_types() != original_schema.field_types():
        return False
    if check_field_metas and schema.field_metadata() != original_schema.field_metadata():
        return False
    return True


def schema_check(schema, previous=None):
    record = as_record(schema)
    if previous is not None:
        assert equal_schemas(schema, previous)
    return record


def attach_metadata_to_scalars(field, metadata):
    for f in field.all_scalars():
        f.set_metadata(metadata)


def _append_field(record, field_name, field):
    return record + Struct((field_name, field))


def _rebind_record(record, rename):
    """record's schema over the blobs rename(name) of its blobs."""
    return from_blob_list(record.clone_schema(), [BlobReference(rename(str(b))) for b in record.field_blobs()])


# core is below this module: Net.AppendOutputRecordField, set_input_record and Clone
# handle records through these
core.set_record_field_appender(_append_field)
core.set_record_tools(NewRecord, _rebind_record)
