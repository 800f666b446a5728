"""Merging of per-feature tensors into one keyed feature map per example (the
Merge*FeatureTensors ops) and the split of the merged gradient back, in NumPy.
Output order is example-major: for each example, each input in turn. Callers
validate lengths, sizes and presence first."""
import numpy as np


def offsets(lengths):
    """Start of each segment and the end of the last: [0, l0, l0 + l1, ...]."""
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])


def _gather(arrays, pieces, dtype_like):
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype_like.dtype)


def merge_single(n, features, feature_ids):
    """features[i]: (presence[N], starts[N], counts[N], payload arrays). Present
    examples get key feature_ids[i], their count and their payload slices."""
    lengths = np.zeros(n, np.int32)
    keys, counts = [], []
    n_payloads = len(features[0][3]) if features else 0
    pieces = [[] for _ in range(n_payloads)]
    for e in range(n):
        for (presence, starts, cnts, payloads), fid in zip(features, feature_ids):
            if not presence[e]:
                continue
            lengths[e] += 1
            keys.append(fid)
            counts.append(cnts[e])
            for k, p in enumerate(payloads):
                pieces[k].append(p[starts[e]:starts[e] + cnts[e]])
    outs = [np.concatenate(pieces[k]) if pieces[k] else features[0][3][k][:0] for k in range(n_payloads)]
    return lengths, np.asarray(keys, np.int64), np.asarray(counts, np.int32), outs


def merge_multi(n, inputs):
    """inputs[i]: (lengths[N], keys, values_lengths or None, payload arrays). Each
    example's keys (and value lengths, and payload ranges) concatenated over inputs."""
    out_lengths = np.zeros(n, np.int32)
    key_pieces, vlen_pieces = [], []
    n_payloads = len(inputs[0][3]) if inputs else 0
    pieces = [[] for _ in range(n_payloads)]
    prepared = []
    for lengths, keys, vlens, payloads in inputs:
        k_off = offsets(lengths)
        v_off = offsets(vlens) if vlens is not None else np.arange(len(keys) + 1)
        prepared.append((k_off, v_off, keys, vlens, payloads))
    for e in range(n):
        for k_off, v_off, keys, vlens, payloads in prepared:
            a, b = k_off[e], k_off[e + 1]
            out_lengths[e] += b - a
            key_pieces.append(keys[a:b])
            if vlens is not None:
                vlen_pieces.append(vlens[a:b])
            for k, p in enumerate(payloads):
                pieces[k].append(p[v_off[a]:v_off[b]])
    cat = lambda ps, like: np.concatenate(ps) if ps else like[:0]  # noqa: E731
    first = inputs[0]
    out_vlens = cat(vlen_pieces, np.zeros(0, np.int32)).astype(np.int32) if first[2] is not None else None
    return (out_lengths, cat(key_pieces, first[1]).astype(np.int64), out_vlens,
            [cat(pieces[k], first[3][k]) for k in range(n_payloads)])


def split_grad(n, takes, grad):
    """Hand out the merged gradient in merge order: takes[i] is (counts[N], sizes,
    total) for input i — for example e input i receives counts[e] values at its own
    offset; the result for input i has `total` values (zeros where it took none)."""
    empty = b"" if grad.dtype == object else 0      # string "gradients" get empty strings
    outs = [np.full((total,) + grad.shape[1:], empty, grad.dtype) for _, _, total in takes]
    pos = 0
    for e in range(n):
        for i, (counts, starts, _) in enumerate(takes):
            c = counts[e]
            if c:
                outs[i][starts[e]:starts[e] + c] = grad[pos:pos + c]
                pos += c
    return outs, pos
