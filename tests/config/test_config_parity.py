"""One home for each policy's parameters: the configurations mirror the constructors, the
cross-field rules live in the policies, and one registry names every policy."""

import inspect

import pytest

from streaming_dpbandit.config import CONFIGS, ConfigError, policy_config
from streaming_dpbandit.policies import REGISTRY, SLATE_POLICIES, Policy, SlatePolicy


def constructor_params(cls) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters) - {"self", "seed"}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_constructor_parameter_has_a_config_field_and_back(name):
    config = CONFIGS[name]
    fields = set(config.model_fields) - {"policy", "private"}
    fields = {config.renamed.get(f, f) for f in fields}
    params = constructor_params(REGISTRY[name])
    assert params - config.not_configurable == fields, (
        f"{name}: constructor only {sorted(params - config.not_configurable - fields)}, "
        f"config only {sorted(fields - params)}"
    )


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_configuration_field_is_documented_by_the_policy(name):
    """Each field's description is its parameter's entry in the policy's numpydoc
    ``Parameters`` (the configuration is derived from the class: docs and code are one)."""
    config = CONFIGS[name]
    undocumented = [
        field
        for field, info in config.model_fields.items()
        if field not in ("policy", "private") and not info.description
    ]
    assert undocumented == []


def test_parity_check_fails_on_a_missing_field():
    """The check above can fail: a constructor parameter without a field is caught."""

    class Wider(REGISTRY["greedy"]):
        def __init__(self, d, reg=1.0, batch_size=1, ties="lowest", extra=0, seed=None):
            super().__init__(d, reg, batch_size, ties, seed)

    fields = set(CONFIGS["greedy"].model_fields) - {"policy", "private"}
    assert constructor_params(Wider) - CONFIGS["greedy"].not_configurable - fields == {"extra"}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_one_registry_names_every_policy_and_its_kind(name):
    cls = REGISTRY[name]
    assert cls.name == name
    assert issubclass(cls, SlatePolicy) == (name in SLATE_POLICIES)
    assert issubclass(cls, Policy) == (name not in SLATE_POLICIES)
    assert set(CONFIGS) <= set(REGISTRY)


def test_the_lazy_registry_and_the_union_name_the_same_classes():
    """``CONFIGS`` (imported on first use) and ``PolicyConfig`` (the union that ``serve``'s
    ``policy:`` sections are) list the same classes in the same order."""
    from typing import get_args

    from streaming_dpbandit.config import PolicyConfig

    members = get_args(get_args(PolicyConfig)[0])
    assert [c.model_fields["policy"].default for c in members] == list(CONFIGS)
    assert [CONFIGS[name] for name in CONFIGS] == list(members)


def test_the_registry_refuses_a_second_class_of_one_name():
    """One name, one policy: registering another class under a registered name fails (and a
    name that is not a policy name is refused)."""
    from streaming_dpbandit.policies import register

    with pytest.raises(ValueError, match=r"'greedy' is taken by .*GreedyRidge"):

        @register
        class Greedy(REGISTRY["linucb"]):
            name = "greedy"

    with pytest.raises(ValueError, match="lower-case policy name"):

        @register
        class Shouting(REGISTRY["linucb"]):
            name = "GREEDY"

    assert REGISTRY["greedy"].__name__ == "GreedyRidge"


def test_slate_policies_have_no_single_arm_interface():
    pol = REGISTRY["dpts-mat"]({"type": "uniform", "n_items": 4, "k": 2}, epsilon=1.0, seed=0)
    assert not isinstance(pol, Policy)
    for method in ("decide", "decide_frozen", "pull", "update"):
        assert not hasattr(pol, method), method
    batch = pol.decide_slates(1)
    assert batch.slates.shape == (1, 2)


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("fliphat", {"d": 5, "s": 9}, "s=9 cannot exceed d=5"),
        ("fliphat", {"d": 3, "s": 2, "feature_mean": [0.0]}, "feature_mean must have d=3"),
        ("dp-linucb", {"d": 3, "horizon_mode": "doubling", "n0": 1000}, "power of two"),
        ("ldp-gloc", {"d": 3, "profile": "authors_multiparam"}, "setting=multi"),
        ("table", {"probabilities": [[-1.0, 2.0]]}, "non-negative"),
    ],
)
def test_cross_field_rules_live_in_the_policy(name, params, message):
    """The configuration reports the policy's own rule (one home), word for word."""
    with pytest.raises(ValueError, match=message) as policy_err:
        REGISTRY[name](**params).validate()
    with pytest.raises(ConfigError) as config_err:
        policy_config(name, params)
    assert str(policy_err.value) in str(config_err.value)


def test_simulate_runs_build_from_the_validated_config():
    from streaming_dpbandit.experiments.runner import RunSpec, build_policy

    cfg = policy_config("greedy", {"d": 3, "reg": 0.5})
    spec = RunSpec("greedy", "greedy", {}, 10, config=cfg)
    pol = build_policy(spec, seed=1)
    assert (pol.d, pol.reg, pol.seed) == (3, 0.5, 1)
