"""The generic policy checks (``streaming_dpbandit.checks``) on every registered policy, built
from its ``_unit_test_params()`` (River's ``_unit_test_params`` and ``river/checks`` model)."""

import numpy as np
import pytest

from streaming_dpbandit.checks import common, contextual, params_of, unit_test_cases, yield_checks
from streaming_dpbandit.policies import (
    LDPUCB,
    OMM,
    REGISTRY,
    SLATE_POLICIES,
    LinUCB,
    RandomPolicy,
    policy_class,
)


def _params_owner(cls):
    """The class that defines ``cls._unit_test_params`` (River's ``Base`` has a default)."""
    return next((k for k in cls.__mro__ if "_unit_test_params" in vars(k)), None)


def _cases():
    for name in sorted(REGISTRY):
        cls = REGISTRY[name]
        if _params_owner(cls).__init__ is not cls.__init__:
            continue  # test_every_registered_policy_defines_unit_test_params fails
        for i, params in enumerate(unit_test_cases(name)):
            pol = policy_class(name, params)(**params, seed=0)
            for check in yield_checks(pol):
                yield pytest.param(name, params, check, id=f"{name}-{i}-{check.__name__}")


@pytest.mark.parametrize("name, params, check", list(_cases()))
def test_policy_passes_check(name, params, check):
    check(policy_class(name, params)(**params, seed=0))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_policy_defines_unit_test_params(name):
    """Defined by the class or by the base whose constructor it shares (never inherited from a
    base with another constructor)."""
    cls = REGISTRY[name]
    owner = _params_owner(cls)
    assert owner.__init__ is cls.__init__, f"{cls.__name__} inherits {owner.__name__}'s params"
    for params in params_of(cls):
        assert isinstance(params, dict) and params
        policy_class(name, params)(**params).validate()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_unit_test_params_follow_rivers_contract(name):
    """River's ``_unit_test_params`` yields parameter dicts (its ``check_init_has_default_params_
    for_tests`` iterates them: a returned dict would give its keys)."""
    from river.checks.common import check_init_has_default_params_for_tests

    cls = REGISTRY[name]
    check_init_has_default_params_for_tests(cls(**params_of(cls)[0]))


def test_slate_policies_get_the_slate_checks():
    for name in sorted(REGISTRY):
        pol = REGISTRY[name](**params_of(REGISTRY[name])[0], seed=0)
        modules = {check.__module__.rsplit(".", 1)[-1] for check in yield_checks(pol)}
        assert modules == {"common", "slate" if name in SLATE_POLICIES else "contextual"}


class _ForgetfulLinUCB(LinUCB):
    """Loses its learned statistics on restore."""

    def load_state_dict(self, state):
        return self


class _GlobalRandomOMM(OMM):
    """Serves slates drawn from numpy's global RNG."""

    def decide_slates(self, n=None, event_ids=None):
        batch = super().decide_slates(n, event_ids)
        batch.slates[:] = np.random.permutation(self.L)[: self.K]  # noqa: NPY002 (the defect)
        return batch


def test_round_trip_check_catches_a_policy_that_drops_its_state():
    pol = _ForgetfulLinUCB(**next(LinUCB._unit_test_params()), seed=0)
    with pytest.raises(AssertionError):
        contextual.check_state_round_trip(pol)


def test_seed_check_catches_global_rng_use():
    from streaming_dpbandit.checks import slate

    pol = _GlobalRandomOMM(**params_of(OMM)[0], seed=0)
    with pytest.raises(AssertionError):
        slate.check_same_seed_same_decisions(pol)


class _DoublingRandom(RandomPolicy):
    """Stores a transformed parameter: rebuilding it from its parameters changes it."""

    def __init__(self, d=None, seed=None):
        super().__init__(d=None if d is None else 2 * d, seed=seed)


class _SilentLDPUCB(LDPUCB):
    """Explains itself without its parameters."""

    def explain(self, horizon=None):
        return {k: v for k, v in super().explain(horizon).items() if k != "params"}


def test_clone_check_catches_a_constructor_that_transforms_its_parameters():
    with pytest.raises(AssertionError):
        common.check_clone_has_equal_params(_DoublingRandom(d=2, seed=0))


def test_explain_check_catches_a_missing_key():
    pol = _SilentLDPUCB(**next(LDPUCB._unit_test_params()), seed=0)
    common.check_privacy_and_explain(LDPUCB(**next(LDPUCB._unit_test_params()), seed=0))
    with pytest.raises(AssertionError, match="params"):
        common.check_privacy_and_explain(pol)
