"""Policies work through River's ContextualPolicy interface and its offline harness."""

import numpy as np
from river import bandit

from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.policies import FLIPHAT, LassoBandit, RandomPolicy


def history(n, seed=0):
    env = FliphatPaperEnv(d=20, s_star=2, K=3)
    rng = np.random.default_rng(seed)
    X = env.contexts(rng, n)
    mu = env.mean_rewards(X)
    arms = ["a", "b", "c"]
    for t in range(n):
        logged = int(rng.integers(3))
        context = {arm: X[t, i] for i, arm in enumerate(arms)}
        yield arms, context, arms[logged], float(mu[t, logged])


def test_is_a_river_contextual_policy_and_clones():
    pol = FLIPHAT(d=20, s=2, epsilon=1.0, delta=0.01)
    assert isinstance(pol, bandit.base.ContextualPolicy)
    clone = pol.clone()
    assert clone is not pol and clone.epsilon == 1.0 and "seed" not in repr(pol)


def test_evaluate_offline_replay():
    for pol in (
        FLIPHAT(d=20, s=2, epsilon=5.0, delta=0.01, b_max=1.4, seed=1),
        LassoBandit(d=20, refit_every=50, seed=1),
        RandomPolicy(d=20, seed=1),
    ):
        total, n = bandit.evaluate_offline(pol, history(1500))
        assert 350 < n < 650  # about a third of the logged arms match
        assert np.isfinite(total.get())


def test_pull_update_drive_learning():
    pol = FLIPHAT(d=20, s=2, epsilon=50.0, delta=0.01, b_max=1.4, seed=2)
    rewards = []
    for arms, context, _, _ in history(3000, seed=4):
        arm = pol.pull(arms, context)
        x = np.asarray(context[arm])
        r = float(x[:2] @ np.array([0.7484285, 0.6370087]))
        pol.update(arm, context, r)
        rewards.append(r)
    assert np.mean(rewards[-1000:]) > np.mean(rewards[:100]) + 0.5
