"""The two local randomizers of LDP-GLB (spec §3, acceptance tests §15.1–15.2).

Spec: docs/specs/ldp_glb.md.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming_dpbandit.ldp import (
    GaussianOLSMechanism,
    L2BallMechanism,
    analytic_sigma,
    ball_radius,
    classical_sigma,
    ols_tau,
    printed_radius,
)
from streaming_dpbandit.ldp.gaussian import gaussian_delta, packed_size, triu_indices
from streaming_dpbandit.privacy.gaussian import analytic_gaussian_sigma
from streaming_dpbandit.privacy.gaussian import gaussian_delta as scipy_gaussian_delta

GOLDEN_RADII = {  # spec §3.1, R = 1
    2: (12.632, 6.414, 3.399, 2.063),
    10: (31.086, 15.783, 8.365, 5.076),
    18: (42.171, 21.411, 11.348, 6.886),
    20: (44.514, 22.601, 11.978, 7.268),
    60: (77.745, 39.473, 20.921, 12.694),
}


@pytest.mark.parametrize("d", sorted(GOLDEN_RADII))
def test_radius_golden_values(d):
    for eps, want in zip((0.25, 0.5, 1.0, 2.0), GOLDEN_RADII[d]):
        # the table is rounded to 3 decimals; the formula must agree to that rounding
        assert abs(ball_radius(eps, d) - want) <= 5e-4 + 1e-6 * want
        assert ball_radius(eps, d, R=2.5) == pytest.approx(2.5 * ball_radius(eps, d), rel=1e-12)


def test_radius_is_finite_beyond_gamma_overflow():
    r = ball_radius(1.0, 2000)
    # r ≈ R·coth(ε/2)·√(πd/2) for large d
    assert r == pytest.approx(2.1639534 * math.sqrt(math.pi * 2000 / 2), rel=1e-3)


N = 100_000


def _check_unbiased(mech, g, Z, tol_factor=4.5):
    r = mech.radius
    tol = tol_factor * r / math.sqrt(Z.shape[0] * mech.d)
    return np.abs(Z.mean(axis=0) - g) <= tol


@pytest.mark.parametrize("d", [2, 10, 20])
@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_l2_ball_is_unbiased_on_the_sphere_and_hemisphere_frequency(d, eps):
    """Spec §3.1 unbiasedness test: mean within 4.5·r/√(N·d) of g, every norm = r, and the
    frequency of zᵀg > 0 within 4.5 binomial standard deviations."""
    rng = np.random.default_rng([d, int(eps * 10)])
    mech = L2BallMechanism(eps, 1.0, d)
    g = np.zeros(d)
    g[0] = 0.7
    Z = mech.privatize(np.tile(g, (N, 1)), rng)
    assert _check_unbiased(mech, g, Z).all(), Z.mean(axis=0)[:4]
    norms = np.linalg.norm(Z, axis=1)
    assert np.all(np.abs(norms / mech.radius - 1.0) <= 1e-9)
    p = 0.5 + 0.7 / 2.0
    q = p * math.exp(eps) / (1 + math.exp(eps)) + (1 - p) / (1 + math.exp(eps))
    frac = np.mean(Z @ g > 0)
    assert abs(frac - q) <= 4.5 * math.sqrt(q * (1 - q) / N)


@pytest.mark.parametrize("d", [2, 10, 20])
@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_l2_ball_of_zero_is_centred(d, eps):
    mech = L2BallMechanism(eps, 1.0, d)
    Z = mech.privatize(np.zeros((N, d)), np.random.default_rng([d, 99]))
    assert _check_unbiased(mech, np.zeros(d), Z).all()
    assert np.allclose(np.linalg.norm(Z, axis=1), mech.radius, rtol=1e-9)


@pytest.mark.parametrize("d", [2, 10, 20])
@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_printed_radius_is_biased(d, eps):
    """The negative test of spec §3.1: the paper's printed radius fails the mean check."""
    mech = L2BallMechanism(eps, 1.0, d, radius=printed_radius(eps, d))
    g = np.zeros(d)
    g[0] = 0.7
    Z = mech.privatize(np.tile(g, (N, 1)), np.random.default_rng([d, 7]))
    assert not _check_unbiased(mech, g, Z)[0]


