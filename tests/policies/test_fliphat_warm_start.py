"""FLIPHAT's certified defaults of issue 35: warm-started fits on bounded contributions, sign
contributions of the first fit, the first episode's length for the noise level, and the private
clip scale.

Derivations: docs/privacy/fliphat-noise-reduction.md §5–§7. End-to-end audits (real calibration
passes, halved noise and wrong accountants are caught): tests/privacy/test_end_to_end_audit.py.
"""

import copy
import math

import numpy as np
import pytest

from streaming_dpbandit.config import CONFIGS
from streaming_dpbandit.estimators.accumulator import EpisodeAccumulator, grid_floor
from streaming_dpbandit.estimators.niht import NIHT
from streaming_dpbandit.policies.fliphat import (
    FIRST_EPISODE_FACTOR,
    FLIPHAT,
    SCALE_MIN_EVIDENCE,
    SCALE_SHARE,
    WARM_ETA,
    WARM_MIN_X_MAX,
    auto_first_episode_len,
)
from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.privacy.peeling_accounting import peeling_pld_ratio
from streaming_dpbandit.privacy.scale_release import SCALE_GRID, scale_bins, scale_release

D = 12
FliphatConfig = CONFIGS["fliphat"]


def policy(**kw):
    # the fast backend: the private release of the clip scale has no secure-grid margin yet, so
    # it is a fast-backend option (on the secure default "auto" keeps the public priors' G)
    base = {"d": D, "s": 2, "epsilon": 1.0, "delta": 0.01, "b_max": 1.0, "seed": 0}
    return FLIPHAT(**(base | {"noise_backend": "fast"} | kw))


def warm_policy(n0=8, **kw):
    """A policy whose first fit is released, on fixed rows: episode 1 (n0·2 rounds) is warm."""
    pol = policy(first_episode_len=n0, **kw)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(n0, D))
    pol.decide(np.zeros((n0, 2, D)))
    pol.learn(X, X[:, 0] + X[:, 1], np.arange(1, n0 + 1))
    (rec,) = pol.refit()
    assert rec.params["contributions"] == "G·sign(x·y)" and pol.coefficients[0].size
    return pol


def episode_shift(rows_a, rows_b, **kw):
    """(2η/n)·h of episode 1 for two datasets, fed through the learning path after the same
    released θ⁰; returns |shift|, λ and θ⁰."""
    out = []
    for X, y in (rows_a, rows_b):
        pol = warm_policy(**kw)
        n = pol.schedule.length(1)
        start = pol.schedule.start(1)
        pol.decide(np.zeros((n, 2, D)))
        pol.learn(X, y, np.arange(start, start + n))
        out.append((2 * pol.step / n) * pol._acc[1].h)
        lam = pol._estimator().calibrate(n, pol.reward_clip_for(n), 1)[0]["sensitivity"]
    return np.abs(out[0] - out[1]), lam, pol._theta0_for(1)


# -- the warm start (§5) --------------------------------------------------------------------------
def test_defaults_are_the_warm_start_with_sign_contributions():
    pol = policy()
    assert pol.warm and pol.cold_form == "sign" and pol.step == WARM_ETA == 0.5
    issue20 = policy(warm_start=False)
    assert not issue20.warm and issue20.cold_form == "clipped" and issue20.step == 1e-4
    paper = policy(calibration="paper", clip_contexts=False)
    assert not paper.warm and paper.first_len == 1


def test_warm_sensitivity_is_attained_through_the_learning_path():
    """The changed row's residual contribution moves from +G to −G in every coordinate, fed
    10× beyond every bound: (2η/n)·h moves by exactly λ = 4ηG/n."""
    G = 0.3
    n = 16
    X = np.full((n, D), 10.0)
    y = np.full(n, 1e3)  # ỹ = R, far above x̄ᵀθ⁰: every residual contribution is +G
    X2 = X.copy()
    X2[3] = -10.0  # the replaced row: −x_max·𝟏, residual still > 0: −G everywhere
    shift, lam, theta0 = episode_shift((X, y), (X2, y), grad_clip=G, b_max=3.0)
    assert theta0[0].size  # a warm episode
    assert lam == pytest.approx(4 * WARM_ETA * G / n, rel=1e-15)
    assert np.all(shift <= lam * (1 + 1e-12))
    assert np.all(shift >= 4 * WARM_ETA * grid_floor(G) / n * (1 - 1e-12))


