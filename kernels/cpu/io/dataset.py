"""Nested datasets stored as flat columns, as Caffe2's dataset ops walk them.

A dataset is a list of fields (columns) named like "a", "b:lengths",
"b:values:lengths", "b:values:values". A field whose last name part is "lengths"
opens a domain: its values give, per entry of the domain it lives in, how many
entries the new domain has. Every other field belongs to the deepest domain whose
lengths field's prefix its name starts with (the top-level domain when none does).
Domain 0 is the top level (records); domain j + 1 is opened by the j-th lengths
field. A cursor keeps one offset per domain.

Everything here raises DatasetError (a ValueError) with a plain message; the
operator layer adds the op's name.
"""
import threading

import numpy as np

SEPARATOR = ":"
LENGTHS = "lengths"


class DatasetError(ValueError):
    """Inconsistent fields or lengths."""


class TreeIterator:
    """The domain structure of a field list."""

    def __init__(self, fields):
        self.fields = [f.decode() if isinstance(f, bytes) else str(f) for f in fields]
        parts = [f.split(SEPARATOR) for f in self.fields]
        self.length_field_ids = [i for i, p in enumerate(parts) if p and p[-1] == LENGTHS]
        # length_field_of[i]: index into length_field_ids of field i's domain opener, -1 for the top
        self.length_field_of = []
        for i, p in enumerate(parts):
            best_level, best = 1, -1
            for j, lid in enumerate(self.length_field_ids):
                if lid == i:
                    continue
                prefix = parts[lid][:-1]
                if p[:len(prefix)] == prefix and len(parts[lid]) > best_level:
                    best_level, best = len(parts[lid]), j
            self.length_field_of.append(best)
        for i, j in enumerate(self.length_field_of):
            if j >= 0 and self.length_field_ids[j] > i:
                lid = self.length_field_ids[j]
                raise DatasetError("field %d (%s) depends on a field defined afterwards: %d (%s)"
                                   % (i, self.fields[i], lid, self.fields[lid]))

    @property
    def num_length_fields(self):
        return len(self.length_field_ids)

    @property
    def num_offset_fields(self):
        return len(self.length_field_ids) + 1

    def domain_of(self, field_id):
        """Offset index (domain) of a field."""
        return self.length_field_of[field_id] + 1

    def limits(self, arrays):
        """Per domain, the smallest first dimension of its fields (its size)."""
        if len(arrays) != len(self.fields):
            raise DatasetError("expected %d fields (%s), got %d"
                               % (len(self.fields), ", ".join(self.fields), len(arrays)))
        limits = [None] * self.num_offset_fields
        for i, a in enumerate(arrays):
            if np.ndim(a) == 0:
                raise DatasetError("field %d (%s) must have at least one dimension" % (i, self.fields[i]))
            d = self.domain_of(i)
            n = int(np.shape(a)[0])
            limits[d] = n if limits[d] is None else min(limits[d], n)
        return [np.iinfo(np.int64).max if x is None else x for x in limits]

    def lengths(self, arrays):
        """The lengths arrays, one per lengths field (int64 copies, checked non-negative)."""
        out = []
        for lid in self.length_field_ids:
            a = np.asarray(arrays[lid])
            if a.size and not np.issubdtype(a.dtype, np.integer):
                raise DatasetError("lengths field %d (%s) must hold integers, got %s"
                                   % (lid, self.fields[lid], a.dtype))
            a = a.reshape(-1).astype(np.int64)
            if a.size and a.min() < 0:
                raise DatasetError("lengths field %d (%s) has a negative length" % (lid, self.fields[lid]))
            out.append(a)
        return out

    def advance(self, lengths, offsets, limits, num):
        """Move `num` records from `offsets`: returns (new offsets, sizes read per domain)."""
        sizes = [0] * self.num_offset_fields
        new = list(offsets)
        if limits[0] < offsets[0]:
            raise DatasetError("tried to advance past the end of the cursor")
        sizes[0] = min(limits[0] - offsets[0], num)
        new[0] = offsets[0] + sizes[0]
        for j in range(1, self.num_offset_fields):
            parent = self.domain_of(self.length_field_ids[j - 1])
            lens = lengths[j - 1]
            start, count = offsets[parent], sizes[parent]
            if start + count > lens.size:
                raise DatasetError("lengths field %s has %d entries; %d needed"
                                   % (self.fields[self.length_field_ids[j - 1]], lens.size, start + count))
            total = int(lens[start:start + count].sum())
            if offsets[j] + total > limits[j]:
                raise DatasetError("inconsistent field length: tried to advance past the end of field %d" % j)
            sizes[j] = total
            new[j] = offsets[j] + total
        return new, sizes


