"""Caffe2's caffe2.python.context: classes whose instances act as "the current one"
inside a `with` block (NetBuilder, Task, TaskGroup use it). Each class keeps its own
per-thread stack of active instances.

Two ways to make such a class, as in Caffe2: derive from Managed (or
DefaultManaged, whose current() makes an instance when none is active), or
decorate any class with @define_context(allow_default=...). Either way an
instance is also a function decorator: `@MyContext()` runs the function inside
`with MyContext():`.
"""
import functools
import threading


class _Stacks(threading.local):
    def __init__(self):
        self.by_class = {}


_stacks = _Stacks()


class Managed:
    """`with obj:` makes obj the current instance of its class for the block."""

    @classmethod
    def _stack(cls):
        return _stacks.by_class.setdefault(cls._context_class(), [])

    @classmethod
    def _context_class(cls):
        # Subclasses share the stack of the first class that derives from Managed,
        # so NetBuilder.current() also finds an active _RunIfNet.
        for klass in cls.__mro__:
            if klass not in _BASES and any(base in _BASES for base in klass.__bases__):
                return klass
        return cls

    @classmethod
    def current(cls, value=None, required=True):
        if value is not None:
            return value
        stack = cls._stack()
        if not stack:
            if required:
                raise AssertionError("No active %s" % cls._context_class().__name__)
            return None
        return stack[-1]

    def __enter__(self):
        self._stack().append(self)
        return self

    def __exit__(self, *args):
        stack = self._stack()
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:        # an error left inner contexts open: drop them too
            del stack[stack.index(self):]

    def __call__(self, func):
        return _run_inside(self, func)


class DefaultManaged(Managed):
    """Like Managed, but current() makes a default instance when none is active."""

    @classmethod
    def current(cls, value=None, required=True):
        if value is not None:
            return value
        stack = cls._stack()
        if not stack:
            stack.append(cls._context_class()())
        return stack[-1]


# The classes a context class derives from; its stack is its own, not theirs.
_BASES = (Managed, DefaultManaged)


def _run_inside(context_obj, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with context_obj:
            return func(*args, **kwargs)
    return wrapper


class define_context:
    """Class decorator (Caffe2's context.define_context): instances of the class
    become contexts with a per-thread stack; `Cls.current(value=None,
    required=True)` returns value, else the innermost active instance, else (with
    allow_default) a default instance made and entered on first use, else fails
    (or returns None when not required). Subclasses share the decorated class's
    stack. The class's own __enter__/__exit__, if any, still run."""

    def __init__(self, arg_name=None, allow_default=False):
        self.arg_name = arg_name
        self.allow_default = allow_default

    def __call__(self, cls):
        if hasattr(cls, "_ctx_class"):
            raise AssertionError("%s parent class (%s) already defines context." % (cls, cls._ctx_class))
        allow_default = self.allow_default
        own_enter = getattr(cls, "__enter__", None)
        own_exit = getattr(cls, "__exit__", None)

        def stack():
            return _stacks.by_class.setdefault(cls, [])

        def __enter__(obj):
            if own_enter is not None:
                own_enter(obj)
            stack().append(obj)
            return obj

        def __exit__(obj, *args):
            active = stack()
            if not active:
                raise AssertionError("Context %s is empty." % cls)
            top = active.pop()
            if top is not obj:
                raise AssertionError("Context %s: exiting %r while %r is the innermost" % (cls, obj, top))
            if own_exit is not None:
                own_exit(obj, *args)

        def current(klass, value=None, required=True):
            if value is not None:
                if not isinstance(value, cls):
                    raise AssertionError("Wrong context type: %s, expected %s" % (type(value), cls))
                return value
            active = stack()
            if not active:
                if not required:
                    return None
                if not allow_default:
                    raise AssertionError("Context %s is required but none is active." % cls)
                active.append(cls())
            return active[-1]

        cls._ctx_class = cls
        cls.__enter__ = __enter__
        cls.__exit__ = __exit__
        cls.__call__ = lambda obj, func: _run_inside(obj, func)
        cls.current = classmethod(current)
        return cls
