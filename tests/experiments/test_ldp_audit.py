"""Privacy audits of the LDP-GLB local randomizers (DESIGN §7, docs/privacy/ldp-glb.md):
certified calibrations pass, sharply; a halved noise scale is caught."""

import pytest

from streaming_dpbandit.experiments import ldp_audits


@pytest.mark.parametrize(
    "kwargs",
    [dict(epsilon=1.0, d=3), dict(epsilon=0.5, d=20, seed=21)],
    ids=["eps1-d3", "eps0.5-d20"],
)
def test_l2_ball_report_passes_sharply_and_halved_noise_is_caught(kwargs):
    ok = ldp_audits.audit_l2_ball(1.0, n=100_000, **kwargs)
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.7 * ok.claimed_epsilon
    halved = ldp_audits.audit_l2_ball(0.5, n=100_000, **kwargs)
    assert not halved.passed, halved
    assert halved.epsilon_lb > 1.5 * halved.claimed_epsilon


def test_gaussian_report_analytic_claim_is_tight():
    ok = ldp_audits.audit_gaussian_report("end-to-end", "analytic", 1.0, n=200_000)
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.7 * ok.claimed_epsilon
    halved = ldp_audits.audit_gaussian_report("end-to-end", "analytic", 0.5, n=200_000)
    assert not halved.passed and halved.epsilon_lb > 1.5 * halved.claimed_epsilon, halved


def test_gaussian_report_classical_meets_its_claim_and_its_exact_profile():
    """Classical σ is ~2× conservative at (1, 0.01): the end-to-end claim passes; the tight
    component claim (the exact profile at ε* = 0.25) catches a halved σ."""
    ok = ldp_audits.audit_gaussian_report("end-to-end", "classical", 1.0, n=200_000)
    assert ok.passed, ok
    exact = ldp_audits.audit_gaussian_report("exact", "classical", 1.0, n=200_000)
    assert exact.passed and exact.epsilon_lb > 0.7 * exact.claimed_epsilon, exact
    halved = ldp_audits.audit_gaussian_report("exact", "classical", 0.5, n=200_000)
    assert not halved.passed and halved.epsilon_lb > 1.5 * halved.claimed_epsilon, halved


def test_multi_parameter_report_meets_the_composed_claim():
    ok = ldp_audits.audit_multi_sgd_report(1.0, n=100_000)
    assert ok.passed, ok  # measured ≈ ε/2: the pair's exact loss (docs/privacy/ldp-glb.md)
    assert ok.epsilon_lb < 0.6 * ok.claimed_epsilon
    halved = ldp_audits.audit_multi_sgd_report(0.5, n=100_000)
    assert not halved.passed, halved
