"""Arrow columns <-> batches of tensors, one tensor per row.

A tensor column is one of
- a fixed-size list (nested fixed-size lists for more dims: list<list<float>[28]>[28]),
  or a variable list whose rows all have the same length;
- a binary column whose values are .npy bytes (self-describing), or raw bytes of a
  dtype and row shape given by the field's metadata (b"dtype", b"shape" as JSON) or
  by the model's declared input;
- a plain numeric column (one scalar per row).
The field metadata key b"shape" (a JSON list) reshapes flat lists too. Outputs are
written back as nested fixed-size lists with the same metadata, so they round-trip.
"""
import io
import json

import numpy as np

from caffe2py.errors import Caffe2Error

NPY_MAGIC = b"\x93NUMPY"


class ColumnError(Caffe2Error):
    """A column that cannot be read as the tensor the model expects."""


def _pa():
    from .deps import require_pyarrow
    return require_pyarrow()


def _meta(field, key):
    meta = field.metadata or {}
    value = meta.get(key.encode())
    return None if value is None else value.decode()


def _meta_shape(field):
    text = _meta(field, "shape")
    if text is None:
        return None
    try:
        shape = [int(d) for d in json.loads(text)]
    except (ValueError, TypeError):
        raise ColumnError("column '%s': metadata 'shape' is %r, not a JSON list of ints" % (field.name, text)) from None
    return shape


def _describe(shape):
    return "[%s]" % ", ".join(str(d) for d in shape)


def _no_nulls(array, name):
    if array.null_count:
        raise ColumnError("column '%s' has %d null row(s); every row needs a tensor" % (name, array.null_count))


def _list_values(array, name):
    """(flat numpy values, per-row shape) of a (nested) list column with equal row sizes."""
    pa = _pa()
    shape = []
    rows = len(array)
    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) \
            or pa.types.is_fixed_size_list(array.type):
        _no_nulls(array, name)
        if pa.types.is_fixed_size_list(array.type):
            size = array.type.list_size
            array = array.flatten()      # respects the array's offset
        else:
            offsets = np.asarray(array.offsets)
            lengths = np.diff(offsets)
            if len(lengths) and lengths.min() != lengths.max():
                raise ColumnError("column '%s' has rows of different lengths (%d to %d values); "
                                  "a tensor column needs one length" % (name, lengths.min(), lengths.max()))
            size = int(lengths[0]) if len(lengths) else 0
            array = array.flatten()
        shape.append(size)
    _no_nulls(array, name)
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type) or pa.types.is_boolean(array.type)):
        raise ColumnError("column '%s' holds %s values; a tensor column holds numbers" % (name, array.type))
    values = array.to_numpy(zero_copy_only=False)
    expected = rows * int(np.prod(shape, dtype=np.int64)) if shape else rows
    if values.size != expected:
        raise ColumnError("column '%s': %d values for %d rows of shape %s" % (name, values.size, rows, _describe(shape)))
    return values, shape


def _binary_values(array, name, dtype, shape):
    """Rows of a binary column: .npy bytes, or raw bytes of dtype/shape."""
    pa = _pa()
    _no_nulls(array, name)
    rows = len(array)
    if rows == 0:
        return np.zeros([0] + list(shape or []), dtype or np.float32)
    first = array[0].as_py()
    if first[:len(NPY_MAGIC)] == NPY_MAGIC:
        tensors = []
        for k in range(rows):
            try:
                tensors.append(np.load(io.BytesIO(array[k].as_py()), allow_pickle=False))
            except Exception as exc:  # noqa: BLE001 - a corrupt row names itself
                raise ColumnError("column '%s' row %d: not a readable .npy value (%s)" % (name, k, exc)) from None
        shapes = {t.shape for t in tensors}
        dtypes = {t.dtype for t in tensors}
        if len(shapes) > 1 or len(dtypes) > 1:
            raise ColumnError("column '%s' has .npy rows of different shapes or dtypes (%s)"
                              % (name, ", ".join(sorted(str(s) for s in shapes | dtypes))))
        return np.stack(tensors)
    if dtype is None or shape is None:
        raise ColumnError("column '%s' holds raw bytes but neither its metadata (b'dtype', b'shape') nor the "
                          "model says their dtype and shape: add the metadata, store .npy bytes, or give "
                          "--shape %s=d1,d2,... --dtype %s=float32" % (name, name, name))
    dtype = np.dtype(dtype)
    row_bytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if pa.types.is_fixed_size_binary(array.type):
        if array.type.byte_width != row_bytes:
            raise ColumnError("column '%s' rows are %d bytes; %s of shape %s take %d"
                              % (name, array.type.byte_width, dtype, _describe(shape), row_bytes))
        data = np.frombuffer(array.buffers()[1], np.uint8)
        start = array.offset * row_bytes
        return data[start:start + rows * row_bytes].view(dtype).reshape([rows] + list(shape))
    offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], offset_type)[array.offset:array.offset + rows + 1]
    lengths = np.diff(offsets)
    bad = np.flatnonzero(lengths != row_bytes)
    if len(bad):
        raise ColumnError("column '%s' row %d is %d bytes; %s of shape %s take %d"
                          % (name, bad[0], lengths[bad[0]], dtype, _describe(shape), row_bytes))
    data = np.frombuffer(array.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
    return data.view(dtype).reshape([rows] + list(shape))


def column_to_array(array, field, row_shape=None, dtype=None):
    """A batch [rows, *row_shape] from one Arrow column (a ChunkedArray or Array).

    row_shape / dtype: what the model declares for this input (None: unknown);
    the column's metadata or nesting supplies what the model leaves open. A
    wrong size is a ColumnError naming the column and both shapes."""
    pa = _pa()
    name = field.name
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    meta_shape = _meta_shape(field)
    t = array.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        shape = row_shape if row_shape is not None else meta_shape
        out = _binary_values(array, name, dtype or _meta(field, "dtype"), shape)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        values, shape = _list_values(array, name)
        out = values.reshape([len(array)] + shape)
    elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        _no_nulls(array, name)
        out = array.to_numpy(zero_copy_only=False)
    else:
        raise ColumnError("column '%s' is of type %s; a tensor column is a fixed-size list, a list, "
                          "binary (.npy or raw bytes) or numeric" % (name, t))
    target = row_shape if row_shape is not None else meta_shape
    if target is not None and list(out.shape[1:]) != list(target):
        per_row = int(np.prod(out.shape[1:], dtype=np.int64))
        if per_row != int(np.prod(target, dtype=np.int64)):
            raise ColumnError("column '%s' has rows of shape %s (%d values); the model's input '%s' takes rows "
                              "of shape %s (%d values)" % (name, _describe(out.shape[1:]), per_row, name,
                                                           _describe(target), int(np.prod(target, dtype=np.int64))))
        out = out.reshape([len(out)] + list(target))
    return out


def array_to_column(values):
    """(Arrow array, field metadata) for a batch [rows, *row_shape]: nested
    fixed-size lists for the row dims, a plain column for scalars per row."""
    pa = _pa()
    values = np.ascontiguousarray(values)
    if values.dtype.kind not in "biuf":
        raise ColumnError("an output of dtype %s cannot be written as a tensor column" % values.dtype)
    row_shape = list(values.shape[1:])
    array = pa.array(values.reshape(-1))
    for size in reversed(row_shape):
        array = pa.FixedSizeListArray.from_arrays(array, size)
    meta = {b"shape": json.dumps(row_shape).encode(), b"dtype": str(values.dtype).encode()}
    return array, meta
