"""caffe2.python.optimizer_context: per-parameter optimizers chosen by tag.

    with UseOptimizer({"DEFAULT": sgd, "WEIGHT": adagrad}):
        brew.fc(model, ...)          # its weight gets adagrad, its bias sgd

ModelHelper.create_param gives each new parameter the optimizer of its first tag that
has one, else the DEFAULT one; the optimizer.build_* functions then use it for that
parameter instead of their own.
"""
import threading

DEFAULT_OPTIM = "DEFAULT"

_state = threading.local()


def _stack():
    if not hasattr(_state, "stack"):
        _state.stack = [{}]
    return _state.stack


class OptimizerContext:
    """The optimizers in effect (tag -> optimizer); `OptimizerContext.current()`."""

    def __init__(self, optimizers):
        self._optimizers = optimizers

    @staticmethod
    def current():
        return OptimizerContext(_stack()[-1])

    def has_optimizer(self, name):
        return name in self._optimizers

    def get_optimizer(self, name):
        if name not in self._optimizers:
            from .errors import Caffe2Error
            raise Caffe2Error("%s optimizer is not provided!" % name)
        return self._optimizers[name]


class UseOptimizer:
    """Context: an optimizer (the DEFAULT) or a {tag: optimizer} dict, added to the
    enclosing context's."""

    def __init__(self, optim_or_dict):
        self._optimizers = dict(optim_or_dict) if isinstance(optim_or_dict, dict) else {DEFAULT_OPTIM: optim_or_dict}

    def __enter__(self):
        merged = dict(_stack()[-1])
        merged.update(self._optimizers)
        _stack().append(merged)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        return False
