"""Caffe2's gradient machinery: the gradient registry and the backward pass builder.

Operator modules register one gradient maker per op type beside the op's schema:

    @register_gradient("Relu")
    def _relu_grad(g):                       # g: a GradientDefs for one forward op
        return [g.op("ReluGradient", [g.O(0), g.GO(0)], [g.GI(0)])]

The maker sees the forward OperatorDef and the gradient blob of each output (a
name, a GradientSlice, or None) and returns the gradient OperatorDefs, naming
input gradients through GI(i) (`<input>_grad`), GI_I / GI_V (`<input>_grad_indices`
/ `_values`) or SetDense / SetSparse (a gradient that is an existing blob, no op
needed). As in Caffe2, the gradient ops get the forward op's device option,
engine and arguments unless the maker says otherwise, and `is_gradient_op` set.
`no_gradient(types)` marks ops that stop gradients (fills, counters, metrics);
`should_not_do_gradient(types)` ops raise when a gradient reaches them; an op
type with no entry raises too, naming the op.

`BackwardPass(ops).build(ys)` is Caffe2's IR: it replays the forward ops keeping
a version per blob (so in-place ops and overwritten blobs are tracked), walks
them in reverse calling the makers, checks that every gradient op reads the
blob versions it needs, and sums the partial gradients of a blob read by several
ops (`_<name>_grad_autosplit_<k>` renamed outputs into one Sum; sparse ones by
Concat of their indices and values). Where one op's gradient ops write a gradient
blob and read it back (Sqrt: Scale, then Div), only the last write is a partial
gradient, and a rename moves the scratch writes with it. `core.Net.AddGradientOperators` is a thin
wrapper over it.
"""
from collections import defaultdict, namedtuple

from . import registry
from .args import make_argument
from .blob_reference import BlobReference
from .definition_sites import caller_site
from .errors import Caffe2Error, describe_op
from .proto import caffe2_pb2

GradientSlice = namedtuple("GradientSlice", ["indices", "values"])

# op type -> callable(op_def, g_output) -> (gradient ops, g_input); Caffe2's
# GradientRegistry (C++ makers and Python RegisterGradient share one table here)
_REGISTRY = {}
_SITES = {}      # op type -> the maker function, or (file, line) of a no_gradient call
_NO_GRADIENT = "no gradient"
_SHOULD_NOT = "should not do gradient"


# --------------------------------------------------------------------------- makers

def _name(blob):
    return blob.decode() if isinstance(blob, bytes) else str(blob)


def _as_gradient(g):
    """None, a dense gradient name (str) or a GradientSlice of names."""
    if g is None:
        return None
    if isinstance(g, GradientSlice) or (isinstance(g, tuple) and len(g) == 2):
        return GradientSlice(_name(g[0]), _name(g[1]))
    return _name(g)