@pytest.mark.parametrize("seed", range(6))
def test_random_warm_neighbours_never_exceed_lambda(seed):
    rng = np.random.default_rng(seed)
    n = 16
    X = rng.normal(size=(n, D)) * rng.uniform(0.1, 20)
    y = rng.normal(size=n) * rng.uniform(0.1, 20)
    X2, y2 = X.copy(), y.copy()
    k = int(rng.integers(n))
    X2[k] = rng.normal(size=D) * 50
    y2[k] = rng.normal() * 50
    shift, lam, _ = episode_shift((X, y), (X2, y2), grad_clip=float(rng.uniform(0.05, 3)))
    assert np.all(shift <= lam * (1 + 1e-12))


def test_warm_contributions_are_the_clipped_residuals_against_the_model_in_force():
    pol = warm_policy(grad_clip=0.5)
    idx, val = pol.coefficients
    n, start = pol.schedule.length(1), pol.schedule.start(1)
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(n, D)), rng.normal(size=n)
    pol.decide(np.zeros((n, 2, D)))
    pol.learn(X, y, np.arange(start, start + n))
    xb, R, G = grid_floor(pol.x_bound), grid_floor(pol.reward_clip_for(n)), grid_floor(0.5)
    xc, yc = np.clip(X, -xb, xb), np.clip(y, -R, R)
    expect = np.clip(xc * (yc - xc[:, idx] @ val)[:, None], -G, G).sum(0)
    assert np.allclose(pol._acc[1].h, expect, atol=n * 2.0**-16)


def test_sign_contributions_of_the_first_fit():
    pol = policy(first_episode_len=10, grad_clip=0.5)
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(10, D)) * 4, rng.normal(size=10) * 4
    pol.decide(np.zeros((10, 2, D)))
    pol.learn(X, y, np.arange(1, 11))
    assert np.array_equal(
        pol._acc[0].h, (grid_floor(0.5) * np.sign(X) * np.sign(y)[:, None]).sum(0)
    )


def test_a_warm_fit_is_one_step_from_the_released_model():
    """Without noise (ε huge), the release is Peeling's top s of θ⁰ + (2η/n)·h."""
    acc = EpisodeAccumulator(D, "h")
    h = np.zeros(D)
    h[[1, 4]] = [8.0, -2.0]
    acc.learn_many(h[None, :], np.ones(1), bounds=(8.0, 1.0))
    acc.seal()
    est = NIHT(s=2, epsilon=1e9, delta=0.5, eta=0.5, l1_radius=100.0, x_max=1.0, grad_clip=8.0)
    theta0 = (np.array([1, 7]), np.array([0.25, 3.0]))
    fit = est.fit(
        acc, n=4, reward_clip=1.0, iterations=1, noise=NoiseSource(0), label=("t",), theta0=theta0
    )
    # θ^{½} = θ⁰ + (2·0.5/4)·h: coordinate 1 → 2.25, 7 → 3.0, 4 → −0.5
    assert fit.indices.tolist() == [1, 7] and np.allclose(fit.values, [2.25, 3.0], atol=1e-6)
    with pytest.raises(ValueError, match="warm start"):
        NIHT(s=2, epsilon=1.0, delta=0.5).fit(acc, 4, 1.0, 1, NoiseSource(0), ("t",), theta0)


def test_the_start_model_is_the_one_in_force_at_the_episode_s_first_round():
    """No delay: episode k starts from fit k. With a swap delay the old model still serves the
    episode's first rounds: it starts from fit k − 1 — and rows arriving after the swap still
    use that start (a model that was in force when their episode began)."""
    for W, expect in ((0, 1), (3, 0)):
        pol = policy(first_episode_len=8, swap_delay=W)
        assert [pol._start_fit(k) for k in (0, 1, 2)] == [0, expect, expect + 1]
    pol = warm_policy(n0=8)  # no delay: episode 1 starts from fit 1
    assert pol._theta0_for(1)[0].tolist() == pol.coefficients[0].tolist()


