"""CTC decoding of [T, B, K] class scores (class 0 is the blank): greedy (argmax per step)
and prefix beam search."""
import numpy as np


def greedy(scores, lengths, merge_repeated):
    """Per sequence, the argmax classes of its first lengths[b] steps, blanks removed and (with
    merge_repeated) repeats of the previous step's class dropped. Returns (lengths, values)."""
    ids = scores.argmax(axis=2).T                       # [B, T]
    prev = np.zeros_like(ids)
    prev[:, 1:] = ids[:, :-1]
    keep = ids != 0
    if merge_repeated:
        keep &= ids != prev
    keep &= np.arange(ids.shape[1])[None, :] < lengths[:, None]
    return keep.sum(axis=1).astype(np.int32), ids[keep].astype(np.int32)


def _beam_one(probs, beam_width, prune_threshold):
    """Prefix beam search over probs [T, K] (probabilities, not logits). Returns the final beam
    (prefixes, best first) and each prefix's total probability."""
    blank_prev, nonblank_prev = {(): 1.0}, {(): 0.0}
    beam = [()]
    for row in probs:
        kept = np.nonzero(row > prune_threshold)[0].tolist()
        p = row.tolist()
        blank, nonblank = {}, {}
        in_beam = set(beam)
        for prefix in beam:
            pb, pnb = blank_prev.get(prefix, 0.0), nonblank_prev.get(prefix, 0.0)
            last = prefix[-1] if prefix else None
            for c in kept:
                if c == 0:
                    blank[prefix] = blank.get(prefix, 0.0) + p[0] * (pb + pnb)
                    continue
                longer = prefix + (c,)
                if c == last:
                    nonblank[longer] = nonblank.get(longer, 0.0) + p[c] * pb
                    nonblank[prefix] = nonblank.get(prefix, 0.0) + p[c] * pnb
                else:
                    nonblank[longer] = nonblank.get(longer, 0.0) + p[c] * (pb + pnb)
                if longer not in in_beam:
                    # a prefix that fell out of the beam keeps its probability from the last step
                    lb, lnb = blank_prev.get(longer, 0.0), nonblank_prev.get(longer, 0.0)
                    blank[longer] = blank.get(longer, 0.0) + p[0] * (lb + lnb)
                    nonblank[longer] = nonblank.get(longer, 0.0) + p[c] * lnb
        total = {}
        for d in (blank, nonblank):
            for k, v in d.items():
                total[k] = total.get(k, 0.0) + v
        ranked = [k for k, v in total.items() if v > 0]
        ranked.sort(key=total.get, reverse=True)
        beam = ranked[:beam_width]
        blank_prev, nonblank_prev = blank, nonblank
    return beam, {k: blank_prev.get(k, 0.0) + nonblank_prev.get(k, 0.0) for k in beam}


def beam_search(scores, lengths, beam_width, num_candidates, prune_threshold):
    """The num_candidates best prefixes of each sequence: (lengths [B * num_candidates],
    values (all prefixes concatenated), probabilities [B * num_candidates]); missing
    candidates have length 0 and probability 0."""
    batch = scores.shape[1]
    out_len = np.zeros(batch * num_candidates, dtype=np.int32)
    out_prob = np.zeros(batch * num_candidates, dtype=np.float32)
    values = []
    for b in range(batch):
        probs = scores[:int(lengths[b]), b, :].astype(np.float64)
        beam, total = _beam_one(probs, beam_width, prune_threshold)
        for k, prefix in enumerate(beam[:num_candidates]):
            values.extend(prefix)
            out_len[b * num_candidates + k] = len(prefix)
            out_prob[b * num_candidates + k] = total[prefix]
    return out_len, np.array(values, dtype=np.int32), out_prob
