"""The compiled LSTMUnit / LSTMUnitGradient (kernels/cpu/rnn/lstm.py) on what the
small tests in test_lstm_unit.py do not reach: the 8-wide vector path (D >= 8, with
the overlapping last chunk), rows split over the team, extreme gates, float16 and
mixed dtypes. References: the formulas in float64 NumPy, written here."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.rnn import lstm as K

RNG = np.random.default_rng(77)


def sigmoid(x):
    with np.errstate(over="ignore"):      # exp(1e30) = inf -> 0, as wanted
        return 1.0 / (1.0 + np.exp(-x))


def reference(h_prev, c_prev, gates, seq, t, forget_bias, drop, dh=None, dc=None):
    """(H, C) and, given dh/dc, (dH_prev, dC_prev, dGates) in float64."""
    hp, cp, g = (np.asarray(a, np.float64)[0] for a in (h_prev, c_prev, gates))
    d = cp.shape[1]
    i, f, o, gg = sigmoid(g[:, :d]), sigmoid(g[:, d:2 * d] + forget_bias), sigmoid(g[:, 2 * d:3 * d]), \
        np.tanh(g[:, 3 * d:])
    c = f * cp + i * gg
    h = o * np.tanh(c)
    valid = (np.ones(cp.shape[0], bool) if seq is None else t < seq)[:, None]
    keep = 0.0 if drop else 1.0
    H, C = np.where(valid, h, keep * hp), np.where(valid, c, keep * cp)
    if dh is None:
        return H, C
    dh, dc = np.asarray(dh, np.float64)[0], np.asarray(dc, np.float64)[0]
    tc = np.tanh(c)
    dct = dc + dh * o * (1 - tc * tc)
    dgates = np.concatenate([dct * gg * i * (1 - i), dct * cp * f * (1 - f), dh * tc * o * (1 - o),
                             dct * i * (1 - gg * gg)], axis=1)
    dgates = np.where(valid, dgates, 0.0)
    dh_prev = np.where(valid, 0.0, keep * dh)
    dc_prev = np.where(valid, dct * f, keep * dc)
    return H, C, dh_prev, dc_prev, dgates


def inputs(n, d, dtype=np.float32, scale=2.0):
    h = RNG.standard_normal((1, n, d)).astype(dtype)
    c = RNG.standard_normal((1, n, d)).astype(dtype)
    g = (RNG.standard_normal((1, n, 4 * d)) * scale).astype(dtype)
    seq = RNG.integers(1, 6, n).astype(np.int32)
    return h, c, g, seq


@pytest.mark.parametrize("d", [8, 13, 64, 100])
@pytest.mark.parametrize("drop", [False, True])
def test_vector_path_forward_and_gradient(d, drop):
    n, t = 11, 3
    h, c, g, seq = inputs(n, d)
    H, C = K.lstm_unit(h, c, g, seq, t, forget_bias=0.7, drop_states=drop)
    want_h, want_c, *_ = reference(h, c, g, seq, t, 0.7, drop)
    np.testing.assert_allclose(H[0], want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(C[0], want_c, rtol=1e-5, atol=1e-6)
    dh = RNG.standard_normal((1, n, d)).astype(np.float32)
    dc = RNG.standard_normal((1, n, d)).astype(np.float32)
    got = K.lstm_unit_gradient(c, g, C, H, dc, dh, seq, t, forget_bias=0.7, drop_states=drop)
    want = reference(h, c, g, seq, t, 0.7, drop, dh, dc)[2:]
    for got_part, want_part in zip(got, want):
        np.testing.assert_allclose(got_part[0], want_part, rtol=1e-5, atol=2e-6)


def test_rows_over_the_team_without_sequence_lengths():
    n, d = 300, 72
    h, c, g, _ = inputs(n, d)
    H, C = K.lstm_unit(h, c, g, None, 0)
    want_h, want_c = reference(h, c, g, None, 0, 0.0, False)
    np.testing.assert_allclose(H[0], want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(C[0], want_c, rtol=1e-5, atol=1e-6)
    dh, dc = np.ones((1, n, d), np.float32), np.full((1, n, d), 0.5, np.float32)
    got = K.lstm_unit_gradient(c, g, C, H, dc, dh, None, 0)
    for got_part, want_part in zip(got, reference(h, c, g, None, 0, 0.0, False, dh, dc)[2:]):
        np.testing.assert_allclose(got_part[0], want_part, rtol=1e-5, atol=2e-6)


def test_extreme_gates_saturate():
    h, c, _, seq = inputs(4, 16)
    g = np.full((1, 4, 64), 120.0, np.float32)
    g[0, 1] = -120.0
    g[0, 2, ::2] = 1e30
    g[0, 3, 1::2] = -1e30
    H, C = K.lstm_unit(h, c, g, seq, 0)
    want_h, want_c = reference(h, c, g, seq, 0, 0.0, False)
    assert np.isfinite(H).all() and np.isfinite(C).all()
    np.testing.assert_allclose(H[0], want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(C[0], want_c, rtol=1e-5, atol=1e-6)


def test_float16_and_mixed_dtypes():
    h, c, g, seq = inputs(9, 24, np.float16, scale=1.0)
    H, C = K.lstm_unit(h, c, g, seq, 2)
    assert H.dtype == np.float16 and C.dtype == np.float16
    want_h, want_c = reference(h, c, g, seq, 2, 0.0, False)
    np.testing.assert_allclose(H[0], want_h, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(C[0], want_c, rtol=2e-3, atol=2e-3)
    # float32 state with float16 gates: float32 out, computed from the same halves
    H32, C32 = K.lstm_unit(h.astype(np.float32), c.astype(np.float32), g, seq, 2)
    assert H32.dtype == np.float32
    np.testing.assert_allclose(H32[0], want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(C32[0], want_c, rtol=1e-5, atol=1e-6)
