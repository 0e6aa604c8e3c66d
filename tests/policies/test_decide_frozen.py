"""Policy.decide_frozen: the frozen policy of off-policy evaluation, for every policy."""

import numpy as np
import pytest

from streaming_dpbandit.checks import params_of, unit_test_cases
from streaming_dpbandit.config import ConfigError, policy_config
from streaming_dpbandit.policies import REGISTRY, SLATE_POLICIES, TablePolicy, policy_class
from streaming_dpbandit.utils.serialization import dumps

D, K = 4, 3

#: (registry name, constructor parameters) of every single-arm policy: the classes'
#: ``_unit_test_params()`` and their variants' (d=4, contexts of K=3 arms).
CASES = [
    (name, params)
    for name in sorted(set(REGISTRY) - SLATE_POLICIES)
    for params in unit_test_cases(name)
]


def trained(name, params=None, rounds=60, seed=0):
    params = params or params_of(REGISTRY[name])[0]
    pol = policy_class(name, params)(**params, seed=seed)
    rng = np.random.default_rng(seed)
    while pol.t < rounds:
        if pol.refit_due():
            pol.refit()
        m = min(pol.max_decide_batch(), rounds - pol.t)
        X = rng.normal(size=(m, K, D))
        ids = np.arange(pol.t, pol.t + m) + 10_000
        dec = pol.decide(X, ids)
        pol.learn(X[np.arange(m), dec.arms], rng.normal(size=m), dec.rounds, ids)
    if pol.refit_due():
        pol.refit()
    return pol


def test_every_policy_is_covered():
    """Every single-arm policy (slate policies have no decide_frozen), with d and K as here."""
    assert {name for name, _ in CASES} == set(REGISTRY) - SLATE_POLICIES
    for name, params in CASES:
        pol = policy_class(name, params)(**params)
        assert getattr(pol, "d", None) in (None, D)
        assert getattr(pol, "n_arms", K) == K


@pytest.mark.parametrize("name, params", CASES)
def test_decide_frozen_leaves_the_state_unchanged_and_agrees_with_decide(name, params):
    pol = trained(name, params)
    before = dumps(pol.state_dict())
    counters = dict(getattr(pol, "counters", {}))
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, K, D))
    ids = np.arange(300) + 10**6
    frozen = pol.decide_frozen(X, ids)  # more rounds than the schedule allows: not a problem
    assert dumps(pol.state_dict()) == before
    assert dict(getattr(pol, "counters", {})) == counters
    again = pol.decide_frozen(X, ids)
    assert np.array_equal(frozen.arms, again.arms)
    m = min(pol.max_decide_batch(), 300)
    live = pol.decide(X[:m], ids[:m])
    assert np.array_equal(live.arms, frozen.arms[:m])
    assert np.allclose(live.propensities, frozen.propensities[:m])


def test_decide_frozen_works_when_an_update_is_due():
    pol = trained("linucb")
    X = np.random.default_rng(2).normal(size=(4, K, D))
    pol.decide(X)
    assert pol.refit_due()
    with pytest.raises(RuntimeError, match="refit"):
        pol.decide(X)
    assert len(pol.decide_frozen(X)) == 4 and pol.refit_due()


def test_table_policy_draws_its_distribution_per_position():
    tab = [[0.6, 0.3, 0.1], [0.0, 0.0, 1.0]]
    pol = TablePolicy(tab, seed=3)
    pos = np.array([0] * 20000 + [1] * 100)
    probs = pol.action_probabilities(3, pos)
    arms = pol.sample(probs, np.arange(pos.size))
    freq = np.bincount(arms[:20000], minlength=3) / 20000
    assert np.allclose(freq, tab[0], atol=4 * np.sqrt(0.25 / 20000))
    assert (arms[20000:] == 2).all()
    mask = np.array([[True, True, False]])
    assert pol.action_probabilities(3, np.array([0]), mask).tolist() == [[2 / 3, 1 / 3, 0.0]]
    with pytest.raises(ValueError, match="positions"):
        pol.action_probabilities(3, np.array([2]))


@pytest.mark.parametrize(
    "probs, message",
    [([[0.5, -0.1]], "non-negative"), ([[0.0, 0.0]], "probability mass"), ([[[1.0]]], "table")],
)
def test_table_config_rejects_bad_tables(probs, message):
    with pytest.raises(ConfigError, match=message):
        policy_config("table", {"probabilities": probs})


@pytest.mark.parametrize("released", [False, True], ids=["initial-model", "released-model"])
def test_rank_frozen_is_decide_frozen_and_the_scores(released):
    """A policy's own ``rank_frozen`` (FLIPHAT's, scoring once: the gateway's Rank) gives the
    decision, propensity, version and masked scores of the generic definition — decide_frozen
    and frozen_scores — for every request, ties (the initial model: all of them) included,
    and leaves the state unchanged."""
    from streaming_dpbandit.policies import FLIPHAT
    from streaming_dpbandit.policies.base import Policy

    d, k = 30, 12
    pol = FLIPHAT(d=d, s=4, epsilon=1.0, delta=1e-6, seed=0, bandit_id="b")
    rng = np.random.default_rng(5)
    if released:
        pol = pol.load_released_model(
            {"model_version": 2, "release_ids": ["b/fliphat/fit/episode=2"],
             "payload": {"indices": [1, 4, 7, 20], "values": rng.normal(size=4).tolist()}}
        )  # fmt: skip
    assert Policy.rank_frozen is not FLIPHAT.rank_frozen
    before = dumps(pol.state_dict())
    for i in range(200):
        x = rng.normal(size=(k, d))
        if i % 4 == 1:
            x[3] = x[7]  # an exact tie between two candidates
        mask = None if i % 3 else rng.random((1, k)) < 0.7
        if mask is not None:
            mask[0, rng.integers(k)] = True
        got = pol.rank_frozen(x, f"event-{i}", mask)
        want = Policy.rank_frozen(pol, x, f"event-{i}", mask)
        assert got[:3] == want[:3], i
        np.testing.assert_array_equal(got[3], want[3])
    assert dumps(pol.state_dict()) == before
