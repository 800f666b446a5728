"""caffe2.python.memonger: fewer distinct blobs for the same computation.

A net keeps every blob it writes alive in the workspace. Memonger renames blobs
whose lifetimes do not overlap to one shared name, so that the later blob takes
over the earlier one's storage:

    share_grad_blobs(net, losses, param_grads, namescope)   activation gradients of a
                                                            training net (and, with
                                                            share_activations, the
                                                            activations)
    optimize_inference_for_dag(net, input_blobs)            the activations of a predict net
    optimize_interference(net, static_blobs)                every blob but the static ones,
                                                            on a linear live-range basis
    release_blobs_when_used(netproto, dont_free)            Free ops after last uses

Sharing rule (share_grad_blobs, optimize_inference_for_dag): blob B may take blob
A's name only when every op that reads or writes A happens before B's first
writer in the net's dependency graph (read-after-write, write-after-read and
write-after-write edges). Then no execution order the graph allows can see the
two values at once, and the renaming adds no in-place use: verify_graph_equality
and verify_inplace_blobs hold for the result (checked before it is returned).

Never shared: external inputs and outputs, blobs read before the net writes them
(their value comes from outside or from an earlier run), blobs written by an op
that reads its outputs' previous values (schema reads_outputs), blobs named inside
nested nets (RecurrentNetwork step nets, If/While bodies), losses and
dont_share_blobs, and names that ops carry as string arguments. Blobs that another
net reads are the caller's business: list them in dont_share_blobs / static_blobs.
"""
import collections
import copy
import enum
import logging

import numpy as np

from .errors import Caffe2Error
from .proto import caffe2_pb2

log = logging.getLogger("caffe2py.memonger")

LiveRange = collections.namedtuple("LiveRange", ["defined", "used", "size"])
Optimization = collections.namedtuple("Optimization", ["net", "assignments", "blob_assignments"])
Statistics = collections.namedtuple("Statistics", ["baseline_nbytes", "optimized_nbytes"])


class AssignmentAlgorithm(enum.Enum):
    GREEDY = 0
    DYNAMIC_PROGRAMMING = 1


def _proto(net):
    proto = net.Proto() if hasattr(net, "Proto") else net
    if not isinstance(proto, caffe2_pb2.NetDef):
        raise Caffe2Error("memonger expects a Net or NetDef, got %s" % type(net).__name__)
    return proto


# --------------------------------------------------------------------------- dependency graph

class InterferenceGraph:
    """The ops of a net (nodes 0..n-1) and the hazards between them: an edge i -> j
    (i < j) when j reads what i wrote (from every earlier writer, as Caffe2's graph
    has it), writes what i read since its last write, or writes what i wrote last.
    Caffe2's graph has only the first kind; the other two keep in-place chains in
    order when ops are reordered. `deps[(i, j)]` names the blobs behind each edge."""

    def __init__(self, ops):
        self.ops = list(ops)
        self._succ = [set() for _ in self.ops]
        self._pred = [set() for _ in self.ops]
        self.deps = {}
        last_writer, writers, readers = {}, collections.defaultdict(list), collections.defaultdict(list)

        def edge(i, j, blob):
            if i != j:
                self._succ[i].add(j)
                self._pred[j].add(i)
                self.deps.setdefault((i, j), set()).add(blob)
        for j, op in enumerate(self.ops):
            for blob in op.input:
                for writer in writers[blob]:
                    edge(writer, j, blob)
            for blob in op.output:
                if blob in last_writer:
                    edge(last_writer[blob], j, blob)
                for reader in readers.pop(blob, ()):
                    edge(reader, j, blob)
            for blob in op.input:
                readers[blob].append(j)
            for blob in op.output:
                last_writer[blob] = j
                writers[blob].append(j)

    def nodes(self):
        return list(range(len(self.ops)))

    def edges(self):
        return sorted(self.deps)

    def successors(self, i):
        return sorted(self._succ[i])

    def predecessors(self, i):
        return sorted(self._pred[i])

    def number_of_nodes(self):
        return len(self.ops)

    def has_edge(self, i, j):
        return (i, j) in self.deps

    def ancestors(self):
        """Per op, a bit mask (Python int) of every op that must run before it."""
        masks = []
        for j in range(len(self.ops)):
            mask = 0
            for i in self._pred[j]:
                mask |= masks[i] | (1 << i)
            masks.append(mask)
        return masks

    def to_networkx(self):
        import networkx as nx
        g = nx.DiGraph()
        for i, op in enumerate(self.ops):
            g.add_node(i, op=op)
        for (i, j), deps in self.deps.items():
            g.add_edge(i, j, deps=deps)
        return g


