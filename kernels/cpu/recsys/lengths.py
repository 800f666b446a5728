"""Conversions between Caffe2's segment encodings (lengths, segment ids, ranges) and
the modulo sharding of id lists (Partition, LengthsPartition, GatherByKey).

All whole-array NumPy: each is a handful of passes over int vectors. Errors are
LookupInputError(role, message) with Caffe2's texts where Caffe2 has one.
"""
import numpy as np

from .sparse_lengths import LookupInputError, check_lengths_sum


def _lengths(lengths):
    lengths = np.asarray(lengths)
    flat = lengths.reshape(-1).astype(np.int64, copy=False)
    if flat.size and flat.min() < 0:
        k = int(np.flatnonzero(flat < 0)[0])
        raise LookupInputError("lengths", "unexpected negative length value: lengths[%d] = %d" % (k, flat[k]))
    check_lengths_sum(flat)
    return flat


def lengths_to_segment_ids(lengths):
    """[1, 3, 0, 2] -> [0, 1, 1, 1, 3, 3] (int32)."""
    flat = _lengths(lengths)
    return np.repeat(np.arange(flat.size, dtype=np.int32), flat)


def lengths_to_ranges(lengths):
    """[1, 3, 0, 2] -> [[0, 1], [1, 3], [4, 0], [4, 2]] in LENGTHS' dtype."""
    flat = _lengths(lengths)
    out = np.empty((flat.size, 2), np.asarray(lengths).dtype)
    out[:, 1] = flat
    out[:, 0] = np.cumsum(flat) - flat
    return out


def lengths_to_shape(lengths):
    """N equal lengths L -> [N, L] (int32); an empty LENGTHS gives [0, 0]."""
    flat = np.asarray(lengths).reshape(-1)
    if flat.size and (flat != flat[0]).any():
        raise LookupInputError("lengths", "All elements of input must be same ")
    return np.array([flat.size, int(flat[0]) if flat.size else 0], np.int32)


def lengths_to_weights(lengths, power=0.5):
    """Each length l repeated l times as 1 / l**power (float32)."""
    flat = _lengths(lengths)
    nonzero = flat[flat > 0]
    if power == 0.5:
        w = 1.0 / np.sqrt(nonzero.astype(np.float64))
    elif power == 1:
        w = 1.0 / nonzero.astype(np.float64)
    else:
        w = 1.0 / np.power(nonzero.astype(np.float64), power)
    return np.repeat(w.astype(np.float32), nonzero)


def _sorted_ids(ids, n_segments):
    ids = np.asarray(ids)
    flat = ids.reshape(-1).astype(np.int64, copy=False)
    if flat.size and flat[0] < 0:
        raise LookupInputError("segment_ids", "Indices must be in 0..K-1 range, got %d" % flat[0])
    k = int(flat[-1]) + 1 if flat.size else 0
    if n_segments is not None:
        if k > n_segments:
            raise LookupInputError("segment_ids", "The number of segments inferred should *NOT* be larger than "
                                                  "the size of Input(1)'s first dimension")
        k = n_segments
    if flat.size:
        prev = np.concatenate(([0], flat[:-1]))
        bad = np.flatnonzero(flat < prev)
        if bad.size:
            i = int(bad[0])
            raise LookupInputError("segment_ids", "Segment ids must be sorted: %d vs %d" % (prev[i], flat[i]))
    return flat, k


def segment_ids_to_lengths(ids, n_segments=None):
    """Sorted segment ids -> lengths (int32); K = last id + 1 or n_segments."""
    flat, k = _sorted_ids(ids, n_segments)
    return np.bincount(flat, minlength=k).astype(np.int32)


def segment_ids_to_ranges(ids, n_segments=None):
    """Sorted segment ids -> (start, length) per segment (int32); an absent segment
    starts where the next present one does."""
    flat, k = _sorted_ids(ids, n_segments)
    out = np.zeros((k, 2), np.int32)
    if not flat.size:
        return out
    out[:, 1] = np.bincount(flat, minlength=k)
    # Caffe2 walks the ids: segments up to the first id start at 0, later absent
    # segments start at the position of the next id
    first = int(flat[0])
    starts = np.searchsorted(flat, np.arange(k), side="left")
    starts[:first + 1] = 0
    out[first + 1:, 0] = starts[first + 1:]
    missing_tail = np.arange(k) > flat[-1]
    out[missing_tail, 0] = 0
    return out


def lengths_tile(data, lengths):
    """Each row of DATA repeated lengths[i] times."""
    flat = _lengths(lengths)
    if flat.size != data.shape[0]:
        raise LookupInputError("lengths", "LENGTHS has %d entries but DATA has %d rows" % (flat.size, data.shape[0]))
    return np.repeat(data, flat, axis=0)


# --------------------------------------------------------------------------- sharding

def shard_of(keys, partitions):
    """Caffe2's moduloPartition: key mod partitions, in [0, partitions)."""
    return np.mod(keys.astype(np.int64, copy=False), partitions)


def partition(main, extras, partitions, pack_first_input=False):
    """Split MAIN's elements (and the matching leading blocks of each extra input) into
    `partitions` shards by key mod partitions, keeping order. Returns a list per shard
    of [main part] + [extra parts]."""
    keys = main.reshape(-1)
    shard = shard_of(keys, partitions)
    order = np.argsort(shard, kind="stable")
    counts = np.bincount(shard, minlength=partitions)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    main_out = (keys - shard) // partitions if pack_first_input else keys
    main_out = main_out.astype(main.dtype, copy=False)
    blocks = []
    for x in extras:                # leading dims may exceed MAIN's: its first keys.size blocks
        rows = x.reshape((int(np.prod(x.shape[:main.ndim], dtype=np.int64)),) + x.shape[main.ndim:])
        blocks.append(rows[:keys.size])
    shards = []
    for j in range(partitions):
        sel = order[bounds[j]:bounds[j + 1]]
        shards.append([main_out[sel]] + [b[sel] for b in blocks])
    return shards


def lengths_partition_lengths(lengths, keys, partitions):
    """Per shard, how many of each segment's keys fall into it (int32, LENGTHS' size)."""
    flat = _lengths(lengths)
    if int(flat.sum()) != keys.size:
        raise LookupInputError("lengths", "Total length is not matching to the number of elements")
    seg = np.repeat(np.arange(flat.size), flat)
    shard = shard_of(keys.reshape(-1), partitions)
    out = np.zeros((partitions, flat.size), np.int32)
    np.add.at(out, (shard, seg), 1)
    return out


def gather_by_key(keys, shards):
    """Inverse of Partition: the full value tensor in KEYS' order from sharded values."""
    p = len(shards)
    shard = shard_of(keys.reshape(-1), p)
    counts = np.bincount(shard, minlength=p)
    for j, s in enumerate(shards):
        if s.shape[0] != counts[j]:
            raise LookupInputError("shard%d" % j, "shard %d holds %d rows but KEYS map %d keys to it"
                                   % (j, s.shape[0], counts[j]))
    out = np.empty((keys.size,) + shards[0].shape[1:], shards[0].dtype)
    order = np.argsort(shard, kind="stable")
    out[order] = np.concatenate(shards, axis=0)
    return out
