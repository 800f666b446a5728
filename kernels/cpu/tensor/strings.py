"""Element-wise string functions over object arrays of str or bytes (Caffe2's
string ops). Caffe2's strings are bytes: lengths count bytes, and a str element
is cut at a byte position of its UTF-8 form, giving bytes (a partial character is
kept, as Caffe2's std::string keeps it)."""
import numpy as np


def _cut(value, cut):
    return cut(value if isinstance(value, bytes) else str(value).encode("utf-8"))


def _map(strings, fn, dtype=object):
    out = np.empty(strings.shape, dtype=dtype)
    flat_in, flat_out = strings.reshape(-1), out.reshape(-1)
    for i, value in enumerate(flat_in):
        flat_out[i] = fn(value)
    return out


def prefix(strings, length):
    return _map(strings, lambda v: _cut(v, lambda b: b[:length]))


def suffix(strings, length):
    return _map(strings, lambda v: _cut(v, lambda b: b[max(0, len(b) - length):]))


def _as_bytes(value):
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def starts_with(strings, text):
    head = _as_bytes(text)
    return _map(strings, lambda v: _as_bytes(v).startswith(head), dtype=bool)


def ends_with(strings, text):
    tail = _as_bytes(text)
    return _map(strings, lambda v: _as_bytes(v).endswith(tail), dtype=bool)


def format_value(value):
    """An element as C++ streams print it: %g for floats, 1/0 for bools."""
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (float, np.floating)):
        return "%g" % value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def join(values, delimiter, axis):
    """Each row (axis 0) or column (axis 1) of a 1-D/2-D array as one string;
    every element is followed by the delimiter, the last one too (as Caffe2)."""
    table = values.reshape(values.shape[0], -1) if values.ndim == 2 else values.reshape(-1, 1)
    if axis == 1:
        table = table.T
    out = np.empty(table.shape[0], dtype=object)
    for i, row in enumerate(table):
        out[i] = "".join(format_value(v) + delimiter for v in row)
    return out
