"""Checks of a slate policy (:class:`~streaming_dpbandit.policies.SlatePolicy`):
``decide_slates``, ``learn`` of per-item rewards, persistence and seeding."""

from __future__ import annotations

import numpy as np

from .common import Kind, play, ready, round_trip_agrees, seeded_twins_agree

__all__ = [
    "check_decide_is_valid",
    "check_learn_then_decide",
    "check_same_seed_same_decisions",
    "check_state_round_trip",
]


def _step(policy, m: int, rng) -> None:
    """Serve m slates and learn Bernoulli(1/2) per-item rewards."""
    batch = policy.decide_slates(m, np.arange(policy.t, policy.t + m) + 10_000)
    policy.learn(batch.slates, (rng.random(batch.slates.shape) < 0.5).astype(float), batch.rounds)


def _next_slates(policy):
    return ready(policy).decide_slates(min(policy.max_decide_batch(), 3))


def check_decide_is_valid(policy) -> None:
    """``decide_slates`` returns per round K distinct items in [0, L) that are independent in the
    matroid, and increasing round numbers."""
    m = min(ready(policy).max_decide_batch(), 4)
    batch = policy.decide_slates(m)
    assert len(batch) == m and batch.slates.shape == (m, policy.K)
    assert ((batch.slates >= 0) & (batch.slates < policy.L)).all(), batch.slates
    for slate in batch.slates:
        assert len(set(slate.tolist())) == policy.K, slate
        assert policy.structure.is_independent(slate.tolist()), slate
    assert (np.diff(np.asarray(batch.rounds)) > 0).all()
    assert policy.t == m


def check_learn_then_decide(policy) -> None:
    """After learning from a few rounds the policy still decides full slates."""
    play(policy, 12, _step)
    assert _next_slates(policy).slates.shape[1] == policy.K


def _assert_same(a, b) -> None:
    assert np.array_equal(a.slates, b.slates), (a.slates, b.slates)
    assert np.array_equal(a.keys, b.keys)


#: How the generic checks drive this kind of policy.
KIND = Kind(lambda pol: play(pol, 12, _step), _next_slates, _assert_same)


def check_state_round_trip(policy) -> None:
    """An unseeded instance restored from ``state_dict`` (through the serialiser) serves the
    same next slates as the original and ends in the same state: every key is in the state."""
    round_trip_agrees(policy, KIND)


def check_same_seed_same_decisions(policy) -> None:
    """Two instances with one seed serve identical slates (no global RNG): numpy's and Python's
    global states are disturbed between them."""
    seeded_twins_agree(policy, KIND)