class GradientDefs:
    """What a gradient maker works with (Caffe2's GradientMakerBase helpers):
    I(i) / O(i) forward blob names, GO(i) the dense gradient of output i (GO_I /
    GO_V a sparse one), GI(i) / GI_I(i) / GI_V(i) the gradient names of input i
    (recorded as the op's input gradients), SetDense / SetSparse to hand an existing
    blob over as an input's gradient, op(...) to build a gradient OperatorDef."""

    def __init__(self, op_def, g_output):
        self.def_ = op_def
        self.g_output = [_as_gradient(g) for g in g_output]
        self.g_input = [None] * len(op_def.input)
        self.label = describe_op(None, op_def)

    # -- forward blobs and arguments
    def I(self, i):  # noqa: E743 - Caffe2's name
        return self.def_.input[i]

    def O(self, i):  # noqa: E743 - Caffe2's name
        return self.def_.output[i]

    def input_value(self, i):
        """I(i), for a gradient that reads the input's value: an error when the op
        wrote an output over it (in place), since the input is gone by then."""
        name = self.I(i)
        if name in self.def_.output:
            raise Caffe2Error("%s: runs in place on '%s', but its gradient needs the input's value, "
                              "which the op overwrote; give the output another name"
                              % (self.label, name))
        return name

    def arg(self, name, default=None):
        from .args import ArgumentHelper
        return ArgumentHelper(self.def_).get(name, default)

    def has_arg(self, name):
        return any(a.name == name for a in self.def_.arg)

    # -- output gradients
    def GradOut(self, i):
        return self.g_output[i]

    def has_grad(self, i):
        return self.g_output[i] is not None

    def GO(self, i):
        g = self.g_output[i]
        if g is None or isinstance(g, GradientSlice):
            raise Caffe2Error("%s: the gradient of output '%s' is %s; this op's gradient needs a dense one"
                              % (self.label, self.O(i), "sparse" if g is not None else "not provided"))
        return g

    def GO_I(self, i):
        return self._sparse_out(i).indices

    def GO_V(self, i):
        return self._sparse_out(i).values

    def _sparse_out(self, i):
        g = self.g_output[i]
        if not isinstance(g, GradientSlice):
            raise Caffe2Error("%s: the gradient of output '%s' is %s; a sparse one is needed"
                              % (self.label, self.O(i), "dense" if g is not None else "not provided"))
        return g

    # -- input gradients
    def GI(self, i):
        return self.SetDense(i, self.I(i) + "_grad")

    def GI_I(self, i):
        self._check_not(i, str, "dense")
        old = self.g_input[i]
        name = self.I(i) + "_grad_indices"
        self.g_input[i] = GradientSlice(name, old.values if old else None)
        return name

    def GI_V(self, i):
        self._check_not(i, str, "dense")
        old = self.g_input[i]
        name = self.I(i) + "_grad_values"
        self.g_input[i] = GradientSlice(old.indices if old else None, name)
        return name

    def SetDense(self, i, name):
        self._check_not(i, GradientSlice, "sparse")
        self.g_input[i] = _name(name)
        return self.g_input[i]

    def SetSparse(self, i, indices, values):
        self._check_not(i, str, "dense")
        self.g_input[i] = GradientSlice(_name(indices), _name(values))
        return self.g_input[i]

    def _check_not(self, i, kind, word):
        if isinstance(self.g_input[i], kind):
            raise Caffe2Error("%s: the gradient of input '%s' is already %s" % (self.label, self.I(i), word))

    # -- building ops
    @staticmethod
    def op(op_type, inputs, outputs, args=None, **kwargs):
        """A gradient OperatorDef; kwargs become Arguments (None values are skipped)."""
        op = caffe2_pb2.OperatorDef()
        op.type = op_type
        op.name = ""        # set, though empty: Caffe2's CreateOperatorDef always writes the name
        op.input.extend(_name(b) for b in inputs)
        op.output.extend(_name(b) for b in outputs)
        for a in args or ():
            op.arg.add().CopyFrom(a)
        for key, value in kwargs.items():
            if value is not None:
                op.arg.add().CopyFrom(make_argument(key, value))
        return op


def register_gradient(*op_types, copy_arguments=True, copy_device_option=True, copy_engine=True):
    """Decorator: `maker(g: GradientDefs) -> list of OperatorDefs` is the gradient of
    each op type. Forward arguments are appended to every gradient op (those the maker
    already set win), as Caffe2's GetGradientForOp does."""
    def wrap(maker):
        def make(op_def, g_output):
            g = GradientDefs(op_def, g_output)
            ops = list(maker(g) or ())
            for grad_op in ops:
                grad_op.is_gradient_op = True
                if copy_device_option and op_def.HasField("device_option"):
                    grad_op.device_option.CopyFrom(op_def.device_option)
                if copy_engine and op_def.engine:
                    grad_op.engine = op_def.engine
                if copy_arguments:
                    present = {a.name for a in grad_op.arg}
                    for a in op_def.arg:
                        if a.name not in present:
                            grad_op.arg.add().CopyFrom(a)
            return ops, g.g_input
        for op_type in op_types:
            _REGISTRY[op_type] = make
            _SITES[op_type] = maker
        return maker
    return wrap


def no_gradient(*op_types):
    """Caffe2's NO_GRADIENT: these ops produce no input gradients; a backward pass
    simply stops at them."""
    site = caller_site()
    for op_type in op_types:
        _REGISTRY[op_type] = _NO_GRADIENT
        _SITES[op_type] = site


