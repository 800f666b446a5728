"""The dependency graph of a compiled net, for the DAG net types' branch parallelism.

Caffe2's DAG executors (dag, prof_dag, async_dag, async_polling, async_scheduling;
parallel) run an op as soon as the ops it depends on have run, on a pool of worker
threads. Here the graph is built once at plan time from the plan's steps (a fused
group of elementwise ops is one node, reading and writing what its member ops do):

  * read after write, write after read and write after write on a blob name order
    two ops (an in-place op reads and writes its blob: both rules apply);
  * ops with effects beyond their named outputs are ordered against every other op
    (a barrier): ops that see the whole workspace (control flow: Do, If, While,
    RecurrentNetwork, Python ops), ops writing the workspace themselves, ops of the
    io, control and distributed families (Save, Load, DBs, queues, readers), the
    runtime utilities (Print, counters, stats) and any op whose type names shared
    state (Atomic, Mutex, Iter, Counter, Queue, ...). Ops without a schema too.

Chains are maximal runs of ops each with one parent, whose parent has only that
child (Caffe2's computeChains): a chain runs on one worker, start to end, and is
the unit the executor schedules. Whether the parallel path pays is decided from
each node's work (flops from the schema's cost estimate, else the bytes it reads
and writes) measured on the blobs of the first run: the work off the critical path
(what can overlap) must reach MIN_OVERLAP_WORK, else the net stays serial; past it,
timed runs of both kinds decide (parallel_executor.py).
"""
import math
import os
import re

DAG_NET_TYPES = frozenset({"dag", "prof_dag", "async_dag", "async_polling", "async_scheduling", "parallel"})

# Work (flops, or bytes moved where an op has no cost estimate) that must be able to
# overlap before branches are tried on worker threads: handing a chain to a pool
# thread and back costs ~60 us of Python; 1M flops is ~0.25 ms of one core's
# convolution. Past it, timed runs decide (parallel_executor.TRIAL_RUNS).
MIN_OVERLAP_WORK = float(os.environ.get("CAFFE2PY_DAG_MIN_WORK", 1e6))

# Families whose ops touch files, queues, other nets or other processes.
_ORDERED_FAMILIES = ("io", "control", "distributed")
_ORDERED_MODULES = ("runtime_ops.py", "python_ops.py", "stats_put.py", "script_module_ops.py")
# Words of an op type (split at capitals) that name shared state or effects.
_SHARED_STATE_WORDS = frozenset((
    "Atomic", "Mutex", "Iter", "Counter", "Count", "Queue", "DB", "Reader", "Read", "Save", "Load",
    "Checkpoint", "Print", "Python", "Recurrent", "Store", "World", "Allreduce", "Allgather", "Broadcast",
    "Barrier", "Send", "Receive", "Stat", "Timer", "File", "Image", "Do", "If", "While", "Net"))
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z]|[0-9_]|$)|[A-Z]?[a-z]+|[0-9]+")


def worker_count(net_def):
    """The pool size Caffe2 gives a net: NetDef.num_workers when set above 0, else
    (its flag caffe2_net_async_thread_pool_size unset) the machine's hardware threads."""
    if net_def.HasField("num_workers") and net_def.num_workers > 0:
        return int(net_def.num_workers)
    return os.cpu_count() or 1


def members(step):
    return getattr(step, "members", None) or (step,)


def _is_ordered_op(step):
    from .registry import schema_site
    if step.takes_blobs or step.commits_outputs or (step.context is not None and step.context.wants_workspace):
        return True
    schema = step.context.schema if step.context is not None else None
    if schema is None:
        return True
    op_type = step.op_def.type
    if any(word in _SHARED_STATE_WORDS for word in _WORD.findall(op_type)):
        return True
    site = schema_site(schema)
    if site:
        path = site[0].replace(os.sep, "/")
        if any("/operators/%s/" % family in path for family in _ORDERED_FAMILIES):
            return True
        if path.endswith(_ORDERED_MODULES):
            return True
    return False


def is_ordered(step):
    """Whether `step` keeps its place against every other op (see the module docstring)."""
    return any(_is_ordered_op(m) for m in members(step))


def accesses(step):
    """(blobs read, blobs written) by a step, fused members included."""
    reads, writes = set(), set()
    for m in members(step):
        reads.update(m.inputs)
        writes.update(m.outputs)
    return reads, writes


