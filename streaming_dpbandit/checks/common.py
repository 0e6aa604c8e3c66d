"""Checks that apply to every policy, contextual or slate."""

from __future__ import annotations

__all__ = [
    "check_clone_has_equal_params",
    "check_privacy_and_explain",
    "check_repr",
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


def without_seed(state: dict) -> dict:
    """``state`` without the constructor's ``seed`` among its ``params``: a restored policy is
    built unseeded, so every key it uses must come from the state."""
    params = state.get("params")
    if isinstance(params, dict) and "seed" in params:
        state = {**state, "params": {k: v for k, v in params.items() if k != "seed"}}
    return state
