"""Configurations of the local-DP policies: LDP-GLB and its two comparison baselines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import PolicyConfigBase

__all__ = ["LDPGLBConfig", "LDPGLOCConfig", "LDPUCBConfig"]


class LDPGLBConfig(PolicyConfigBase):
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
    gaussian: Literal["classical", "analytic", "discrete"] = "classical"
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
    noise_backend: Literal["fast", "secure"] = "fast"

    def secure_by_default(self) -> bool:
        """Never by default: the noise is drawn on the devices (the client SDK's
        ``LDPClient(noise_backend="secure")``), which the server cannot see; ``serve``'s
        in-process simulated devices stay on the fast backend."""
        return False

    def simulation_only(self) -> str | None:
        if self.profile == "authors_code":
            return (
                "ldp-glb profile=authors_code reproduces the authors' experiments and is refused "
                "outside mode=simulation (LDP-GLB spec §0, §15.8)"
            )
        return None


class _LDPBaselineConfig(PolicyConfigBase):
    """What the two comparison baselines share (``policies/_ldp_baseline.py``)."""

    private: bool = True
    d: int = Field(gt=0)
    n_arms: int = Field(2, gt=0)
    setting: Literal["single", "multi"] = "single"
    epsilon: float = Field(1.0, gt=0)
    delta: float = Field(0.01, gt=0, lt=1)
    alpha: float = Field(0.1, gt=0, lt=1)
    horizon: int = Field(1_000_000, ge=2)
    sigma_factor: float = Field(6.0, gt=0)
    refresh_every: int = Field(1, ge=1)
    bandit_id: str = "default"

    def simulation_only(self) -> str | None:
        return f"{self.policy} is a comparison baseline for simulations only (LDP-GLB spec §7)"


class LDPUCBConfig(_LDPBaselineConfig):
    """LDP-UCB comparison baseline (simulation only)."""

    policy: Literal["ldp-ucb"] = "ldp-ucb"
    v0: float = Field(1.0, ge=0)


class LDPGLOCConfig(_LDPBaselineConfig):
    """LDP-GLOC comparison baseline (simulation only)."""

    policy: Literal["ldp-gloc"] = "ldp-gloc"
    link: Literal["linear", "logistic", "poisson"] = "linear"
    profile: Literal["spec", "authors_multiparam"] = "spec"
    v0: float = Field(0.0, ge=0)
