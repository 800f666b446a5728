"""Operator definitions, one folder per op family (tensor, math, cnn, recsys, ...), one
module per op group inside it, each declaring schemas, kernel factories, gradient makers,
ONNX translators and device registrations side by side. Modules directly in this
package are shared helpers. Importing this package registers every op."""
import importlib
import pkgutil


def family_modules():
    """Names of every op module, family by family (helpers starting with '_' left out)."""
    names = []
    for family in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not family.ispkg:
            continue
        package = importlib.import_module(__name__ + "." + family.name)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            if not info.name.startswith("_"):
                names.append(package.__name__ + "." + info.name)
    return names


def load_all():
    for name in family_modules():
        importlib.import_module(name)


load_all()
