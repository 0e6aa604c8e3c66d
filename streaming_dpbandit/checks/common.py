"""Checks that apply to every policy, contextual or slate."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..utils.serialization import dumps, loads

__all__ = [
    "Kind",
    "assert_same_state",
    "check_clone_has_equal_params",
    "check_privacy_and_explain",
    "check_repr",
    "play",
    "ready",
    "restored_unseeded",
    "round_trip_agrees",
    "same_seed_twins",
    "seeded_twins_agree",
    "without_seed",
]

#: Keys every private policy's ``explain()`` returns.
EXPLAIN_KEYS = frozenset({"policy", "private", "params"})


def check_repr(policy) -> None:
    """``repr`` names the class and does not raise."""
    text = repr(policy)
    assert text.startswith(type(policy).__name__ + "("), text


def check_clone_has_equal_params(policy) -> None:
    """Rebuilding the policy from its ``_get_params()`` gives the same class and parameters."""
    params = policy._get_params()
    twin = type(policy)(**params)
    assert type(twin) is type(policy)
    assert repr(twin._get_params()) == repr(params)
    assert repr(twin) == repr(policy)


def check_privacy_and_explain(policy) -> None:
    """A private policy states a finite ε and explains itself with the documented keys."""
    statement = policy.privacy
    assert statement.epsilon is not None and statement.epsilon > 0, statement
    assert statement.text()
    info = policy.explain()
    missing = EXPLAIN_KEYS - set(info)
    assert not missing, f"explain() lacks {sorted(missing)}"
    assert info["private"] is True and info["policy"] == policy.name


def restored_unseeded(policy):
    """A new, unseeded instance of the policy's class loaded with its ``state_dict`` (through
    the serialiser): every key it uses must come from the state."""
    twin = type(policy)(**{**policy._get_params(), "seed": None})
    twin.load_state_dict(loads(dumps(policy.state_dict())))
    return twin


def assert_same_state(policy, twin) -> None:
    """The two policies' states agree (all but the constructor's seed)."""
    assert dumps(without_seed(policy.state_dict())) == dumps(without_seed(twin.state_dict()))


def without_seed(state: dict) -> dict:
    """``state`` without the constructor's ``seed`` among its ``params``: a restored policy is
    built unseeded, so every key it uses must come from the state."""
    params = state.get("params")
    if isinstance(params, dict) and "seed" in params:
        state = {**state, "params": {k: v for k, v in params.items() if k != "seed"}}
    return state


def ready(policy):
    """Run the model update the schedule requires (a fresh private policy releases first)."""
    if policy.refit_due():
        policy.refit()
    return policy


def play(policy, rounds: int, step: Callable, seed: int = 0):
    """Play ``rounds`` rounds in batches the schedule allows; ``step(policy, m, rng)`` decides
    and learns m rounds. Refits when due, before and after."""
    rng = np.random.default_rng(seed)
    while policy.t < rounds:
        ready(policy)
        step(policy, min(policy.max_decide_batch(), rounds - policy.t), rng)
    return ready(policy)


def same_seed_twins(policy, run: Callable) -> list:
    """``run`` on two instances built with one seed, numpy's and Python's global RNGs seeded
    differently before each: equal results mean no global RNG is used."""
    params = {**policy._get_params(), "seed": 123}
    out = []
    for shuffle in (1, 2):
        np.random.seed(shuffle)  # noqa: NPY002 (disturbs the global RNG on purpose)
        random.seed(shuffle)
        out.append(run(type(policy)(**params)))
    return out


@dataclass(frozen=True)
class Kind:
    """How to drive one kind of policy (contextual or slate) in the checks."""

    #: Plays a few rounds of decisions and feedback; returns the policy.
    warm_up: Callable
    #: The next few decisions of a policy.
    next_decisions: Callable
    #: Raises ``AssertionError`` unless two decision batches are the same.
    assert_same: Callable


def round_trip_agrees(policy, kind: Kind) -> None:
    """After a warm-up, an unseeded instance restored from the state makes the same next
    decisions and ends in the same state."""
    kind.warm_up(policy)
    twin = restored_unseeded(policy)
    kind.assert_same(kind.next_decisions(policy), kind.next_decisions(twin))
    assert_same_state(policy, twin)


def seeded_twins_agree(policy, kind: Kind) -> None:
    """Two instances with one seed make the same decisions after one warm-up, whatever the
    global RNGs hold."""
    kind.assert_same(*same_seed_twins(policy, lambda pol: kind.next_decisions(kind.warm_up(pol))))
