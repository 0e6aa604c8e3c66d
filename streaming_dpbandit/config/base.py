"""The base of every policy configuration, and the helpers that read options.

A policy's configuration is derived from its constructor (:func:`~.registry.config_class`):
its fields are the policy's parameters with their types and ranges (pydantic v2); everything
else is generic: :meth:`PolicyConfigBase.build` constructs the registered policy class, and
validation ends with the policy's own cross-field rules (:meth:`BasePolicy.validate
<streaming_dpbandit.policies.base.BasePolicy.validate>`), their one home; the refusals outside
``mode: simulation`` and the secure-noise default are the policy's too. :data:`PolicyField` is
a ``policy:`` section of the service's settings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    SerializeAsAny,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticKnownError

from ..errors import ConfigError

__all__ = ["PolicyConfigBase", "PolicyField", "format_validation_error", "parse_kv"]


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

    #: Constructor parameters a configuration never sets (the policy's ``not_configurable``).
    not_configurable: ClassVar[frozenset[str]] = frozenset()
    #: Configuration field → constructor parameter, where the names differ.
    renamed: ClassVar[dict[str, str]] = {}
    #: Field → its value before it existed (the policy's ``config_before_added``).
    before_added: ClassVar[dict[str, Any]] = {}

    @model_validator(mode="after")
    def _policy_rules(self):
        if getattr(self, "noise_backend", None) == "auto":
            # one noise story (issue 31 §5): the secure backend wherever the policy has a
            # secure construction, recorded as what it resolved to (ledgers, fingerprints)
            backend = self.build().noise_backend_in_force
            object.__setattr__(self, "noise_backend", backend)
        try:  # the policy's cross-field rules (s ≤ d, calibration options, ...)
            self.build().validate()
        except ValueError as err:
            raise ValueError(str(err)) from None
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by policy name (the class is derived, not importable by its own name):
        ``simulate --jobs`` hands configurations to worker processes."""
        return _rebuild, (self.policy, self.__getstate__())

    def policy_class(self) -> type:
        """The policy class this configuration builds (by its registry name and, for a
        policy whose parameters select a variant, its parameters)."""
        from ..policies import policy_class

        return policy_class(self.policy, self.params())

    def params(self) -> dict:
        """The constructor's keyword arguments (without ``seed``)."""
        from ..policies import REGISTRY

        params = self.model_dump(exclude={"policy", "private"})
        for field, param in self.renamed.items():
            params[param] = params.pop(field)
        return REGISTRY[self.policy].config_params(params)

    def changes_since(self, fingerprint: str) -> list[str]:
        """Fields whose value differs from a snapshot's fingerprint (its ``model_dump_json``).

        A field the fingerprint lacks (added by a later version) counts only when this
        configuration moves it off its default — or, for a field whose default changed the
        behaviour (``before_added``), off the value that reproduces the old one — so that a
        state written before the field existed resumes only under the behaviour it was written
        with.

        >>> from streaming_dpbandit.config import CONFIGS
        >>> old = '{"policy": "dp-linucb", "private": true, "d": 3, "epsilon": 1.0}'
        >>> CONFIGS["dp-linucb"](d=3, noise_backend="fast").changes_since(old)
        []
        >>> CONFIGS["dp-linucb"](d=3, epsilon=2.0, noise_backend="secure").changes_since(old)
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
                default = self.before_added.get(key, default)
                changed = json.loads(json.dumps(default)) != value
            if changed:
                out.append(key)
        return out + sorted(set(then) - set(now))

    def build(self, seed: int | None = None, **overrides):
        """The policy, with ``overrides`` replacing configured parameters."""
        return self.policy_class()(**{**self.params(), **overrides}, seed=seed)

    def simulation_only(self) -> str | None:
        """Why this configuration is refused outside ``mode: simulation`` (None: it is not):
        the policy's :meth:`~streaming_dpbandit.policies.base.BasePolicy.simulation_only`."""
        reason: str | None = self.build().simulation_only()
        return reason


def _rebuild(name: str, state: dict[str, Any]) -> PolicyConfigBase:
    from .registry import CONFIGS

    cls = CONFIGS[name]
    obj = cls.__new__(cls)
    obj.__setstate__(state)
    return obj


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


def _by_name(value: Any, info: Any) -> Any:
    """A ``policy:`` section: validated by the configuration its ``policy`` names (the
    other policies are not imported). Errors are located as a tagged union's are
    (``policy.fliphat.s``); ``context={"strict": True}`` validates strictly."""
    from .registry import CONFIGS

    if isinstance(value, PolicyConfigBase):
        return value
    if not isinstance(value, Mapping):
        raise PydanticKnownError("model_attributes_type")
    name = value.get("policy")
    if not isinstance(name, str):
        raise PydanticKnownError("union_tag_not_found", {"discriminator": "'policy'"})
    if name not in CONFIGS:
        expected = ", ".join(repr(n) for n in CONFIGS)
        raise PydanticKnownError(
            "union_tag_invalid",
            {"discriminator": "'policy'", "tag": name, "expected_tags": expected},
        )
    strict = bool((info.context or {}).get("strict"))
    try:
        return CONFIGS[name].model_validate(value, strict=strict, context=info.context)
    except ValidationError as err:
        lines = [{**e, "loc": (name, *e["loc"])} for e in err.errors(include_url=False)]
        raise ValidationError.from_exception_data(err.title, lines) from None  # type: ignore[arg-type]


#: A ``policy:`` section of the service's settings: any registered policy's configuration.
PolicyField = Annotated[SerializeAsAny[PolicyConfigBase], BeforeValidator(_by_name)]