def should_not_do_gradient(*op_types):
    """Caffe2's SHOULD_NOT_DO_GRADIENT: asking for a gradient through these is an error."""
    site = caller_site()
    for op_type in op_types:
        _REGISTRY[op_type] = _SHOULD_NOT
        _SITES[op_type] = site


def has_gradient(op_type):
    entry = _REGISTRY.get(op_type)
    return entry is not None and entry not in (_NO_GRADIENT, _SHOULD_NOT)


def gradient_status(op_type):
    """'gradient', 'no gradient', 'should not do gradient' or None (not registered)."""
    entry = _REGISTRY.get(op_type)
    if entry is None or entry in (_NO_GRADIENT, _SHOULD_NOT):
        return entry
    return "gradient"


def record_gradient_site(op_type, site):
    """Say where op_type's gradient is defined when its maker is a shared helper's
    (operators/_gradient_hooks.delegate_gradient)."""
    _SITES[op_type] = site


def gradient_site(op_type):
    """The maker function of op_type (a no_gradient / should_not_do_gradient entry: the
    (file, line) that declared it), or None."""
    return _SITES.get(op_type)


def registered_gradient_types():
    return sorted(t for t in _REGISTRY if has_gradient(t))


class StopGradientError(Caffe2Error, ValueError):
    """A StopGradient whose output nothing reads (Caffe2 raises ValueError for it)."""


def _check_schema(op_def, label):
    """Caffe2 verifies an op against its schema before asking for its gradient, so a
    malformed op (say Mul with one input) fails here, naming the schema, not inside
    the gradient maker."""
    schema = registry.schema_for(op_def.type)
    if schema is None:
        return
    try:
        schema.verify(op_def, label)
    except Caffe2Error as exc:
        raise Caffe2Error("%s: the operator def does not pass schema checking, so it has no gradient (%s)"
                          % (label, exc)) from None


def get_gradient_for_op(op_def, g_output):
    """Caffe2's GetGradientForOp: (gradient OperatorDefs, gradient of each input)."""
    g_output = [_as_gradient(g) for g in g_output]
    if len(g_output) != len(op_def.output):
        raise Caffe2Error("%s: %d output gradients given for %d outputs"
                          % (describe_op(None, op_def), len(g_output), len(op_def.output)))
    entry = _REGISTRY.get(op_def.type)
    label = describe_op(None, op_def)
    if entry is None:
        raise Caffe2Error("%s: no gradient is defined for operator type '%s', but a gradient must flow "
                          "through it (to its inputs %s); stop it before this op with StopGradient or "
                          "register a gradient maker" % (label, op_def.type, list(op_def.input)))
    if entry is _SHOULD_NOT:
        raise Caffe2Error("%s: one should not ask for the gradient of operator type '%s' (it has none "
                          "by design), but a gradient reaches its outputs %s"
                          % (label, op_def.type, [o for o, g in zip(op_def.output, g_output) if g is not None]))
    if entry is _NO_GRADIENT:
        return [], [None] * len(op_def.input)
    _check_schema(op_def, label)
    ops, g_input = entry(op_def, g_output)
    if ops is None:
        ops = []
    elif isinstance(ops, caffe2_pb2.OperatorDef):
        ops = [ops]
    g_input = [_as_gradient(g) for g in g_input]
    if len(g_input) != len(op_def.input):
        raise Caffe2Error("%s: the gradient maker returned %d input gradients for %d inputs"
                          % (label, len(g_input), len(op_def.input)))
    return list(ops), g_input


# --------------------------------------------------------------------------- backward pass

# chain: the gradient ops of one maker that write this gradient one after another
# (Pow: Pow, Mul, Scale into X_grad); renaming the gradient renames it in all of them
_Dense = namedtuple("_Dense", ["grad_op", "index", "gradient", "chain"], defaults=(None,))
_Sparse = namedtuple("_Sparse", ["op_indices", "index_indices", "op_values", "index_values", "gradient"])
_Versioned = namedtuple("_Versioned", ["op", "in_versions", "out_versions"])


def _index_in(gradients, name):
    """Which entry of a gradient list is (or holds, for a slice) `name`; None if none."""
    for i, g in enumerate(gradients):
        if g == name or (isinstance(g, GradientSlice) and name in (g.indices, g.values)):
            return i
    return None


