"""Validated configuration: one discriminated union of policy configs (pydantic v2).

The CLI and the service build policies only through these models, so a bad option is one clear
error, never a traceback. ``validate_for_mode`` enforces the spec's deployment rules: FLIPHAT's
``paper`` calibration and M > 1 with η < 1e-2 are refused outside ``mode="simulation"``
(FLIPHAT spec §5.3, §6); so are DP-LinUCB's ``zcdp`` (pending review, DP-LinUCB spec §3.2) and
``authors_code_2018`` (reproduction only, §3.4) calibrations and its simulation-only
``track_bounds`` diagnostics (§9). DP-LinUCB's ``paper`` calibration is a valid (conservative)
guarantee and stays available, labelled. So are PrivateLASSO's ``paper`` calibration and its
``support="oracle"`` diagnostic (PrivateLASSO spec §4, §10 P1, §12.3 T7).
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from .errors import ConfigError

# The policy classes are imported where they are used (``build``, the table policy's check), so
# that importing the configuration loads neither numpy nor the policies.
if TYPE_CHECKING:
    from .policies import (
        FLIPHAT,
        LDPGLB,
        LDPGLOC,
        LDPUCB,
        DPLinUCB,
        GreedyRidge,
        LassoBandit,
        LinUCB,
        LinUCBDisjoint,
        Policy,
        PrivateLASSO,
        RandomPolicy,
        SALassoBandit,
        TablePolicy,
        THLassoBandit,
    )

__all__ = [
    "ConfigError",
    "DPLinUCBConfig",
    "DPMatroidConfig",
    "DPTSMatConfig",
    "DPUCBMatConfig",
    "FliphatConfig",
    "GreedyConfig",
    "LDPGLBConfig",
    "LDPGLOCConfig",
    "LDPUCBConfig",
    "LassoBanditConfig",
    "LinUCBConfig",
    "LinUCBDisjointConfig",
    "PolicyConfig",
    "PrivateLassoConfig",
    "RandomConfig",
    "SALassoConfig",
    "ScalingSettings",
    "ServiceSettings",
    "THLassoConfig",
    "TableConfig",
    "format_validation_error",
    "load_service_settings",
    "parse_kv",
    "policy_config",
    "validate_for_mode",
]


class _PolicyConfig(BaseModel):
    # defer_build: a model's validator is built when it is first used, not at import (most
    # commands use one or two of these models; building them all took ≈ 0.2 s of start-up);
    # no infinities or NaN anywhere in a configuration (``feedback_window: .inf`` is a mistake)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)
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
    grad_clip: float | Literal["auto", "off"] = "auto"
    accountant: Literal["auto", "pld", "closed_form"] = "auto"
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
    noise_backend: Literal["fast", "secure"] = "fast"

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
        if self.calibration == "paper" and self.accountant == "pld":
            raise ValueError("the paper calibration is reproduced with the closed form only")
        if not isinstance(self.grad_clip, str):
            if not (math.isfinite(self.grad_clip) and self.grad_clip > 0):
                raise ValueError("grad_clip must be 'auto', 'off' or a number > 0")
            if self.calibration != "certified":
                raise ValueError("grad_clip is an option of the certified calibration only")
            if self.m_schedule != "fixed" or self.iterations != 1:
                raise ValueError("grad_clip needs one N-IHT iteration (m_schedule=fixed, M = 1)")
            if self.form not in ("auto", "h"):
                raise ValueError("grad_clip accumulates clipped contributions: form must be 'h'")
        return self

    def build(self, seed: int | None = None, **overrides) -> FLIPHAT:
        from .policies import FLIPHAT

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return FLIPHAT(**params, seed=seed)


class RandomConfig(_PolicyConfig):
    """Uniform random policy."""

    policy: Literal["random"] = "random"
    d: int | None = Field(None, gt=0)

    def build(self, seed: int | None = None, **overrides) -> RandomPolicy:
        from .policies import RandomPolicy

        return RandomPolicy(**{"d": self.d, **overrides}, seed=seed)


class TableConfig(_PolicyConfig):
    """A fixed, context-free stochastic policy: action probabilities per slate position."""

    policy: Literal["table"] = "table"
    probabilities: list[list[float]] | list[float]
    d: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self):
        from .policies import TablePolicy

        try:
            TablePolicy(self.probabilities)._table()
        except ValueError as err:
            raise ValueError(str(err)) from None
        return self

    def build(self, seed: int | None = None, **overrides) -> TablePolicy:
        from .policies import TablePolicy

        params = {"probabilities": self.probabilities, "d": self.d, **overrides}
        return TablePolicy(**params, seed=seed)


class LassoBanditConfig(_PolicyConfig):
    """Sparsity-agnostic Lasso bandit (non-private baseline)."""

    policy: Literal["lasso-bandit"] = "lasso-bandit"
    d: int = Field(gt=0)
    lambda0: float = Field(1.0, gt=0)
    refit_every: int = Field(200, ge=1)
    tol: float = Field(1e-3, gt=0)
    max_iter: int = Field(1000, ge=1)

    def build(self, seed: int | None = None, **overrides) -> LassoBandit:
        from .policies import LassoBandit

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return LassoBandit(**params, seed=seed)


class LinUCBConfig(_PolicyConfig):
    """LinUCB, shared parameter over per-arm features (non-private baseline)."""

    policy: Literal["linucb"] = "linucb"
    d: int = Field(gt=0)
    reg: float = Field(1.0, gt=0)
    beta: float | None = Field(None, ge=0)
    alpha: float = Field(0.01, gt=0, lt=1)
    sigma: float = Field(1.0, gt=0)
    S: float = Field(1.0, gt=0)
    batch_size: int = Field(1, ge=1)

    def build(self, seed: int | None = None, **overrides) -> LinUCB:
        from .policies import LinUCB

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return LinUCB(**params, seed=seed)


class LinUCBDisjointConfig(_PolicyConfig):
    """Disjoint LinUCB: one ridge model per arm, keyed by arm id (non-private baseline).

    ``max_arms`` bounds the models kept (least recently used arm forgotten beyond it);
    ``n_arms``, its name before arm-id keying, is still accepted.
    """

    policy: Literal["linucb-disjoint"] = "linucb-disjoint"
    d: int = Field(gt=0)
    max_arms: int = Field(1024, gt=0, validation_alias=AliasChoices("max_arms", "n_arms"))
    reg: float = Field(1.0, gt=0)
    beta: float | None = Field(None, ge=0)
    alpha: float = Field(0.01, gt=0, lt=1)
    sigma: float = Field(1.0, gt=0)
    S: float = Field(1.0, gt=0)
    batch_size: int = Field(1, ge=1)
    pending_capacity: int = Field(1 << 16, ge=1)

    def build(self, seed: int | None = None, **overrides) -> LinUCBDisjoint:
        from .policies import LinUCBDisjoint

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return LinUCBDisjoint(**params, seed=seed)


class GreedyConfig(_PolicyConfig):
    """Greedy ridge / OLS (reg = 0) baseline."""

    policy: Literal["greedy"] = "greedy"
    d: int = Field(gt=0)
    reg: float = Field(1.0, ge=0)
    batch_size: int = Field(1, ge=1)

    def build(self, seed: int | None = None, **overrides) -> GreedyRidge:
        from .policies import GreedyRidge

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return GreedyRidge(**params, seed=seed)


class DPLinUCBConfig(_PolicyConfig):
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
    tree_impl: Literal["binary", "sqrt_toeplitz", "blt"] = "binary"
    n_steps: int | None = Field(None, ge=1)
    batch_size: int = Field(1, ge=1)
    track_bounds: bool = False
    release_records: bool = True
    bandit_id: str = "default"

    @model_validator(mode="after")
    def _check(self):
        if self.horizon_mode == "doubling" and self.n0 & (self.n0 - 1):
            raise ValueError("n0 must be a power of two in doubling mode")
        try:  # every calibration rule of the spec (c > 0, Gaussian-only options, ...)
            self.build()._validate()
        except ValueError as err:
            raise ValueError(str(err)) from None
        return self

    def build(self, seed: int | None = None, **overrides) -> DPLinUCB:
        from .policies import DPLinUCB

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return DPLinUCB(**params, seed=seed)


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
        from .policies import PrivateLASSO

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
        from .policies import THLassoBandit

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
        from .policies import SALassoBandit

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return SALassoBandit(**params, seed=seed)


class _Matroid(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)
    expected_rank: int | None = Field(None, ge=1, description="assertion on the computed rank")


class UniformMatroidConfig(_Matroid):
    """Any K of L items."""

    type: Literal["uniform"] = "uniform"
    n_items: int = Field(ge=1)
    k: int = Field(ge=1)


class PartitionMatroidConfig(_Matroid):
    """At most ``capacities[j]`` items of category j; ``categories[e]`` is item e's category."""

    type: Literal["partition"] = "partition"
    categories: list[int] = Field(min_length=1)
    capacities: list[int] = Field(min_length=1)


