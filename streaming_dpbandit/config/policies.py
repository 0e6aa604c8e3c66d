"""Validated policy configurations: one discriminated union, one class per policy (pydantic v2).

Each class declares its policy's parameters with their types and ranges; building, the
cross-field rules (the policy's own ``validate``) and the refusals outside ``mode: simulation``
come from :class:`~.base.PolicyConfigBase`. FLIPHAT's class lives in :mod:`.fliphat`, the local
DP and slate ones in :mod:`.ldp` and :mod:`.matroid`; :mod:`.registry` names them all (``CONFIGS``,
imported on first use) and its ``validate_for_mode`` enforces the spec's
deployment rules: FLIPHAT's ``paper`` calibration and M > 1 with η < 1e-2 are refused outside
``mode="simulation"`` (FLIPHAT spec §5.3, §6); so are DP-LinUCB's ``zcdp`` (pending review,
DP-LinUCB spec §3.2) and ``authors_code_2018`` (reproduction only, §3.4) calibrations and its
simulation-only ``track_bounds`` diagnostics (§9). DP-LinUCB's ``paper`` calibration is a valid
(conservative) guarantee and stays available, labelled. So are PrivateLASSO's ``paper``
calibration and its ``support="oracle"`` diagnostic (PrivateLASSO spec §4, §10 P1, §12.3 T7).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, Field

from .base import PolicyConfigBase
from .fliphat import FliphatConfig
from .ldp import LDPGLBConfig, LDPGLOCConfig, LDPUCBConfig
from .matroid import DPTSMatConfig, DPUCBMatConfig

__all__ = [
    "DPLinUCBConfig",
    "FliphatConfig",
    "GreedyConfig",
    "LassoBanditConfig",
    "LinUCBConfig",
    "LinUCBDisjointConfig",
    "PolicyConfig",
    "PrivateLassoConfig",
    "RandomConfig",
    "SALassoConfig",
    "THLassoConfig",
    "TableConfig",
]


class RandomConfig(PolicyConfigBase):
    """Uniform random policy."""

    policy: Literal["random"] = "random"
    d: int | None = Field(None, gt=0)


class TableConfig(PolicyConfigBase):
    """A fixed, context-free stochastic policy: action probabilities per slate position."""

    policy: Literal["table"] = "table"
    probabilities: list[list[float]] | list[float]
    d: int | None = Field(None, gt=0)


class LassoBanditConfig(PolicyConfigBase):
    """Sparsity-agnostic Lasso bandit (non-private baseline)."""

    policy: Literal["lasso-bandit"] = "lasso-bandit"
    d: int = Field(gt=0)
    lambda0: float = Field(1.0, gt=0)
    refit_every: int = Field(200, ge=1)
    tol: float = Field(1e-3, gt=0)
    max_iter: int = Field(1000, ge=1)


class _RidgeUCBConfig(PolicyConfigBase):
    """What the two LinUCB variants share."""

    d: int = Field(gt=0)
    reg: float = Field(1.0, gt=0)
    beta: float | None = Field(None, ge=0)
    alpha: float = Field(0.01, gt=0, lt=1)
    sigma: float = Field(1.0, gt=0)
    S: float = Field(1.0, gt=0)
    batch_size: int = Field(1, ge=1)


class LinUCBConfig(_RidgeUCBConfig):
    """LinUCB, shared parameter over per-arm features (non-private baseline)."""

    policy: Literal["linucb"] = "linucb"


class LinUCBDisjointConfig(_RidgeUCBConfig):
    """Disjoint LinUCB: one ridge model per arm, keyed by arm id (non-private baseline).

    ``max_arms`` bounds the models kept (least recently used arm forgotten beyond it);
    ``n_arms``, its name before arm-id keying, is still accepted.
    """

    policy: Literal["linucb-disjoint"] = "linucb-disjoint"
    max_arms: int = Field(1024, gt=0, validation_alias=AliasChoices("max_arms", "n_arms"))
    pending_capacity: int = Field(1 << 16, ge=1)


class GreedyConfig(PolicyConfigBase):
    """Greedy ridge / OLS (reg = 0) baseline."""

    policy: Literal["greedy"] = "greedy"
    d: int = Field(gt=0)
    reg: float = Field(1.0, ge=0)
    batch_size: int = Field(1, ge=1)


class DPLinUCBConfig(PolicyConfigBase):
    """Joint-DP LinUCB (see :class:`streaming_dpbandit.policies.DPLinUCB` for every parameter)."""

    policy: Literal["dp-linucb"] = "dp-linucb"
    private: bool = True
    d: int = Field(gt=0)
    epsilon: float = Field(1.0, gt=0)
    delta: float = Field(1e-6, gt=0, lt=1)
    n_cap: int = Field(1 << 20, ge=1)
    noise: Literal["gaussian", "wishart"] = "gaussian"
    shift: bool = True
    calibration: Literal["certified", "paper", "zcdp", "authors_code_2018"] = "certified"
    wishart_gamma: Literal["printed", "tight"] = "printed"
    alpha: float | None = Field(None, gt=0, lt=1)
    L: float = Field(1.0, gt=0)
    B_tilde: float = Field(1.0, gt=0)
    S: float = Field(1.0, gt=0)
    sigma: float | None = Field(None, gt=0)
    horizon_mode: Literal["fixed", "doubling"] = "fixed"
    n0: int = Field(1024, ge=1)
    tree_impl: Literal["auto", "binary", "sqrt_toeplitz", "blt"] = "auto"
    n_steps: int | None = Field(None, ge=1)
    batch_size: int = Field(1, ge=1)
    track_bounds: bool = False
    release_records: bool = True
    bandit_id: str = "default"
    noise_backend: Literal["fast", "secure"] = "fast"

    def secure_by_default(self) -> bool:
        """``serve``'s secure default applies to the Gaussian binary tree (certified or zCDP);
        the exact factorisations cost O(steps) per step and Wishart has no secure
        construction (docs/privacy/secure-noise.md)."""
        return (
            self.noise == "gaussian"
            and self.calibration in ("certified", "zcdp")
            and self.tree_impl in ("auto", "binary")
        )

    def simulation_only(self) -> str | None:  # the paper calibration is valid (conservative)
        if self.calibration == "zcdp":
            return (
                "dp-linucb calibration=zcdp is simulation-only: pending DP-specialist review "
                "(DP-LinUCB spec §3.2)"
            )
        if self.calibration == "authors_code_2018":
            return (
                "dp-linucb calibration=authors_code_2018 is simulation-only: a reproduction "
                "profile of the authors' code (DP-LinUCB spec §3.4)"
            )
        if self.track_bounds:
            return "track_bounds reads the raw noise and is simulation-only (DP-LinUCB spec §9)"
        if not self.release_records:
            return (
                "release_records=false is simulation-only: the ledger must record every release "
                "before it is used"
            )
        return None


class PrivateLassoConfig(PolicyConfigBase):
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
    noise_backend: Literal["fast", "secure"] = "fast"

    def secure_by_default(self) -> bool:
        """The paper's literal calibration has no secure construction."""
        return self.calibration != "paper"

    def simulation_only(self) -> str | None:
        if self.support == "oracle":
            reason = "support=oracle uses the true support and is refused outside mode=simulation"
        elif self.allow_invalid_privacy:
            reason = "allow_invalid_privacy is refused outside mode=simulation"
        else:
            reason = None
        return super().simulation_only() or reason


class _LassoBaselineConfig(PolicyConfigBase):
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


class SALassoConfig(_LassoBaselineConfig):
    """Sparsity-agnostic Lasso bandit, PrivateLASSO spec §6 profile (non-private, ε = ∞)."""

    policy: Literal["sa-lasso"] = "sa-lasso"
    d: int = Field(gt=1)
    lambda0: float = Field(0.1, gt=0)
    refit_every: int = Field(200, ge=1)


PolicyConfig = Annotated[
    FliphatConfig
    | RandomConfig
    | LassoBanditConfig
    | LinUCBConfig
    | LinUCBDisjointConfig
    | GreedyConfig
    | DPLinUCBConfig
    | PrivateLassoConfig
    | THLassoConfig
    | SALassoConfig
    | LDPGLBConfig
    | LDPUCBConfig
    | LDPGLOCConfig
    | DPUCBMatConfig
    | DPTSMatConfig
    | TableConfig,
    Field(discriminator="policy"),
]
