"""caffe2py.context (Caffe2's caffe2.python.context): define_context and Managed,
per-thread stacks of active instances, defaults and the decorator form."""
import threading

import pytest

from caffe2py import context


@context.define_context()
class Strict:
    pass


@context.define_context(allow_default=True)
class WithDefault:
    pass


@context.define_context()
class Counting:
    def __init__(self):
        self.log = []

    def __enter__(self):
        self.log.append("enter")

    def __exit__(self, *args):
        self.log.append("exit")


class Derived(Strict):
    pass


def test_current_is_the_innermost_active_instance():
    with Strict() as outer:
        assert Strict.current() is outer
        with Strict() as inner:
            assert Strict.current() is inner
        assert Strict.current() is outer
    assert Strict.current(required=False) is None
    with pytest.raises(AssertionError, match="required but none is active"):
        Strict.current()


def test_an_explicit_value_wins_and_must_be_of_the_class():
    given = Strict()
    with Strict():
        assert Strict.current(given) is given
    with pytest.raises(AssertionError, match="Wrong context type"):
        Strict.current(WithDefault())


def test_allow_default_makes_one_instance_on_first_use():
    first = WithDefault.current()
    assert isinstance(first, WithDefault) and WithDefault.current() is first
    with WithDefault() as mine:
        assert WithDefault.current() is mine
    assert WithDefault.current() is first


def test_subclasses_share_the_decorated_class_stack():
    with Derived() as d:
        assert Strict.current() is d and Derived.current() is d
    with pytest.raises(AssertionError, match="already defines context"):
        context.define_context()(type("Again", (Strict,), {}))


def test_the_class_own_enter_and_exit_still_run():
    c = Counting()
    with c as entered:
        assert entered is c and Counting.current() is c
    assert c.log == ["enter", "exit"]


def test_an_instance_decorates_a_function():
    seen = []

    @Strict()
    def body(x):
        seen.append(Strict.current())
        return x + 1

    assert body(1) == 2 and isinstance(seen[0], Strict)
    assert Strict.current(required=False) is None


def test_each_thread_has_its_own_stack():
    errors = []
    barrier = threading.Barrier(4)

    def use():
        try:
            with Strict() as mine:
                barrier.wait(timeout=10)      # all four are active at once
                for _ in range(200):
                    assert Strict.current() is mine
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_managed_instances_decorate_functions_too():
    class Box(context.Managed):
        pass

    box = Box()

    @box
    def inside():
        return Box.current()

    assert inside() is box
    assert Box.current(required=False) is None


def test_default_managed_classes_each_have_their_own_stack():
    class A(context.DefaultManaged):
        pass

    class B(context.DefaultManaged):
        pass

    with A() as a:
        with B() as b:
            assert A.current() is a and B.current() is b
    assert isinstance(A.current(), A) and isinstance(B.current(), B)
