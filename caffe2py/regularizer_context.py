"""Caffe2's caffe2.python.regularizer_context: regularizers chosen by name for
the layers built inside a block (see modifier_context).

    with UseRegularizer({"WEIGHT": L1Norm(0.2)}):
        weight_reg = RegularizerContext.current().get_regularizer("WEIGHT")
"""
from . import context
from .modifier_context import ModifierContext, UseModifierBase


@context.define_context(allow_default=True)
class RegularizerContext(ModifierContext):

    def has_regularizer(self, name):
        return self._has_modifier(name)

    def get_regularizer(self, name):
        assert self.has_regularizer(name), "{} regularizer is not provided!".format(name)
        return self._get_modifier(name)


class UseRegularizer(UseModifierBase):

    def _context_class(self):
        return RegularizerContext