def _same_device(a, b):
    if not a.device_type and not b.device_type:
        return True
    return a.device_type == b.device_type and a.device_id == b.device_id


class BackwardPass:
    """Caffe2's IR over a list of forward OperatorDefs; build(ys) returns (gradient
    ops, {blob: gradient}) where a gradient is a name or a GradientSlice of names."""

    def __init__(self, operators):
        self.ssa = []
        self.frontier = defaultdict(int)        # blob -> its current version
        self.readers = defaultdict(lambda: defaultdict(list))      # blob -> version -> op positions
        self.gradient_frontier = {}             # blob -> version its current gradient belongs to
        self.generators = defaultdict(lambda: defaultdict(list))   # blob -> version -> producers
        self.written_by = defaultdict(list)     # blob -> [(op, version)] for error texts
        self.partial_seeds = set()              # given gradients to sum with the net's (build's partial)
        for op in operators:
            self._play(op)
        self._check_stop_gradients()

    def _play(self, op):
        ins = {}
        for blob in op.input:
            ins[blob] = self.frontier[blob]
            self.readers[blob][self.frontier[blob]].append(len(self.ssa))
        outs = {}
        for blob in op.output:
            if blob in self.frontier:
                self.frontier[blob] += 1
            outs[blob] = self.frontier[blob]
            self.written_by[blob].append((op, self.frontier[blob]))
        self.ssa.append(_Versioned(op, ins, outs))

    def _check_stop_gradients(self):
        for v in self.ssa:
            if v.op.type == "StopGradient" and v.op.output[0] not in self.readers:
                raise StopGradientError("%s: StopGradient's output '%s' is read by no op, so it stops nothing; "
                                        "write it in place (same input and output blob)"
                                        % (describe_op(None, v.op), v.op.output[0]))

    # -- checks of what gradient ops read
    def _history(self, blob):
        return "; versions of '%s': %s" % (blob, ", ".join(
            "%d by %s" % (ver, describe_op(None, op)) for op, ver in self.written_by[blob]) or "none written")

    def _check_grad_op_input(self, blob, g_output, position, local):
        op, ins, outs = self.ssa[position]
        label = describe_op(position, op)
        k = _index_in(g_output, blob)
        if k is not None:
            output = op.output[k]
            if outs[output] != self.gradient_frontier.get(output):
                raise Caffe2Error("%s: gradient '%s' should belong to version %d of '%s', but the gradient "
                                  "being propagated belongs to version %s%s"
                                  % (label, blob, outs[output], output, self.gradient_frontier.get(output),
                                     self._history(output)))
        elif blob in outs:
            if self.frontier[blob] != outs[blob]:
                raise Caffe2Error("%s: its gradient needs output '%s' as this op wrote it (version %d), but a "
                                  "later op overwrote it (version %d); use another output name%s"
                                  % (label, blob, outs[blob], self.frontier[blob], self._history(blob)))
        elif blob in ins:
            if self.frontier[blob] != ins[blob]:
                raise Caffe2Error("%s: its gradient needs input '%s' as this op read it (version %d), but "
                                  "it was overwritten later (version %d), e.g. by an in-place op%s"
                                  % (label, blob, ins[blob], self.frontier[blob], self._history(blob)))
        elif blob not in local:
            raise Caffe2Error("%s: a gradient op reads '%s', which is neither an input, an output or an "
                              "output gradient of the op nor made by its other gradient ops" % (label, blob))

    # -- recording who produces which gradient
    def _record(self, position, grad_ops, g_output, g_input):
        op, ins, _outs = self.ssa[position]
        local = set()
        sparse = defaultdict(lambda: defaultdict(list))
        dense = defaultdict(list)               # (input, version, gradient) -> [(grad_op, output index)]
        for grad_op in grad_ops:
            for blob in grad_op.input:
                self._check_grad_op_input(blob, g_output, position, local)
            local.update(grad_op.output)
            for i, out in enumerate(grad_op.output):
                k = _index_in(g_input, out)
                if k is None:
                    continue
                name, version = op.input[k], ins[op.input[k]]
                g = g_input[k]
                if isinstance(g, GradientSlice):
                    meta = (_Sparse(grad_op, i, None, 0, g) if g.indices == out
                            else _Sparse(None, 0, grad_op, i, g))
                    sparse[name][version].append(meta)
                else:
                    dense[name, version, g].append((grad_op, i))
        for (name, version, g), writes in dense.items():
            # one input position with several writer ops is a chain (Pow: Pow, Mul, Scale
            # into X_grad), whose last op holds the gradient; a blob read at several
            # positions (BatchMatMul(z, z)) has one separate gradient per position
            positions = sum(1 for k, blob in enumerate(op.input) if blob == name and g_input[k] == g)
            if positions == 1 and len({id(w[0]) for w in writes}) > 1:
                chain = [o for o in grad_ops if g in o.output or g in o.input]
                self.generators[name][version].append(_Dense(writes[-1][0], writes[-1][1], g, chain))
            else:                                       # one op (twice for Mul(x, x))
                for grad_op, i in writes:
                    self.generators[name][version].append(_Dense(grad_op, i, g))
        for name, by_version in sparse.items():
            for version, parts in by_version.items():
                if len(parts) == 1:
                    merged = parts[0]
                else:       # one op made the indices, another the values
                    a, b = parts
                    merged = _Sparse(a.op_indices or b.op_indices, a.index_indices + b.index_indices,
                                     a.op_values or b.op_values, a.index_values + b.index_values, a.gradient)
                self.generators[name][version].append(merged)
        # gradients handed over without an op (Sum's inputs share its output gradient)
        for k, g in enumerate(g_input):
            if g is None:
                continue
            name, version = op.input[k], ins[op.input[k]]
            if isinstance(g, GradientSlice):
                if g.indices not in local and g.values not in local:
                    self.generators[name][version].append(_Sparse(None, 0, None, 0, g))
            elif g not in local:
                self.generators[name][version].append(_Dense(None, 0, g))
        for k, g in enumerate(g_input):
            if g is not None:
                self.gradient_frontier[op.input[k]] = ins[op.input[k]]

    # -- accumulation of the gradients of a blob read by several ops
    def _accumulate(self, position):
        op, ins, _outs = self.ssa[position]
        sum_ops, grad_map = [], {}
        for name in dict.fromkeys(op.input):        # each distinct input once, in order
            version = ins[name]
            readers = self.readers[name][version]
            if len(readers) <= 1 or readers[0] != position:
                continue                  # not read twice, or an earlier reader is still to come
            producers = self.generators[name][version]
            if not self._needs_sum(name, producers):
                continue
            ops, g = self._sum_ops(name, producers)
            sum_ops.extend(ops)
            grad_map[name] = g
        return sum_ops, grad_map

    def _needs_sum(self, name, producers):
        if len({type(p) for p in producers}) > 1:
            raise Caffe2Error("the gradients of '%s' are a mix of sparse (GradientSlice) and dense ones; "
                              "summing them is not supported (as in Caffe2)" % name)
        if len(producers) < 2:
            return False
        devices = []
        for p in producers:
            for grad_op in ((p.grad_op,) if isinstance(p, _Dense) else (p.op_indices, p.op_values)):
                if grad_op is not None:
                    devices.append(grad_op.device_option)
        if any(not _same_device(d, devices[0]) for d in devices[1:]):
            raise Caffe2Error("the gradient ops of '%s' run on different devices; their partial "
                              "gradients cannot be summed" % name)
        return True

    @staticmethod
    def _rename(grad_op, index, counter, chain=None):
        """A partial gradient's own name: on its one output, or (a chain) on every
        read and write of it in the chain's ops."""
        old = grad_op.output[index]
        new = "_%s_autosplit_%d" % (old, counter)
        if chain is None:
            grad_op.output[index] = new
        else:
            for op in chain:
                for blobs in (op.input, op.output):
                    for k, blob in enumerate(blobs):
                        if blob == old:
                            blobs[k] = new
        return new, counter + 1

    def _sum_ops(self, name, producers):
        base = name + "_grad"
        for p in producers:               # the first op-made gradient names the sum
            if isinstance(p, _Dense) and p.grad_op is not None:
                base = p.grad_op.output[p.index]
                break
            if isinstance(p, _Sparse) and (p.op_indices or p.op_values):
                op, i, suffix = ((p.op_indices, p.index_indices, "_indices") if p.op_indices
                                 else (p.op_values, p.index_values, "_values"))
                out = op.output[i]
                base = out[:-len(suffix)] if out.endswith(suffix) else out
                break
        device = next((o.device_option for p in producers
                       for o in ((p.grad_op,) if isinstance(p, _Dense) else (p.op_values, p.op_indices))
                       if o is not None and o.HasField("device_option")), None)
        if isinstance(producers[0], _Dense):
            ops, g = self._dense_sum(producers, base)
        else:
            ops, g = self._sparse_sum(producers, base)
        for op in ops:
            if device is not None:
                op.device_option.CopyFrom(device)
        return ops, g

    def _dense_sum(self, producers, base):
        parts, counter, first = [], 0, True
        for p in producers:
            if p.grad_op is not None:
                if first:
                    first = False
                    parts.append(p.grad_op.output[p.index])
                else:
                    out, counter = self._rename(p.grad_op, p.index, counter, p.chain)
                    parts.append(out)
            else:
                if p.gradient == base and p.gradient not in self.partial_seeds:   # as Caffe2's _CheckSumOpsConflict
                    raise Caffe2Error("a gradient handed over without an op is named '%s', the name of the "
                                      "summed gradient itself" % base)
                parts.append(p.gradient)
        if parts.count(base) > 1:
            raise Caffe2Error("the gradient given for '%s' as a partial gradient is also the name an op of "
                              "the net writes its part to" % base)
        if base in parts:          # Sum may only run in place on its first input
            k = parts.index(base)
            parts[0], parts[k] = parts[k], parts[0]
        return [GradientDefs.op("Sum", parts, [base])], base

    def _sparse_sum(self, producers, base):
        indices, values, ci, cv = [], [], 0, 0
        for p in producers:
            if p.op_indices is not None:
                out, ci = self._rename(p.op_indices, p.index_indices, ci)
                indices.append(out)
            else:
                indices.append(p.gradient.indices)
            if p.op_values is not None:
                out, cv = self._rename(p.op_values, p.index_values, cv)
                values.append(out)
            else:
                values.append(p.gradient.values)
        ops = [GradientDefs.op("Concat", indices, [base + "_indices_concat", base + "_indices_concat_split"], axis=0),
               GradientDefs.op("Concat", values, [base + "_values_concat", base + "_values_concat_split"], axis=0)]
        return ops, GradientSlice(base + "_indices_concat", base + "_values_concat")

    # -- the walk
    def _seed(self, ys, scalar_losses, partial):
        grads, ops = {}, []
        for y, g in ys.items():
            if y in partial and not isinstance(g, str):
                raise Caffe2Error("the partial gradient given for '%s' must be a dense blob name, got %r" % (y, g))
            if y in partial:
                # a gradient that arrives from outside (RecurrentNetwork's link from step t + 1)
                # and adds to what the net's own readers of y hand back: summed with them
                self.partial_seeds.add(g)
                self.generators[y][self.frontier[y]].append(_Dense(None, 0, g))
            if g is None:
                seed = GradientDefs.op("ConstantFill", [y], [y + "_autogen_grad"], value=1.0)
                if scalar_losses:
                    seed.arg.add().CopyFrom(make_argument("require_scalar_input", 1))
                ops.append(seed)
                grads[y] = seed.output[0]
                self.generators[y][self.frontier[y]].append(_Dense(seed, 0, seed.output[0]))
            else:
                # as in Caffe2, a given gradient is not a partial gradient to sum (unless
                # named in partial): when ops of the net also read y, their gradient of y
                # replaces it (RecurrentNetwork's backward step adds its linked gradients
                # itself when an op writes them under their own name)
                grads[y] = g
        return grads, ops

    def _step(self, position, grads):
        op, _ins, _outs = self.ssa[position]
        g_output = [grads.get(name) for name in op.output]
        # ZeroGradient has no outputs: as in Caffe2 its maker runs anyway (zeros for its input)
        if all(g is None for g in g_output) and op.type != "ZeroGradient":
            return {}, []
        try:
            grad_ops, g_input = get_gradient_for_op(op, g_output)
        except Caffe2Error as exc:
            text = str(exc)
            label = describe_op(None, op)
            if text.startswith(label):          # name the op's position in the forward ops
                text = describe_op(position, op) + text[len(label):]
            raise Caffe2Error(text) from None
        self._record(position, grad_ops, g_output, g_input)
        new = {}
        for name, g in zip(op.input, g_input):
            # keep an existing gradient unless this op writes the blob (then the
            # older version's gradient replaces it, possibly with None)
            if g is not None or name not in grads or name in op.output:
                new[name] = g
        return new, grad_ops

    def build(self, ys, scalar_losses=False, partial=()):
        """partial: the ys whose given gradient is one part of their gradient, summed
        with the gradients the net's ops reading them produce (Caffe2 replaces it)."""
        if isinstance(ys, (list, tuple)):
            ys = {y: None for y in ys}
        elif not isinstance(ys, dict):
            raise Caffe2Error("ys must be a list of blobs or a dict blob -> gradient blob, got %s"
                              % type(ys).__name__)
        ys = {_name(y): _as_gradient(g) for y, g in ys.items()}
        for y in ys:
            if y not in self.frontier:
                raise Caffe2Error("cannot differentiate '%s': no op of the net reads or writes it" % y)
            self.gradient_frontier[y] = self.frontier[y]
            self.readers[y][self.frontier[y]].append(len(self.ssa))
        partial = {_name(y) for y in partial}
        unknown = partial - set(ys)
        if unknown:
            raise Caffe2Error("partial gradients named for blobs that are not ys: %s" % sorted(unknown))
        grads, all_ops = self._seed(ys, scalar_losses, partial)
        for position in reversed(range(len(self.ssa))):
            new, grad_ops = self._step(position, grads)
            grads.update(new)
            all_ops += grad_ops
            sum_ops, summed = self._accumulate(position)
            grads.update(summed)
            all_ops += sum_ops
        return all_ops, {name: g for name, g in grads.items() if g is not None}


