"""Hypothesis keywords that Caffe2-era op tests pass and today's hypothesis removed,
accepted again for one run: `python -m caffe2py.compat --legacy-hypothesis -m pytest ...`
(or `caffe2py conformance --legacy-hypothesis`).

Caffe2's tests were written against hypothesis 3.x. Since then hypothesis removed:

- `settings(timeout=..., max_iterations=..., min_satisfying_examples=...,
  perform_health_check=..., max_shrinks=..., strict=..., use_coverage=...)`: limits and
  switches of the old engine. Dropped here: today's engine has no such knob, and
  hypothesis 3.x had already made `timeout` a no-op by default;
- `average_size=` of lists / sets / frozensets / dictionaries / text / binary: a size hint
  for the old generator (deprecated in 3.x, removed in 4.0). Dropped here (it never
  constrained sizes; min_size / max_size still do); and `text(alphabet=None)`, 3.x's way
  to say "any character" (today's default alphabet);
- `hypothesis.extra.numpy.arrays(dtype, shape, elements, fill, unique)` with positional
  elements (keyword-only since hypothesis 5): passed on as keywords.

Nothing else changes: a test still fails where its op does. Never installed by
`import caffe2py` or the compat alias alone (see caffe2py/legacy_numpy.py for the same
rule on NumPy names).
"""
import functools
import sys

_REMOVED_SETTINGS = ("timeout", "max_iterations", "min_satisfying_examples", "perform_health_check",
                     "max_shrinks", "strict", "use_coverage", "buffer_size", "database_file")
_SIZED_STRATEGIES = ("lists", "sets", "frozensets", "dictionaries", "text", "binary")
_ARRAYS_POSITIONAL = ("elements", "fill", "unique")
_MARK = "_caffe2py_legacy"


def _drop(kwargs, names):
    return {key: value for key, value in kwargs.items() if key not in names}


def _settings_init(original):
    @functools.wraps(original)
    def __init__(self, parent=None, **kwargs):
        original(self, parent, **_drop(kwargs, _REMOVED_SETTINGS))
    setattr(__init__, _MARK, True)
    return __init__


def _without_average_size(original):
    @functools.wraps(original)
    def strategy(*args, **kwargs):
        kwargs = _drop(kwargs, ("average_size",))
        if original.__name__ == "text":
            # text(alphabet=None): hypothesis 3.x's "any character", today's default alphabet
            if args and args[0] is None:
                args = args[1:]
            if "alphabet" in kwargs and kwargs["alphabet"] is None:
                del kwargs["alphabet"]
        return original(*args, **kwargs)
    setattr(strategy, _MARK, True)
    return strategy


def _arrays(original):
    @functools.wraps(original)
    def arrays(dtype, shape, *rest, **kwargs):
        if len(rest) > len(_ARRAYS_POSITIONAL):
            raise TypeError("arrays() takes at most %d positional arguments" % (2 + len(_ARRAYS_POSITIONAL)))
        for name, value in zip(_ARRAYS_POSITIONAL, rest):
            if name in kwargs:
                raise TypeError("arrays() got multiple values for argument '%s'" % name)
            kwargs[name] = value
        return original(dtype, shape, **kwargs)
    setattr(arrays, _MARK, True)
    return arrays


def install(stream=None):
    """Accept the removed keywords again in this process; returns the names patched.
    Says so in one line on stderr (stream). Calling it twice patches nothing more."""
    import hypothesis
    import hypothesis.strategies as strategies
    import hypothesis.extra.numpy as hnp

    patched = []
    if not getattr(hypothesis.settings.__init__, _MARK, False):
        hypothesis.settings.__init__ = _settings_init(hypothesis.settings.__init__)
        patched.append("settings")
    for name in _SIZED_STRATEGIES:
        original = getattr(strategies, name)
        if not getattr(original, _MARK, False):
            setattr(strategies, name, _without_average_size(original))
            patched.append(name)
    if not getattr(hnp.arrays, _MARK, False):
        hnp.arrays = _arrays(hnp.arrays)
        patched.append("extra.numpy.arrays")
    (stream or sys.stderr).write(
        "caffe2py.compat --legacy-hypothesis: hypothesis %s accepts the removed settings(timeout=...), "
        "average_size= and positional arrays(elements) for this run\n" % hypothesis.__version__)
    return patched
