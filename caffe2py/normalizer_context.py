"""caffe2.python.normalizer_context: normalizers chosen by name for the layers
built inside a block (see modifier_context).

    with UseNormalizer({"BATCH": BatchNormalizer(momentum=0.1)}):
        normalizer = NormalizerContext.current().get_normalizer("BATCH")
"""
from . import context
from .modifier_context import ModifierContext, UseModifierBase


@context.define_context(allow_default=True)
class NormalizerContext(ModifierContext):

    def has_normalizer(self, name):
        return self._has_modifier(name)

    def get_normalizer(self, name):
        assert self.has_normalizer(name), "{} normalizer is not provided!".format(name)
        return self._get_modifier(name)


class UseNormalizer(UseModifierBase):

    def _context_class(self):
        return NormalizerContext
