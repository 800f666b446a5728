"""The RecurrentNetwork step loop: run the step net once per timestep in its step
workspace with the links applied (what links and step workspaces are: rnn_ops.py).

Each step costs the step plan's own ops plus, per link, one slice (its window of the
external tensor) and, per link the step net replaces, one copy back into the window.
Everything else is done once per op or once per run:

- the step plans are compiled once per op (rnn_ops.py), and what each may write
  (`Plan.writes`) is known then, so only the links a plan writes are checked after it;
- the external tensors are looked up once per run and the links' windows checked
  against their lengths once per run (a window past the end still fails at the step
  that needs it, with the same message);
- the run context of a plan run (executor.repeated_runs) is entered once per run,
  and the generated plan function is called directly, on the step workspace's own
  dict (`StepWorkspace`), whose missing names fall through to the shared workspace
  at dict speed.

The direct path needs each name the loop or the plans write to be new to the shared
workspace (a write of a name it holds goes to the shared workspace: recompute blobs)
and plans that need no more than their function (no workspace ops, no model-file
policy, no op reading its own output's value); otherwise each step runs through the
step workspace mapping and `Plan.run`, as general and slower.
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
    __slots__ = ("plan", "runner", "writes")

    def __init__(self, plan):
        self.plan = plan
        runner = plan.repeatable_runner()
        # an op reading its output's current value reads it with B.get, which a dict's
        # fall-through does not serve
        if runner is not None and any(step.optional for step in plan.op_steps()):
            runner = None
        self.runner = runner
        self.writes = frozenset(plan.writes) if runner is not None else None


class StepLoop:
    """The step plans of one RecurrentNetwork(Gradient) op and its links, run over
    timesteps by `run` (state of a run lives in `run`'s locals: one op may run in
    several threads at once)."""

    def __init__(self, ctx, links, plans, label):
        self.ctx, self.links, self.label = ctx, links, label
        self.pieces = [_Piece(plan) for plan in plans]
        self.external_names = list(dict.fromkeys(link.external for link in links))
        position = {name: i for i, name in enumerate(self.external_names)}
        # per piece: (internal, external index, window start, window stop, checked after the run)
        self.all_specs = [(link.internal, position[link.external], link.offset, link.offset + link.window, True)
                          for link in links]
        self.direct_specs = [None if piece.runner is None else
                             [spec[:4] + (spec[0] in piece.writes,) for spec in self.all_specs]
                             for piece in self.pieces]
        written = set().union(*(piece.writes for piece in self.pieces if piece.writes is not None))
        self.local_names = written | {link.internal for link in links}
        self.direct = all(piece.runner is not None for piece in self.pieces)

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
        for _, i, start, stop, _ in self.all_specs:
            value = values[i]
            fits = value.shape[0] - stop + 1 if isinstance(value, np.ndarray) and value.ndim >= 1 else 0
            limit = fits if limit is None else min(limit, fits)
        return limit

    def _window_error(self, values, t):
        for link, (_, i, start, stop, _) in zip(self.links, self.all_specs):
            value = values[i]
            if not isinstance(value, np.ndarray) or value.ndim < 1 or t + stop > value.shape[0]:
                return self.ctx.error("link '%s' -> '%s' needs steps [%d, %d) at timestep %d, but '%s' has shape %s"
                                      % (link.internal, link.external, t + start, t + stop, t, link.external,
                                         list(np.shape(value))))
        raise AssertionError("no link's window is out of range")

    def _write_back(self, spec, value, view, t, values, parent, owned):
        """Copy what the step net wrote for a link into its window of the external tensor."""
        name, i, start, stop, _ = spec
        value = np.asarray(value)
        external_name = self.external_names[i]
        if value.size != view.size:
            raise self.ctx.error("timestep %d: the step net wrote '%s' with shape %s, but its link to '%s' "
                                 "holds %s" % (t, name, list(value.shape), external_name, list(view.shape)))
        external = values[i]
        if id(external) not in owned:
            external = external.copy()           # never write into an array the op did not make
            parent[external_name] = values[i] = external
            owned.add(id(external))
        external[t + start:t + stop] = value.reshape(view.shape)

    def run(self, scope, parent, owned, workspaces, cycle, timesteps, timestep=None, before=None, after=None):
        """Run the step plans for each t of `timesteps` in workspaces[t] (workspaces[t % cycle]
        when cycle is given). scope: the shared workspace (where the linked tensors are
        found); parent: where a linked tensor the op copies is stored (ids in `owned`:
        the arrays the op made and may write into). timestep: the blob set to [t] first;
        before(t) / after(t, workspace) run around each step."""
        ctx, label = self.ctx, self.label
        values = self._externals(scope)
        limit = self._steps_in_range(values)
        used = workspaces if cycle is None else workspaces[:cycle]
        direct = (self.direct and all(type(ws.local) is _LocalBlobs for ws in used)
                  and not any(name in scope for name in self.local_names)
                  and (timestep is None or timestep not in scope))
        pieces = [(piece.runner, piece.plan, specs) if direct else (piece.plan.run, piece.plan, self.all_specs)
                  for piece, specs in zip(self.pieces, self.direct_specs)]
        with repeated_runs():
            for t in timesteps:
                ws = workspaces[t if cycle is None else t % cycle]
                blobs = ws.local if direct else ws
                if timestep is not None:
                    blobs[timestep] = np.array([t], np.int32)
                if before is not None:
                    before(t)
                if limit is not None and t >= limit:
                    raise self._window_error(values, t)
                for run, plan, specs in pieces:      # several pieces: links overlap (step_segments.py)
                    checked = []
                    for spec in specs:
                        view = values[spec[1]][t + spec[2]:t + spec[3]]
                        blobs[spec[0]] = view
                        if spec[4]:
                            checked.append((spec, view))
                    try:
                        run(blobs)
                    except Exception as exc:  # noqa: BLE001 - named with the op and the timestep
                        if direct:
                            exc = plan.explain(exc)
                        elif not isinstance(exc, Caffe2Error):
                            raise
                        raise ctx.error("%s %d: %s" % (label, t, exc)) from exc
                    for spec, view in checked:
                        value = blobs[spec[0]]
                        if value is not view:
                            self._write_back(spec, value, view, t, values, parent, owned)
                if after is not None:
                    after(t, ws)
