"""Branch parallelism for the DAG net types: a plan's independent chains of ops
(caffe2py/net_dag.py) run on the run's own thread and a small persistent pool of
worker threads.

When: a plan of a DAG net type (net_dag.DAG_NET_TYPES) whose NetDef.num_workers asks
for at least two workers (unset: serial, see branch_schedule), capped by the thread budget (CAFFE2PY_NUM_THREADS, else min(4, CPUs)) so that
workers never outnumber the cores; every op on the CPU; two chains that can run at
once; enough work off the critical path (net_dag.MIN_OVERLAP_WORK); and a timed trial
that shows the parallel runs faster (below). Each op's
work is estimated from shapes: at compile time from the workspace's values of the
blobs the net reads, carried through shape inference; failing that (a blob not fed
yet, work that inference cannot see), from the blobs the first run, a serial one,
leaves. A run inside another parallel run (a control-flow subnet) runs serially.

How: each chain is compiled as its own plan (executor.Plan, the same generated
runner) that reads its inputs from, and writes its outputs to, one overlay of the
workspace shared by the run (blob_scopes.BlobOverlay). A chain starts when every
chain it depends on has finished, so its reads see their writes and no two chains
touch one blob in conflicting ways at once. The run's own thread is one of the
workers, with `num_workers - 1` pool threads beside it: the chains ready at once are
shared by estimated work, the heaviest to the run's thread (a pool thread starts
tens of microseconds late), the rest queued for the pool. Each worker runs its
chains with the kernels' team limited to budget // workers threads
(jit.team_limit): workers x team threads <= budget. So does a chain that never runs
beside another (every other chain runs before or after it: a stem, the Concat
joining the branches), on the run's own thread: with the whole team its kernels'
2-thread regions left libgomp's idle team thread spinning (~4 ms of CPU after each
region, measured) into the next branches, on the core the pool thread needs
(inception 3a on the loaded 2-CPU VM, 2 workers: 19-27 ms a run with the Concat on
the team of 2, 4-7 ms with it on 1 thread, `simple` on 1 thread 4-7 ms). A net whose
stem needs the whole team runs faster serially, and its trial says so. A chain holding a barrier op
(net_dag: control flow, I/O, shared state) runs on the run's own thread once
nothing else is running, as under `simple`.
Every op runs with the same inputs as under `simple` and each kernel is
deterministic, so results are bitwise those of `simple` on a team of budget //
workers threads (the GEMMs' column blocks follow the team size: they may round
differently from the same GEMMs on the whole team).

Measured, not guessed: the work estimate only says whether workers could pay. Once
it does, the next runs are a trial (TRIAL_RUNS timed runs each way, after one untimed
parallel warm-up run): pairs of serial and pairs of parallel runs alternate, each a
real run of the net, the second of each pair timed (so that every timed run follows
one of its own kind, see _trial_steps), and the workers stay only when the parallel
runs' median is at least TRIAL_MARGIN faster than the serial runs'
(`BranchSchedule.measured` keeps the two medians). A timed run during which a kernel
was still compiling in the background (running as its NumPy twin) does not count:
its pair runs again (for up to TRIAL_COMPILE_WAIT seconds); the workers' one-thread
kernel variants are first asked for by the trial's own parallel runs. Nor does one
started less than TRIAL_SETTLE after a run of the other kind (more untimed runs
first). A team of 2 threads splits each op; 2 workers run two ops side by side:
which wins depends on each op's size and the machine's load (with big convolutions
the team already keeps both cores busy and workers lose; with many small ops per
branch a team scales poorly and workers can win; benchmarks/parallel_branches.py),
so the net's own runs decide.

Failure: the first failing chain's error (naming its op, as the serial plan does)
is raised after the chains in flight have finished; no new chain starts. The
overlay is dropped and the in-place writes of every chain are undone (inplace.py:
workers collect their undo records, the run's thread adopts them), so the
workspace is left as it was. KeyboardInterrupt on the run's thread stops
scheduling the same way.
"""
import os
import queue
import statistics
import threading
import time

from .blob_scopes import BlobOverlay
from .devices import cpu_run_context
from .kernels.cpu.runtime.jit import kernels_waiting, team_limit
from .inplace import adopt, collect_undo, undo_on_failure
from . import fp_exceptions, model_trust
from .net_dag import (DAG_NET_TYPES, BranchGraph, step_work, types_after_run, types_before_run,
                      worker_count)
from . import net_dag