class GraphicMatroidConfig(_Matroid):
    """Items are the edges (u, v) of a multigraph; a slate is a spanning forest."""

    type: Literal["graphic"] = "graphic"
    edges: list[tuple[int, int]] = Field(min_length=1)
    n_vertices: int | None = Field(None, ge=1)


class LinearMatroidConfig(_Matroid):
    """Items are vectors; a slate is a basis of their span over the reals."""

    type: Literal["linear"] = "linear"
    vectors: list[list[float]] = Field(min_length=1)
    exact: bool = False
    tol: float = Field(1e-9, gt=0, lt=1)


MatroidConfig = Annotated[
    UniformMatroidConfig | PartitionMatroidConfig | GraphicMatroidConfig | LinearMatroidConfig,
    Field(discriminator="type"),
]


class DPMatroidConfig(_PolicyConfig):
    """DPUCB-MAT / DPTS-MAT: private slates over a matroid (DP-matroid spec §10).

    ``items`` names the L items (the bandit's catalogue; default ``item-0`` … ``item-{L−1}``).
    ``calibration="paper"`` (ε0 = ε/K, certified as 2ε-DP only) is refused outside
    ``mode: simulation``.
    """

    private: bool = True
    matroid: MatroidConfig
    epsilon: float = Field(gt=0)
    calibration: Literal["certified", "paper"] = "certified"
    update_every: int = Field(1, ge=1)
    reward_range: tuple[float, float] = (0.0, 1.0)
    default_reward: float = Field(0.0, ge=0, le=1)
    items: list[str] | None = None
    bandit_id: str = "default"
    noise_backend: Literal["fast", "secure"] = "fast"

    @model_validator(mode="after")
    def _check(self):
        if not self.reward_range[0] < self.reward_range[1]:
            raise ValueError("reward_range must be (lo, hi) with lo < hi")
        from .matroids import from_description

        m = from_description(self.matroid.model_dump())  # validates; computes rank and loops
        if self.items is not None and (
            len(self.items) != m.n_items or len(set(self.items)) != len(self.items)
        ):
            raise ValueError(f"items must be {m.n_items} distinct ids (one per matroid item)")
        return self

    def item_ids(self) -> list[str]:
        if self.items is not None:
            return list(self.items)
        from .matroids import from_description

        return [f"item-{i}" for i in range(from_description(self.matroid.model_dump()).n_items)]

    def build(self, seed: int | None = None, **overrides):
        params = self.model_dump(exclude={"policy", "private", "items"})
        params["item_ids"] = self.item_ids()
        params.update(overrides)
        from .policies import DPTSMAT, DPUCBMAT

        cls = DPUCBMAT if self.policy == "dpucb-mat" else DPTSMAT
        return cls(**params, seed=seed)