def test_restore_mid_episode_keeps_the_start_model_and_refits_identically():
    pol = warm_policy(n0=8, grad_clip=0.5)
    n, start = pol.schedule.length(1), pol.schedule.start(1)
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(n, D)), rng.normal(size=n)
    pol.decide(np.zeros((n, 2, D)))
    pol.learn(X[: n // 2], y[: n // 2], np.arange(start, start + n // 2))
    snap = copy.deepcopy(pol.state_dict())
    back = policy(first_episode_len=8, grad_clip=0.5).load_state_dict(snap)
    for p in (pol, back):
        p.learn(X[n // 2 :], y[n // 2 :], np.arange(start + n // 2, start + n))
    a, b = pol.refit()[0], back.refit()[0]
    assert a.content_digest() == b.content_digest()
    assert a.params["start_model"] == "default/fliphat/fit/episode=1" and a.params["warm_start"]


# -- the first episode's length (§6) -------------------------------------------------------------
def test_auto_first_episode_is_a_function_of_public_parameters():
    pol = policy(epsilon=1.0, delta=1e-6)
    rho = peeling_pld_ratio(2, 1, 1.0, 1e-6)
    assert pol.first_len == math.ceil(FIRST_EPISODE_FACTOR * math.log(D) / rho)
    assert pol.first_len == auto_first_episode_len(D, rho)
    assert policy(epsilon=4.0, delta=1e-6).first_len < pol.first_len  # less noise, sooner
    assert policy(first_episode_len=7).first_len == 7
    assert policy(grad_clip="off", warm_start=False).first_len == 1  # the paper's schedule
    ex = pol.explain(10_000)
    assert ex["first_episode_len"] == pol.first_len
    assert ex["episodes"][0]["rounds"][0] == pol.first_len + 1  # episode 1


# -- the private clip scale (§7) -----------------------------------------------------------------
def test_scale_release_moves_by_at_most_one_per_count_and_finds_the_median():
    rng = np.random.default_rng(4)
    v = rng.normal(size=500) * 3.0
    h = scale_bins(v)
    v2 = v.copy()
    v2[17] = 1e6  # replace one row
    below = np.cumsum(h)[:-1]
    below2 = np.cumsum(scale_bins(v2))[:-1]
    assert np.abs(below - below2).max() <= 1
    q = scale_release(h, 500, 200.0, np.random.default_rng(0))
    m = np.median(np.abs(v))
    assert m / 2**0.25 <= q <= m * 2**0.25  # the grid point next to the median
    # missing rows are zero rows: with half the rows missing, the median is below every row
    assert scale_release(h, 1000, 200.0, np.random.default_rng(0)) <= np.abs(v).min()
    assert SCALE_GRID[0] == 2.0**-10 and SCALE_GRID[-1] == 2.0**10


def test_private_scale_is_released_with_the_first_fit_and_composed():
    pol = policy(grad_clip="private", first_episode_len=400, epsilon=2.0, delta=1e-6, b_max=10.0)
    rng = np.random.default_rng(6)
    X = rng.normal(size=(400, D))
    y = 0.8 * X[:, 0] + 0.1 * rng.normal(size=400)
    pol.decide(np.zeros((400, 2, D)))
    pol.learn(X, y, np.arange(1, 401))
    assert pol.contribution_clip == 1.0  # unit sign contributions until the release
    (rec,) = pol.refit()
    q = rec.params["scale_release"]["value"]
    m = np.median(np.abs(y))
    assert m / 2 <= q <= 2 * m and pol.contribution_clip == q  # not b_max's 3.0
    eps_q = SCALE_SHARE * 2.0
    acc = rec.params["accountant"]
    assert rec.params["scale_release"]["epsilon"] == acc["composed_pure_epsilon"] == eps_q
    assert acc["ratio"] == peeling_pld_ratio(2, 1, 2.0, 1e-6, extra_pure=eps_q)
    assert acc["pld_epsilon"] <= 2.0 and rec.epsilon == 2.0 and rec.dp_valid
    assert rec.params["sensitivities"] == [pytest.approx(4 * WARM_ETA * q / 400)]
    # later fits clip at the released q, with the ratio of a fit alone
    n = pol.schedule.length(1)
    pol.decide(np.zeros((n, 2, D)))
    pol.learn(rng.normal(size=(n, D)), rng.normal(size=n), np.arange(401, 401 + n))
    (rec2,) = pol.refit()
    assert rec2.params["grad_clip"] == q and rec2.params["scale_release"] is None
    assert rec2.params["accountant"]["ratio"] == peeling_pld_ratio(2, 1, 2.0, 1e-6)
    back = policy(grad_clip="private", first_episode_len=400, epsilon=2.0, delta=1e-6)
    assert back.load_state_dict(copy.deepcopy(pol.state_dict())).contribution_clip == q


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"grad_clip": "off", "warm_start": True}, "warm_start needs clipped"),
        ({"grad_clip": "off", "cold_contributions": "sign"}, "sign"),
        ({"grad_clip": "private", "warm_start": False}, "private"),
        ({"grad_clip": "private", "cold_contributions": "clipped"}, "private"),
        ({"grad_clip": "private", "iterations": 2}, "one N-IHT iteration"),
        ({"first_episode_len": 0}, "first_episode_len"),
        ({"eta": -1.0}, "eta"),
        ({"cold_contributions": "magnitude"}, "cold_contributions"),
    ],
)
def test_invalid_combinations_are_rejected_by_policy_and_config(kw, match):
    with pytest.raises(ValueError, match=match):
        policy(**kw).decide(np.zeros((1, 2, D)))
    if kw.get("cold_contributions") != "magnitude":
        with pytest.raises(ValueError, match=match):
            FliphatConfig(d=D, s=2, **kw).build(seed=0).decide(np.zeros((1, 2, D)))


