"""The RecurrentNetwork step loop: run the step net once per timestep in its step
workspace with the links applied (what links and step workspaces are: rnn_ops.py).

Each step costs the step plan's own ops plus, per link the step net replaces, one copy
of what it wrote into the link's window. Everything else is done once per op or once
per run:

- the step plans are compiled once per op (rnn_ops.py), and what each may write
  (`Plan.writes`) is known then: only the links a plan writes are looked at after it;
- per run, the external tensors and the blobs the plans read from the shared workspace
  are looked up once and the links' windows checked against the tensors' lengths (a
  window past the end still fails at the step that needs it, with the same message);
  a linked tensor the op did not create and a plan writes is copied then (never
  written into a caller's array), instead of at the first write, so that a write-back
  is one copy into the window's view;
- the run context of a plan run (executor.repeated_runs) is entered once per run,
  and the generated plan function is called directly, on the step workspace's own
  dict (`StepWorkspace`), whose missing names fall through at dict speed.

This direct path needs the linked blobs and the timestep to be names new to the shared
workspace, and plans that need no more than their function (no workspace ops, no
model-file policy, no op reading its own output's value); otherwise each step binds and
writes through the step workspace mapping and runs `Plan.run` (`_run_general`), as
before. A plan's output that the shared workspace has (recompute blobs) is handed to it
after each run of the plan, where SharedBlobs would have written it.
"""
import numpy as np

from caffe2py.blob_scopes import SharedBlobs
from caffe2py.errors import Caffe2Error
from caffe2py.executor import repeated_runs


class _LocalBlobs(dict):
    """A step workspace's own blobs; a name it lacks is read from the shared workspace."""
    __slots__ = ("parent",)

    def __missing__(self, name):
        return self.parent[name]


