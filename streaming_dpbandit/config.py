"""Validated configuration: one discriminated union of policy configs (pydantic v2).

The CLI and the service build policies only through these models, so a bad option is one clear
error, never a traceback. ``validate_for_mode`` enforces the spec's deployment rules: the
``paper`` calibration and M > 1 with η < 1e-2 are refused outside ``mode="simulation"``
(FLIPHAT spec §5.3, §6), and so are PrivateLASSO's ``paper`` calibration and its
``support="oracle"`` diagnostic (PrivateLASSO spec §4, §10 P1, §12.3 T7).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .policies import (
    FLIPHAT,
    LassoBandit,
    Policy,
    PrivateLASSO,
    RandomPolicy,
    SALassoBandit,
    THLassoBandit,
)

__all__ = [
    "ConfigError",
    "FliphatConfig",
    "LassoBanditConfig",
    "PolicyConfig",
    "PrivateLassoConfig",
    "RandomConfig",
    "SALassoConfig",
    "THLassoConfig",
    "format_validation_error",
    "parse_kv",
    "policy_config",
    "validate_for_mode",
]


class ConfigError(ValueError):
    """A user-facing configuration error (printed as one line by the CLI)."""


class _PolicyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    private: bool = False

    def build(self, seed: int | None = None, **overrides) -> Policy:
        raise NotImplementedError


class FliphatConfig(_PolicyConfig):
    """FLIPHAT (see :class:`streaming_dpbandit.policies.FLIPHAT` for every parameter)."""

    policy: Literal["fliphat"] = "fliphat"
    private: bool = True
    d: int = Field(gt=0)
    s: int = Field(10, gt=0)
    epsilon: float = Field(1.0, gt=0)
    delta: float = Field(1e-6, gt=0, lt=1)
    eta: float = Field(1e-4, gt=0)
    b_max: float = Field(1.0, gt=0)
    l1_radius: float | None = Field(None, gt=0)
    x_max: float | None = Field(None, gt=0)
    sigma_prior: float = Field(0.1, ge=0)
    reward_clip: float | None = Field(None, gt=0)
    calibration: Literal["certified", "paper"] = "certified"
    m_schedule: Literal["fixed", "log"] = "fixed"
    iterations: int = Field(1, ge=1)
    m0: float = Field(0.16, gt=0)
    m_guard: Literal["min_one", "allow_zero"] = "min_one"
    first_episode_len: int = Field(1, ge=1)
    max_episode_len: int | None = Field(None, ge=1)
    swap_delay: int = Field(0, ge=0)
    clip_contexts: bool = True
    feature_mean: list[float] | None = None
    feature_scale: list[float] | None = None
    form: Literal["auto", "h", "gram", "rows"] = "auto"
    bandit_id: str = "default"

    @model_validator(mode="after")
    def _check(self):
        if self.s > self.d:
            raise ValueError(f"s={self.s} cannot exceed d={self.d}")
        if self.calibration == "certified" and not self.clip_contexts:
            raise ValueError("the certified calibration requires clip_contexts=true")
        for name in ("feature_mean", "feature_scale"):
            v = getattr(self, name)
            if v is not None and len(v) != self.d:
                raise ValueError(f"{name} must have d={self.d} entries")
        if self.feature_scale is not None and min(self.feature_scale) <= 0:
            raise ValueError("feature_scale entries must be positive")
        if self.max_episode_len is not None and self.max_episode_len < self.first_episode_len:
            raise ValueError("max_episode_len must be >= first_episode_len")
        return self

    def build(self, seed: int | None = None, **overrides) -> FLIPHAT:
        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return FLIPHAT(**params, seed=seed)


class RandomConfig(_PolicyConfig):
    """Uniform random policy."""

    policy: Literal["random"] = "random"
    d: int | None = Field(None, gt=0)

    def build(self, seed: int | None = None, **overrides) -> RandomPolicy:
        return RandomPolicy(**{"d": self.d, **overrides}, seed=seed)


class LassoBanditConfig(_PolicyConfig):
    """Sparsity-agnostic Lasso bandit (non-private baseline)."""

    policy: Literal["lasso-bandit"] = "lasso-bandit"
    d: int = Field(gt=0)
    lambda0: float = Field(1.0, gt=0)
    refit_every: int = Field(200, ge=1)
    tol: float = Field(1e-3, gt=0)
    max_iter: int = Field(1000, ge=1)

    def build(self, seed: int | None = None, **overrides) -> LassoBandit:
        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return LassoBandit(**params, seed=seed)


class PrivateLassoConfig(_PolicyConfig):
    """PrivateLASSO-R (and, in simulation only, the paper's literal PrivateLASSO).

    See :class:`streaming_dpbandit.policies.PrivateLASSO` for every parameter. ``clip_l2`` and
    ``reward_bound`` are public bounds without defaults; ``calibration="repaired"`` is the spec's
    name for the default ``"certified"``.
    """

    policy: Literal["private-lasso"] = "private-lasso"
    private: bool = True
    d: int = Field(gt=1)
    s0: int = Field(gt=0)
    horizon: int = Field(ge=2)
    epsilon: float = Field(1.0, gt=0)
    delta: float = Field(1e-8, gt=0, lt=1)
    mode: Literal["forgetful", "episodic"] = "forgetful"
    clip_coord: float = Field(1.0, gt=0)
    clip_l2: float = Field(gt=0)
    reward_bound: float = Field(gt=0)
    theta_bound: float = Field(1.0, gt=0)
    support_cap: int | None = Field(None, gt=0)
    l_min: int | None = Field(None, ge=1)
    lambda0: float | None = Field(None, gt=0)
    sbar_pub: float = Field(1.0, gt=0)
    ridge: float = Field(1.0, gt=0)
    solver_slack: float = Field(0.05, gt=0)
    rho_split: dict[str, float] | None = None
    shift_beta: float = Field(0.05, gt=0, lt=1)
    shift_mult: float = Field(1.0, ge=0)
    refresh_every: int = Field(1, ge=1)
    support: Literal["svt", "oracle", "full"] = "svt"
    oracle_support: list[int] | None = None
    calibration: Literal["certified", "repaired", "paper"] = "certified"
    allow_invalid_privacy: bool = False
    allow_large: bool = False
    phi2: float = Field(0.5, gt=0)
    c_x: float = Field(1.0, gt=0)
    self_check: bool = False
    bandit_id: str = "default"

    @model_validator(mode="after")
    def _check(self):
        if self.s0 >= self.d:
            raise ValueError(f"s0={self.s0} must be below d={self.d}")
        if self.calibration == "paper":
            if not self.allow_invalid_privacy:
                raise ValueError(
                    "calibration=paper has no valid privacy guarantee; it needs "
                    "allow_invalid_privacy=true (simulation only)"
                )
            return self
        cap = self.support_cap if self.support_cap is not None else 2 * self.s0
        if self.support == "svt" and not self.s0 < cap < self.d:
            raise ValueError(f"need s0 < support_cap < d, got support_cap={cap}")
        if self.support == "oracle" and not self.oracle_support:
            raise ValueError("support=oracle needs oracle_support")
        if self.oracle_support and not all(0 <= i < self.d for i in self.oracle_support):
            raise ValueError("oracle_support indices must lie in [0, d)")
        if self.rho_split is not None:
            need = {"sel", "ls"} if self.mode == "forgetful" else {"sel", "snap", "tree"}
            if set(self.rho_split) != need or abs(sum(self.rho_split.values()) - 1) > 1e-12:
                raise ValueError(f"rho_split needs keys {sorted(need)} summing to 1")
            if min(self.rho_split.values()) <= 0:
                raise ValueError("rho_split fractions must be positive")
        lmin = self.l_min
        if lmin is None:
            lmin = max(8, math.ceil(math.log2(10.0 * self.s0 * math.log(self.d))))
        if (self.horizon - 1).bit_length() - 1 < lmin:
            raise ValueError(
                f"horizon={self.horizon} leaves no boundary after the burn-in 2^{lmin}"
            )
        return self

    def build(self, seed: int | None = None, **overrides) -> PrivateLASSO:
        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return PrivateLASSO(**params, seed=seed)


class _LassoBaselineConfig(_PolicyConfig):
    clip_coord: float | None = Field(None, gt=0)
    clip_l2: float | None = Field(None, gt=0)
    reward_bound: float | None = Field(None, gt=0)
    tol: float = Field(1e-6, gt=0)


class THLassoConfig(_LassoBaselineConfig):
    """Thresholded Lasso bandit (non-private ε = ∞ reference)."""

    policy: Literal["th-lasso"] = "th-lasso"
    d: int = Field(gt=1)
    lambda0: float = Field(0.02, gt=0)
    refit_every: int = Field(1, ge=1)
    first_refit: int = Field(2, ge=1)

    def build(self, seed: int | None = None, **overrides) -> THLassoBandit:
        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return THLassoBandit(**params, seed=seed)


class SALassoConfig(_LassoBaselineConfig):
    """Sparsity-agnostic Lasso bandit, spec §6 profile (non-private ε = ∞ reference)."""

    policy: Literal["sa-lasso"] = "sa-lasso"
    d: int = Field(gt=1)
    lambda0: float = Field(0.1, gt=0)
    refit_every: int = Field(200, ge=1)

    def build(self, seed: int | None = None, **overrides) -> SALassoBandit:
        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return SALassoBandit(**params, seed=seed)


PolicyConfig = Annotated[
    FliphatConfig
    | RandomConfig
    | LassoBanditConfig
    | PrivateLassoConfig
    | THLassoConfig
    | SALassoConfig,
    Field(discriminator="policy"),
]

_CONFIGS: dict[str, type[_PolicyConfig]] = {
    "fliphat": FliphatConfig,
    "random": RandomConfig,
    "lasso-bandit": LassoBanditConfig,
    "private-lasso": PrivateLassoConfig,
    "th-lasso": THLassoConfig,
    "sa-lasso": SALassoConfig,
}


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
    return out


def policy_config(name: str, params: dict) -> _PolicyConfig:
    """Validate ``params`` for policy ``name``; raise :class:`ConfigError` with one line."""
    cls = _CONFIGS.get(name)
    if cls is None:
        raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(sorted(_CONFIGS))}")
    try:
        return cls(**params)
    except ValidationError as err:
        raise ConfigError(
            format_validation_error(err, f"invalid parameters for {name}: ")
        ) from None


def validate_for_mode(cfg: _PolicyConfig, mode: str) -> None:
    """Refuse settings that are only acceptable in simulation (spec §5.3, §6)."""
    if mode == "simulation":
        return
    if getattr(cfg, "calibration", None) == "paper":
        raise ConfigError(
            "calibration=paper is for reproducing the paper's figures only and is refused "
            "outside mode=simulation"
        )
    if isinstance(cfg, FliphatConfig) and cfg.m_schedule == "fixed" and cfg.iterations > 1:
        if cfg.eta < 1e-2:
            raise ConfigError("iterations > 1 with eta < 1e-2 adds noise without progress; refused")
    if isinstance(cfg, FliphatConfig) and cfg.m_schedule == "log" and cfg.eta < 1e-2:
        raise ConfigError("m_schedule=log with eta < 1e-2 is refused outside mode=simulation")
    if isinstance(cfg, PrivateLassoConfig):
        if cfg.support == "oracle":
            raise ConfigError(
                "support=oracle uses the true support and is refused outside mode=simulation"
            )
        if cfg.allow_invalid_privacy:
            raise ConfigError("allow_invalid_privacy is refused outside mode=simulation")