def test_auto_clip_is_private_only_where_the_first_fit_can_afford_the_median():
    """``grad_clip="auto"``: the private scale when n₀·ε′ ≥ SCALE_MIN_EVIDENCE (the FLIPHAT
    paper's d = 400, s = 10), the public priors' G otherwise (few rows: d = 12, s = 2)."""
    sparse = FLIPHAT(d=400, s=10, epsilon=1.0, delta=1e-6, b_max=10.0, noise_backend="fast")
    assert sparse.private_scale and sparse.contribution_clip == 1.0  # unit until released
    # on the default (secure) backend the scale is the public priors' G: no secure release yet
    assert not FLIPHAT(d=400, s=10, epsilon=1.0, delta=1e-6, b_max=10.0).private_scale
    n0 = auto_first_episode_len(400, peeling_pld_ratio(10, 1, 1.0, 1e-6))
    assert n0 * SCALE_SHARE * 1.0 >= SCALE_MIN_EVIDENCE
    assert sparse.first_len == auto_first_episode_len(
        400, peeling_pld_ratio(10, 1, 1.0, 1e-6, extra_pure=SCALE_SHARE)
    )
    small = policy(delta=1e-6)
    assert not small.private_scale and small.contribution_clip == pytest.approx(
        0.3 * math.hypot(1.0, 0.1)
    )
    assert (
        "private_clip" in sparse.explain(10)["formula"]
        and "private" not in small.explain(10)["formula"]
    )


def test_auto_warm_start_needs_standardised_contexts():
    """η = ½ is a Newton step for unit-variance coordinates: a coordinate clip x_max < 2 (e.g.
    unit-norm actions, mean square 1/d per coordinate) keeps issue 20's cold fits."""
    assert policy().x_bound >= WARM_MIN_X_MAX and policy().warm  # √(2 ln 12) = 2.23
    unit = policy(x_max=1.0)
    assert not unit.warm and unit.cold_form == "clipped" and unit.step == 1e-4
    assert policy(x_max=1.0, warm_start=True).warm  # an explicit choice is kept