def test_l2_ball_rejects_unclipped_input_and_nan():
    mech = L2BallMechanism(1.0, 1.0, 3)
    with pytest.raises(ValueError, match="clip"):
        mech.privatize(np.array([1.0, 1.0, 0.0]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="NaN"):
        mech.privatize(np.array([np.nan, 0.0, 0.0]), np.random.default_rng(0))


def test_l2_ball_same_seed_same_output():
    mech = L2BallMechanism(1.0, 2.0, 5)
    g = np.random.default_rng(1).normal(size=(10, 5)) * 0.3
    a = mech.privatize(g, np.random.default_rng(3))
    b = mech.privatize(g, np.random.default_rng(3))
    assert np.array_equal(a, b)


# -- Gaussian ------------------------------------------------------------------------------------
def test_sigma_golden_values():
    """Spec §3.2: σ_{ε,δ} = 2√(2 ln(1.25/δ))/ε and σ_{ε/2,δ/2} = 4√(2 ln(2.5/δ))/ε."""
    for (eps, delta), want in {
        (1, 0.01): 6.215,
        (0.5, 0.01): 12.430,
        (1, 0.1): 4.495,
        (0.5, 0.1): 8.990,
    }.items():
        assert ols_tau(eps, delta) == pytest.approx(want, abs=5e-4)
    assert ols_tau(0.5, 0.005) == pytest.approx(13.292, abs=5e-4)
    assert ols_tau(0.5, 0.05) == pytest.approx(10.149, abs=5e-4)


def test_classical_refuses_epsilon_above_one():
    with pytest.raises(ValueError, match="ε ≤ 1"):
        ols_tau(1.5, 0.01, "classical")
    assert ols_tau(1.5, 0.01, "analytic") > 0


@pytest.mark.parametrize("delta", [1e-10, 1e-6, 1e-3, 0.01, 0.1, 0.4])
def test_classical_at_epsilon_one_meets_the_exact_profile(delta):
    """Classical σ is proved for ε < 1; at ε = 1 it still satisfies the exact (Balle–Wang) δ(ε)."""
    sigma = classical_sigma(1.0, delta)
    assert scipy_gaussian_delta(sigma, 1.0) <= delta


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 8.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-5, 1e-2])
def test_sdk_analytic_sigma_matches_the_scipy_implementation(eps, delta):
    mine = analytic_sigma(eps, delta, 2.0)
    ref = analytic_gaussian_sigma(eps, delta, 2.0)
    assert mine == pytest.approx(ref, rel=1e-8)
    assert scipy_gaussian_delta(mine, eps, 2.0) <= delta * (1 + 1e-9)
    assert gaussian_delta(mine, eps, 2.0) == pytest.approx(
        scipy_gaussian_delta(mine, eps, 2.0), rel=1e-6, abs=1e-15
    )


def _whitened(x, r, c_r, tau):
    rows, cols = triu_indices(x.size)
    return np.concatenate([np.outer(x, x)[rows, cols] / (2 * tau), r * x / (c_r * tau)])


def _unit_ball(v):
    v = np.asarray(v, dtype=float)
    n = np.linalg.norm(v)
    return v / n if n > 1 else v


@given(
    d=st.integers(1, 6),
    seed=st.integers(0, 2**31),
    c_r=st.sampled_from([0.5, 1.0, 3.0]),
    shrink=st.floats(0.0, 1.0),
    sign=st.sampled_from([-1.0, 1.0]),
)
def test_whitened_sensitivity_is_at_most_two_over_tau(d, seed, c_r, shrink, sign):
    """Spec §15.2: over unit-ball pairs with ±c_r rewards, ‖f(x, r) − f(x′, r′)‖ ≤ 2/τ for the
    report whitened by its stds (2τ, c_r τ); pairs include x′ close to x (the worst case)."""
    rng = np.random.default_rng(seed)
    tau = 1.7
    x = _unit_ball(rng.normal(size=d) * rng.uniform(0.2, 3.0))
    x2 = _unit_ball((1 - shrink) * x + shrink * rng.normal(size=d))
    r, r2 = c_r * rng.choice([-1.0, 1.0]), sign * c_r * rng.uniform(0, 1)
    diff = _whitened(x, r, c_r, tau) - _whitened(x2, r2, c_r, tau)
    assert np.linalg.norm(diff) <= 2.0 / tau * (1 + 1e-12)


def test_whitened_sensitivity_is_attained_in_the_limit():
    tau, c_r = 2.0, 1.0
    x = np.array([0.6, 0.8])
    diff = _whitened(x, c_r, c_r, tau) - _whitened(x, -c_r, c_r, tau)
    assert np.linalg.norm(diff) == pytest.approx(2.0 / tau, rel=1e-12)


def test_printed_stds_fail_beyond_sqrt_two():
    """At ‖x‖ = C_B > √2 the printed stds (2C_Bσ, c_r C_Bσ) no longer cover the sensitivity."""
    tau, C = 1.0, 2.0
    x = np.array([C, 0.0])
    x2 = np.array([C * math.cos(0.05), C * math.sin(0.05)])
    rows, cols = triu_indices(2)

    def f(v, r):
        return np.concatenate([np.outer(v, v)[rows, cols] / (2 * C * tau), r * v / (C * tau)])

    assert np.linalg.norm(f(x, 1.0) - f(x2, -1.0)) > 2.0 / tau


def test_gaussian_report_moments():
    d, n = 3, 200_000
    mech = GaussianOLSMechanism.certified(d, 1.0, 0.01, c_r=2.0)
    x = np.array([0.6, 0.0, 0.8])
    M, u = mech.privatize(np.tile(x, (n, 1)), np.full(n, 1.5), np.random.default_rng(5))
    rows, cols = triu_indices(d)
    assert M.shape == (n, packed_size(d)) and u.shape == (n, d)
    assert np.abs(M.mean(0) - np.outer(x, x)[rows, cols]).max() < 4.5 * mech.matrix_std / n**0.5
    assert np.abs(u.mean(0) - 1.5 * x).max() < 4.5 * mech.vector_std / n**0.5
    assert M.std(0) == pytest.approx(np.full(6, 2 * mech.tau), rel=0.01)
    assert u.std(0) == pytest.approx(np.full(3, 2.0 * mech.tau), rel=0.01)
