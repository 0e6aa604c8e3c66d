"""Checks of a contextual policy (:class:`~streaming_dpbandit.policies.Policy`): ``decide`` on a
(B, K, d) batch, ``learn`` from the chosen rows, persistence and seeding.

Contexts have K=3 arms and the policy's ``d`` (4 when it has none, e.g. the table policy).
"""

from __future__ import annotations

import numpy as np

from .common import Kind, play, ready, round_trip_agrees, seeded_twins_agree

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


def _step(policy, m: int, rng) -> None:
    """Decide m rounds of Gaussian contexts and learn Gaussian rewards of the chosen arms."""
    X, ids = _batch(policy, rng, m)
    dec = policy.decide(X, ids)
    policy.learn(X[np.arange(m), dec.arms], rng.normal(size=m), dec.rounds, ids)


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
    play(policy, 24, _step)
    dec = _next_decisions(policy)
    assert ((np.asarray(dec.arms) >= 0) & (np.asarray(dec.arms) < K)).all()


def _assert_same(a, b) -> None:
    assert np.array_equal(a.arms, b.arms), (a.arms, b.arms)
    assert np.allclose(a.propensities, b.propensities)


#: How the generic checks drive this kind of policy.
KIND = Kind(lambda pol: play(pol, 24, _step), _next_decisions, _assert_same)


def check_state_round_trip(policy) -> None:
    """An unseeded instance restored from ``state_dict`` (through the serialiser) makes the same
    next decisions as the original and ends in the same state: every key is in the state."""
    round_trip_agrees(policy, KIND)


def check_same_seed_same_decisions(policy) -> None:
    """Two instances with one seed decide identically (no global RNG): numpy's and Python's
    global states are disturbed between them."""
    seeded_twins_agree(policy, KIND)
