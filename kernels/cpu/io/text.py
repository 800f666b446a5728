"""Caffe2's text file reader: rows of tab-separated fields, one row per line.

Tokens end at a delimiter, newline (id 0) or tab (id 1); a token remembers which
delimiter came before it (a newline at the start of a pass). Text after the last
delimiter of the file is not a token, so the last row needs its newline. A NUL byte
escapes the next byte. After the last pass over the file reading stops.
Float fields parse like C's strtof: the longest numeric prefix, after leading
whitespace; a field without one is an error.
"""
import re
import threading

import numpy as np

NEWLINE, TAB = 0, 1
_DELIMS = {0x0A: NEWLINE, 0x09: TAB}
_ESCAPE = 0x00
_FLOAT_PREFIX = re.compile(
    rb"\s*[+-]?(?:inf(?:inity)?|nan(?:\([0-9a-z_]*\))?|0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?\d+)?"
    rb"|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)", re.I)


class TextFileError(ValueError):
    """A malformed row or field."""


def parse_float(token):
    m = _FLOAT_PREFIX.match(token)
    if m is None:
        raise TextFileError("invalid float: %r" % token.decode("utf-8", "replace"))
    text = m.group(0).strip()
    try:
        return float.fromhex(text.decode()) if b"0x" in text.lower() else float(text)
    except ValueError:
        if text.lower().lstrip(b"+-").startswith(b"nan"):
            return float("nan")
        raise TextFileError("invalid float: %r" % token.decode("utf-8", "replace")) from None


_DELIM_RE = re.compile(rb"[\t\n]")


def _tokens(path, buffer_size):
    """(start delimiter id, token bytes) for one pass over the file."""
    start_delim = NEWLINE
    current = bytearray()
    escaped = False
    with open(path, "rb") as f:
        while True:
            chunk = f.read(buffer_size)
            if not chunk:
                return
            if not escaped and _ESCAPE not in chunk:     # the common case: split with a regex
                pos = 0
                for m in _DELIM_RE.finditer(chunk):
                    current += chunk[pos:m.start()]
                    yield start_delim, bytes(current)
                    current.clear()
                    start_delim = _DELIMS[chunk[m.start()]]
                    pos = m.end()
                current += chunk[pos:]
                continue
            for byte in chunk:
                if escaped:
                    current.append(byte)
                    escaped = False
                elif byte == _ESCAPE:
                    escaped = True
                elif byte in _DELIMS:
                    yield start_delim, bytes(current)
                    current.clear()
                    start_delim = _DELIMS[byte]
                else:
                    current.append(byte)


class TextFileReader:
    """The reader instance CreateTextFileReader makes (thread safe)."""

    def __init__(self, path, num_passes, field_types, buffer_size=1 << 16):
        self.path = path
        self.num_passes = int(num_passes)
        self.field_types = list(field_types)
        self.rows_read = 0
        self._pass = 0
        self._buffer_size = buffer_size
        self._lock = threading.Lock()
        with open(path, "rb"):      # fail now, as Caffe2 opens the file at creation
            pass
        self._stream = None

    def _next_token(self):
        while True:
            if self._stream is None:
                if self._pass >= self.num_passes:
                    return None
                self._stream = _tokens(self.path, self._buffer_size)
            token = next(self._stream, None)
            if token is not None:
                return token
            self._stream = None
            self._pass += 1

    def read(self, batch_size, convert):
        """Up to batch_size rows; convert[i](token bytes) -> value of field i.
        Returns one list of values per field."""
        n = len(self.field_types)
        columns = [[] for _ in range(n)]
        with self._lock:
            rows = 0
            while rows < batch_size:
                row = []
                for field in range(n):
                    token = self._next_token()
                    if token is None:
                        if field != 0:
                            raise TextFileError("invalid number of fields at end of file")
                        break
                    delim, data = token
                    if (field == 0) != (delim == NEWLINE):
                        raise TextFileError("invalid number of columns at row %d" % (self.rows_read + rows + 1))
                    row.append(convert[field](data))
                if len(row) < n:
                    break
                for field, value in enumerate(row):
                    columns[field].append(value)
                rows += 1
            self.rows_read += rows
        return columns


def column(values, dtype):
    if dtype is object:
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return np.asarray(values, dtype=dtype).reshape(len(values))
