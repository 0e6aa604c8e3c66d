"""Π_C, the exact Euclidean projection onto the ℓ1 ball (FLIPHAT spec §3.2, §15)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from streaming_dpbandit.privacy.projection import project_l1_ball

vectors = arrays(np.float64, st.integers(1, 40), elements=st.floats(-1e3, 1e3))
radii = st.floats(1e-3, 1e3)


def reference_projection(v, C):
    """Independent algorithm: bisection on the threshold τ of Σ max(|v| − τ, 0) = C."""
    a = np.abs(v)
    if a.sum() <= C:
        return v.copy()
    lo, hi = 0.0, a.max()
    for _ in range(200):
        mid = (lo + hi) / 2
        if np.maximum(a - mid, 0).sum() > C:
            lo = mid
        else:
            hi = mid
    return np.sign(v) * np.maximum(a - hi, 0)


@given(vectors, radii)
def test_output_is_in_the_ball(v, C):
    assert np.abs(project_l1_ball(v, C)).sum() <= C  # exactly: the sensitivity bound needs it


def test_rounding_cannot_push_the_norm_above_the_radius():
    """Found by hypothesis: τ's rounding left ‖u‖₁ = 1 + 1.6e-12 for this input."""
    u = project_l1_ball(np.full(11, 455.51147093562076), 1.0)
    assert np.abs(u).sum() <= 1.0


@given(vectors, radii)
def test_identity_inside_the_ball(v, C):
    if np.abs(v).sum() <= C:
        np.testing.assert_array_equal(project_l1_ball(v, C), v)


@given(vectors, radii)
def test_matches_an_independent_solver(v, C):
    np.testing.assert_allclose(
        project_l1_ball(v, C), reference_projection(v, C), atol=1e-9 * max(1, np.abs(v).max())
    )


@given(vectors, radii)
def test_is_the_closest_point(v, C):
    """Optimality: no random feasible point is closer to v than the projection."""
    p = project_l1_ball(v, C)
    rng = np.random.default_rng(0)
    d0 = np.linalg.norm(v - p)
    for _ in range(20):
        u = rng.normal(size=v.shape)
        u *= rng.uniform(0, C) / max(np.abs(u).sum(), 1e-300)
        assert np.linalg.norm(v - u) >= d0 - 1e-9


@given(vectors, radii)
def test_support_never_grows_and_signs_kept(v, C):
    p = project_l1_ball(v, C)
    assert set(np.nonzero(p)[0]) <= set(np.nonzero(v)[0])
    assert np.all(p * v >= 0)


@given(vectors, vectors, radii)
def test_non_expansive(v, w, C):
    if v.shape != w.shape:
        return
    lhs = np.linalg.norm(project_l1_ball(v, C) - project_l1_ball(w, C))
    assert lhs <= np.linalg.norm(v - w) + 1e-9


@pytest.mark.parametrize("bad", [[np.nan, 1.0], [np.inf]])
def test_rejects_non_finite(bad):
    with pytest.raises(ValueError):
        project_l1_ball(np.array(bad), 1.0)


def test_rejects_bad_radius():
    with pytest.raises(ValueError):
        project_l1_ball([1.0], 0.0)
