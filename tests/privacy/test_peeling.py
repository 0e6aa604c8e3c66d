"""Peeling (FLIPHAT spec §3.1, §15)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.privacy.peeling import Peeling, peeling_scale


@given(
    arrays(np.float64, st.integers(3, 60), elements=st.floats(-100, 100)),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
)
def test_returns_s_distinct_indices_and_s_values(v, s, seed):
    idx, vals = Peeling(s, 1.0, 0.1, 1.0).release(v, np.random.default_rng(seed))
    assert idx.shape == (s,) and vals.shape == (s,)
    assert len(set(idx.tolist())) == s
    assert np.all((0 <= idx) & (idx < v.size))


@given(arrays(np.float64, 30, elements=st.floats(-100, 100), unique=True), st.integers(1, 10))
def test_tiny_noise_gives_the_exact_top_s(v, s):
    idx, vals = Peeling(s, 1e9, 0.5, 1e-9).release(v, np.random.default_rng(0))
    expected = np.argsort(-np.abs(v), kind="stable")[:s]
    assert idx.tolist() == expected.tolist()  # in order of selection
    np.testing.assert_allclose(vals, v[idx], atol=1e-4)


def test_scale_formula_and_unit_test_value():
    assert peeling_scale(1.0, 10, 1.0, 0.01) == pytest.approx(23.507880, rel=1e-6)
    assert Peeling(10, 2.0, 0.01, 3.0).scale == pytest.approx(3.0 * 23.507880 / 2.0, rel=1e-6)


def test_fresh_noise_every_round_mask_after_noise():
    """Counting the draws: s vectors of size d, then s values — no vector is reused."""

    class Recorder:
        def __init__(self):
            self.rng = np.random.default_rng(5)
            self.sizes = []
            self.draws = []

        def laplace(self, loc, scale, size):
            x = self.rng.laplace(loc, scale, size)
            self.sizes.append(size)
            self.draws.append(x.copy())
            return x

    rec = Recorder()
    Peeling(4, 1.0, 0.1, 1.0).release(np.arange(12.0), rec)
    assert rec.sizes == [(1, 12)] * 4 + [(1, 4)]
    flat = [tuple(d.ravel()) for d in rec.draws]
    assert len(set(flat)) == len(flat)


def test_no_noise_vector_repeats_across_fits():
    """Independent streams per fit label (a repeated PRNG key would repeat vectors)."""
    src = NoiseSource(seed=11)
    seen = set()
    for k in range(50):
        g = src.generator("fit", k)
        w = g.laplace(size=64)
        assert tuple(w) not in seen
        seen.add(tuple(w))


def test_release_many_matches_release_row_by_row():
    V = np.random.default_rng(0).normal(size=(1, 20))
    peel = Peeling(3, 1.0, 0.05, 0.5)
    a = peel.release(V[0], np.random.default_rng(9))
    b = peel.release_many(V, np.random.default_rng(9))
    assert np.array_equal(a[0], b[0][0]) and np.array_equal(a[1], b[1][0])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(s=0),
        dict(s=99),
        dict(epsilon=0.0),
        dict(delta=0.0),
        dict(delta=1.0),
        dict(sensitivity=0.0),
    ],
)
def test_invalid_parameters(kwargs):
    params = dict(s=2, epsilon=1.0, delta=0.1, sensitivity=1.0) | kwargs
    with pytest.raises(ValueError):
        Peeling(**params).release(np.ones(10), np.random.default_rng(0))


def test_rejects_non_finite_input():
    with pytest.raises(ValueError):
        Peeling(1, 1.0, 0.1, 1.0).release(np.array([1.0, np.nan]), np.random.default_rng(0))
