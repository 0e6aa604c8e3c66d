"""N-IHT: calibration values, sensitivity derivation, forms, schedule (FLIPHAT spec §5, §6, §15)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming_dpbandit.estimators.accumulator import EpisodeAccumulator
from streaming_dpbandit.estimators.niht import NIHT, iterations_for, niht_sensitivity
from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.privacy.projection import project_l1_ball

D = 400
XMAX = math.sqrt(2 * math.log(D))
BMAX = 3.436219
N = 1024


def test_spec_unit_values():
    """Spec §5.4, to 1e-6 relative."""
    assert XMAX == pytest.approx(3.461637, rel=1e-6)
    r_paper = XMAX * BMAX + math.sqrt(2 * math.log(1 + N))
    r_cert = XMAX * BMAX + 0.1 * math.sqrt(2 * math.log(N))
    assert r_paper == pytest.approx(15.618501, rel=1e-6)
    assert r_cert == pytest.approx(12.267271, rel=1e-6)
    kw = dict(eta=1e-4, n=N, x_max=XMAX, l1_radius=BMAX, b_max=BMAX)
    cases = [
        ("paper", 0, r_paper, 2.686860e-6, 6.316237e-5),
        ("certified", 0, r_cert, 1.658783e-5, 3.899447e-4),
        ("certified", 1, r_cert, 3.267219e-5, 7.680539e-4),
    ]
    for calib, m, R, lam, xi in cases:
        assert niht_sensitivity(m, calib, reward_clip=R, **kw) == pytest.approx(lam, rel=1e-6)
        est = NIHT(
            s=10,
            epsilon=1.0,
            delta=0.01,
            eta=1e-4,
            l1_radius=BMAX,
            x_max=XMAX,
            b_max=BMAX,
            calibration=calib,
        )
        steps = est.calibrate(N, R, 2 if m else 1)
        if m == 0:
            assert steps[0]["scale"] == pytest.approx(xi, rel=1e-6)
        else:
            # The table's m ≥ 1 row is λ₁ with the single-step factor 2√(3s ln(1/δ))/ε.
            assert steps[1]["sensitivity"] == pytest.approx(lam, rel=1e-6)
            assert steps[1]["sensitivity"] * 23.507880 == pytest.approx(xi, rel=1e-6)
            # With M = 2 each step gets (ε/2, δ/2): ξ₁ = λ₁·2√(3s ln(2/δ))·2/ε.
            factor = 2 * math.sqrt(3 * 10 * math.log(2 / 0.01)) * 2 / 1.0
            assert steps[1]["scale"] == pytest.approx(steps[1]["sensitivity"] * factor, rel=1e-12)


def test_schedule_values_of_spec_section_6():
    f = lambda n, m0, g="allow_zero": iterations_for(n, "log", m0=m0, b_max=BMAX, guard=g)  # noqa: E731
    assert [f(2**k, 0.16) for k in range(0, 6)] == [0] * 6  # n <= 32
    assert all(f(2**k, 0.16) == 1 for k in range(6, 15))  # 64 … 16384
    assert f(32768, 0.16) == 2
    assert all(f(2**k, 0.15) == 0 for k in range(0, 7)) and all(
        f(2**k, 0.15) == 1 for k in range(7, 16)
    )
    assert f(1, 0.16, "min_one") == 1
    with pytest.raises(ValueError):
        iterations_for(10, "fixed", iterations=0)


def _step(X, y, theta, eta, n):
    """θ − η(2/n)(XᵀXθ − Xᵀy), written directly from the loss."""
    return theta - eta * (2.0 / n) * (X.T @ (X @ theta) - X.T @ y)


@pytest.mark.parametrize("m", [0, 1])
def test_the_worst_case_construction_attains_lambda_exactly(m):
    """Spec §5.1: θ = C·e₁ (m ≥ 1) or 0 (m = 0), ỹ = ỹ′ = −R, x₁ = x′₁ = x_max, x_j = −x′_j."""
    d, n, eta, xm, R, C = 6, 50, 0.01, 2.0, 3.0, 1.5
    rng = np.random.default_rng(0)
    X = np.clip(rng.normal(size=(n, d)), -xm, xm)
    y = np.clip(rng.normal(size=n), -R, R)
    X2, y2 = X.copy(), y.copy()
    X[0] = X2[0] = 0.0
    X[0, 0] = X2[0, 0] = xm
    X[0, 3], X2[0, 3] = xm, -xm
    y[0] = y2[0] = -R
    theta = np.zeros(d)
    if m:
        theta[0] = C
    diff = np.abs(_step(X, y, theta, eta, n) - _step(X2, y2, theta, eta, n)).max()
    lam = niht_sensitivity(m, "certified", eta=eta, n=n, x_max=xm, reward_clip=R, l1_radius=C)
    assert diff == pytest.approx(lam, rel=1e-12)


@given(st.integers(0, 2**32 - 1), st.integers(1, 2))
def test_random_adversarial_pairs_never_exceed_lambda(seed, m):
    rng = np.random.default_rng(seed)
    d, n, eta, xm, R, C = 8, 30, 0.05, 1.5, 2.0, 1.0
    X = rng.uniform(-xm, xm, size=(n, d))
    y = rng.uniform(-R, R, size=n)
    X2, y2 = X.copy(), y.copy()
    X2[5] = rng.choice([-xm, xm], size=d) * rng.uniform(0.5, 1, size=d)
    y2[5] = rng.choice([-R, R])
    theta = np.zeros(d)
    if m:
        theta = project_l1_ball(rng.normal(size=d) * 5, C)
    diff = np.abs(_step(X, y, theta, eta, n) - _step(X2, y2, theta, eta, n)).max()
    assert diff <= niht_sensitivity(
        m, "certified", eta=eta, n=n, x_max=xm, reward_clip=R, l1_radius=C
    ) * (1 + 1e-12)


def test_gram_rows_and_h_forms_give_identical_fits():
    rng = np.random.default_rng(1)
    d, n = 30, 200
    X = np.clip(rng.normal(size=(n, d)), -2, 2)
    beta = np.zeros(d)
    beta[[1, 7]] = [1.0, -0.5]
    y = np.clip(X @ beta + 0.1 * rng.normal(size=n), -4, 4)
    est = NIHT(s=3, epsilon=50.0, delta=0.01, eta=0.2, l1_radius=3.0, x_max=2.0)
    fits = {}
    for form in ("gram", "rows"):
        acc = EpisodeAccumulator(d, form)
        acc.learn_many(X, y)
        fits[form] = est.fit(acc, n, 4.0, 3, NoiseSource(seed=5), ("f", 1))
    assert np.array_equal(fits["gram"].indices, fits["rows"].indices)
    np.testing.assert_allclose(fits["gram"].values, fits["rows"].values, rtol=1e-10)
    acc = EpisodeAccumulator(d, "h")
    acc.learn_many(X, y)
    with pytest.raises(RuntimeError):
        est.fit(acc, n, 4.0, 2, NoiseSource(seed=5), ("f", 1))  # M > 1 needs G
    assert set(fits["gram"].indices.tolist()) >= {1, 7}


def test_fit_normalises_by_the_nominal_n_and_projects_every_iteration():
    d = 10
    acc = EpisodeAccumulator(d, "gram")
    acc.learn_many(np.eye(d)[:3] * 2.0, np.array([1.0, 1.0, 1.0]))
    est = NIHT(s=3, epsilon=1e6, delta=0.5, eta=0.5, l1_radius=0.1, x_max=2.0)
    fit = est.fit(acc, 1000, 1.0, 4, NoiseSource(seed=0), ("f", 2))
    assert fit.l1_norm <= 0.1 + 1e-12
    assert fit.sensitivities[0] == pytest.approx(
        4 * 0.5 * 2.0 * 1.0 / 1000
    )  # n nominal, not 3 rows
    assert fit.sensitivities[1] == pytest.approx(4 * 0.5 * 2.0 * (1.0 + 2.0 * 0.1) / 1000)


def test_zero_iterations_touch_nothing():
    acc = EpisodeAccumulator(5)
    acc.learn_many(np.ones((2, 5)), np.ones(2))
    src = NoiseSource(seed=1)
    fit = NIHT(s=2, epsilon=1.0, delta=0.1).fit(acc, 2, 1.0, 0, src, ("f", 1))
    assert fit.indices.size == 0 and fit.iterations == 0
    src.generator("f", 1, "iter", 0)  # no noise stream was consumed


def test_accumulator_forgetting_overwrites_and_frees():
    acc = EpisodeAccumulator(200, "gram")
    acc.learn_many(np.ones((10, 200)), np.ones(10))
    G = acc._G
    assert acc.nbytes > 200 * 200 * 8
    acc.destroy()
    assert float(np.abs(G).sum()) == 0.0  # the old buffer was overwritten
    assert acc.nbytes == 0 and acc.count == 0 and acc.sealed
    with pytest.raises(RuntimeError):
        acc.learn_many(np.ones((1, 200)), np.ones(1))


def test_accumulator_state_round_trip():
    rng = np.random.default_rng(0)
    for form in ("h", "gram", "rows"):
        acc = EpisodeAccumulator(4, form)
        acc.learn_many(rng.normal(size=(7, 4)), rng.normal(size=7), ids=list(range(7)))
        clone = EpisodeAccumulator.from_state_dict(acc.state_dict())
        np.testing.assert_array_equal(clone.h, acc.h)
        assert clone.digest.hexdigest() == acc.digest.hexdigest() and clone.count == 7
