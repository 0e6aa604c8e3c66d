"""TH-Lasso and SA-Lasso baselines (PrivateLASSO spec §6, §11.11) and the sparse Lasso solver."""

import math

import numpy as np
import pytest
from scipy import sparse

from streaming_dpbandit.envs import MarginEnv, NoMarginEnv
from streaming_dpbandit.estimators.sparse_lasso import lasso_rows
from streaming_dpbandit.policies import LassoBandit, SALassoBandit, THLassoBandit


def test_lambda_schedules_match_the_formulas():
    for n, d in [(200, 1000), (4096, 50), (10**5, 10**4)]:
        th = THLassoBandit(d=d, lambda0=0.02)
        assert th.lambda_n(n) == pytest.approx(0.02 * math.sqrt(2 * math.log(n) * math.log(d) / n))
        sa = SALassoBandit(d=d, lambda0=0.1)
        assert sa.lambda_n(n) == pytest.approx(
            0.2 * math.sqrt((4 * math.log(n) + 2 * math.log(d)) / n)
        )
    assert isinstance(SALassoBandit(d=5), LassoBandit)  # the foundation's Lasso bandit, reused


@pytest.mark.parametrize("seed", range(3))
def test_lasso_rows_matches_scikit_learn(seed):
    from sklearn.linear_model import Lasso

    rng = np.random.default_rng(seed)
    n, d = 400, 300
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.05)
    beta = np.zeros(d)
    beta[rng.choice(d, 4, replace=False)] = rng.normal(size=4)
    y = X @ beta + 0.05 * rng.normal(size=n)
    alpha = 0.01
    ours = lasso_rows(sparse.csr_matrix(X), y, alpha, tol=1e-10)
    ref = Lasso(alpha=alpha, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y).coef_

    def obj(w):
        return 0.5 / n * np.sum((y - X @ w) ** 2) + alpha * np.abs(w).sum()

    assert obj(ours) <= obj(ref) + 1e-9
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_lasso_rows_warm_start_reoptimises_on_new_data():
    """A warm start whose support has no KKT violator must still be re-solved on the new rows."""
    rng = np.random.default_rng(4)
    X = np.zeros((500, 30))
    X[:, 2] = rng.normal(size=500)  # no other column can violate the optimality conditions
    y1 = X[:, 2] * 1.0
    y2 = X[:, 2] * 0.5  # same support, different value
    w1 = lasso_rows(sparse.csr_matrix(X), y1, 0.001, tol=1e-10)
    w2 = lasso_rows(sparse.csr_matrix(X), y2, 0.001, w0=w1, tol=1e-10)
    cold = lasso_rows(sparse.csr_matrix(X), y2, 0.001, tol=1e-10)
    np.testing.assert_allclose(w2, cold, atol=1e-6)
    assert abs(w2[2] - 0.5) < 0.01


def test_th_lasso_recovers_support_and_beta_exactly_when_noiseless():
    rng = np.random.default_rng(1)
    d, n = 40, 400
    beta = np.zeros(d)
    beta[[3, 17, 29]] = [0.9, -0.6, 0.7]
    pol = THLassoBandit(d=d, refit_every=n, seed=0)
    X = rng.choice([-1.0, 1.0], size=(n, 2, d)) * (rng.random((n, 2, d)) < 0.5)  # well conditioned
    dec = pol.decide(X)
    x = X[np.arange(n), dec.arms]
    pol.learn(x, x @ beta, dec.rounds)
    assert pol.refit_due()
    pol.refit()
    S, b = pol.coefficients
    assert S.tolist() == [3, 17, 29]
    np.testing.assert_allclose(b, beta[S], atol=1e-10)


def test_refit_schedules():
    env = MarginEnv(d=100)
    rng = np.random.default_rng(0)
    sa, th = SALassoBandit(d=100, seed=0), THLassoBandit(d=100, refit_every=50, seed=0)
    for pol, first in ((sa, 200), (th, 50)):
        assert pol.max_decide_batch() == first
        X = env.contexts(rng, first)
        dec = pol.decide(X)
        pol.learn(X[np.arange(first), dec.arms], np.zeros(first), dec.rounds)
        assert pol.refit_due() and pol.max_decide_batch() == 0
        pol.refit()
        assert pol.model_version == 1 and not pol.refit_due()


@pytest.mark.parametrize("cls", [SALassoBandit, THLassoBandit])
def test_state_round_trip_and_clipping(cls):
    from streaming_dpbandit.utils.serialization import dumps, loads

    env = NoMarginEnv(d=80)
    b = env.public_bounds()
    kw = dict(
        d=80,
        refit_every=100,
        clip_coord=b["clip_coord"],
        clip_l2=b["clip_l2"],
        reward_bound=b["reward_bound"],
        seed=1,
    )
    a, c = cls(**kw), None
    rng = np.random.default_rng(2)
    X = env.contexts(rng, 600)
    mu = env.mean_rewards(X)
    arms_a, arms_c = [], []
    for t0 in range(0, 600, 50):
        if t0 == 300:
            c = cls(**kw).load_state_dict(loads(dumps(a.state_dict())))
        for pol, arms in ((a, arms_a), (c, arms_c)) if c is not None else ((a, arms_a),):
            if pol.refit_due():
                pol.refit()
            dec = pol.decide(X[t0 : t0 + 50])
            rows = np.arange(t0, t0 + 50)
            pol.learn(X[rows, dec.arms], mu[rows, dec.arms], dec.rounds)
            arms.append(dec.arms)
    assert np.array_equal(np.concatenate(arms_a[6:]), np.concatenate(arms_c))
    assert a.counters == {"clipped_coords": 0, "clipped_norms": 0, "clipped_rewards": 0}
    a.learn(X[:1, 0] * 100, np.array([1e6]), np.array([1]))
    assert a.counters["clipped_rewards"] == 1 and a.counters["clipped_coords"] > 0
