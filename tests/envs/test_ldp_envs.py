"""LDP-GLB environments (spec §11): E1, E2 and the E3 auto-loan loader on a synthetic CSV in the
dataset's format (the product never downloads the real data).

Spec: docs/specs/ldp_glb.md.
"""

import csv

import numpy as np
import pytest

from streaming_dpbandit.envs import REGISTRY, LDPMultiParamEnv, LDPSingleParamEnv
from streaming_dpbandit.envs.auto_loan import (
    PRICES,
    REQUIRED_COLUMNS,
    AutoLoanEnv,
    fit_logistic,
    load_auto_loan,
)


def test_e1_segments_on_the_sphere_noise_free_rewards_theta_per_seed():
    env = LDPSingleParamEnv(d=2, K=10, theta_seed=0)
    X = env.contexts(np.random.default_rng(1), 1000)
    assert np.allclose(np.linalg.norm(X, axis=2), 1.0)
    assert np.allclose(np.linalg.norm(env.theta), 1.0)
    mu = env.mean_rewards(X)
    assert np.allclose(mu, X @ env.theta)
    assert np.array_equal(env.rewards(mu, env.reward_noise(np.random.default_rng(2), 1000)), mu)
    assert not np.allclose(env.theta, LDPSingleParamEnv(d=2, K=10, theta_seed=1).theta)
    b = LDPSingleParamEnv(d=3, K=4, theta_seed=0, rewards="bernoulli")
    y = b.rewards(
        b.mean_rewards(X[:, :4, :1].repeat(3, 2)), b.reward_noise(np.random.default_rng(3), 1000)
    )
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert "ldp-glb-single" in REGISTRY and "ldp-glb-multi" in REGISTRY


@pytest.mark.parametrize("law", ["sphere", "gaussian"])
def test_e2_shared_context_and_per_arm_parameters(law):
    env = LDPMultiParamEnv(d=20, K=3, contexts=law, noise_sd=0.05, theta_seed=3)
    X = env.contexts(np.random.default_rng(0), 2000)
    assert (X[:, 0] == X[:, 1]).all() and (X[:, 1] == X[:, 2]).all()
    norms = np.linalg.norm(X[:, 0], axis=1)
    if law == "sphere":
        assert np.allclose(norms, 1.0)
    else:
        assert norms.mean() == pytest.approx(np.sqrt(20), rel=0.05)  # the authors' code
    noise = env.reward_noise(np.random.default_rng(1), 20_000)
    assert noise.std() == pytest.approx(0.05, rel=0.02)
    assert np.allclose(env.mean_rewards(X)[:, 1], X[:, 0] @ env.thetas[1])


def _write_csv(path, n=600, seed=0):
    rng = np.random.default_rng(seed)
    cols = [*list(REQUIRED_COLUMNS), "extra"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for _i in range(n):
            amount = rng.uniform(5000, 40000)
            term = rng.choice([36, 48, 60, 72])
            onemonth = rng.uniform(0.2, 0.6)
            rate = onemonth / 100
            mp = amount * rate / (1 - (1 + rate) ** -term) * rng.uniform(0.95, 1.1)
            w.writerow(
                {
                    "apply": int(rng.random() < 0.3),
                    "Primary_FICO": rng.integers(600, 850),
                    "onemonth": onemonth,
                    "Term": term,
                    "Amount_Approved": amount,
                    "CarType": rng.choice(["N", "U", "R"]),
                    "Competition_rate": rng.uniform(3, 7),
                    "mp": mp,
                    "extra": "x",
                }
            )
        w.writerow({c: "" for c in cols})  # an unusable row is skipped


def test_auto_loan_loader_features_and_arms(tmp_path):
    path = tmp_path / "loans.csv"
    _write_csv(path)
    X, _price, y, types = load_auto_loan(path)
    assert X.shape == (600, 9) and types == ["N", "R", "U"]  # 5 numeric, 1, one-hot(3)
    assert np.all(X[:, 5] == 1.0) and np.all(X[:, 6:].sum(axis=1) == 1.0)
    assert set(np.unique(y)) <= {0.0, 1.0}
    env = AutoLoanEnv(str(path), shuffle_seed=1)
    assert env.d == 18 and env.K == PRICES.size == 25 and PRICES[-1] == -25000.0
    C = env.contexts(np.random.default_rng(0), 7)
    assert C.shape == (7, 25, 18)
    mu = env.mean_rewards(C)
    assert np.all((mu > 0) & (mu < 1))
    assert np.array_equal(env.reward_noise(None, 7), np.zeros((7, 25)))  # the mean is fed


def test_auto_loan_missing_columns_and_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("apply,Term\n1,36\n")
    with pytest.raises(ValueError, match="missing columns"):
        load_auto_loan(bad)
    with pytest.raises(FileNotFoundError):
        load_auto_loan(tmp_path / "nope.csv")


def test_logistic_fit_matches_scikit_learn_defaults():
    sklearn = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(800, 6))
    y = (rng.random(800) < 1 / (1 + np.exp(-(X @ np.array([2, -1, 0.5, 0, 1, -2]))))).astype(float)
    ref = sklearn.LogisticRegression(fit_intercept=False).fit(X, y).coef_[0]
    mine = fit_logistic(X, y)

    def objective(w):  # scikit-learn's: C·Σ logloss + ½‖w‖², C = 1
        return np.logaddexp(0.0, -(2 * y - 1) * (X @ w)).sum() + 0.5 * w @ w

    assert objective(mine) <= objective(ref) + 1e-9  # the same problem, solved at least as well
    assert np.allclose(mine, ref, atol=5e-3)  # scikit-learn stops at its tol = 1e-4