def backward_pass(operators, ys, scalar_losses=False, partial=()):
    """(gradient ops, {blob name: gradient name or GradientSlice}) for the forward ops."""
    return BackwardPass(list(operators)).build(ys, scalar_losses, partial)


def add_gradient_operators(net, ys, skip=0, scalar_losses=False):
    """Append the backward pass of net's ops (from `skip` on) to the core.Net and return
    Caffe2's map {BlobReference: BlobReference or GradientSlice of BlobReferences}.
    scalar_losses: the ys whose gradient is seeded with 1.0 must hold one value (checked
    when the net runs; ModelHelper asks for it)."""
    ops, grads = backward_pass(net.Proto().op[skip:], ys, scalar_losses)
    if isinstance(ys, dict):
        # explicit gradient blobs come from outside the net: declare them
        given = [b for g in ys.values() if g is not None
                 for b in ((g[0], g[1]) if isinstance(g, tuple) else (g,))]
        for blob in dict.fromkeys(_name(b) for b in given):
            if not net.BlobIsDefined(blob):
                net.AddExternalInput(blob)
    net._ExtendOps(ops)
    result = {}
    for name, g in grads.items():
        if isinstance(g, GradientSlice):
            result[BlobReference(name)] = GradientSlice(BlobReference(g.indices), BlobReference(g.values))
        else:
            result[BlobReference(name)] = BlobReference(g)
    return result


class GradientRegistry:
    """caffe2.python.core.GradientRegistry: Python registration of gradients
    (`@GradientRegistry.RegisterGradient('Op') def f(op, g_output): return ops, g_input`)
    and the lookups."""

    @classmethod
    def RegisterGradient(cls, op_type):
        def wrapper(func):
            def make(op_def, g_output):
                ops, g_input = func(op_def, g_output)
                return ([] if ops is None else ops), g_input
            _REGISTRY[op_type] = make
            return func
        return wrapper

    @classmethod
    def GetGradientForOp(cls, op, g_output):
        return get_gradient_for_op(op, g_output)

    @classmethod
    def GetBackwardPass(cls, operators, ys, ys_generate_gradient=False):  # noqa: ARG003
        ops, grads = backward_pass(operators, ys)
        return ops, {BlobReference(k): (GradientSlice(BlobReference(v.indices), BlobReference(v.values))
                                        if isinstance(v, GradientSlice) else BlobReference(v))
                     for k, v in grads.items()}


IR = BackwardPass