class TreeCursor:
    """Offsets per domain (empty: not started) and the lock that makes reads atomic."""

    def __init__(self, iterator, offsets=None):
        self.it = iterator
        self.offsets = list(offsets or [])
        self.lock = threading.Lock()

    def __repr__(self):
        return "TreeCursor(fields=%r, offsets=%r)" % (self.it.fields, self.offsets)


def _slice(a, begin, count):
    return np.array(a[begin:begin + count])      # a copy: outputs never alias the dataset


def read_next_batch(cursor, arrays, batch_size, enforce_batch_size=False):
    it = cursor.it
    limits = it.limits(arrays)
    lengths = it.lengths(arrays)
    with cursor.lock:
        if not cursor.offsets:
            cursor.offsets = [0] * it.num_offset_fields
        if len(cursor.offsets) != it.num_offset_fields:
            raise DatasetError("the cursor holds %d offsets, the fields need %d (was it used by ReadRandomBatch?)"
                               % (len(cursor.offsets), it.num_offset_fields))
        start = list(cursor.offsets)
        cursor.offsets, sizes = it.advance(lengths, start, limits, batch_size)
        if enforce_batch_size and sizes[0] < batch_size:
            sizes = [0] * len(sizes)     # not a full batch: empty outputs signal the end
    return [_slice(a, start[it.domain_of(i)], sizes[it.domain_of(i)]) for i, a in enumerate(arrays)]


def compute_offset(cursor, arrays):
    """(records + 1, domains) int64 matrix of the offsets before each record; resets the cursor."""
    it = cursor.it
    limits = it.limits(arrays)
    lengths = it.lengths(arrays)
    with cursor.lock:
        offsets = list(cursor.offsets) or [0] * it.num_offset_fields
        out = np.empty((limits[0] + 1, it.num_offset_fields), dtype=np.int64)
        for k in range(limits[0] + 1):
            out[k] = offsets
            offsets, _ = it.advance(lengths, offsets, limits, 1)
        cursor.offsets = [0] * it.num_offset_fields
    return out


def read_random_batch(cursor, idx, offsets, arrays, batch_size, enforce_batch_size=False, loop_over=False):
    it = cursor.it
    idx = np.asarray(idx).reshape(-1)
    offsets = np.asarray(offsets)
    if offsets.ndim != 2:
        raise DatasetError("the offsets matrix must be 2-D, got shape %s" % list(offsets.shape))
    with cursor.lock:
        if len(cursor.offsets) != 1:
            cursor.offsets = (list(cursor.offsets) + [0])[:1]
        pos = cursor.offsets[0]
        if enforce_batch_size and pos + batch_size > idx.size:
            pos = idx.size
        if loop_over and pos >= idx.size:
            cursor.offsets[0] = pos = 0
        cursor.offsets[0] += batch_size
    rows = idx[pos:pos + batch_size] if pos < idx.size else idx[:0]
    outs = []
    for i, a in enumerate(arrays):
        d = it.domain_of(i)
        if np.ndim(a) == 0:
            raise DatasetError("field %d (%s) must have at least one dimension" % (i, it.fields[i]))
        pieces = []
        for r in rows:
            r = int(r)
            if r < 0 or r + 1 >= offsets.shape[0] or d >= offsets.shape[1]:
                raise DatasetError("index %d is out of range of the %s offsets matrix" % (r, list(offsets.shape)))
            begin, end = int(offsets[r, d]), int(offsets[r + 1, d])
            if not 0 <= begin <= end <= np.shape(a)[0]:
                raise DatasetError("record %d spans rows [%d, %d) of field %s, which has %d"
                                   % (r, begin, end, it.fields[i], np.shape(a)[0]))
            pieces.append(a[begin:end])
        outs.append(np.concatenate(pieces) if pieces else np.array(a[:0]))
    return outs


