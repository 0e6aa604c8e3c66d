"""The secure backend's rounding term is inside the ledger's (ε, δ) (issue 31 §5).

Rounding a value to the grid γ = grid_of(b) ≤ b·2⁻³⁰ can move a neighbour's integer release by
one more unit, so a secure Laplace-type release's sensitivity is λ + γ per coordinate, not λ
(docs/privacy/secure-noise.md, "Privacy"). Each check recomputes, from the ledger record's own
public numbers, the privacy of the noise actually drawn *with* that term and requires it within
what the record claims. Before issue 31 the records claimed the continuous calibration's figure
and every check here failed by the rounding term.
"""

from __future__ import annotations

import numpy as np
import pytest

from streaming_dpbandit.policies import REGISTRY
from streaming_dpbandit.privacy.accountant import Accountant
from streaming_dpbandit.privacy.secure_noise import grid_of


def _fliphat_records(backend):
    pol = REGISTRY["fliphat"](
        d=20, s=2, epsilon=1.0, delta=0.01, first_episode_len=8, seed=0, noise_backend=backend
    )
    rng = np.random.default_rng(0)
    recs = []
    while pol.t < 40:
        if pol.refit_due():
            recs += pol.refit()
        n = min(pol.max_decide_batch(), 40 - pol.t)
        X = rng.normal(size=(n, 3, 20))
        dec = pol.decide(X)
        x = X[np.arange(n), dec.arms]
        pol.learn(x, x[:, 0], dec.rounds)
    return pol, recs


def test_fliphat_peeling_ratio_with_the_grid_term_is_the_certified_one():
    _, recs = _fliphat_records("secure")
    fits = [r for r in recs if r.params["iterations"]]
    assert fits
    for r in fits:
        lam, xi = r.params["sensitivities"][0], r.params["scales"][0]
        certified = r.params["accountant"]["ratio"]  # what the PLD (ε, δ) is computed for
        assert (lam + grid_of(xi)) / xi <= certified
        assert r.params["rounding_margin"] == 2.0**-30
    _, fast = _fliphat_records("fast")
    assert all(r.params["rounding_margin"] == 0.0 for r in fast)


def test_private_lasso_svt_epsilon_in_the_ledger_covers_the_grid_term():
    pol = REGISTRY["private-lasso"](
        d=4, s0=1, horizon=64, support_cap=2, clip_l2=4.0, reward_bound=4.0, l_min=3,
        seed=0, noise_backend="secure",
    )  # fmt: skip
    k = pol.boundary_constants(3)
    delta_q, sigma = k["sensitivity"], k["svt_sigma_nominal"]
    effective = delta_q + grid_of(2 * sigma) + grid_of(sigma)  # the threshold shift, on grid
    eps0 = 2.0 * effective / sigma
    with pytest.warns(UserWarning, match="dense features"):
        pol.refit_due()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 3, 4))
    dec = pol.decide(X)
    pol.learn(X[np.arange(8), dec.arms], rng.normal(size=8), dec.rounds)
    rec = pol.refit()[0]
    svt = [c for c in rec.accounting if c.get("mechanism") == "svt"]
    assert svt and svt[0]["epsilon"] >= eps0  # the ledger's pure ε0 includes the rounding
    # and it is still within the per-call zCDP budget the calibration gave the SVT
    assert svt[0]["count"] * svt[0]["epsilon"] ** 2 / 2 <= k["rho_svt"] * (1 + 1e-12)


@pytest.mark.parametrize("name", ["dpucb-mat", "dpts-mat"])
def test_batch_mean_laplace_component_covers_the_grid_term(name):
    pol = REGISTRY[name](
        matroid={"type": "uniform", "n_items": 5, "k": 2}, epsilon=1.0, seed=0,
        noise_backend="secure",
    )  # fmt: skip
    recs = []
    for _ in range(8):
        if pol.refit_due():
            recs += pol.refit()
        b = pol.decide_slates(1)
        pol.learn(b.slates, np.full((1, 2), 0.7), b.rounds)
    recs += pol.refit()
    scale, K = recs[0].params["laplace_scale"], pol.K
    assert recs[0].params["rounding_margin"] == grid_of(scale)
    drawn = 2 * K * (1 + grid_of(scale)) / scale  # the noise drawn, with the grid's rounding
    assert drawn <= pol.epsilon_certified
    # what the ledger composes covers it, and is the statement's number exactly
    spend = Accountant(recs).spend("default").of_record()
    assert drawn <= spend["epsilon"] == pol.epsilon_certified == pol.privacy.epsilon


def test_the_statement_covers_a_person_whose_rounds_fall_in_several_episodes():
    pol, _ = _fliphat_records("secure")
    text = pol.privacy.text()
    assert "sequential composition" in text and "group privacy" in text
