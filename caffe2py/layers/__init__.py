"""caffe2.python.layers: the layers LayerModelHelper builds models from.

Importing the package imports each of its modules and registers every ModelLayer
subclass under its class name, so `model.FC(...)` finds layers.fc.FC. A module
added here is picked up without further wiring.
"""
import importlib
import pkgutil

from . import layers
from .layers import ModelLayer


def _import_submodules():
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(__name__ + "." + info.name)


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _register_all():
    for cls in set(_subclasses(ModelLayer)):
        if not layers.layer_exists(cls.__name__):
            layers.register_layer(cls.__name__, cls)


_import_submodules()
_register_all()