class StepWorkspace(SharedBlobs):
    """A step workspace (SharedBlobs: Caffe2's Workspace(shared)) whose own blobs a
    step plan can run on directly."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.local = _LocalBlobs()
        self.local.parent = parent

    def rebind(self, parent):
        self.parent = self.local.parent = parent


class _Piece:
    """One compiled piece of the step net (step_segments.py) and how the loop runs it."""
    __slots__ = ("plan", "runner", "writes", "reads")

    def __init__(self, plan):
        self.plan = plan
        runner = plan.repeatable_runner()
        # an op reading its output's current value reads it with B.get, which a dict's
        # fall-through does not serve
        if runner is not None and any(step.optional for step in plan.op_steps()):
            runner = None
        self.runner = runner
        self.writes = frozenset(plan.writes) if runner is not None else None
        self.reads = frozenset(plan.reads)


class StepLoop:
    """The step plans of one RecurrentNetwork(Gradient) op and its links, run over
    timesteps by `run` (state of a run lives in `run`'s locals: one op may run in
    several threads at once)."""

    def __init__(self, ctx, links, plans, label):
        self.ctx, self.links, self.label = ctx, links, label
        self.pieces = [_Piece(plan) for plan in plans]
        self.external_names = list(dict.fromkeys(link.external for link in links))
        position = {name: i for i, name in enumerate(self.external_names)}
        # (internal, external index, window start, window stop) per link
        self.specs = [(link.internal, position[link.external], link.offset, link.offset + link.window)
                      for link in links]
        self.direct = all(piece.runner is not None for piece in self.pieces)
        # per piece: the links bound before it runs and not looked at after (it does not
        # write them), and those checked after it; one ordered list when two links bind
        # one name (the last binding wins)
        unique = len({spec[0] for spec in self.specs}) == len(self.specs)
        everything = list(range(len(self.specs)))
        self.direct_specs = []
        for piece in self.pieces:
            if piece.runner is None or not unique:
                self.direct_specs.append(([], everything))
            else:
                self.direct_specs.append(([k for k in everything if self.specs[k][0] not in piece.writes],
                                          [k for k in everything if self.specs[k][0] in piece.writes]))
        # the external tensors of the links checked after a piece (copied before a direct
        # run when the op did not make them), and the pieces as the direct loop takes them
        self.written_externals = sorted({self.specs[k][1] for _, checked in self.direct_specs for k in checked})
        self.direct_pieces = [(piece.runner, piece.plan, [self.specs[k] for k in plain],
                               [self.specs[k] for k in checked], [])
                              for piece, (plain, checked) in zip(self.pieces, self.direct_specs)]
        written = set().union(*(piece.writes for piece in self.pieces if piece.writes is not None))
        self.internal_names = {link.internal for link in links}
        self.local_names = written | self.internal_names
        # what the plans read from the shared workspace: looked up once per run
        self.shared_reads = (set().union(*(piece.reads for piece in self.pieces))
                             - self.local_names - set(self.external_names))

    def _externals(self, scope):
        values = []
        for name in self.external_names:
            try:
                values.append(scope[name])
            except KeyError:
                raise self.ctx.error("linked blob '%s' does not exist" % name) from None
        return values

    def _steps_in_range(self, values):
        """The first timestep some link's window does not fit its external tensor."""
        limit = None
        for _, i, _, stop in self.specs:
            value = values[i]
            fits = value.shape[0] - stop + 1 if isinstance(value, np.ndarray) and value.ndim >= 1 else 0
            limit = fits if limit is None else min(limit, fits)
        return limit

    def _window_error(self, values, t):
        for link, (_, i, start, stop) in zip(self.links, self.specs):
            value = values[i]
            if not isinstance(value, np.ndarray) or value.ndim < 1 or t + stop > value.shape[0]:
                return self.ctx.error("link '%s' -> '%s' needs steps [%d, %d) at timestep %d, but '%s' has shape %s"
                                      % (link.internal, link.external, t + start, t + stop, t, link.external,
                                         list(np.shape(value))))
        raise AssertionError("no link's window is out of range")

    def _resolved_reads(self, scope):
        """The shared workspace's blobs the plans read, looked up now; other names fall
        through to the shared workspace itself. Only names no step writes: the loop
        writes the shared workspace's linked tensors only (they are not taken here)."""
        resolved = _LocalBlobs()
        resolved.parent = scope
        for name in self.shared_reads:
            try:
                resolved[name] = scope[name]
            except KeyError:
                pass        # missing: the plan's read fails and names it
        return resolved

    def _write_back(self, spec, value, view, t, values, parent, owned):
        """The general path's copy of what the step net wrote for a link into its window
        of the external tensor (copied first when the op did not make it)."""
        name, i, start, stop = spec
        value = np.asarray(value)
        external_name = self.external_names[i]
        self._check_size(name, value, view, t, external_name)
        external = values[i]
        if id(external) not in owned:
            external = external.copy()           # never write into an array the op did not make
            parent[external_name] = values[i] = external
            owned.add(id(external))
        external[t + start:t + stop] = value.reshape(view.shape)

    def _check_size(self, name, value, view, t, external_name):
        if value.size != view.size:
            raise self.ctx.error("timestep %d: the step net wrote '%s' with shape %s, but its link to '%s' "
                                 "holds %s" % (t, name, list(value.shape), external_name, list(view.shape)))

    def run(self, scope, parent, owned, workspaces, cycle, seq_len, reverse=False, timestep=None, before=None,
            after=None):
        """Run the step plans for t = 0 .. seq_len - 1 (backwards when reverse) in
        workspaces[t] (workspaces[t % cycle] when cycle is given). scope: the shared
        workspace (where the linked tensors are found); parent: where a linked tensor the
        op copies is stored (ids in `owned`: the arrays the op made and may write into).
        timestep: the blob set to [t] first; before(t) / after(t, workspace) run around
        each step."""
        values = self._externals(scope)
        limit = self._steps_in_range(values)
        if limit is None:
            limit = seq_len
        used = workspaces if cycle is None else workspaces[:cycle]
        timesteps = range(seq_len - 1, -1, -1) if reverse else range(seq_len)
        direct = self.direct and (timestep is None or timestep not in scope)
        if direct:
            shared = {name for name in self.local_names if name in scope}
            # a linked blob must be the step workspace's; of a shared blob that a step
            # workspace also has itself, its own is written
            direct = (shared.isdisjoint(self.internal_names) and all(type(ws.local) is _LocalBlobs for ws in used)
                      and not any(name in ws.local for ws in used for name in shared))
        with repeated_runs():
            if not direct:
                self._run_general(values, limit, parent, owned, workspaces, cycle, timesteps, timestep, before, after)
                return
            resolved = self._resolved_reads(scope)
            for ws in used:
                ws.local.parent = resolved
            try:
                self._run_direct(scope, shared, values, min(limit, seq_len), parent, owned, workspaces, cycle,
                                 timesteps, timestep, before, after)
            finally:
                for ws in used:
                    ws.local.parent = ws.parent

    def _run_direct(self, scope, shared, values, count, parent, owned, workspaces, cycle, timesteps, timestep,
                    before, after):
        ctx, label = self.ctx, self.label
        if count > 0:
            for i in self.written_externals:
                if id(values[i]) not in owned:    # never write into an array the op did not make
                    values[i] = values[i].copy()
                    parent[self.external_names[i]] = values[i]
                    owned.add(id(values[i]))
        stamps = list(np.arange(max(count, 0), dtype=np.int32).reshape(-1, 1))
        # a blob a plan writes that the shared workspace has is the shared workspace's
        # (recompute blobs): handed to it after each run of the plan, as SharedBlobs does
        pieces = self.direct_pieces
        if shared:
            pieces = [entry[:4] + ([name for name in piece.writes if name in shared],)
                      for entry, piece in zip(pieces, self.pieces)]
        ndarray = np.ndarray
        for t in timesteps:
            blobs = workspaces[t if cycle is None else t % cycle].local
            if timestep is not None:
                blobs[timestep] = stamps[t] if t < count else np.array([t], np.int32)
            if before is not None:
                before(t)
            if t >= count:
                raise self._window_error(values, t)
            for run, plan, plain, checked, handed in pieces:   # several pieces: links overlap (step_segments.py)
                for name, i, start, stop in plain:
                    blobs[name] = values[i][t + start:t + stop]
                views = []
                for name, i, start, stop in checked:
                    view = blobs[name] = values[i][t + start:t + stop]
                    views.append(view)
                try:
                    run(blobs)
                except Exception as exc:  # noqa: BLE001 - named with the op and the timestep
                    error = plan.explain(exc)
                    raise ctx.error("%s %d: %s" % (label, t, error)) from error
                for name in handed:
                    scope[name] = blobs.pop(name)
                for (name, i, _, _), view in zip(checked, views):
                    value = blobs[name]
                    if value is not view:
                        if type(value) is not ndarray or value.shape != view.shape:
                            value = np.asarray(value)
                            self._check_size(name, value, view, t, self.external_names[i])
                            value = value.reshape(view.shape)
                        view[...] = value       # the view is of the tensor itself: copied before the loop
            if after is not None:
                after(t, workspaces[t if cycle is None else t % cycle])

    def _run_general(self, values, limit, parent, owned, workspaces, cycle, timesteps, timestep, before, after):
        """Each step through the step workspace mapping and Plan.run, every link looked at
        after each piece."""
        ctx, label = self.ctx, self.label
        for t in timesteps:
            ws = workspaces[t if cycle is None else t % cycle]
            if timestep is not None:
                ws[timestep] = np.array([t], np.int32)
            if before is not None:
                before(t)
            if t >= limit:
                raise self._window_error(values, t)
            for piece in self.pieces:
                views = []
                for name, i, start, stop in self.specs:
                    view = ws[name] = values[i][t + start:t + stop]
                    views.append(view)
                try:
                    piece.plan.run(ws)
                except Caffe2Error as exc:
                    raise ctx.error("%s %d: %s" % (label, t, exc)) from exc
                for spec, view in zip(self.specs, views):
                    value = ws[spec[0]]
                    if value is not view:
                        self._write_back(spec, value, view, t, values, parent, owned)
            if after is not None:
                after(t, ws)
