"""Views of a workspace's blobs: the mappings control-flow ops run subnets against.

A net run never writes the workspace until it has finished (executor.py). Ops that
run other nets (If, While, Do, RecurrentNetwork, ...) must nevertheless see the
blobs the ops before them wrote in the same run, and the ops after them must see
what the subnets wrote. Such a run works on a `BlobOverlay`: reads fall through to
the workspace, writes and removals stay in the overlay, and `commit()` applies
them when the whole run has succeeded. A failed run drops its overlay, so the
workspace stays as it was.

Caffe2's two kinds of child workspace are modelled as mappings too:

- `ForwardedBlobs` (Caffe2's `Workspace(parent, forwarded_blobs)`, used by `Do`):
  its own blobs plus a fixed set of names forwarded to blobs of the parent; no
  other parent blob is visible.
- `SharedBlobs` (Caffe2's `Workspace(shared)`, used by RecurrentNetwork's step
  workspaces): its own blobs, then every blob of the parent. Writing a name the
  parent already has writes the parent's blob; a new name stays local.

Persistent child scopes (kept in a blob between runs, as Caffe2 keeps its
workspace objects) are re-pointed at the current run's parent view with
`rebind`, because that view is a new overlay in every run.
"""
from collections.abc import MutableMapping

from .errors import Caffe2Error

_MISSING = object()


class BlobOverlay(MutableMapping):
    """Writes and removals on top of a base mapping, applied by commit()."""

    __slots__ = ("base", "writes", "removed")

    def __init__(self, base, writes=None):
        self.base = base
        self.writes = {} if writes is None else writes
        self.removed = set()

    def __getitem__(self, name):
        value = self.writes.get(name, _MISSING)
        if value is not _MISSING:
            return value
        if name in self.removed:
            raise KeyError(name)
        return self.base[name]

    def __setitem__(self, name, value):
        self.writes[name] = value
        self.removed.discard(name)

    def __delitem__(self, name):
        if name not in self:
            raise KeyError(name)
        self.writes.pop(name, None)
        self.removed.add(name)

    def __contains__(self, name):
        if name in self.writes:
            return True
        return name not in self.removed and name in self.base

    def __iter__(self):
        seen = set(self.writes)
        yield from self.writes
        for name in self.base:
            if name not in seen and name not in self.removed:
                yield name

    def __len__(self):
        return sum(1 for _ in self)

    def commit(self, keep=None):
        """Apply the removals and writes to the base (only `keep`'s names when given)."""
        for name in self.removed:
            if (keep is None or name in keep) and name in self.base:
                del self.base[name]
        if keep is None:
            self.base.update(self.writes)
        else:
            self.base.update((k, v) for k, v in self.writes.items() if k in keep)
        self.writes = {}
        self.removed = set()


def write_through(blobs, name, value):
    """Write `value` to the mapping under a run's overlays at once, dropping what
    the overlays hold for `name` so that their commit does not write an older value
    over it (AtomicAppend from concurrent nets)."""
    while isinstance(blobs, BlobOverlay):
        blobs.writes.pop(name, None)
        blobs.removed.discard(name)
        blobs = blobs.base
    blobs[name] = value


