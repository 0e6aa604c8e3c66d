"""The base of every policy configuration, and the helpers that read options.

A configuration declares its policy's parameters with their types and ranges (pydantic v2);
everything else is generic: :meth:`PolicyConfig.build` constructs the registered policy class,
and validation ends with the policy's own cross-field rules (:meth:`BasePolicy.validate
<streaming_dpbandit.policies.base.BasePolicy.validate>`), their one home.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ..errors import ConfigError

__all__ = ["PolicyConfigBase", "format_validation_error", "parse_kv"]


class PolicyConfigBase(BaseModel):
    """A policy's validated parameters; ``policy`` is its registry name."""

    # defer_build: a model's validator is built when it is first used, not at import (most
    # commands use one or two of these models; building them all took ≈ 0.2 s of start-up);
    # no infinities or NaN anywhere in a configuration (``feedback_window: .inf`` is a mistake)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)
    private: bool = False
    if TYPE_CHECKING:  # each subclass declares it as a Literal field (a field here would
        policy: str  # reorder every model's fields, and with them the snapshot fingerprints)

        def __getattr__(self, name: str) -> Any:  # a policy's own parameters
            ...

    #: Constructor parameters a configuration never sets: the privacy audit's noise multiplier
    #: and the tests' tie rule (``tests/config/test_config_parity.py`` checks the rest match).
    not_configurable: ClassVar[frozenset[str]] = frozenset({"noise_scale_multiplier", "ties"})
    #: Configuration field → constructor parameter, where the names differ.
    renamed: ClassVar[dict[str, str]] = {}

    @model_validator(mode="after")
    def _policy_rules(self):
        try:  # the policy's cross-field rules (s ≤ d, calibration options, ...)
            self.build().validate()
        except ValueError as err:
            raise ValueError(str(err)) from None
        return self

    def policy_class(self) -> type:
        """The policy class this configuration builds (by its registry name and, for a
        policy whose parameters select a variant, its parameters)."""
        from ..policies import policy_class

        return policy_class(self.policy, self.params())

    def params(self) -> dict:
        """The constructor's keyword arguments (without ``seed``)."""
        params = self.model_dump(exclude={"policy", "private"})
        for field, param in self.renamed.items():
            params[param] = params.pop(field)
        return params

    def changes_since(self, fingerprint: str) -> list[str]:
        """Fields whose value differs from a snapshot's fingerprint (its ``model_dump_json``).

        A field the fingerprint lacks (added by a later version) counts only when this
        configuration moves it off its default, so that a state written before the field
        existed still resumes under the behaviour it was written with.

        >>> from streaming_dpbandit.config import DPLinUCBConfig
        >>> old = '{"policy": "dp-linucb", "private": true, "d": 3, "epsilon": 1.0}'
        >>> DPLinUCBConfig(d=3, noise_backend="fast").changes_since(old)
        []
        >>> DPLinUCBConfig(d=3, epsilon=2.0, noise_backend="secure").changes_since(old)
        ['epsilon', 'noise_backend']
        """
        then = json.loads(fingerprint)
        now = json.loads(self.model_dump_json())
        fields = type(self).model_fields
        out = []
        for key, value in now.items():
            if key in then:
                changed = then[key] != value
            else:
                default = fields[key].default if key in fields else None
                changed = json.loads(json.dumps(default)) != value
            if changed:
                out.append(key)
        return out + sorted(set(then) - set(now))

    def build(self, seed: int | None = None, **overrides):
        """The policy, with ``overrides`` replacing configured parameters."""
        return self.policy_class()(**{**self.params(), **overrides}, seed=seed)

    def simulation_only(self) -> str | None:
        """Why this configuration is refused outside ``mode: simulation`` (None: it is not)."""
        if getattr(self, "calibration", None) == "paper":
            return (
                "calibration=paper is for reproducing the paper's figures only and is refused "
                "outside mode=simulation"
            )
        return None


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line per problem, e.g. ``s: Input should be greater than 0``."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"] if x not in ("function-after",))
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return prefix + "; ".join(parts)


def parse_kv(items: list[str] | None, what: str = "--policy-param") -> dict:
    """Parse ``KEY=VALUE`` items; values are JSON when they parse as JSON, else strings.

    >>> parse_kv(["s=10", "calibration=paper", "feature_mean=[0, 1]", "clip_contexts=false"])
    {'s': 10, 'calibration': 'paper', 'feature_mean': [0, 1], 'clip_contexts': False}
    >>> parse_kv(["sigma=1e309"])
    Traceback (most recent call last):
    ...
    streaming_dpbandit.errors.ConfigError: --policy-param sigma: '1e309' is not a finite number
    """
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"{what} expects KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if not key:
            raise ConfigError(f"{what} has an empty key in {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
        value = out[key]
        non_finite = isinstance(value, float) and not math.isfinite(value)
        if non_finite or raw.strip().lstrip("+-").lower() in ("inf", "infinity", "nan"):
            raise ConfigError(f"{what} {key}: {raw!r} is not a finite number")
    return out
