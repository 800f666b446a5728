"""pool.py's cached set-up (`_checked_plan`): repeated shapes skip the Python checks
and dispatch, yet give the reference values, raise the same errors every call, and
follow the thread's team size and monkeypatched kernels call by call."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import pool as pool_k

RNG = np.random.default_rng(3)


def ref_max_pool_s2(x):
    """3x3 stride-2 pad-1 max pool with float64 NumPy: -inf padding, nine strided views."""
    n, c, h, w = x.shape
    oh, ow = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 2), (1, 2)), constant_values=-np.inf)
    return np.max([xp[:, :, a:a + 2 * oh:2, b:b + 2 * ow:2] for a in range(3) for b in range(3)], axis=0)


def test_repeated_shapes_reuse_the_plan(monkeypatch):
    pool_k._checked_plan.cache_clear()
    made = []
    compiled_plan = pool_k._compiled_plan
    monkeypatch.setattr(pool_k, "_compiled_plan", lambda *a: made.append(a[0]) or compiled_plan(*a))
    for _ in range(3):
        x = RNG.standard_normal((2, 3, 9, 8)).astype(np.float32)
        y = pool_k.max_pool(x, [3, 3], [2, 2], [1, 1, 1, 1])      # lists: the plan's key is made of tuples
        np.testing.assert_array_equal(y, ref_max_pool_s2(x).astype(np.float32))
    assert made == [(2, 3, 9, 8)]
    pool_k.max_pool(x[:1], (3, 3), (2, 2), (1, 1, 1, 1))
    assert made == [(2, 3, 9, 8), (1, 3, 9, 8)]


def test_bad_arguments_raise_on_every_call():
    pool_k._checked_plan.cache_clear()
    x = np.zeros((1, 2, 5, 5), np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match="must be positive"):
            pool_k.max_pool(x, (3, 0), (1, 1), (0, 0, 0, 0))
        with pytest.raises(ValueError, match="needs a 4-D input"):
            pool_k.average_pool(x[0], (3, 3), (1, 1), (0, 0, 0, 0))


def test_a_cached_plan_follows_the_team_and_the_module_kernels(monkeypatch):
    pool_k._checked_plan.cache_clear()
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    pool_k.max_pool(x, (3, 3), (2, 2), (1, 1, 1, 1))           # the plan is made
    calls = []
    for name in ("_pool3x3s2_f32", "_pool3x3s2_f32_serial"):      # float32 3x3/s2's kernel
        kernel_fn = getattr(pool_k, name)
        monkeypatch.setattr(pool_k, name, lambda *a, f=kernel_fn, n=name: calls.append((n, a[-1])) or f(*a))
    monkeypatch.setattr(pool_k, "team_blocks", lambda count, work: 2)
    y = pool_k.max_pool(x, (3, 3), (2, 2), (1, 1, 1, 1))
    monkeypatch.setattr(pool_k, "team_blocks", lambda count, work: 1)
    z = pool_k.max_pool(x, (3, 3), (2, 2), (1, 1, 1, 1))
    assert calls == [("_pool3x3s2_f32", 2), ("_pool3x3s2_f32_serial", 1)]
    np.testing.assert_array_equal(y, ref_max_pool_s2(x).astype(np.float32))
    np.testing.assert_array_equal(z, y)


def test_large_outputs_check_the_memory_limit_every_call(monkeypatch):
    pool_k._checked_plan.cache_clear()
    x = np.zeros((1, 1, 8, 8), np.float32)
    pool_k.average_pool(x, (3, 3), (1, 1), (1, 1, 1, 1))
    monkeypatch.setattr(pool_k, "_PLAN_RECHECK_BYTES", 16)
    checked = []
    check = pool_k._check
    monkeypatch.setattr(pool_k, "_check", lambda *a: checked.append(a[0]) or check(*a))
    pool_k.average_pool(x, (3, 3), (1, 1), (1, 1, 1, 1))
    assert checked == [(1, 1, 8, 8)]