def check_consistency(iterator, arrays):
    limits = [None] * iterator.num_offset_fields
    for i, a in enumerate(arrays):
        if np.ndim(a) == 0:
            raise DatasetError("field %d (%s) must have at least one dimension" % (i, iterator.fields[i]))
        d, n = iterator.domain_of(i), int(np.shape(a)[0])
        if limits[d] is None:
            limits[d] = n
        elif limits[d] != n:
            raise DatasetError("inconsistent sizes for fields belonging to the same domain: field %d (%s) has "
                               "%d entries, an earlier field of its domain %d" % (i, iterator.fields[i], n, limits[d]))
    limits = [np.iinfo(np.int64).max if x is None else x for x in limits]
    offsets, _ = iterator.advance(iterator.lengths(arrays), [0] * iterator.num_offset_fields, limits, limits[0])
    for d, (o, lim) in enumerate(zip(offsets, limits)):
        if o != lim:
            raise DatasetError("domain %d: the lengths cover %d entries but its fields hold %d" % (d, o, lim))


def walk_records(iterator, arrays):
    """Yield (start offsets, sizes) of every record in turn."""
    limits = iterator.limits(arrays)
    lengths = iterator.lengths(arrays)
    offsets = [0] * iterator.num_offset_fields
    for _ in range(limits[0]):
        new, sizes = iterator.advance(lengths, offsets, limits, 1)
        yield offsets, sizes
        offsets = new


def pack_records(iterator, arrays):
    """1-D object array: per record, the list of its field slices."""
    records = [[_slice(a, start[iterator.domain_of(i)], sizes[iterator.domain_of(i)])
                for i, a in enumerate(arrays)] for start, sizes in walk_records(iterator, arrays)]
    out = np.empty(len(records), dtype=object)
    for k, rec in enumerate(records):
        out[k] = rec
    return out


def unpack_records(packed, num_fields, prototypes=None):
    """Concatenate the packed records field by field (prototypes give shapes when empty)."""
    packed = np.asarray(packed, dtype=object).reshape(-1)
    if packed.size == 0 and not prototypes:
        raise DatasetError("unpacking an empty record without prototype blobs would leave the outputs undefined")
    if prototypes:
        if len(prototypes) != num_fields:
            raise DatasetError("expected %d prototype blobs, got %d" % (num_fields, len(prototypes)))
        protos = [np.asarray(p) for p in prototypes]
    else:
        protos = packed[0]
        if not isinstance(protos, (list, tuple)) or len(protos) != num_fields:
            raise DatasetError("packed records hold %s tensors; %d fields expected"
                               % (len(protos) if isinstance(protos, (list, tuple)) else "no", num_fields))
    pieces = [[] for _ in range(num_fields)]
    for k, rec in enumerate(packed):
        if not isinstance(rec, (list, tuple)) or len(rec) != num_fields:
            raise DatasetError("record %d is not a list of %d tensors" % (k, num_fields))
        for j, (t, proto) in enumerate(zip(rec, protos)):
            t = np.asarray(t)
            if t.ndim != np.ndim(proto) or t.ndim == 0 or t.shape[1:] != np.shape(proto)[1:] or t.dtype != proto.dtype:
                raise DatasetError("record %d field %d is %s %s; expected %s with inner shape %s"
                                   % (k, j, t.dtype, list(t.shape), proto.dtype, list(np.shape(proto)[1:])))
            pieces[j].append(t)
    return [np.concatenate(p) if p else np.zeros((0,) + tuple(np.shape(proto)[1:]), dtype=np.asarray(proto).dtype)
            for p, proto in zip(pieces, protos)]


def trim(iterator, arrays, multiple_of):
    """Keep the largest number of records that is a multiple of multiple_of."""
    limits = iterator.limits(arrays)
    total = limits[0]
    keep = (total // multiple_of) * multiple_of
    if keep == total:
        return [a for a in arrays]
    lengths = iterator.lengths(arrays)
    offsets, _ = iterator.advance(lengths, [0] * iterator.num_offset_fields, limits, keep)
    return [np.array(a[:offsets[iterator.domain_of(i)]]) for i, a in enumerate(arrays)]


class TensorVector(list):
    """The blob CreateTensorVector makes: a growable list of tensors."""


def concat_tensor_vector(vector):
    if not len(vector):
        raise DatasetError("the tensor vector is empty")
    first = np.asarray(vector[0])
    if first.ndim == 0:
        raise DatasetError("tensors must have at least one dimension to be concatenated")
    for k, t in enumerate(vector):
        t = np.asarray(t)
        if t.ndim != first.ndim or t.shape[1:] != first.shape[1:] or t.dtype != first.dtype:
            raise DatasetError("tensor %d is %s %s; tensor 0 is %s %s (all but the first dimension must match)"
                               % (k, t.dtype, list(t.shape), first.dtype, list(first.shape)))
    return np.concatenate([np.asarray(t) for t in vector])