# Timed runs each way before a plan keeps or drops its workers (0: trust the work
# estimate alone), and how much faster the parallel median must be to keep them.
TRIAL_RUNS = int(os.environ.get("CAFFE2PY_DAG_TRIAL_RUNS", 3))
TRIAL_MARGIN = 0.05
# Seconds a trial keeps re-running pairs timed while kernels were still compiling in
# the background (a kernel left waiting longer compiles on its next call, jit.py).
TRIAL_COMPILE_WAIT = 60.0
# Seconds after a run of the other kind before a run is timed: a serial run's team
# threads spin on after its last parallel region (libgomp: ~4 ms of CPU measured on a
# Zen 3 VM), on the core a worker needs; on a 2-CPU Intel Xeon VM one untimed run was
# not enough (inception 3a's timed parallel runs took 3.4-3.6 ms against 2.2-2.4 once
# settled, so the trial dropped workers that were 5% faster).
TRIAL_SETTLE = 0.010
_OTHER_MODE = {"serial": "parallel", "parallel": "serial"}
_clock = time.perf_counter

_local = threading.local()           # .inside: this thread is running a parallel run or a chain of one
_pools = {}                          # worker count -> ThreadPoolExecutor, kept for the process
_pools_lock = threading.Lock()


def inside_parallel_run():
    return getattr(_local, "inside", False)


def thread_budget():
    """Threads caffe2py may keep busy: the kernels' team size (kernels/cpu/runtime/threads.py)."""
    from .kernels.cpu.runtime.threads import num_threads
    return num_threads()


def _pool(workers):
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor
            pool = _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="caffe2py-branch")
        return pool


def _on_cpu(step):
    from .registry import CPU
    op = step.op_def
    return not op.HasField("device_option") or op.device_option.device_type == CPU