def dependencies(steps):
    """parents[j]: the steps step j must wait for (indices into steps)."""
    parents = [set() for _ in steps]
    last_writer, readers = {}, {}
    barrier, since_barrier = None, []
    for j, step in enumerate(steps):
        reads, writes = accesses(step)
        if is_ordered(step):
            parents[j].update(since_barrier)
            if barrier is not None:
                parents[j].add(barrier)
            barrier, since_barrier = j, []
            last_writer, readers = {}, {}     # everything later waits for the barrier
            continue
        mine = parents[j]
        if barrier is not None:
            mine.add(barrier)
        for blob in reads:
            if blob in last_writer:
                mine.add(last_writer[blob])                 # read after write
        for blob in writes:
            if blob in last_writer:
                mine.add(last_writer[blob])                 # write after write
            mine.update(readers.get(blob, ()))              # write after read
        mine.discard(j)
        for blob in reads:
            readers.setdefault(blob, []).append(j)
        for blob in writes:
            last_writer[blob] = j
            readers[blob] = []
        since_barrier.append(j)
    return parents


class BranchGraph:
    """Chains of a plan's steps and the order between them."""

    def __init__(self, steps):
        self.steps = steps
        parents = dependencies(steps)
        children = [set() for _ in steps]
        for j, ps in enumerate(parents):
            for p in ps:
                children[p].add(j)
        chain_of = [None] * len(steps)
        self.chains = []
        for j, ps in enumerate(parents):
            if len(ps) == 1:
                (p,) = ps
                if len(children[p]) == 1 and self.chains[chain_of[p]][-1] == p:
                    chain_of[j] = chain_of[p]
                    self.chains[chain_of[j]].append(j)
                    continue
            chain_of[j] = len(self.chains)
            self.chains.append([j])
        # chains holding a barrier op run on the run's own thread (nothing else runs then)
        self.chain_ordered = [any(is_ordered(steps[j]) for j in chain) for chain in self.chains]
        self.chain_parents = [sorted({chain_of[p] for j in chain for p in parents[j]} - {c})
                              for c, chain in enumerate(self.chains)]
        self.chain_children = [[] for _ in self.chains]
        for c, ps in enumerate(self.chain_parents):
            for p in ps:
                self.chain_children[p].append(c)
        self.chain_alone = self._alone()

    def _alone(self):
        """Per chain: whether every other chain runs before or after it (a stem, a
        Concat joining the branches): such a chain never runs beside another one."""
        n = len(self.chains)
        before = [0] * n            # bitsets of the chains each chain waits for, directly or not
        for c, ps in enumerate(self.chain_parents):
            for p in ps:
                before[c] |= before[p] | (1 << p)
        after = [0] * n
        for c in range(n - 1, -1, -1):
            for child in self.chain_children[c]:
                after[c] |= after[child] | (1 << child)
        return [bin(before[c] | after[c]).count("1") == n - 1 for c in range(n)]

    def width_possible(self):
        """Whether two chains can run at once (some depth level holds two chains)."""
        depth = []
        for ps in self.chain_parents:
            depth.append(1 + max((depth[p] for p in ps), default=-1))
        return len(set(depth)) < len(depth)

    def overlap_work(self, work):
        """Work off the critical path: total minus the heaviest chain of dependent chains
        (work[i]: the work of step i)."""
        chain_work = [sum(work[j] for j in chain) for chain in self.chains]
        finish = []
        for c, ps in enumerate(self.chain_parents):
            finish.append(chain_work[c] + max((finish[p] for p in ps), default=0.0))
        return sum(chain_work) - max(finish, default=0.0)


def step_work(step, type_of):
    """Estimated work of one step, type_of(blob) giving each blob's TensorType (UNKNOWN
    where not known): the schema's flops where it has a cost estimate, else the bytes
    of its inputs and outputs."""
    from .registry import OpContext
    total = 0.0
    for m in members(step):
        ins = [type_of(b) for b in m.op_def.input]
        schema = m.context.schema if m.context is not None else None
        flops = 0.0
        if schema is not None and schema.cost is not None and all(t.known for t in ins):
            try:
                flops = float(schema.cost(OpContext(m.op_def, schema, m.index, ins), ins).flops or 0.0)
            except Exception:  # noqa: BLE001 - cost is advisory
                flops = 0.0
        total += flops or sum(_nbytes(type_of(b)) for b in tuple(m.op_def.input) + tuple(m.op_def.output))
    return total


def _nbytes(t):
    from .shape_inference import itemsize
    return float(math.prod(t.dims)) * itemsize(t.dtype) if t.known else 0.0


def types_after_run(blobs):
    """type_of for the values a run left in `blobs`."""
    from .registry import UNKNOWN
    from .schema_inference import type_of_value
    return lambda b: type_of_value(blobs[b]) if b in blobs else UNKNOWN


def types_before_run(net_def, blob_values, reads):
    """type_of from the workspace's values of the blobs the net reads, carried through
    the net by the schemas' shape inference; None when a read blob has no value."""
    from .registry import UNKNOWN
    from .schema_inference import infer_net, type_of_value
    if blob_values is None or any(b not in blob_values for b in reads):
        return None
    types = infer_net([net_def], {b: type_of_value(blob_values[b]) for b in reads})
    return lambda b: types.get(b, UNKNOWN)
