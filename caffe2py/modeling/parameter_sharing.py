"""caffe2.python.modeling.parameter_sharing: share parameters between name scopes.

    with ParameterSharing({"tower_b": "tower_a"}):
        with NameScope("tower_b"):
            brew.fc(model, x, "fc", 4, 3)    # uses tower_a/fc_w and tower_a/fc_b

Inside the context, ModelHelper.create_param resolves a parameter's scope through
the overrides (applied repeatedly, longest matching prefix first), so both towers
create (and train) one set of blobs: the gradients of both uses add up.
"""
import contextlib
import logging

from .. import scope
from ..errors import Caffe2Error

log = logging.getLogger("caffe2py")
_SEP = scope._NAMESCOPE_SEPARATOR


class ParameterSharingContext:
    """The active scope overrides ({scope/: scope/}) of nested ParameterSharing blocks."""

    def __init__(self):
        self._scope_overrides = {}
        self._contexts = []

    def _resolve_scope_overrides(self, candidate_scope):
        """The scope parameters of `candidate_scope` live in: the override of its
        deepest overridden prefix, resolved again, followed by the rest of the scope."""
        parts = candidate_scope.split(_SEP)
        best, best_index, prefix = candidate_scope, 0, ""
        for index, part in enumerate(parts):
            prefix += part + _SEP
            if prefix in self._scope_overrides:
                best, best_index = self._scope_overrides[prefix], index
        if best == candidate_scope:
            return candidate_scope
        return self._resolve_scope_overrides(best) + _SEP.join(parts[best_index + 1:])

    def get_parameter_name(self, name):
        candidate = scope.CurrentNameScope()
        resolved = self._resolve_scope_overrides(candidate)
        if resolved != candidate:
            log.debug("parameter sharing: scope %r uses the parameters of %r", candidate, resolved)
        return resolved + name

    def add_scope_overrides(self, shared_scopes):
        self._contexts.append(shared_scopes)
        self._scope_overrides.update(shared_scopes)

    def pop(self):
        if not self._contexts:
            raise Caffe2Error("ParameterSharingContext.pop: no ParameterSharing block is open")
        self._contexts.pop()
        self._scope_overrides = {}
        for overrides in self._contexts:
            self._scope_overrides.update(overrides)


parameter_sharing_context = ParameterSharingContext()


def _normalize_namescope(namescope):
    return namescope + _SEP if namescope and not namescope.endswith(_SEP) else namescope


@contextlib.contextmanager
def ParameterSharing(shared_scopes):
    """Parameters created under `<current scope>/<key>` are those of
    `<current scope>/<value>` for each {key: value} of shared_scopes."""
    if not isinstance(shared_scopes, dict):
        raise Caffe2Error("ParameterSharing expects a dict {scope: scope it shares with}, got %s"
                          % type(shared_scopes).__name__)
    current = scope.CurrentNameScope()
    overrides = {}
    for key, value in shared_scopes.items():
        if value.startswith(key):
            raise Caffe2Error("Illegal override for parameter sharing: %r is a prefix of %r" % (key, value))
        overrides[_normalize_namescope(current + key)] = _normalize_namescope(current + value)
    parameter_sharing_context.add_scope_overrides(overrides)
    try:
        yield
    finally:
        parameter_sharing_context.pop()