class ForwardedBlobs(MutableMapping):
    """A child workspace that sees only its own blobs and the forwarded ones
    (inner name -> parent name); writes to a forwarded name write the parent."""

    def __init__(self, parent=None, bindings=None):
        self.local = {}
        self.parent = parent
        self.bindings = dict(bindings or {})

    def rebind(self, parent, bindings):
        """Forward `bindings` to `parent` from now on (a new run's parent view);
        local copies shadowing a forwarded name are dropped, as Caffe2 does when
        it reuses a workspace of its stack. An outer blob need not exist yet (an
        op output is created by its first write)."""
        for inner in bindings:
            self.local.pop(inner, None)
        self.parent = parent
        self.bindings = dict(bindings)

    def add_bindings(self, parent, bindings, skip_defined=False):
        """Caffe2's AddBlobMapping: add forwarded names; a name already defined
        here is an error unless skip_defined."""
        for inner in bindings:
            if inner in self.local or inner in self.bindings:
                if skip_defined:
                    continue
                raise Caffe2Error("blob binding: '%s' is already defined in the inner workspace" % inner)
        self.parent = parent
        for inner, outer in bindings.items():
            if not (skip_defined and (inner in self.local or inner in self.bindings)):
                self.bindings[inner] = outer

    def copy_forwarded(self, names):
        """Caffe2's CopyForwardedTensors: turn forwarded names into local copies."""
        import numpy as np
        for inner in names:
            outer = self.bindings.pop(inner, None)
            if outer is not None and outer in self.parent:
                value = self.parent[outer]
                self.local[inner] = value.copy() if isinstance(value, np.ndarray) else value

    def __getitem__(self, name):
        value = self.local.get(name, _MISSING)
        if value is not _MISSING:
            return value
        outer = self.bindings.get(name)
        if outer is None:
            raise KeyError(name)
        return self.parent[outer]

    def __setitem__(self, name, value):
        outer = self.bindings.get(name)
        if outer is not None and name not in self.local:
            self.parent[outer] = value
        else:
            self.local[name] = value

    def __delitem__(self, name):
        # Caffe2's RemoveBlob removes local blobs only.
        del self.local[name]

    def __contains__(self, name):
        if name in self.local:
            return True
        outer = self.bindings.get(name)
        return outer is not None and self.parent is not None and outer in self.parent

    def __iter__(self):
        yield from self.local
        for name in self.bindings:
            if name not in self.local and name in self:
                yield name

    def __len__(self):
        return sum(1 for _ in self)


class SharedBlobs(MutableMapping):
    """A child workspace that sees every blob of its parent after its own."""

    def __init__(self, parent=None):
        self.local = {}
        self.parent = parent

    def rebind(self, parent):
        self.parent = parent

    def __getitem__(self, name):
        value = self.local.get(name, _MISSING)
        if value is not _MISSING:
            return value
        return self.parent[name]

    def __setitem__(self, name, value):
        if name not in self.local and self.parent is not None and name in self.parent:
            self.parent[name] = value
        else:
            self.local[name] = value

    def __delitem__(self, name):
        del self.local[name]

    def __contains__(self, name):
        return name in self.local or (self.parent is not None and name in self.parent)

    def __iter__(self):
        yield from self.local
        if self.parent is not None:
            for name in self.parent:
                if name not in self.local:
                    yield name

    def __len__(self):
        return sum(1 for _ in self)

    def create_local(self, name, value=None):
        """Caffe2's CreateLocalBlob: a local blob even when the parent has the name."""
        self.local.setdefault(name, value)


class WorkspaceStack:
    """Caffe2's detail::WorkspaceStack, the value of a CreateScope blob: the child
    workspaces of the `Do` ops bound to it, reused from run to run. A forward Do
    pushes (or, with reuse_workspace, re-enters the top one); its gradient Do
    pops the one the forward pass used."""

    def __init__(self):
        self.workspaces = []
        self.top = -1

    def clear(self):
        self.top = -1

    def empty(self):
        return self.top < 0

    def push_forward(self, parent, bindings):
        if self.top == len(self.workspaces) - 1:
            self.workspaces.append(ForwardedBlobs(parent, {}))
        self.top += 1
        child = self.workspaces[self.top]
        child.rebind(parent, bindings)
        return child

    def reuse_last_forward(self, parent, bindings):
        if self.top < 0:
            return None
        child = self.workspaces[self.top]
        child.rebind(parent, bindings)
        return child

    def pop_gradient(self, parent, grad_bindings):
        if self.top < 0:
            return None
        child = self.workspaces[self.top]
        child.add_bindings(parent, grad_bindings, skip_defined=True)
        self.top -= 1
        return child

    def __repr__(self):
        return "WorkspaceStack(depth=%d, kept=%d)" % (self.top + 1, len(self.workspaces))


def local_names(view):
    """The blobs a view holds itself (Caffe2's LocalBlobs): a child workspace's own
    blobs, not those it sees in a parent; a run's overlay adds its writes."""
    if isinstance(view, BlobOverlay):
        return (local_names(view.base) | set(view.writes)) - view.removed
    local = getattr(view, "local", None)
    return set(local) if local is not None else set(view)
