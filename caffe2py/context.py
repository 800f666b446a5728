"""Caffe2's caffe2.python.context: classes whose instances act as "the current one"
inside a `with` block (NetBuilder uses it). Each class keeps its own per-thread
stack of active instances."""
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
            if Managed in klass.__bases__:
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
