"""The secure noise backend on the LDP client randomizers (issue 22 §1).

ℓ2-ball: exact coins and an exactly sign-symmetric direction law make the report exactly ε-LDP
whatever the float geometry (docs/privacy/secure-noise.md, "LDP randomizers"). Gaussian OLS:
grid releases with exact discrete Gaussian noise under the Rényi-certified
``gaussian="discrete"`` calibration. Audits with their halved-noise mutants on both backends,
grid, goodness of fit, reproducibility from the device key and the message id.
"""

import numpy as np
import pytest
from scipy import stats

from dpbandit_testing.secure_audit_helpers import (
    SecureBatches,
    check_audit_and_mutant,
    run_audit,
)
from streaming_dpbandit.ldp import ModelSnapshot, ModelSpec
from streaming_dpbandit.ldp.client import LDPClient
from streaming_dpbandit.ldp.gaussian import GaussianOLSMechanism, ols_tau
from streaming_dpbandit.ldp.l2_ball import L2BallMechanism
from streaming_dpbandit.ldp.model import SnapshotError
from streaming_dpbandit.ldp.randomizers import build_payloads
from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.privacy.secure_noise import grid_of
from streaming_dpbandit.privacy.zcdp import delta_from_rho_cks


def _audit_l2(backend, multiplier, n=40_000, epsilon=1.0, d=3, seed=7):
    """Worst-case pair g = ±R·e₁ (the exact privacy-loss statistic: the output's side).
    The mutant spends 2ε on the side coin (the ℓ2 ball's "halved noise")."""
    base = L2BallMechanism(epsilon, 1.0, d)
    mech = base
    if multiplier != 1.0:
        mech = L2BallMechanism(epsilon / multiplier, 1.0, d, radius=base.radius)
    streams = SecureBatches(3, "l2")

    def sampler(which, k, rng):
        g = np.zeros((k, d))
        g[:, 0] = 1.0 if which == 0 else -1.0
        return np.sign(mech.privatize(g, rng if backend == "fast" else streams.next())[:, 0])

    return run_audit(sampler, epsilon, 0.0, n, seed, f"l2 ball {backend} ×{multiplier:g}")


@pytest.mark.parametrize("backend", ["fast", "secure"])
def test_l2_ball_audit_passes_sharply_and_the_2eps_mutant_is_caught(backend):
    check_audit_and_mutant(lambda m: _audit_l2(backend, m), sharp=0.7, caught_by=1.5)


def test_secure_l2_ball_is_exactly_sign_symmetric_and_unbiased():
    """The output is ±w for a direction w of the base law; the side coin is exact: the share of
    outputs on the input's side is e^ε/(1+e^ε) within 4 standard errors, and the mean is g."""
    mech = L2BallMechanism(1.0, 1.0, 2)
    n = 40_000
    g = np.tile([0.7, 0.0], (n, 1))
    Z = mech.privatize(g, NoiseSource(1, backend="secure").generator("l2"))
    assert np.allclose(np.linalg.norm(Z, axis=1), mech.radius)
    p = np.e / (1 + np.e)
    # P[same side as g] = b·p + (1 − b)(1 − p), b = ½ + ‖g‖/2R
    b = 0.5 + 0.7 / 2
    same = b * p + (1 - b) * (1 - p)
    se = np.sqrt(same * (1 - same) / n)
    assert abs((Z[:, 0] > 0).mean() - same) < 4 * se
    se_mean = mech.radius / np.sqrt(n)
    assert np.all(np.abs(Z.mean(axis=0) - [0.7, 0.0]) < 4 * se_mean)
    # within a side the direction is uniform: |sin(angle)| has CDF (2/π)·arcsin (KS, α = 10⁻⁴)
    ang = np.arctan2(Z[:, 1], Z[:, 0])
    sin_law = lambda s: 2 / np.pi * np.arcsin(s)  # noqa: E731
    assert stats.kstest(np.abs(np.sin(ang[Z[:, 0] > 0])), sin_law).pvalue > 1e-4


def _audit_ols(backend, multiplier, n=30_000, epsilon=1.0, delta=1e-2, seed=9):
    """d = 1, worst-case pair (x, r) = (1, ±c_r): the vector coordinate carries the whole
    rescaled sensitivity 2 (the matrix coordinate x² is equal)."""
    gauss = "discrete" if backend == "secure" else "analytic"
    tau = ols_tau(epsilon, delta, gauss, n_coords=2)
    mech = GaussianOLSMechanism(1, 2 * tau * multiplier, tau * multiplier)
    streams = SecureBatches(3, "ols")

    def sampler(which, k, rng):
        r = rng if backend == "fast" else streams.next()
        _, u = mech.privatize(np.ones((k, 1)), np.full(k, 1.0 if which == 0 else -1.0), r)
        return u[:, 0]

    return run_audit(sampler, epsilon, delta, n, seed, f"ols report {backend} ×{multiplier:g}")


@pytest.mark.parametrize("backend", ["fast", "secure"])
def test_ols_report_audit_passes_and_halved_noise_is_caught(backend):
    check_audit_and_mutant(lambda m: _audit_ols(backend, m))


