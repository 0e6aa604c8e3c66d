"""Checks of a slate policy (:class:`~streaming_dpbandit.policies.SlatePolicy`):
``decide_slates``, ``learn`` of per-item rewards, persistence and seeding."""

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


def ready(policy):
    """Run the model update the schedule requires (a fresh private policy releases first)."""
    if policy.refit_due():
        policy.refit()
    return policy


def play(policy, rounds: int, seed: int = 0):
    """Decide slates and learn Bernoulli per-item rewards for ``rounds`` rounds."""
    rng = np.random.default_rng(seed)
    while policy.t < rounds:
        ready(policy)
        m = min(policy.max_decide_batch(), rounds - policy.t)
        batch = policy.decide_slates(m, np.arange(policy.t, policy.t + m) + 10_000)
        rewards = (rng.random(batch.slates.shape) < 0.5).astype(float)
        policy.learn(batch.slates, rewards, batch.rounds)
    return ready(policy)


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
    play(policy, 12)
    assert _next_slates(policy).slates.shape[1] == policy.K


def check_state_round_trip(policy) -> None:
    """An unseeded instance restored from ``state_dict`` (through the serialiser) serves the
    same next slates as the original and ends in the same state: every key is in the state."""
    play(policy, 12)
    state = loads(dumps(policy.state_dict()))
    twin = type(policy)(**{**policy._get_params(), "seed": None})  # keys come from the state
    twin.load_state_dict(state)
    a, b = _next_slates(policy), _next_slates(twin)
    assert np.array_equal(a.slates, b.slates), (a.slates, b.slates)
    assert np.array_equal(a.keys, b.keys)
    assert dumps(without_seed(policy.state_dict())) == dumps(without_seed(twin.state_dict()))


def check_same_seed_same_decisions(policy) -> None:
    """Two instances with one seed serve identical slates (no global RNG): numpy's and Python's
    global states are disturbed between them."""
    params = {**policy._get_params(), "seed": 123}
    runs = []
    for shuffle in (1, 2):
        np.random.seed(shuffle)  # noqa: NPY002 (disturbs the global RNG on purpose)
        random.seed(shuffle)
        runs.append(_next_slates(play(type(policy)(**params), 12)).slates)
    assert np.array_equal(runs[0], runs[1])