class DPUCBMatConfig(DPMatroidConfig):
    """DPUCB-MAT (thesis Alg. 2)."""

    policy: Literal["dpucb-mat"] = "dpucb-mat"


class DPTSMatConfig(DPMatroidConfig):
    """DPTS-MAT (thesis Alg. 5)."""

    policy: Literal["dpts-mat"] = "dpts-mat"


class LDPGLBConfig(_PolicyConfig):
    """LDP-GLB (LDP-SGD / LDP-OLS, local model; see :class:`streaming_dpbandit.policies.LDPGLB`).

    In ``dpbandit serve`` it is the configuration of a ``privacy: local`` bandit: the devices
    decide and privatise with the client SDK, the service runs the server model. The
    ``authors_code`` profile and its reproduction switches are simulation-only.
    """

    policy: Literal["ldp-glb"] = "ldp-glb"
    private: bool = True
    d: int = Field(gt=0)
    n_arms: int = Field(2, gt=0)
    variant: Literal["sgd", "ols"] = "sgd"
    setting: Literal["single", "multi"] = "single"
    link: Literal["linear", "logistic", "poisson"] = "linear"
    epsilon: float = Field(1.0, gt=0)
    delta: float = Field(0.01, gt=0, lt=1)
    gaussian: Literal["classical", "analytic"] = "classical"
    context_scale: float = Field(1.0, gt=0)
    c_r: float = Field(1.0, gt=0)
    R: float | None = Field(None, gt=0)
    S: float = Field(1.0, gt=0)
    c0: float = Field(5.0, gt=0)
    n0: float = Field(1.0, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(1, ge=1)
    alpha: float = Field(0.1, gt=0, lt=1)
    horizon: int = Field(1_000_000, ge=1, description="T_max inside the OLS shift c̃")
    ols_shift: bool = True
    refresh_every: int = Field(1, ge=1)
    warmup_rounds: int = Field(0, ge=0)
    warmup_arm: Literal["ticket", "uniform"] = "ticket"
    h: float | None = Field(None, gt=0)
    multi_sgd_mechanism: Literal["per_arm", "joint"] = "per_arm"
    theta0: Literal["zero", "random", "prior"] = "zero"
    theta_prior: list[float] | None = None
    profile: Literal["paper", "authors_code"] = "paper"
    normalise: bool = True
    clip_reward: bool = True
    score_clip: float | None = Field(None, gt=0)
    ols_noise: Literal["certified", "code"] = "certified"
    code_sigma_factor: float = Field(6.0, gt=0)
    ball_dim: int | None = Field(None, ge=1)
    warmup_variant: Literal["same", "ols"] = "same"
    pending_capacity: int = Field(1 << 16, ge=1)
    bandit_id: str = "default"

    @model_validator(mode="after")
    def _check(self):
        if self.theta0 == "prior":
            n = self.d if self.setting == "single" else self.d * self.n_arms
            if self.theta_prior is None or len(self.theta_prior) != n:
                raise ValueError(f"theta0=prior needs theta_prior with {n} numbers")
        if not self.ols_shift and self.profile != "authors_code":
            raise ValueError("ols_shift=false is a reproduction switch of profile=authors_code")
        try:  # every rule of the model spec (ε ≤ 1 per Gaussian under classical, ...)
            self.build().model_spec()
        except ValueError as err:
            raise ValueError(str(err)) from None
        return self

    def build(self, seed: int | None = None, **overrides) -> LDPGLB:
        from .policies import LDPGLB

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return LDPGLB(**params, seed=seed)


class LDPUCBConfig(_PolicyConfig):
    """LDP-UCB comparison baseline (simulation only)."""

    policy: Literal["ldp-ucb"] = "ldp-ucb"
    private: bool = True
    d: int = Field(gt=0)
    n_arms: int = Field(2, gt=0)
    setting: Literal["single", "multi"] = "single"
    epsilon: float = Field(1.0, gt=0)
    delta: float = Field(0.01, gt=0, lt=1)
    alpha: float = Field(0.1, gt=0, lt=1)
    horizon: int = Field(1_000_000, ge=2)
    v0: float = Field(1.0, ge=0)
    sigma_factor: float = Field(6.0, gt=0)
    refresh_every: int = Field(1, ge=1)
    bandit_id: str = "default"

    def build(self, seed: int | None = None, **overrides) -> LDPUCB:
        from .policies import LDPUCB

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return LDPUCB(**params, seed=seed)


class LDPGLOCConfig(_PolicyConfig):
    """LDP-GLOC comparison baseline (simulation only)."""

    policy: Literal["ldp-gloc"] = "ldp-gloc"
    private: bool = True
    d: int = Field(gt=0)
    n_arms: int = Field(2, gt=0)
    setting: Literal["single", "multi"] = "single"
    link: Literal["linear", "logistic", "poisson"] = "linear"
    epsilon: float = Field(1.0, gt=0)
    delta: float = Field(0.01, gt=0, lt=1)
    alpha: float = Field(0.1, gt=0, lt=1)
    horizon: int = Field(1_000_000, ge=2)
    sigma_factor: float = Field(6.0, gt=0)
    profile: Literal["spec", "authors_multiparam"] = "spec"
    v0: float = Field(0.0, ge=0)
    refresh_every: int = Field(1, ge=1)
    bandit_id: str = "default"

    @model_validator(mode="after")
    def _check(self):
        if self.profile == "authors_multiparam" and self.setting != "multi":
            raise ValueError("profile=authors_multiparam is the authors' E2 code: setting=multi")
        return self

    def build(self, seed: int | None = None, **overrides) -> LDPGLOC:
        from .policies import LDPGLOC

        params = self.model_dump(exclude={"policy", "private"})
        params.update(overrides)
        return LDPGLOC(**params, seed=seed)


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

_CONFIGS: dict[str, type[_PolicyConfig]] = {
    "fliphat": FliphatConfig,
    "random": RandomConfig,
    "lasso-bandit": LassoBanditConfig,
    "linucb": LinUCBConfig,
    "linucb-disjoint": LinUCBDisjointConfig,
    "greedy": GreedyConfig,
    "dp-linucb": DPLinUCBConfig,
    "private-lasso": PrivateLassoConfig,
    "th-lasso": THLassoConfig,
    "sa-lasso": SALassoConfig,
    "ldp-glb": LDPGLBConfig,
    "ldp-ucb": LDPUCBConfig,
    "ldp-gloc": LDPGLOCConfig,
    "dpucb-mat": DPUCBMatConfig,
    "dpts-mat": DPTSMatConfig,
    "table": TableConfig,
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
    if isinstance(cfg, (LDPUCBConfig, LDPGLOCConfig)):
        raise ConfigError(
            f"{cfg.policy} is a comparison baseline for simulations only (LDP-GLB spec §7)"
        )
    if isinstance(cfg, LDPGLBConfig) and cfg.profile == "authors_code":
        raise ConfigError(
            "ldp-glb profile=authors_code reproduces the authors' experiments and is refused "
            "outside mode=simulation (LDP-GLB spec §0, §15.8)"
        )
    if isinstance(cfg, DPLinUCBConfig):
        if cfg.calibration in ("zcdp", "authors_code_2018"):
            raise ConfigError(
                f"dp-linucb calibration={cfg.calibration} is simulation-only: "
                + (
                    "pending DP-specialist review (spec §3.2)"
                    if cfg.calibration == "zcdp"
                    else "a reproduction profile of the authors' code (spec §3.4)"
                )
            )
        if cfg.track_bounds:
            raise ConfigError("track_bounds reads the raw noise and is simulation-only (spec §9)")
        if not cfg.release_records:
            raise ConfigError(
                "release_records=false is simulation-only: the ledger must record "
                "every release before it is used"
            )
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


# -- the service ------------------------------------------------------------------------------
from pathlib import Path  # noqa: E402

from pydantic import SecretStr  # noqa: E402
from pydantic_settings import (  # noqa: E402
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True, allow_inf_nan=False)


class TopicsSettings(_Section):
    contexts: str = "dpbandit.contexts"
    feedback: str = "dpbandit.feedback"
    decisions: str = "dpbandit.decisions"
    dead_letter: str = "dpbandit.dead-letter"
    models: str = Field(
        "dpbandit.models",
        description="compacted topic of the published models of privacy=local bandits",
    )


class KafkaSettings(_Section):
    """Kafka transport (kafka-python). Absent: the embedded in-process transport is used."""

    bootstrap_servers: str = Field(min_length=1)
    group_id: str = "dpbandit"
    client_id: str = "dpbandit"
    topics: TopicsSettings = Field(default_factory=TopicsSettings)
    create_topics: bool = True
    partitions: int = Field(6, ge=1)
    replication_factor: int = Field(1, ge=1)
    max_poll_records: int = Field(2000, ge=1)
    poll_timeout_ms: int = Field(50, ge=0)
    linger_ms: int = Field(2, ge=0)
    producer_batch_bytes: int = Field(
        1 << 20,
        ge=1024,
        le=4 << 20,
        description="the producer's batch size per partition (kafka-python's batch_size). "
        "kafka-python wakes its sender thread at every send while more than one batch of a "
        "partition waits, so batches that fit a whole decided chunk save a system call and a "
        "thread switch per decision (docs/service.md, Performance)",
    )
    rejoin_stall_s: float = Field(
        60.0,
        ge=0,
        description="re-create the consumer when its group membership has not been stable for "
        "this long (kafka-python 3.0 can stall in a re-join for ever); 0 disables",
    )
    session_timeout_ms: int = Field(
        10_000,
        ge=1000,
        description="consumer-group session: how long the broker waits for a member that "
        "stopped heartbeating (a killed process) before its partitions move or a newcomer may "
        "take them; the broker accepts 6,000-300,000 by default (kafka-python's default, "
        "45,000, made a restart after kill -9 wait ~45 s)",
    )
    heartbeat_interval_ms: int | None = Field(
        None,
        ge=100,
        description="consumer heartbeats; default a fifth of session_timeout_ms (at least 300)",
    )
    static_membership: bool = Field(
        True,
        description="scaling.mode single: join the consumer group as a static member "
        "(group.instance.id = group_instance_id, or <group_id>-single), so a restarted "
        "process takes its partitions back at once, without waiting for the session timeout "
        "of the one it replaces (docs/operations.md, Restarts)",
    )
    group_instance_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="static membership id (KIP-345): in single mode default <group_id>-single; "
        "in group mode none unless set (then unique per replica, e.g. the pod name)",
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None

    @model_validator(mode="after")
    def _heartbeat_below_session(self):
        if self.heartbeat_interval_ms is not None and (
            self.heartbeat_interval_ms >= self.session_timeout_ms
        ):
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        return self

    def heartbeat_ms(self) -> int:
        """The consumer's heartbeat interval: the setting, else a fifth of the session.

        >>> KafkaSettings(bootstrap_servers="h:1", session_timeout_ms=6000).heartbeat_ms()
        1200
        """
        if self.heartbeat_interval_ms is not None:
            return self.heartbeat_interval_ms
        return max(300, self.session_timeout_ms // 5)

    def instance_id(self, single: bool) -> str | None:
        """The consumer's ``group.instance.id`` (None: a dynamic member).

        >>> KafkaSettings(bootstrap_servers="h:1", group_id="shop/eu").instance_id(single=True)
        'shop_eu-single'
        >>> KafkaSettings(bootstrap_servers="h:1").instance_id(single=False) is None
        True
        """
        if self.group_instance_id is not None:
            return self.group_instance_id
        if not single or not self.static_membership:
            return None
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.group_id)[:240] + "-single"


class ScalingSettings(_Section):
    """Several replicas in one consumer group (docs/scaling.md, pattern 1).

    ``single`` (default): one process owns every partition; snapshots and the ledger live in
    the local state directory. ``group``: each input partition index is a *task* with its own
    Kafka transactional producer; task snapshots go to a compacted changelog topic and ledger
    records to a compacted ledger topic, committed atomically with the task's outputs.
    """

    mode: Literal["single", "group"] = "single"
    state_topic: str | None = Field(None, description="default: <group_id>.state")
    ledger_topic: str | None = Field(None, description="default: <group_id>.ledger")
    commit_interval_s: float = Field(
        1.0, gt=0, description="transaction commit interval: bounds the decisions' visibility"
    )
    transaction_timeout_ms: int = Field(60_000, ge=1000)

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data):
        if isinstance(data, dict) and "session_timeout_ms" in data:
            raise ValueError(
                "scaling.session_timeout_ms moved to kafka.session_timeout_ms (one setting for "
                "both scaling modes)"
            )
        return data


class SimulationSource(_Section):
    """The embedded default input: a simulated stream from an ``envs/`` environment."""

    env: str = "fliphat-paper"
    env_params: dict = Field(default_factory=lambda: {"d": 100, "K": 3, "s_star": 5})
    events: int = Field(20_000, ge=1)
    bandit_id: str = "default"
    seconds_between_events: float = Field(0.01, gt=0)
    feedback_delay_mean: float = Field(0.2, ge=0)
    feedback_probability: float = Field(1.0, ge=0, le=1)
    seed: int = 0
    feature_encoding: Literal["json", "f64"] = Field(
        "json",
        description="how contexts carry features: JSON number lists, or binary "
        "arm_features_f64 (base64 float64; several times faster to read, docs/events.md)",
    )


class FileSource(_Section):
    """A JSONL file of ``{"topic": "contexts"|"feedback", "value": {...}}`` lines."""

    path: Path


class LocalBanditSettings(_Section):
    """Server side of a ``privacy: local`` bandit (LDP-GLB spec §8; ``stream/local.py``).

    Model versions are published every ``refresh_every`` reports (the ldp-glb policy setting).
    """

    max_staleness: int = Field(
        100, ge=0, description="reports computed against an older model version are dropped"
    )
    dedup_window: int = Field(
        100_000, ge=1, description="a msg_id seen within the last N accepted reports is dropped"
    )
    model_epoch: int = Field(
        0, ge=0, description="bump to start a new model lineage (a new model id) on purpose"
    )


class BanditSettings(_Section):
    """One bandit: its policy and how its rewards are joined."""

    policy: PolicyConfig
    privacy: Literal["central", "local"] = Field(
        "central",
        description="local: devices privatise their own reports (policy ldp-glb); the feedback "
        "topic carries LDP reports and the service publishes model snapshots",
    )
    local: LocalBanditSettings = Field(default_factory=LocalBanditSettings)
    feedback_window: float = Field(60.0, gt=0, description="seconds of event time")
    on_expiry: Literal["drop", "default"] = "drop"
    default_reward: float = 0.0
    reward_bounds: tuple[float, float] | None = None
    max_pending: int = Field(200_000, ge=1)
    feedback_lag_rounds: int = Field(
        0,
        ge=0,
        description="for policies that update every few rounds (LinUCB family): an update at "
        "round r reads the rows of rounds ≤ r − lag, so rewards can arrive without blocking",
    )
    retention: float | None = Field(None, gt=0, description="seconds; default 10× the window")
    epsilon_budget: float | None = Field(None, gt=0)
    arms: list[str] | None = Field(
        None, description="arm catalogue for shared contexts (disjoint per-arm encoding)"
    )
    seed: int | None = Field(
        None, description="seeds noise key and coins: reproducible tests only, never production"
    )

    @model_validator(mode="after")
    def _secure_noise_by_default(self):
        """``serve`` draws from the secure noise backend unless the policy says otherwise
        (issue 22 §1; docs/privacy/secure-noise.md). ``simulate``/``replay`` keep ``fast``."""
        pol = self.policy
        if (
            "noise_backend" in type(pol).model_fields
            and "noise_backend" not in pol.model_fields_set
        ):
            self.policy = pol.model_copy(update={"noise_backend": "secure"})
        return self


class SnapshotSettings(_Section):
    directory: Path = Path("state")
    interval_s: float = Field(30.0, gt=0)


class MetricsSettings(_Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9464, ge=0, le=65535)


class BroadcastSettings(_Section):
    """Model broadcast (docs/scaling.md, pattern 2): this process is the bandit's single
    ``learner`` or one of its decision replicas (``decider``)."""

    role: Literal["learner", "decider"]
    models_topic: str = Field("dpbandit.models", min_length=1)
    learner_group_id: str | None = Field(
        None, description="consumer group of the learner (default: '<kafka.group_id>.learner')"
    )
    replica_id: str | None = Field(
        None, max_length=200, description="decider's name in its decisions (default host-pid)"
    )
    model_refresh_ms: int = Field(100, ge=0, description="decider: how often it checks models")
    commit_interval_s: float = Field(1.0, gt=0, description="decider: flush + offset commit")


class ModelServerSettings(_Section):
    """HTTP endpoint of the published models of ``privacy: local`` bandits."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9465, ge=0, le=65535)


class ServiceSettings(BaseSettings):
    """Configuration of ``dpbandit serve``.

    Sources, highest priority first: command-line overrides, environment variables
    (``DPBANDIT_...``, nested with ``__``, e.g. ``DPBANDIT_KAFKA__BOOTSTRAP_SERVERS``), the YAML
    file given with ``--config``, defaults.
    """

    model_config = SettingsConfigDict(
        env_prefix="DPBANDIT_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
        defer_build=True,
        allow_inf_nan=False,
    )

    mode: Literal["service", "simulation"] = "service"
    kafka: KafkaSettings | None = None
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    simulation: SimulationSource = Field(default_factory=SimulationSource)
    file: FileSource | None = None
    bandits: dict[str, BanditSettings] = Field(default_factory=dict)
    snapshots: SnapshotSettings = Field(default_factory=SnapshotSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    model_server: ModelServerSettings = Field(default_factory=ModelServerSettings)
    max_message_bytes: int = Field(1_000_000, ge=1024)
    max_batch: int = Field(2048, ge=1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = False
    progress: bool = True
    idle_timeout_s: float = Field(
        30.0, gt=0, description="force-expire joins of a blocked bandit after this long idle"
    )
    max_event_time_skew_s: float | None = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="contexts and rewards stamped more than this many seconds ahead of the "
        "wall clock are dead-lettered (event_time_out_of_range): a far-future event would "
        "stall its bandit until that time; null disables (simulated streams from the future)",
    )
    broadcast: BroadcastSettings | None = None

    _yaml_file: Path | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ):
        yaml_file = _YAML_FILE.get("path")
        sources = [init_settings, env_settings]
        if yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)

    @model_validator(mode="after")
    def _check(self):
        for name, b in self.bandits.items():
            validate_for_mode(b.policy, self.mode)
            is_ldp = isinstance(b.policy, LDPGLBConfig)
            if b.privacy == "local" and not is_ldp:
                raise ValueError(f"bandit {name}: privacy=local needs policy ldp-glb")
            if is_ldp and b.privacy != "local":
                raise ValueError(
                    f"bandit {name}: policy ldp-glb runs with privacy=local (the devices "
                    "privatise their reports; a central ldp-glb bandit would see raw data)"
                )
            if isinstance(b.policy, DPMatroidConfig):
                _check_slate_bandit(name, b)
            if b.reward_bounds is not None and not b.reward_bounds[0] < b.reward_bounds[1]:
                raise ValueError(
                    f"bandit {name}: reward_bounds must be (low, high) with low < high"
                )
        topics = self.kafka.topics if self.kafka else None
        if (
            topics
            and len({topics.contexts, topics.feedback, topics.decisions, topics.dead_letter}) < 4
        ):
            raise ValueError("the four topics must have different names")
        if (
            topics
            and any(b.privacy == "local" for b in self.bandits.values())
            and topics.models
            in {topics.contexts, topics.feedback, topics.decisions, topics.dead_letter}
        ):
            raise ValueError("the models topic must differ from the other topics")
        if self.scaling.mode == "group" and self.kafka is None:
            raise ValueError("scaling.mode 'group' needs the kafka section (replicas share topics)")
        if self.scaling.mode == "group" and any(
            b.privacy == "local" for b in self.bandits.values()
        ):
            raise ValueError(
                "privacy=local bandits run in scaling.mode 'single' (their server model is "
                "small; scale the devices, not the server)"
            )
        if self.scaling.mode == "group" and self.broadcast is not None:
            raise ValueError(
                "scaling.mode 'group' (many bandits over replicas) and broadcast (one bandit, "
                "a learner and decision replicas) are different patterns: choose one"
            )
        return self


def _check_slate_bandit(name: str, b: BanditSettings) -> None:
    """A slate bandit finalizes every served item at the deadline (DP-matroid spec §7.2): a
    missing reward becomes the *policy's* ``default_reward`` — dropping it would make the batch
    composition depend on which feedback arrived — so the bandit-level ``on_expiry`` does not
    apply and a bandit-level ``default_reward`` other than 0 must agree with the policy's."""
    if b.default_reward != 0.0 and b.default_reward != b.policy.default_reward:
        raise ValueError(
            f"bandit {name}: set the default reward of a slate bandit in its policy "
            "(policy.default_reward)"
        )
    if b.arms is not None:
        raise ValueError(f"bandit {name}: a slate bandit's catalogue is its policy's 'items'")


_YAML_FILE: dict = {}

#: Wrong-type errors of strict validation: a quoted number or boolean in the YAML file.
_STRICT_TYPES = {"float_type", "int_type", "bool_type"}


def _check_yaml_types(path) -> None:
    """Refuse a number or boolean written as a string in the YAML file (``reward: "1.5"``,
    ``enabled: "no"``): lax validation would convert it silently, and a quoted value is more
    often a mistake than a wish. Environment variables are strings by nature: not checked.
    Any other problem is left to the full validation (one error line per problem)."""
    import json

    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return  # reported by the full validation
    if not isinstance(raw, dict):
        return
    from pydantic import TypeAdapter

    parts = []
    for key, value in raw.items():
        field = ServiceSettings.model_fields.get(key)
        if field is None:
            continue  # reported by the full validation
        try:  # JSON mode: str → Path and list → tuple stay allowed; "1.5" → float does not
            TypeAdapter(field.annotation).validate_json(json.dumps(value, default=str), strict=True)
        except ValidationError as err:
            for e in err.errors():
                if e["type"] not in _STRICT_TYPES or not isinstance(e["input"], str):
                    continue
                loc = ".".join(str(x) for x in (key, *e["loc"]) if x != "function-after")
                kind = {"float_type": "a number", "int_type": "an integer"}.get(
                    e["type"], "true or false"
                )
                parts.append(f"{loc}: {kind}, not the string {e['input']!r} (drop the quotes)")
        except ValueError:
            continue
    if parts:
        raise ConfigError(f"invalid configuration in {path}: " + "; ".join(parts))


def _check_yaml_top_level(path: str) -> None:
    """One clear line for a YAML file whose top level is not a mapping of settings."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return  # reported, with its position, by the settings source below
    if data is not None and not isinstance(data, dict):
        kinds = {list: "a list", str: "a string", int: "a number", float: "a number"}
        kind = kinds.get(type(data), f"a {type(data).__name__}")
        raise ConfigError(
            f"{path}: the top level must be a mapping of settings (e.g. 'bandits:'), not {kind}"
        )


def load_service_settings(path: str | None = None, **overrides) -> ServiceSettings:
    """Build :class:`ServiceSettings` from an optional YAML file, the environment and overrides.

    Raises :class:`ConfigError` with one line per problem.
    """
    if path is not None and not Path(path).is_file():
        raise ConfigError(f"no configuration file at {path}")
    if path is not None:
        _check_yaml_top_level(path)
        _check_yaml_types(path)
    _YAML_FILE["path"] = path
    try:
        return ServiceSettings(**overrides)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, "invalid configuration: ")) from None
    except ConfigError:
        raise
    except (ValueError, OSError) as err:
        raise ConfigError(f"invalid configuration: {err}") from None
    except Exception as err:  # YAML syntax errors
        import yaml

        if isinstance(err, yaml.YAMLError):
            mark = getattr(err, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(f"invalid YAML in {path}{where}: {problem}") from None
        raise
    finally:
        _YAML_FILE.pop("path", None)