def compute_interference_graph(ops):
    return InterferenceGraph(ops)


def topological_sort_traversal(g):
    """Caffe2's order (networkx's topological_sort of its day): Kahn's algorithm with
    the ready ops on a stack, the last made ready first; ops ready at the start are
    stacked in net order, so the last of them runs first."""
    indegree = [len(g.predecessors(i)) for i in g.nodes()]
    ready = [i for i in g.nodes() if indegree[i] == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for j in g.successors(i):
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    return order


def _reverse_postorder(g, starts):
    """A topological order: depth-first from each of `starts` in turn (all unexplored
    successors stacked at once, the last one explored first), post-order reversed, as
    networkx's topological_sort(g, nbunch) of Caffe2's day did."""
    explored, order = set(), []
    for start in starts:
        fringe = [start]
        while fringe:
            node = fringe[-1]
            if node in explored:
                fringe.pop()
                continue
            new = [j for j in g.successors(node) if j not in explored]
            if new:
                fringe.extend(new)
            else:
                explored.add(node)
                order.append(node)
                fringe.pop()
    return order[::-1]


def topological_sort_traversal_longest_path(g):
    """Caffe2's order that starts the source op with the longest path to the end first,
    so long chains start early and short-lived blobs are consumed soon after they are
    made: each op's longest path to a sink (a virtual common sink when there are
    several) forms a tree rooted there; sorting every node's children by subtree
    height, lowest first, gives the sources in order; a depth-first order from them,
    reversed, puts the deepest first."""
    nodes = g.nodes()
    if not nodes:
        return []
    sink = len(nodes)                         # virtual, joins every op without successors
    height = {sink: 0}
    next_on_path = {}
    for i in reversed(nodes):                 # ops are in a topological order by index
        succ = g.successors(i) or [sink]
        best = max(succ, key=lambda j: (height[j], -j))
        height[i], next_on_path[i] = height[best] + 1, best
    sources = [i for i in nodes if not g.predecessors(i)]
    children = collections.defaultdict(list)
    for source in sources:                    # tree edges in the order the paths add them
        node = source
        while node != sink:
            parent = next_on_path[node]
            if node not in children[parent]:
                children[parent].append(node)
            node = parent
    subtree = collections.defaultdict(int)    # height of each node's subtree (leaves 0)
    for node in sorted(n for kids in children.values() for n in kids):   # children before parents
        parent = next_on_path[node]
        subtree[parent] = max(subtree[parent], subtree[node] + 1)
    ordered_sources, stack = [], [sink]
    while stack:                              # leaves left to right, lowest subtrees first
        node = stack.pop()
        if not children[node]:
            ordered_sources.append(node)
        stack.extend(reversed(sorted(children[node], key=lambda c: subtree[c])))
    return _reverse_postorder(g, ordered_sources)


# --------------------------------------------------------------------------- DAG-safe recycling

def _nested_blobs(proto):
    """Blob names that appear in nets nested in op arguments (step nets, If/While
    bodies) or as string arguments (RecurrentNetwork's links and aliases name outer
    blobs that way): renaming them would leave those references stale."""
    names = set()

    def decode(value):
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def walk_args(op):
        for arg in op.arg:
            if arg.HasField("s"):
                names.add(decode(arg.s))
            names.update(decode(v) for v in arg.strings)
            if arg.HasField("n"):
                walk(arg.n)
            for sub in arg.nets:
                walk(sub)

    def walk(net):
        names.update(net.external_input)
        names.update(net.external_output)
        for op in net.op:
            names.update(op.input)
            names.update(op.output)
            walk_args(op)
    for op in proto.op:
        walk_args(op)
    return names


def _reads_outputs(op):
    from .registry import schema_for
    schema = schema_for(op.type, op.domain or "")
    return schema is not None and bool(getattr(schema, "reads_outputs", False))


def _valued_from_outside(proto):
    """Blobs whose first value in a run does not come from this run: read (or, for
    reads_outputs ops, read-modify-written) by the first op that touches them."""
    seen, out = set(), set()
    for op in proto.op:
        for blob in op.input:
            if blob not in seen:
                out.add(blob)
        if _reads_outputs(op):
            out.update(b for b in op.output if b not in seen)
        seen.update(op.input)
        seen.update(op.output)
    return out


def _blob_size(blob_shapes, blob):
    shape = (blob_shapes or {}).get(blob)
    return None if shape is None else int(np.prod(shape))


def _recycle(proto, shareable, namescope, blob_shapes=None):
    """(new NetDef, {old name: shared name}) with the blobs of `shareable` renamed
    by the sharing rule of this module's docstring."""
    ops = list(proto.op)
    graph = InterferenceGraph(ops)
    ancestors = graph.ancestors()
    touchers = collections.defaultdict(list)
    for i, op in enumerate(ops):
        for blob in set(op.input) | set(op.output):
            touchers[blob].append(i)
    excluded = set(proto.external_input) | set(proto.external_output) | _nested_blobs(proto) \
        | _valued_from_outside(proto)
    candidates = [blob for blob in shareable if blob not in excluded and blob in touchers]
    candidates.sort(key=lambda b: (touchers[b][0], b))

    slots = []                # [members], each member's touchers before the next one's definition
    for blob in candidates:
        definition = touchers[blob][0]
        size = _blob_size(blob_shapes, blob)
        best, best_gap = None, None
        for slot in slots:
            last = slot[-1]
            if any(not (ancestors[definition] >> t) & 1 for t in touchers[last]):
                continue
            if size is None:
                best = slot
                break
            sizes = [_blob_size(blob_shapes, m) or 0 for m in slot]
            gap = abs(max(sizes) - size)
            if best is None or gap < best_gap:
                best, best_gap = slot, gap
        if best is None:
            slots.append([blob])
        else:
            best.append(blob)

    mapping = {}
    shared = [slot for slot in slots if len(slot) > 1]
    taken = set(touchers) | excluded
    counter = 0
    for slot in shared:
        name = "%s__m%d_shared" % (namescope, counter)
        while name in taken:
            counter += 1
            name = "%s__m%d_shared" % (namescope, counter)
        counter += 1
        taken.add(name)
        for blob in slot:
            mapping[blob] = name
    optim = copy.deepcopy(proto)
    apply_assignments(optim, mapping)
    log.info("memonger: %d blobs share %d names", len(mapping), len(shared))
    return optim, mapping


def _check_result(original, optim):
    if not verify_graph_equality(original, optim):
        raise Caffe2Error("memonger: the optimized net's dependency graph differs from the original "
                          "(an internal error: please report it with the net)")
    if not verify_inplace_blobs(original, optim):
        raise Caffe2Error("memonger: the optimized net has in-place blobs the original does not have")


def share_grad_blobs(net, losses, param_grads, namescope, dont_share_blobs=None, share_activations=False,
                     blob_shapes=None):
    """A NetDef in which the activation gradients (blobs named `<namescope>..._grad`,
    not in param_grads) whose lifetimes do not overlap share names; with
    share_activations the forward activations (outputs of ops that take
    `<output>_w`) except the last two share too. blob_shapes ({blob: shape})
    pairs blobs of similar size. Assign the result to `model.net._net`, or run it
    with workspace.RunNetOnce."""
    proto = _proto(net)
    if namescope and not namescope.endswith("/"):
        namescope += "/"
    param_grads = {str(g) for g in param_grads or ()}
    losses = {str(b) for b in losses or ()}
    used = {b for op in proto.op for b in list(op.input) + list(op.output)}
    missing = sorted(losses - used)
    if missing:
        raise Caffe2Error("share_grad_blobs: loss blob '%s' is not used by net '%s'" % (missing[0], proto.name))
    dont_share = {str(b) for b in dont_share_blobs or ()} | losses

    def is_grad_blob(name):
        return (name.endswith("_grad") and (name.startswith(namescope) or name.startswith("_" + namescope))
                and name not in param_grads)

    external_output = set(proto.external_output)
    activations = []
    for op in proto.op:
        for b in op.output:
            if b + "_w" in op.input and b not in external_output:
                activations.append(b)
    activations = set(activations[:-2])      # the last ones are usually read from outside
    shareable = set()
    for op in proto.op:
        for b in list(op.input) + list(op.output):
            if is_grad_blob(b) or (share_activations and b in activations):
                shareable.add(b)
    optim, _ = _recycle(proto, shareable - dont_share, namescope, blob_shapes)
    _check_result(proto, optim)
    return optim


def optimize_inference_for_dag(net, input_blobs, namescope=""):
    """A NetDef in which the activations of an inference net (blobs neither external
    inputs nor external outputs, under `namescope`) whose lifetimes do not
    overlap share names. input_blobs are the net's data inputs (never shared)."""
    proto = _proto(net)
    external = set(proto.external_input) | set(proto.external_output) | {str(b) for b in input_blobs}
    seen, activations = set(), set()
    for op in proto.op:
        if op.is_gradient_op:
            raise Caffe2Error("optimize_inference_for_dag: op %s (%s) is a gradient op; only inference "
                              "nets can be passed" % (op.type, ", ".join(op.output)))
        for b in op.input:
            if b not in external:
                if b not in seen:
                    raise Caffe2Error("optimize_inference_for_dag: op %s reads '%s', which is neither an "
                                      "external input nor written by an earlier op" % (op.type, b))
                activations.add(b)
        for b in op.output:
            if b not in external:
                activations.add(b)
        seen.update(op.output)
    shareable = {b for b in activations if b.startswith(namescope)}
    optim, _ = _recycle(proto, shareable, namescope, None)
    _check_result(proto, optim)
    return optim


def optimize_inference_fast(net, static_blobs):
    """optimize_inference_for_dag for a NetDef, every blob in static_blobs kept."""
    proto = _proto(net)
    static = {str(b) for b in static_blobs}
    keep = set(proto.external_input) | set(proto.external_output) | static
    shareable = {b for op in proto.op for b in list(op.output) if b not in keep}
    optim, _ = _recycle(proto, shareable, "", None)
    _check_result(proto, optim)
    return optim


# --------------------------------------------------------------------------- live ranges (linear)

def compute_ranges(linearized_ops, blob_sizes=None):
    """{blob: LiveRange(first op writing it, last op reading it, size)} over ops in order."""
    blobs = collections.defaultdict(lambda: LiveRange(defined=None, used=None, size=None))
    for i, op in enumerate(linearized_ops):
        for blob in list(op.input) + list(op.output):
            r = blobs[blob]
            if blob in op.input:
                r = r._replace(used=i if r.used is None else max(r.used, i))
            if blob in op.output:
                r = r._replace(defined=i if r.defined is None else min(r.defined, i))
            if blob_sizes:
                if blob not in blob_sizes:
                    raise Caffe2Error("compute_ranges: blob_sizes has no size for '%s'" % blob)
                r = r._replace(size=blob_sizes[blob])
            blobs[blob] = r
    return blobs


def is_compatible(candidate_range, assignment, static_blobs):
    """Whether a blob with candidate_range can follow the last blob of assignment."""
    name, range_ = assignment[-1]
    if name in static_blobs:
        return False
    if candidate_range.defined is None or range_.defined is None or range_.used is None:
        return False
    return candidate_range.defined > range_.used


def _max_size(assignment):
    sizes = [r.size for _, r in assignment if r.size is not None]
    return max(sizes) if sizes else 0


def get_memory_usage(assignments):
    return sum(_max_size(a) for a in assignments)


def compute_assignments_greedy(ranges_sorted, init_assignments=None):
    """Chains [(name, LiveRange), ...] of blobs that can share one name. ranges_sorted:
    (name, LiveRange) by last use; init_assignments: chains to extend (their blobs are
    skipped in ranges_sorted). Each blob joins the compatible chain whose largest blob
    is closest in size (the first of equals), else starts a chain."""
    assignments = list(init_assignments or [])
    placed = {name for chain in assignments for name, _ in chain}
    for name, range_ in ranges_sorted:
        if name in placed:
            continue
        size = range_.size or 0
        best, best_gap = None, None
        for chain in assignments:
            if is_compatible(range_, chain, ()):
                gap = abs(_max_size(chain) - size)
                if best is None or gap < best_gap:
                    best, best_gap = chain, gap
        if best is None:
            assignments.append([(name, range_)])
        else:
            best.append((name, range_))
    return assignments


# Exact search stays cheap up to about this many blobs; past it the search space grows
# exponentially and the greedy chains are returned instead.
DP_MAX_BLOBS = 18


def compute_assignments_dp(ranges_sorted, init_assignment, counter=None):
    """Chains as compute_assignments_greedy's, with the smallest total memory
    (get_memory_usage): an exact search over which chain each blob joins, memoised on
    the multiset of chain states (last use, largest size). For more than DP_MAX_BLOBS
    blobs the greedy chains are returned (logged). counter: Caffe2's recursion
    counter, accepted and unused."""
    assignments = [list(chain) for chain in (init_assignment or [])]
    placed = {name for chain in assignments for name, _ in chain}
    blobs = [(name, r) for name, r in ranges_sorted if name not in placed]
    if len(blobs) > DP_MAX_BLOBS:
        log.info("compute_assignments_dp: %d blobs, over %d: greedy assignment", len(blobs), DP_MAX_BLOBS)
        return compute_assignments_greedy(blobs, assignments)
    sizes = [r.size or 0 for _, r in blobs]

    def choices(k, states):
        """(chain index or None for a new chain, the states after, the memory it adds)."""
        r = blobs[k][1]
        for index, (used, largest) in enumerate(states):
            if used is not None and r.defined is not None and r.defined > used:
                grown = states[:index] + ((r.used, max(largest, sizes[k])),) + states[index + 1:]
                yield index, grown, max(0, sizes[k] - largest)
        yield None, states + ((r.used, sizes[k]),), sizes[k]

    memo = {}

    def cost(k, states):
        """The least memory blobs[k:] add to chains in `states`."""
        if k == len(blobs):
            return 0
        key = (k, tuple(sorted(states, key=repr)))
        if key not in memo:
            memo[key] = min(added + cost(k + 1, after) for _, after, added in choices(k, states))
        return memo[key]

    states = tuple((chain[-1][1].used, _max_size(chain)) for chain in assignments)
    for k, (name, r) in enumerate(blobs):
        index, states, _ = min(choices(k, states), key=lambda c: c[2] + cost(k + 1, c[1]))
        if index is None:
            assignments.append([(name, r)])
        else:
            assignments[index].append((name, r))
    return assignments


def compute_assignments(ranges, static_blobs, algo=AssignmentAlgorithm.GREEDY):
    """Chains of blobs [(name, LiveRange), ...] that can share one name, by last use;
    static blobs stay alone. GREEDY: compute_assignments_greedy; DYNAMIC_PROGRAMMING:
    compute_assignments_dp (smallest total size)."""
    if algo not in (AssignmentAlgorithm.GREEDY, AssignmentAlgorithm.DYNAMIC_PROGRAMMING):
        raise Caffe2Error("compute_assignments: algo must be an AssignmentAlgorithm, got %r" % (algo,))
    ordered = sorted(ranges.items(), key=lambda p: (p[1].used is None, p[1].used if p[1].used is not None else 0))
    last_use = max((r.used for _, r in ordered if r.used is not None), default=-1) + 1
    ordered = [(name, r._replace(defined=-1 if r.defined is None else r.defined,
                                 used=last_use if r.used is None else r.used,
                                 size=1 if r.size is None else r.size)) for name, r in ordered]
    static = set(static_blobs)
    shareable = [(name, r) for name, r in ordered if name not in static]
    if algo == AssignmentAlgorithm.GREEDY:
        assignments = compute_assignments_greedy(shareable)
    else:
        assignments = compute_assignments_dp(shareable, [])
    return assignments + [[(name, r)] for name, r in ordered if name in static]


def compute_blob_assignments(assignments):
    """{blob: the last blob of its chain} for chains of two or more blobs."""
    out = {}
    for assignment in assignments:
        if len(assignment) > 1:
            last = assignment[-1][0]
            for blob, _ in assignment:
                out[blob] = last
    return out


def apply_assignments(net, blob_assignments):
    """Rename blobs of a NetDef in place (inputs, outputs, and RecurrentNetwork step nets)."""
    def canonical(blob):
        return blob_assignments.get(blob, blob)
    for op in net.op:
        if op.type.startswith("RecurrentNetwork"):
            _apply_recurrent_assignments(op, blob_assignments, canonical)
        op.input[:] = [canonical(b) for b in op.input]
        op.output[:] = [canonical(b) for b in op.output]


def _apply_recurrent_assignments(op, blob_assignments, canonical):
    for arg in op.arg:
        if arg.name.endswith("step_net") and arg.HasField("n"):
            apply_assignments(arg.n, blob_assignments)
            arg.n.external_input[:] = [canonical(b) for b in arg.n.external_input]
    for blob, renamed in blob_assignments.items():
        if blob in list(op.input) + list(op.output):
            op.arg.add(name=blob + ".rename", s=str(renamed).encode())


def optimize_interference(net, static_blobs, ordering_function=topological_sort_traversal, blob_sizes=None,
                          algo=AssignmentAlgorithm.GREEDY):
    """Optimization(net, assignments, blob_assignments): the ops put in the order
    ordering_function gives, then blobs whose live ranges in that order do not
    overlap renamed to one name. The net's external inputs and outputs are kept
    as static blobs along with static_blobs."""
    proto = copy.deepcopy(_proto(net))
    graph = compute_interference_graph(proto.op)
    order = list(ordering_function(graph))
    if sorted(order) != graph.nodes():
        raise Caffe2Error("optimize_interference: ordering_function must return every op index once")
    linearized = [proto.op[i] for i in order]
    del proto.op[:]
    proto.op.extend(linearized)
    static = set(map(str, static_blobs)) | set(proto.external_input) | set(proto.external_output) \
        | _nested_blobs(proto) | _valued_from_outside(proto)
    ranges = compute_ranges(proto.op, blob_sizes)
    assignments = compute_assignments(ranges, static, algo)
    blob_assignments = compute_blob_assignments(assignments)
    apply_assignments(proto, blob_assignments)
    return Optimization(net=proto, assignments=assignments, blob_assignments=blob_assignments)


# --------------------------------------------------------------------------- checks

def verify_inplace_blobs(net_a, net_b):
    """Whether the two nets' ops (pairwise) have the same input/output position pairs
    naming one blob: memonger must not add an in-place use."""
    def inplaces(op):
        outputs = list(op.output)
        return [(j, outputs.index(b)) for j, b in enumerate(op.input) if b in outputs]
    a, b = _proto(net_a), _proto(net_b)
    if len(a.op) != len(b.op):
        return False
    return all(x.type == y.type and inplaces(x) == inplaces(y) for x, y in zip(a.op, b.op))


def verify_graph_equality(net_a, net_b):
    """Whether the two nets compute the same thing: the same op types, devices and
    engines in the same order, and every input read from the same producing op."""
    def parents(ops):
        owner, out = {}, []
        for i, op in enumerate(ops):
            out.append([owner[b] for b in op.input if b in owner])
            for b in op.output:
                owner[b] = i
        return out
    a, b = _proto(net_a), _proto(net_b)
    if len(a.op) != len(b.op):
        return False
    for x, y in zip(a.op, b.op):
        if x.type != y.type or x.device_option != y.device_option or x.engine != y.engine:
            return False
    same = parents(a.op) == parents(b.op)
    if not same:
        for j, (pa, pb) in enumerate(zip(parents(a.op), parents(b.op))):
            if pa != pb:
                log.debug("op %d (%s): parents %s vs %s", j, a.op[j].type, pa, pb)
    return same


# --------------------------------------------------------------------------- memory accounting

_SIZEOF = {caffe2_pb2.TensorProto.DOUBLE: 8, caffe2_pb2.TensorProto.FLOAT: 4, caffe2_pb2.TensorProto.FLOAT16: 2,
           caffe2_pb2.TensorProto.INT32: 4, caffe2_pb2.TensorProto.INT8: 1, caffe2_pb2.TensorProto.UINT8: 1,
           caffe2_pb2.TensorProto.UINT16: 2, caffe2_pb2.TensorProto.INT16: 2, caffe2_pb2.TensorProto.BOOL: 1,
           caffe2_pb2.TensorProto.INT64: 8}


def estimate_memory_usage(protos, shapes, types, devicescope):
    """(total bytes allocated, high-water mark, {op type: bytes}) of running the nets
    one op at a time on `devicescope`, from final blob shapes and types ({blob:
    TensorProto data type}); Free and Alias ops release their outputs."""
    current = highest = total = 0
    allocated = set()
    by_op = collections.defaultdict(int)

    def nbytes(blob):
        if blob not in shapes or blob not in types:
            log.warning("estimate_memory_usage: unknown blob %s", blob)
            return 0
        if types[blob] not in _SIZEOF:
            raise Caffe2Error("estimate_memory_usage: blob '%s' has a data type (%s) of unknown size"
                              % (blob, types[blob]))
        return _SIZEOF[types[blob]] * int(np.prod(shapes[blob]))
    for proto in protos:
        for op in _proto(proto).op:
            if op.type in ("Free", "Alias"):
                for o in op.output:
                    if o in allocated:
                        current -= nbytes(o)
                        allocated.remove(o)
            elif op.device_option == devicescope:
                for o in op.output:
                    if o not in allocated:
                        n = nbytes(o)
                        total += n
                        current += n
                        highest = max(highest, current)
                        allocated.add(o)
                        by_op[op.type] += n
    return total, highest, by_op


def release_blobs_when_used(netproto, dont_free_blobs, selector_fun=None):
    """A copy of netproto with a Free op after the last use of each blob the net
    writes and reads again (not external outputs, not dont_free_blobs, not Alias
    sources; selector_fun(name) may exclude more)."""
    from .core import CreateOperator
    proto = copy.deepcopy(_proto(netproto))
    inputs, can_release, alias_sources = set(), set(), set()
    for op in proto.op:
        if op.type == "Alias":
            alias_sources.add(op.input[0])
            continue
        inputs.update(op.input)
        for o in op.output:
            if o not in inputs and (selector_fun is None or selector_fun(o)):
                can_release.add(o)
    can_release = (can_release & inputs) - set(proto.external_output) - set(dont_free_blobs or ()) - alias_sources
    ops = list(proto.op)
    for j in reversed(range(len(proto.op))):
        for b in proto.op[j].input:
            if b in can_release:
                can_release.remove(b)
                ops.insert(j + 1, CreateOperator("Free", [b], [b]))
    del proto.op[:]
    proto.op.extend(ops)
    return proto


def blob_nbytes(blob):
    from . import workspace
    try:
        return workspace.FetchBlob(blob).nbytes
    except Exception:      # noqa: BLE001 - Caffe2's helper counts what it cannot fetch as 0
        log.warning("blob_nbytes: cannot fetch %s", blob)
        return 0


def compute_statistics(assignments):
    """Statistics(bytes of the blobs apart, bytes when each chain shares its largest)."""
    sizes = {blob: blob_nbytes(blob) for a in assignments for blob, _ in a}
    return Statistics(baseline_nbytes=sum(sizes.values()),
                      optimized_nbytes=sum(max(sizes[b] for b, _ in a) for a in assignments))


def collect_blob_sizes(net):
    return {b: blob_nbytes(b) for op in _proto(net).op for b in list(op.input) + list(op.output)}


def count_blobs(proto):
    """The number of distinct blob names the net's ops read or write."""
    return len({b for op in _proto(proto).op for b in list(op.input) + list(op.output)})
