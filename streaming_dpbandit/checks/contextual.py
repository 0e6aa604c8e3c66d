"""Checks of a contextual policy (:class:`~streaming_dpbandit.policies.Policy`): ``decide`` on a
(B, K, d) batch, ``learn`` from the chosen rows, persistence and seeding.

Contexts have K=3 arms and the policy's ``d`` (4 when it has none, e.g. the table policy).
"""

from __future__ import annotations

import random

import numpy as np

from ..utils.serialization import dumps, loads
from .common import without_seed

__all__ = [
    "check_decide_is_valid",
    "check_learn_then_decide",
    "check_same_seed_same_decisions",
    "check_state_round_trip",
]

K = 3


def _d(policy) -> int:
    return int(getattr(policy, "d", None) or 4)


def _batch(policy, rng, m: int) -> tuple[np.ndarray, np.ndarray]:
    X = rng.normal(size=(m, K, _d(policy)))
    ids = np.arange(policy.t, policy.t + m) + 10_000
    return X, ids


def ready(policy):
    """Run the model update the schedule requires (a fresh private policy releases first)."""
    if policy.refit_due():
        policy.refit()
    return policy


def play(policy, rounds: int, seed: int = 0):
    """Decide and learn ``rounds`` rounds of Gaussian contexts and rewards, refitting when due."""
    rng = np.random.default_rng(seed)
    while policy.t < rounds:
        ready(policy)
        m = min(policy.max_decide_batch(), rounds - policy.t)
        X, ids = _batch(policy, rng, m)
        dec = policy.decide(X, ids)
        policy.learn(X[np.arange(m), dec.arms], rng.normal(size=m), dec.rounds, ids)
    return ready(policy)


def _next_decisions(policy, seed: int = 7):
    X, ids = _batch(ready(policy), np.random.default_rng(seed), min(policy.max_decide_batch(), 5))
    return policy.decide(X, ids)


def check_decide_is_valid(policy) -> None:
    """``decide`` returns one arm in [0, K) per round, propensities in (0, 1] and increasing
    round numbers."""
    X, ids = _batch(ready(policy), np.random.default_rng(0), min(policy.max_decide_batch(), 6))
    dec = policy.decide(X, ids)
    assert len(dec) == len(X)
    arms = np.asarray(dec.arms)
    assert arms.shape == (len(X),) and ((arms >= 0) & (arms < K)).all(), arms
    p = np.asarray(dec.propensities, dtype=float)
    assert p.shape == (len(X),) and ((p > 0) & (p <= 1 + 1e-12)).all(), p
    assert (np.diff(np.asarray(dec.rounds)) > 0).all()
    assert policy.t == len(X)


def check_learn_then_decide(policy) -> None:
    """After learning from a few rounds the policy still decides valid arms."""
    play(policy, 24)
    dec = _next_decisions(policy)
    assert ((np.asarray(dec.arms) >= 0) & (np.asarray(dec.arms) < K)).all()


def check_state_round_trip(policy) -> None:
    """An unseeded instance restored from ``state_dict`` (through the serialiser) makes the same
    next decisions as the original and ends in the same state: every key is in the state."""
    play(policy, 24)
    state = loads(dumps(policy.state_dict()))
    twin = type(policy)(**{**policy._get_params(), "seed": None})  # keys come from the state
    twin.load_state_dict(state)
    a, b = _next_decisions(policy), _next_decisions(twin)
    assert np.array_equal(a.arms, b.arms), (a.arms, b.arms)
    assert np.allclose(a.propensities, b.propensities)
    assert dumps(without_seed(policy.state_dict())) == dumps(without_seed(twin.state_dict()))


def check_same_seed_same_decisions(policy) -> None:
    """Two instances with one seed decide identically (no global RNG): numpy's global state is
    disturbed between them."""
    params = {**policy._get_params(), "seed": 123}
    runs = []
    for shuffle in (1, 2):
        np.random.seed(shuffle)  # noqa: NPY002 (disturbs the global RNG on purpose)
        random.seed(shuffle)
        pol = play(type(policy)(**params), 24)
        runs.append(_next_decisions(pol))
    assert np.array_equal(runs[0].arms, runs[1].arms)
    assert np.allclose(runs[0].propensities, runs[1].propensities)
