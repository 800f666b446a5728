"""Caffe2's Merge*FeatureTensors ops (feature_maps_ops): per-feature tensors merged
into one keyed feature map per example, plus the gradient ops that hand the merged
values' gradient back to each input's values.

- Single* take one feature per input with a presence flag per example; the key of
  input i is feature_ids[i]. Scalar: (values, presence); List: (lengths, values,
  presence); Map: (lengths, keys, values, presence).
- Multi* take already keyed inputs and concatenate them per example. Scalar:
  (lengths, keys, values); List: (lengths, keys, values_lengths, values_values);
  Map: (lengths, keys, values_lengths, values_keys, values_values).
- MergeDenseFeatureTensors: a dense (N, F) matrix with an (N, F) presence mask.
Kernels: kernels/cpu/recsys/feature_maps.py."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.recsys import feature_maps as K
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, register_kernel, register_schema

_COST = lambda ctx, ins: Cost()  # noqa: E731
_FEATURE_IDS = Arg("feature_ids", "ints", None, doc="the key of each input's feature")

# op: (inputs per feature, outputs, gradient inputs per feature, forward input whose
#      gradient the gradient op makes, forward output whose gradient it reads)
SINGLE = {
    "MergeSingleScalarFeatureTensors": (("values", "presence"), ("lengths", "keys", "values"),
                                        ("presence",), 0, 2),
    "MergeSingleListFeatureTensors": (("lengths", "values", "presence"),
                                      ("lengths", "keys", "values_lengths", "values_values"),
                                      ("lengths", "presence"), 1, 3),
    "MergeSingleMapFeatureTensors": (("lengths", "keys", "values", "presence"),
                                     ("lengths", "keys", "values_lengths", "values_keys", "values_values"),
                                     ("lengths", "presence"), 2, 4),
}
MULTI = {
    "MergeMultiScalarFeatureTensors": (("lengths", "keys", "values"), ("lengths", "keys", "values"),
                                       ("lengths",), 2, 2),
    "MergeMultiListFeatureTensors": (("lengths", "keys", "values_lengths", "values_values"),
                                     ("lengths", "keys", "values_lengths", "values_values"),
                                     ("lengths", "values_lengths"), 3, 3),
    "MergeMultiMapFeatureTensors": (("lengths", "keys", "values_lengths", "values_keys", "values_values"),
                                    ("lengths", "keys", "values_lengths", "values_keys", "values_values"),
                                    ("lengths", "values_lengths"), 4, 4),
}


def _per_feature(k):
    return lambda n: n > 0 and n % k == 0


def _int_vector(ctx, index, a, what, size=None):
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ctx.input_error(index, "%s must be a 1-D integer tensor, got %s of shape %s"
                              % (what, a.dtype, list(a.shape)))
    if (a < 0).any():
        raise ctx.input_error(index, "%s must be >= 0" % what)
    if size is not None and a.size != size:
        raise ctx.input_error(index, "%s has %d values, expected %d" % (what, a.size, size))
    return a.astype(np.int64)


def _presence(ctx, index, p, n):
    if p.dtype != np.bool_ or p.shape != (n,):
        raise ctx.input_error(index, "presence must be a bool vector of %d values, got %s of shape %s"
                              % (n, p.dtype, list(p.shape)))
    return p


def _sized(ctx, index, a, size, what):
    if a.ndim < 1 or a.shape[0] != size:
        raise ctx.input_error(index, "%s must have %d rows, got shape %s" % (what, size, list(a.shape)))
    return a


def _feature_ids(ctx, k):
    ids = list(ctx.ints("feature_ids") or ())
    if len(ids) != k:
        raise ctx.error("feature_ids has %d values; the op has %d features" % (len(ids), k))
    return ids


def _examples(ctx, first_index, first):
    return first.shape[0] if first.ndim >= 1 else 0


# ----------------------------------------------------------------- Single*

def _single_feature(ctx, kind, base, group, n):
    """(presence, starts, counts, payloads) for one input group."""
    if kind == "MergeSingleScalarFeatureTensors":
        values, presence = group
        _sized(ctx, base, values, n, "values")
        return (_presence(ctx, base + 1, presence, n), np.arange(n), np.ones(n, np.int64), [values])
    lengths = _int_vector(ctx, base, group[0], "lengths", n)
    presence = _presence(ctx, base + len(group) - 1, group[-1], n)
    off = K.offsets(lengths)
    payloads = list(group[1:-1])
    for j, p in enumerate(payloads):
        _sized(ctx, base + 1 + j, p, int(off[-1]), "the values")
    return presence, off[:-1], lengths, payloads


def _register_single(op_type, ins, outs):
    k = len(ins)
    register_schema(OpSchema(
        op_type, num_inputs=_per_feature(k), num_outputs=len(outs), inputs=ins, outputs=outs,
        args=(_FEATURE_IDS,), inference=lambda ctx, t: [UNKNOWN] * len(outs), cost=_COST,
        doc="Per example, the present features (in input order) with key feature_ids[i]; inputs "
            "per feature: %s." % ", ".join(ins)))

    @register_kernel(op_type)
    def factory(ctx):
        def run(*arrays):
            groups = [arrays[b:b + k] for b in range(0, len(arrays), k)]
            ids = _feature_ids(ctx, len(groups))
            n = groups[0][-1].shape[0] if groups[0][-1].ndim == 1 else -1
            features = [_single_feature(ctx, op_type, b * k, g, n) for b, g in enumerate(groups)]
            lengths, keys, counts, payloads = K.merge_single(n, features, ids)
            if op_type == "MergeSingleScalarFeatureTensors":
                return lengths, keys, payloads[0]
            return (lengths, keys, counts) + tuple(payloads)
        return run
    factory.__name__ = op_type


# ----------------------------------------------------------------- Multi*

def _register_multi(op_type, ins, outs):
    k = len(ins)
    register_schema(OpSchema(
        op_type, num_inputs=_per_feature(k), num_outputs=len(outs), inputs=ins, outputs=outs,
        inference=lambda ctx, t: [UNKNOWN] * len(outs), cost=_COST,
        doc="Per example, every input's keys (and values) concatenated in input order; inputs "
            "per feature map: %s." % ", ".join(ins)))

    @register_kernel(op_type)
    def factory(ctx):
        def run(*arrays):
            groups = [arrays[b:b + k] for b in range(0, len(arrays), k)]
            n = groups[0][0].shape[0]
            prepared = []
            for b, g in enumerate(groups):
                base = b * k
                lengths = _int_vector(ctx, base, g[0], "lengths", n)
                n_keys = int(lengths.sum())
                keys = _sized(ctx, base + 1, g[1], n_keys, "keys")
                if k == 3:
                    prepared.append((lengths, keys, None, [_sized(ctx, base + 2, g[2], n_keys, "values")]))
                    continue
                vlens = _int_vector(ctx, base + 2, g[2], "values_lengths", n_keys)
                n_values = int(vlens.sum())
                payloads = [_sized(ctx, base + 3 + j, p, n_values, "the values") for j, p in enumerate(g[3:])]
                prepared.append((lengths, keys, vlens, payloads))
            lengths, keys, vlens, payloads = K.merge_multi(n, prepared)
            return ((lengths, keys) if vlens is None else (lengths, keys, vlens)) + tuple(payloads)
        return run
    factory.__name__ = op_type


# ----------------------------------------------------------------- gradients

def _grad_takes(ctx, op_type, groups, n):
    """For each input, (counts per example, starts per example, total values)."""
    takes = []
    for b, g in enumerate(groups):
        base = b * len(g)
        if op_type == "MergeSingleScalarFeatureTensors":
            presence = _presence(ctx, base, g[0], n)
            takes.append((presence.astype(np.int64), np.arange(n), n))
        elif op_type in ("MergeSingleListFeatureTensors", "MergeSingleMapFeatureTensors"):
            lengths = _int_vector(ctx, base, g[0], "lengths", n)
            presence = _presence(ctx, base + 1, g[1], n)
            off = K.offsets(lengths)
            takes.append((lengths * presence, off[:-1], int(off[-1])))
        elif op_type == "MergeMultiScalarFeatureTensors":
            lengths = _int_vector(ctx, base, g[0], "lengths", n)
            off = K.offsets(lengths)
            takes.append((lengths, off[:-1], int(off[-1])))
        else:
            lengths = _int_vector(ctx, base, g[0], "lengths", n)
            k_off = K.offsets(lengths)
            vlens = _int_vector(ctx, base + 1, g[1], "values_lengths", int(k_off[-1]))
            v_off = K.offsets(vlens)
            starts = v_off[k_off]
            takes.append((np.diff(starts), starts[:-1], int(v_off[-1])))
    return takes


def _register_gradient_op(op_type, grad_ins, forward_in, forward_out, per_feature):
    grad_type = op_type + "Gradient"
    k = len(grad_ins)
    register_schema(OpSchema(
        grad_type, num_inputs=lambda n: n > k and (n - 1) % k == 0, num_outputs=(1, None),
        inputs=grad_ins + ("merged_values_grad",), outputs=("values_grad",),
        inputs_outputs_check=lambda n_in, n_out: n_out == (n_in - 1) // k,
        inference=lambda ctx, t: [UNKNOWN] * len(ctx.outputs), cost=_COST,
        doc="Gradient of %s: the merged values' gradient handed back, in merge order, to each "
            "input's values (zeros for absent examples); inputs per feature: %s."
            % (op_type, ", ".join(grad_ins))))

    @register_kernel(grad_type)
    def factory(ctx):
        def run(*arrays):
            grad = arrays[-1]
            groups = [arrays[b:b + k] for b in range(0, len(arrays) - 1, k)]
            n = groups[0][0].shape[0]
            takes = _grad_takes(ctx, op_type, groups, n)
            need = sum(int(c.sum()) for c, _, _ in takes)
            if grad.ndim < 1 or grad.shape[0] != need:
                raise ctx.input_error(len(arrays) - 1, "has shape %s; the merge produced %d values"
                                      % (list(grad.shape), need))
            outs, _ = K.split_grad(n, takes, grad)
            return outs[0] if len(outs) == 1 else tuple(outs)
        return run
    factory.__name__ = grad_type

    @register_gradient(op_type)
    def maker(g):
        n_features = len(g.def_.input) // per_feature
        positions = {"MergeSingleScalarFeatureTensors": {"presence": 1},
                     "MergeSingleListFeatureTensors": {"lengths": 0, "presence": 2},
                     "MergeSingleMapFeatureTensors": {"lengths": 0, "presence": 3}}.get(
            op_type, {"lengths": 0, "values_lengths": 2})
        inputs = [g.I(f * per_feature + positions[name]) for f in range(n_features) for name in grad_ins]
        return [g.op(grad_type, inputs + [g.GO(forward_out)],
                     [g.GI(f * per_feature + forward_in) for f in range(n_features)])]


for _op, (_ins, _outs, _gins, _fin, _fout) in SINGLE.items():
    _register_single(_op, _ins, _outs)
    _register_gradient_op(_op, _gins, _fin, _fout, len(_ins))
for _op, (_ins, _outs, _gins, _fin, _fout) in MULTI.items():
    _register_multi(_op, _ins, _outs)
    _register_gradient_op(_op, _gins, _fin, _fout, len(_ins))


# ----------------------------------------------------------------- MergeDenseFeatureTensors

register_schema(OpSchema(
    "MergeDenseFeatureTensors", num_inputs=2, num_outputs=3, inputs=("in", "in_presence"),
    outputs=("lengths", "keys", "values"), args=(_FEATURE_IDS,),
    inference=lambda ctx, t: [UNKNOWN] * 3, cost=_COST,
    doc="Per row of the dense (N, F) input, the present columns (bool (N, F) mask) as keys "
        "feature_ids[j] with their values."))


@register_kernel("MergeDenseFeatureTensors")
def merge_dense_feature_tensors(ctx):
    def run(x, presence):
        if x.ndim != 2:
            raise ctx.input_error(0, "must be 2-D (N, F), got shape %s" % list(x.shape))
        if presence.dtype != np.bool_ or presence.shape != x.shape:
            raise ctx.input_error(1, "must be a bool mask of X's shape %s, got %s of shape %s"
                                  % (list(x.shape), presence.dtype, list(presence.shape)))
        ids = np.asarray(_feature_ids(ctx, x.shape[1]), np.int64)
        lengths = presence.sum(axis=1).astype(np.int32)
        rows, cols = np.nonzero(presence)
        return lengths, ids[cols], x[rows, cols]
    return run
