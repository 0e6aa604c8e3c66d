import math

import numpy as np
import pytest

from streaming_dpbandit.envs.fliphat_paper import PAPER_BETA, FliphatPaperEnv, expected_max_normal


def test_contexts_equal_cholesky_of_the_ar_covariance():
    env = FliphatPaperEnv(d=60, K=2)
    rng = np.random.default_rng(3)
    X = env.contexts(rng, 5)
    z = np.random.default_rng(3).standard_normal((10, 60))
    S = 0.1 ** np.abs(np.subtract.outer(np.arange(60), np.arange(60)))
    np.testing.assert_allclose(X.reshape(10, 60), z @ np.linalg.cholesky(S).T, atol=1e-12)


@pytest.mark.parametrize("rows", [3, 511, 512, 3000])
def test_ar_filter_paths_equal_lfilter_bit_for_bit(rows):
    """Both paths of ar_filter (lfilter below LFILTER_MAX_ROWS, the column recurrence above)
    return exactly lfilter's values, so a simulation's numbers do not depend on the batch size."""
    from scipy.signal import lfilter

    from streaming_dpbandit.envs.fliphat_paper import LFILTER_MAX_ROWS, ar_filter

    assert 3 < LFILTER_MAX_ROWS <= 3000
    z = np.random.default_rng(rows).standard_normal((rows, 400))
    c = np.sqrt(1 - 0.1**2)
    ref = z.copy()
    ref[:, 0] /= c
    expected = lfilter([c], [1.0, -0.1], ref, axis=-1)
    assert np.array_equal(ar_filter(z.copy(), 0.1), expected)


@pytest.mark.parametrize("n", [171, 1000, 2048])
def test_contexts_are_one_draw_filtered_whatever_the_blocks(n):
    """``contexts`` draws and filters in cache-sized blocks (``ar_draw``): the same normals in
    the same order and the same values as filtering one draw of all rows, so a simulation's
    numbers do not depend on the block size either."""
    from streaming_dpbandit.envs.fliphat_paper import DRAW_ROWS, ar_filter

    assert 3 * 2048 > DRAW_ROWS  # the largest case is drawn in several blocks
    env = FliphatPaperEnv()
    got = env.contexts(np.random.default_rng(n), n)
    z = np.random.default_rng(n).standard_normal((3 * n, 400))
    assert np.array_equal(got, ar_filter(z, 0.1).reshape(n, 3, 400))


def test_moments_of_contexts():
    env = FliphatPaperEnv(d=20, K=3)
    X = env.contexts(np.random.default_rng(0), 40_000).reshape(-1, 20)
    C = np.cov(X.T)
    se = 1 / math.sqrt(X.shape[0])
    assert abs(C[0, 0] - 1) < 6 * se * math.sqrt(2) and abs(C[3, 4] - 0.1) < 6 * se
    assert abs(C[3, 5] - 0.01) < 6 * se


def test_paper_constants():
    env = FliphatPaperEnv()
    assert env.beta[:5].tolist() == list(PAPER_BETA) and np.count_nonzero(env.beta) == 5
    assert env.b_max == pytest.approx(3.436219, abs=1e-6)
    assert float(env.beta @ env.beta) == pytest.approx(2.371726, abs=1e-6)
    assert env.signal_variance() == pytest.approx(2.766119, abs=1e-6)
    assert env.random_regret_per_round() == pytest.approx(1.4075, abs=1e-4)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi))


def test_larger_sparsity_is_deterministic_and_noise_laws():
    a, b = FliphatPaperEnv(d=50, s_star=9), FliphatPaperEnv(d=50, s_star=9)
    assert np.array_equal(a.beta, b.beta) and np.count_nonzero(a.beta) == 9
    u = FliphatPaperEnv(noise="uniform").reward_noise(np.random.default_rng(0), 10_000)
    assert np.abs(u).max() <= 0.1 and abs(u.std() - 0.1 / math.sqrt(3)) < 0.003


@pytest.mark.parametrize(
    "kw", [dict(K=1), dict(s_star=0), dict(noise="cauchy"), dict(d="x"), dict(rho=1.0)]
)
def test_invalid(kw):
    with pytest.raises(ValueError):
        FliphatPaperEnv(**kw)


def test_shariff_sheffet_environment_law():
    from scipy import stats

    from streaming_dpbandit.envs import ShariffSheffetEnv

    env = ShariffSheffetEnv(d=5, gap=0.1)
    rng = np.random.default_rng(0)
    X = env.contexts(rng, 4000)
    assert X.shape == (4000, 25, 5)
    np.testing.assert_allclose(np.linalg.norm(X, axis=2), 1.0, rtol=1e-12)
    mu = env.mean_rewards(X)
    assert np.all((mu == 0.75).sum(axis=1) == 1)  # exactly one optimal action per round
    others = mu[mu != 0.75]
    assert others.min() >= -0.75 and others.max() <= 0.65 + 1e-12  # the gap Δ
    # h = 2u − 1 with u ~ Beta(2, 2) truncated to [0.125, 0.825]: compare the CDF (KS test)
    lo, hi = (1 - 0.75) / 2, (1 + 0.75 - 0.1) / 2
    beta = stats.beta(2, 2)
    cdf = lambda h: (beta.cdf((h + 1) / 2) - beta.cdf(lo)) / (beta.cdf(hi) - beta.cdf(lo))  # noqa: E731
    assert stats.kstest(others[:20000], cdf).pvalue > 1e-3
    assert abs(others.mean() - env.mean_suboptimal_projection()) < 5 * others.std() / 300
    # the orthogonal part is uniform: its first coordinate is symmetric with the right variance
    w = X[..., 1:] / np.sqrt(1 - X[..., :1] ** 2)
    assert abs(w[..., 0].mean()) < 0.01 and abs(w[..., 0].var() - 0.25) < 0.01


def test_shariff_sheffet_rewards_and_rotation():
    from streaming_dpbandit.envs import ShariffSheffetEnv

    env = ShariffSheffetEnv(d=4, gap=0.0, theta_seed=3)
    rng = np.random.default_rng(1)
    X = env.contexts(rng, 3000)
    mu = env.mean_rewards(X)
    np.testing.assert_allclose(mu.max(axis=1), 0.75, rtol=1e-12)  # rotated: still 0.75
    np.testing.assert_allclose(np.linalg.norm(env.theta), 1.0)
    coins = env.reward_noise(rng, 3000)
    y = env.rewards(mu, coins)
    assert set(np.unique(y).tolist()) == {-1.0, 1.0}
    assert abs((y - mu).mean()) < 4 / np.sqrt(y.size)  # E[y] = μ
    g = ShariffSheffetEnv(d=4, rewards="gaussian")
    assert g.rewards(np.zeros(2), np.ones(2)).tolist() == [1.0, 1.0]
    assert 0.75 > env.random_regret_per_round() > 0.5
    with pytest.raises(ValueError, match="d >= 2"):
        ShariffSheffetEnv(d=1)