def test_discrete_calibration_is_renyi_certified_with_the_rounding_margin():
    tau = ols_tau(1.0, 1e-2, "discrete", n_coords=9)
    rho = (2 / tau + 3 * 2.0**-30) ** 2 / 2
    assert delta_from_rho_cks(rho, 1.0) <= 1e-2 * (1 + 1e-9)
    assert tau > ols_tau(1.0, 1e-2, "analytic")  # more noise than the continuous profile


def test_secure_ols_reports_lie_on_the_grids_and_match_the_discrete_gaussian():
    mech = GaussianOLSMechanism(2, 4.0, 3.0)
    n = 6_000
    X = np.tile([0.3, 0.4], (n, 1))
    M, u = mech.privatize(X, np.full(n, 0.5), NoiseSource(2, backend="secure").generator("o"))
    for V, std in ((M, 4.0), (u, 3.0)):
        units = V / grid_of(std)
        assert np.array_equal(units, np.rint(units))
    zM = (M - np.array([0.09, 0.12, 0.16])) / 4.0
    zu = (u - np.array([0.15, 0.2])) / 3.0
    z = np.concatenate([zM.ravel(), zu.ravel()])
    assert stats.kstest(z, "norm").pvalue > 1e-4
    assert stats.kstest(z / 1.1, "norm").pvalue < 1e-4  # 10 % too much noise is rejected


def _client(spec, **kw):
    theta = np.zeros((spec.K, spec.d)) if spec.setting == "multi" else np.zeros(spec.d)
    snap = ModelSnapshot("shop", "m1", 7, spec, theta=theta)
    return LDPClient(snap, max_epsilon=1.0, max_delta=0.01, **kw)


def test_client_reports_are_reproducible_from_the_key_and_msg_id():
    spec = ModelSpec(
        variant="ols", setting="multi", d=2, K=3, epsilon=1.0, delta=0.01, gaussian="discrete"
    )
    a = _client(spec, noise_backend="secure", noise_key=5)
    ch = a.decide(np.array([0.3, 0.2]))
    rep = a.report(ch, 0.5)
    again = NoiseSource(5, backend="secure").generator("ldp-report", rep.msg_id, track=False)
    P = build_payloads(
        spec,
        ch.phase,
        np.zeros((3, 2)),
        np.array([ch.arm]),
        ch._context[None, :],
        np.array([0.5]),
        again,
    )[0]
    assert np.array_equal(P, rep.payload)
    b = _client(spec, noise_backend="secure", noise_key=6)
    assert not np.array_equal(b.report(b.decide(np.array([0.3, 0.2])), 0.5).payload, rep.payload)


def test_secure_client_refuses_ols_models_without_the_discrete_calibration():
    spec = ModelSpec(
        variant="ols", setting="single", d=2, K=3, epsilon=1.0, delta=0.01, gaussian="analytic"
    )
    with pytest.raises(SnapshotError, match="gaussian='discrete'"):
        _client(spec, noise_backend="secure")
    _client(spec)  # the fast backend keeps the analytic calibration


def _ldp_run(pol, rounds, seed=0):
    rng = np.random.default_rng(seed)
    theta = np.array([0.6, 0.8])
    pol.records = []
    while pol.t < rounds:
        if pol.refit_due():
            pol.records += pol.refit()
        n = min(8, pol.max_decide_batch())
        X = rng.normal(size=(n, pol.n_arms, 2))
        dec = pol.decide(X)
        x = X[np.arange(n), dec.arms]
        pol.learn(x, x @ theta + 0.1 * rng.normal(size=n), dec.rounds)
    return pol


@pytest.mark.parametrize("variant, gauss", [("sgd", "classical"), ("ols", "discrete")])
def test_ldp_glb_simulated_devices_on_the_secure_backend_are_reproducible(variant, gauss):
    from streaming_dpbandit.policies import LDPGLB

    kw = dict(
        d=2, n_arms=3, variant=variant, epsilon=1.0, gaussian=gauss, seed=4, noise_backend="secure"
    )
    a = _ldp_run(LDPGLB(**kw), 64)
    b = _ldp_run(LDPGLB(**kw), 64)
    assert a.records and {r.noise_backend for r in a.records} == {"secure"}
    assert np.array_equal(a._server.theta, b._server.theta)
    fast = _ldp_run(LDPGLB(**{**kw, "noise_backend": "fast"}), 64)
    assert not np.array_equal(a._server.theta, fast._server.theta)
    # a restored policy continues the batch counter: it never repeats a stream
    c = LDPGLB(**kw).load_state_dict(a.state_dict())
    assert c._secure_batches == a._secure_batches > 0


def test_ldp_glb_refuses_secure_ols_without_the_discrete_calibration():
    from streaming_dpbandit.policies import LDPGLB

    with pytest.raises(ValueError, match="gaussian='discrete'"):
        LDPGLB(d=2, variant="ols", gaussian="analytic", noise_backend="secure").refit()
