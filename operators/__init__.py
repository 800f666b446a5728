"""Operator definitions: one module per op family, each declaring schemas and
registering kernels. Importing this package registers every op."""
import importlib
import pkgutil


def load_all():
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(__name__ + "." + info.name)


load_all()
