import numpy as np
import pytest

from streaming_dpbandit.estimators.lasso import lasso_gram

sklearn = pytest.importorskip("sklearn.linear_model")


@pytest.mark.parametrize("seed", range(8))
def test_matches_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(50, 2000)), int(rng.integers(5, 300))
    X = rng.normal(size=(n, d))
    beta = np.zeros(d)
    beta[: min(5, d)] = rng.uniform(0.5, 1, min(5, d))
    y = X @ beta + 0.1 * rng.normal(size=n)
    lam = 2 * np.sqrt((4 * np.log(n) + 2 * np.log(d)) / n) * rng.uniform(0.1, 1)
    ours = lasso_gram(X.T @ X, X.T @ y, float(y @ y), n, lam)
    ref = sklearn.Lasso(alpha=lam, fit_intercept=False, tol=1e-3).fit(X, y).coef_
    obj = lambda w: ((y - X @ w) ** 2).sum() / (2 * n) + lam * np.abs(w).sum()  # noqa: E731
    assert obj(ours) <= obj(ref) * (1 + 1e-6)
    np.testing.assert_allclose(ours, ref, atol=1e-6)
