"""Generic checks that every registered policy passes (River's ``river/checks`` is the model).

Each check is a function of one policy instance, freshly built from the class's
``_unit_test_params()``; it raises ``AssertionError`` when the policy breaks the contract.
:func:`yield_checks` names the checks that apply to a policy (contextual or slate).

Examples
--------
>>> from streaming_dpbandit.checks import yield_checks
>>> from streaming_dpbandit.policies import LinUCB
>>> pol = LinUCB(**next(LinUCB._unit_test_params()), seed=0)
>>> for check in yield_checks(pol):
...     check(pol.clone())
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from . import common, contextual, slate

__all__ = ["params_of", "unit_test_cases", "yield_checks"]


def params_of(cls) -> list[dict]:
    """The class's ``_unit_test_params()`` as a list of parameter dicts (a dict or an iterator
    of dicts)."""
    params = cls._unit_test_params()
    return [params] if isinstance(params, dict) else list(params)


def unit_test_cases(name: str) -> list[dict]:
    """Every ``_unit_test_params()`` dict of registered policy ``name``: its class's, then
    those of the variants its parameters select (a policy is built from one with
    :func:`~streaming_dpbandit.policies.policy_class`).

    >>> [p.get("calibration") for p in unit_test_cases("private-lasso")]
    [None, 'paper']
    """
    from ..policies import REGISTRY, policy_variants

    classes = [REGISTRY[name], *policy_variants(name)]
    return [params for cls in classes for params in params_of(cls)]


def yield_checks(policy) -> Iterator[Callable]:
    """The checks that apply to ``policy`` (each takes a fresh, unseeded-by-the-check policy)."""
    yield common.check_repr
    yield common.check_clone_has_equal_params
    if policy.private:
        yield common.check_privacy_and_explain
    kind = slate if getattr(policy, "slates", False) else contextual
    yield kind.check_decide_is_valid
    yield kind.check_learn_then_decide
    yield kind.check_state_round_trip
    yield kind.check_same_seed_same_decisions