class BranchSchedule:
    """A plan's chains and, once decided, their compiled sub-plans.

    `active`: None until the first run decides, then True (runs go parallel, or
    alternate while `trial` is measuring) or False.
    `stats`: parallel runs, and chains and ops run on worker threads.
    `measured`: after a trial, {"serial_ms", "parallel_ms"}: the medians it compared."""

    def __init__(self, plan, make_plan, workers):
        self.plan = plan
        self.make_plan = make_plan       # steps -> a Plan committing to the blobs it is run on
        self.workers = workers
        self.graph = BranchGraph(plan.steps)
        self.active = None
        self.chain_plans = None
        self.overlap_work = None
        self.trial = None           # {"serial": [s], "parallel": [s], "steps": [(mode, timed)]} while measuring
        self.measured = None
        self.chain_work = None      # estimated work per chain (net_dag.step_work), once estimated
        self.stats = {"parallel_runs": 0, "worker_chains": 0, "worker_ops": 0, "caller_chains": 0,
                      "caller_ops": 0}

    def decide_early(self, blob_values):
        """At compile time: go parallel now when the workspace's values of the blobs the
        net reads, carried through shape inference, already show enough work overlapping
        (a net run once, RunNetOnce, runs in parallel too). Otherwise the first run decides."""
        type_of = types_before_run(self.plan.net_def, blob_values, self.plan.reads)
        if type_of is not None and self._pays(type_of):
            self._activate()

    def decide(self, blobs):
        """After the plan's first successful run: go parallel when enough work overlaps."""
        if self._pays(types_after_run(blobs)):
            self._activate()
        else:
            self.active = False

    def _pays(self, type_of):
        work = [step_work(s, type_of) for s in self.plan.steps]
        self.chain_work = [sum(work[j] for j in chain) for chain in self.graph.chains]
        self.overlap_work = self.graph.overlap_work(work)
        return self.overlap_work >= net_dag.MIN_OVERLAP_WORK and self.overlap_work > 0

    def _activate(self):
        self.chain_plans = [self.make_plan([self.plan.steps[j] for j in chain]) for chain in self.graph.chains]
        self.active = True
        if TRIAL_RUNS > 0:
            self.trial = {"serial": [], "parallel": [], "steps": _trial_steps(TRIAL_RUNS), "began": _clock(),
                          "ended": {"serial": 0.0, "parallel": 0.0}}

    def run(self, blobs):
        """One run against blobs (parallel, or while measuring, either way); OperatorError
        (the first failing op) with blobs untouched on failure."""
        trial = self.trial
        if trial is None:
            self._run_parallel(blobs)
            return
        mode, timed = trial["steps"].pop(0)
        if timed and _clock() - trial["ended"][_OTHER_MODE[mode]] < TRIAL_SETTLE:
            # the other kind's threads may still be spinning on these cores: one more
            # untimed run of this kind first
            trial["steps"].insert(0, (mode, True))
            timed = False
        compiling = timed and kernels_waiting()
        start = _clock()
        if mode == "serial":
            self.plan.run_serial(blobs)
        else:
            self._run_parallel(blobs)
        if timed:
            elapsed = _clock() - start
            if (compiling or kernels_waiting()) and _clock() - trial["began"] < TRIAL_COMPILE_WAIT:
                # a kernel compiling in the background ran as its NumPy twin (the
                # workers' one-thread kernels are first asked for by the trial itself):
                # this pair is run again once machine code runs
                trial["steps"][0:0] = [(mode, False), (mode, True)]
            else:
                trial[mode].append(elapsed)
        trial["ended"][mode] = _clock()
        if not trial["steps"]:
            self._conclude()

    def _conclude(self):
        serial, parallel = (1e3 * statistics.median(self.trial[m]) for m in ("serial", "parallel"))
        self.measured = {"serial_ms": serial, "parallel_ms": parallel}
        self.trial = None
        self.active = parallel <= serial * (1.0 - TRIAL_MARGIN)

    def _run_parallel(self, blobs):
        plan = self.plan
        overlay = BlobOverlay(blobs)
        trust = model_trust.enter(plan.policy) if plan.policy is not None else None
        try:
            with cpu_run_context(), undo_on_failure(), fp_exceptions.run_context():
                self._execute(overlay)
        finally:
            if trust is not None:
                model_trust.leave(trust)
        overlay.commit(plan.keep)
        self.stats["parallel_runs"] += 1

    def _execute(self, overlay):
        """Run the chains in dependency order, each on a team of budget // workers. The
        ready chains that may run at once are shared between this thread and `workers - 1`
        pool threads by their estimated work (_share); this thread runs alone the
        chains that never run beside another (a stem, the Concat joining the branches:
        no OpenMP team on a pool thread) and the barrier chains."""
        graph = self.graph
        team = max(1, thread_budget() // self.workers)    # every chain: see the module docstring
        helpers = self.workers - 1
        pool = _pool(helpers)
        done = queue.SimpleQueue()
        waiting = [len(ps) for ps in graph.chain_parents]
        ready = [c for c, n in enumerate(waiting) if n == 0]
        in_flight = 0
        failure = None
        policy = self.plan.policy
        _local.inside = True
        # this thread's team is sized before any pool thread is woken (_run_here)
        limit = team_limit(team)
        limit.__enter__()
        try:
            while True:
                mine, helpers_for = [], []
                if failure is None and ready:
                    if graph.chain_ordered[ready[0]] or graph.chain_alone[ready[0]]:
                        if not in_flight:       # a barrier or a lone chain: never beside another
                            mine = [ready.pop(0)]
                    else:
                        mine, helpers_for = self._share(ready, helpers)
                        del ready[:]
                if mine:
                    failure, ran, handed = self._run_here(mine, overlay, pool,
                                                          [(c, overlay, team, policy, done) for c in helpers_for])
                    in_flight += handed
                    ready.extend(helpers_for[handed:])  # the pool is shut down (interpreter exit): here, later
                    ready.extend(mine[ran + (failure is not None):])
                    for chain in mine[:ran]:
                        self._finished(chain, ready, waiting)
                    ready.sort()
                if not in_flight:
                    if not mine and (failure is not None or not ready):
                        break
                    continue
                try:
                    # after a chain of its own, this thread only collects what has finished
                    chain, records, error = done.get() if not mine else done.get_nowait()
                except queue.Empty:
                    continue
                except BaseException as exc:    # KeyboardInterrupt: stop scheduling, let the chains in flight end
                    failure = failure or exc
                    continue
                in_flight -= 1
                adopt(records)
                if error is not None:
                    failure = failure or error
                    continue
                self.stats["worker_chains"] += 1
                self.stats["worker_ops"] += len(graph.chains[chain])
                self._finished(chain, ready, waiting)
        finally:
            limit.__exit__(None, None, None)
            _local.inside = False
        if failure is not None:
            raise failure

    def _share(self, ready, helpers):
        """Split the ready chains (none a barrier or lone chain) between this thread and
        the pool's `helpers` threads, heaviest first, each to the least loaded (by the
        work estimate): (this thread's chains, the pool's), each in program order. This
        thread gets the heaviest (a pool thread starts its chain tens of microseconds
        late); the pool's chains queue for its threads."""
        # at least 1 per chain: chains without an estimate are shared by count
        work = [max(1.0, w) for w in self.chain_work] if self.chain_work else [1.0] * len(self.graph.chains)
        loads = [0.0] * (1 + helpers)
        shares = [[] for _ in loads]
        for chain in sorted(ready, key=lambda c: (-work[c], c)):
            least = min(range(len(loads)), key=lambda i: (loads[i], i))
            loads[least] += work[chain]
            shares[least].append(chain)
        return sorted(shares[0]), sorted(c for share in shares[1:] for c in share)

    def _finished(self, chain, ready, waiting):
        for child in self.graph.chain_children[chain]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
        ready.sort()        # program order among the chains ready to start

    def _run_here(self, chains, overlay, pool, helper_calls):
        """Start helper_calls' chains on pool threads and run `chains` one after another
        on the run's own thread, inside the run's contexts (their in-place writes are
        undone with the run's): (the error or None, how many of `chains` ran, how many
        chains were handed to the pool). A KeyboardInterrupt is returned too, so that
        the chains in flight are waited for before it is raised. This thread's team
        size was set (_execute) before the pool threads are woken: numba.set_num_threads
        is a ctypes call, which releases the GIL, and a woken pool thread that takes
        the GIL then keeps it through its chain's Python parts while this thread waits
        (measured: the two branches ran one after the other)."""
        handed = ran = 0
        sub = None
        try:
            for call in helper_calls:
                if not _submitted(pool, self._run_chain, *call):
                    break
                handed += 1
            for chain in chains:
                sub = self.chain_plans[chain]
                sub._runner(overlay)
                ran += 1
                self.stats["caller_chains"] += 1
                self.stats["caller_ops"] += len(self.graph.chains[chain])
        except Exception as exc:  # noqa: BLE001 - raised by _execute once nothing is in flight
            return (sub._explain(exc) if sub is not None else exc), ran, handed
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt: likewise
            return exc, ran, handed
        return None, ran, handed

    def _run_chain(self, chain, overlay, team, policy, done):
        sub = self.chain_plans[chain]
        _local.inside = True
        trust = model_trust.enter(policy) if policy is not None else None
        undo = collect_undo()
        try:
            with team_limit(team), cpu_run_context(), undo, fp_exceptions.run_context():
                sub._runner(overlay)
            done.put((chain, undo.records, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the run's thread, which raises it
            done.put((chain, [], sub._explain(exc) if isinstance(exc, Exception) else exc))
        finally:
            if trust is not None:
                model_trust.leave(trust)
            _local.inside = False


def _trial_steps(runs):
    """The trial's runs, (mode, timed): an untimed parallel warm-up, then `runs` rounds
    of serial, serial, parallel, parallel where only the second of each pair is timed:
    every timed run follows a run of its own kind, as it does once the choice is made.
    A run after one of the other kind pays for it: a serial run's 2-thread regions leave
    libgomp's idle team thread spinning for ~4 ms of CPU (measured), on the core the
    next parallel run's pool thread needs; strict alternation timed every parallel run
    in that state."""
    steps = [("parallel", False)]
    for _ in range(runs):
        steps += [("serial", False), ("serial", True), ("parallel", False), ("parallel", True)]
    return steps


def _submitted(pool, *call):
    try:
        pool.submit(*call)
    except RuntimeError:        # "cannot schedule new futures after interpreter shutdown"
        return False
    return True


def branch_schedule(plan, make_plan, blob_values=None):
    """The BranchSchedule of a plan that may run its branches in parallel, else None
    (blob_values: the workspace's values at compile time, for an early decision)."""
    net_def = plan.net_def
    if net_def.type not in DAG_NET_TYPES:
        return None
    if not (net_def.HasField("num_workers") and net_def.num_workers > 1):
        # Only a net that asks for workers gets them. Caffe2 would use one per hardware
        # thread, but here every op already runs on the team: on a quiet 2-CPU machine
        # two Inception-style conv branches on 2 workers x 1 thread took 0.84-0.91x of
        # `simple`'s speed on a team of 2 (benchmarks/RESULTS.md), so the default stays serial.
        return None
    workers = min(worker_count(net_def), thread_budget())
    if workers < 2 or len(plan.steps) < 2:
        return None
    if not all(_on_cpu(m) for s in plan.steps for m in (getattr(s, "members", None) or (s,))):
        return None     # device contexts (CUDA) are per thread: GPU nets stay on the run's thread
    schedule = BranchSchedule(plan, make_plan, workers)
    if not schedule.graph.width_possible():
        return None
    schedule.decide_early(blob_values)
    return schedule
