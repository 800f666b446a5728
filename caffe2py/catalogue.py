"""Coverage of Caffe2's published operator catalogue (the 424 forward ops of its
operators-catalogue page, names in data/caffe2_catalogue.txt): which are registered
in the caffe2 domain, which are left out on purpose (with the reason an operator
module declared through `registry.leave_out`), and which are still missing."""
from dataclasses import dataclass
from importlib import resources

from . import registry


def catalogue_ops():
    """The catalogue's forward op names, in its order."""
    text = resources.files("caffe2py").joinpath("data/caffe2_catalogue.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


@dataclass
class Coverage:
    registered: list
    left_out: dict          # name -> reason
    missing: list

    @property
    def total(self):
        return len(self.registered) + len(self.left_out) + len(self.missing)


def coverage():
    names = catalogue_ops()
    reasons = registry.left_out_reasons()
    registered, left_out, missing = [], {}, []
    for name in names:
        if registry.has_op(name):
            registered.append(name)
        elif name in reasons:
            left_out[name] = reasons[name]
        else:
            missing.append(name)
    return Coverage(registered, left_out, missing)
