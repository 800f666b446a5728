"""Caffe2's caffe2.python.modifier_context: a context of named "modifiers"
(regularizers, normalizers) that layers look up by name.

    with UseRegularizer({"WEIGHT": L1Norm(0.1), "BIAS": L2Norm(0.01)}):
        reg = RegularizerContext.current().get_regularizer("WEIGHT")

Nested blocks add to (and may override) the names of the enclosing ones; a
single modifier instead of a dict goes under DEFAULT_MODIFIER.
"""
DEFAULT_MODIFIER = "DEFAULT"


class ModifierContext:
    """The modifiers in effect: a stack of dicts, later ones overriding earlier ones."""

    def __init__(self):
        self._modifiers = {}
        self._modifiers_list = []

    def _rebuild_modifiers(self):
        self._modifiers = {}
        for modifiers in self._modifiers_list:
            self._modifiers.update(modifiers)

    def _has_modifier(self, name):
        return name in self._modifiers

    def _get_modifier(self, name):
        return self._modifiers.get(name)

    def push_modifiers(self, modifiers):
        self._modifiers_list.append(modifiers)
        self._modifiers.update(modifiers)

    def pop_modifiers(self):
        assert len(self._modifiers_list) > 0, "no modifiers to pop"
        self._modifiers_list.pop()
        self._rebuild_modifiers()


class UseModifierBase:
    """`with` block pushing modifiers on the current context of _context_class()."""

    def __init__(self, modifier_or_dict):
        if isinstance(modifier_or_dict, dict):
            self._modifiers = modifier_or_dict
        else:
            self._modifiers = {DEFAULT_MODIFIER: modifier_or_dict}

    def _context_class(self):
        raise NotImplementedError

    def __enter__(self):
        self._context_class().current().push_modifiers(self._modifiers)
        return self

    def __exit__(self, etype, value, traceback):
        self._context_class().current().pop_modifiers()
