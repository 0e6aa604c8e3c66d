"""FLIPHAT's configuration, in a module of its own: ``dpbandit simulate --policy fliphat`` builds
this one pydantic model, not those of every other policy (start-up, issue 24).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import PolicyConfigBase

__all__ = ["FliphatConfig"]


class FliphatConfig(PolicyConfigBase):
    """FLIPHAT (see :class:`streaming_dpbandit.policies.FLIPHAT` for every parameter)."""

    policy: Literal["fliphat"] = "fliphat"
    private: bool = True
    d: int = Field(gt=0)
    s: int = Field(10, gt=0)
    epsilon: float = Field(1.0, gt=0)
    delta: float = Field(1e-6, gt=0, lt=1)
    eta: float | Literal["auto"] = "auto"
    b_max: float = Field(1.0, gt=0)
    l1_radius: float | None = Field(None, gt=0)
    x_max: float | None = Field(None, gt=0)
    sigma_prior: float = Field(0.1, ge=0)
    reward_clip: float | None = Field(None, gt=0)
    calibration: Literal["certified", "paper"] = "certified"
    grad_clip: float | Literal["auto", "off", "private"] = "auto"
    accountant: Literal["auto", "pld", "closed_form"] = "auto"
    m_schedule: Literal["fixed", "log"] = "fixed"
    iterations: int = Field(1, ge=1)
    m0: float = Field(0.16, gt=0)
    m_guard: Literal["min_one", "allow_zero"] = "min_one"
    first_episode_len: int | Literal["auto"] = "auto"
    max_episode_len: int | None = Field(None, ge=1)
    swap_delay: int = Field(0, ge=0)
    warm_start: bool | Literal["auto"] = "auto"
    cold_contributions: Literal["auto", "sign", "clipped"] = "auto"
    clip_contexts: bool = True
    feature_mean: list[float] | None = None
    feature_scale: list[float] | None = None
    form: Literal["auto", "h", "gram", "rows"] = "auto"
    bandit_id: str = "default"
    noise_backend: Literal["fast", "secure"] = "fast"

    @field_validator("eta")
    @classmethod
    def _eta_positive(cls, v: float | str) -> float | str:
        if v != "auto" and not (isinstance(v, (int, float)) and v > 0):
            raise ValueError("eta must be 'auto' or a number > 0")
        return v

    @field_validator("first_episode_len")
    @classmethod
    def _n0_positive(cls, v: int | str) -> int | str:
        if v != "auto" and not (isinstance(v, int) and v >= 1):
            raise ValueError("first_episode_len must be 'auto' or an integer >= 1")
        return v

    def simulation_only(self) -> str | None:
        eta = 1e-4 if self.eta == "auto" else float(self.eta)  # M > 1: no warm start, 1e-4
        if self.m_schedule == "fixed" and self.iterations > 1 and eta < 1e-2:
            reason = "iterations > 1 with eta < 1e-2 adds noise without progress; refused"
        elif self.m_schedule == "log" and eta < 1e-2:
            reason = "m_schedule=log with eta < 1e-2 is refused outside mode=simulation"
        else:
            reason = None
        return super().simulation_only() or reason
