"""User-level privacy settings: the one home of k, E and the counter-memory cap (issue 22 §2).

A bandit's ``user_level:`` section (``dpbandit serve``), and ``--max-contributions-per-user`` /
``--max-releases-per-user`` of ``simulate`` and ``replay``, are this model. Absent, the bandit
is event level (today's behaviour and numbers). Present, the policy's ``epsilon``/``delta`` are
the guarantee of **one release for the k events of one user**: the policy is built at the group
calibration (:func:`~streaming_dpbandit.policies.user_level.group_params`) and wrapped in
:class:`~streaming_dpbandit.policies.user_level.UserLevel`. Derivation:
``docs/privacy/user-level.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from .base import PolicyConfigBase

__all__ = ["UserLevelConfig"]


class UserLevelConfig(BaseModel):
    """Contribution bounding per user.

    >>> from streaming_dpbandit.config import policy_config
    >>> ul = UserLevelConfig(max_contributions_per_user=2, max_releases_per_user=3)
    >>> pol = ul.build(policy_config("fliphat", {"d": 10, "s": 2}), seed=1)
    >>> pol.policy.epsilon, pol.max_contributions_per_user    # ε/k for one release
    (0.5, 2)
    >>> print(ul.refusal(policy_config("linucb", {"d": 3})))  # doctest: +ELLIPSIS
    user_level: policy linucb is not private (user-level privacy applies to fliphat, ...)
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)

    max_contributions_per_user: int = Field(
        ge=1, description="k: events of one user learned from per release (window)"
    )
    max_releases_per_user: int | None = Field(
        None, ge=1, description="E: releases (windows) a user is learned from; null: no cap"
    )
    window_rounds: int | None = Field(
        None,
        ge=1,
        description="local-DP bandits (ldp-glb) only: rounds per bounding window (a device "
        "sends at most k reports per window, in at most E windows; needs "
        "max_releases_per_user); null: one window for the run",
    )
    max_users: int = Field(
        1_000_000,
        ge=1,
        description="cap on each per-user counter table (about 100 bytes per entry); a new "
        "user beyond it is decided but not learned from",
    )
    key_file: Path | None = Field(
        None,
        description="file holding the secret key of the user-id hash (at least 16 bytes), "
        "shared by every process that hashes ids (a broadcast's learner and decision "
        "replicas); null: drawn once from the OS and kept in the bandit's snapshot",
    )

    @field_validator("key_file")
    @classmethod
    def _key_readable(cls, path: Path | None) -> Path | None:
        if path is not None:
            _read_key(path)  # refused at start with one line, never later
        return path

    def key_seed(self, seed: int | None) -> int | None:
        """The ``UserLevel`` hash-key seed: derived from ``key_file`` when set (a secret, never
        logged), else from the bandit's ``seed`` (tests), else None (OS entropy)."""
        if self.key_file is not None:
            return int.from_bytes(_read_key(self.key_file) + b"\x01", "little")  # injective
        return None if seed is None else int(seed) ^ 0x5EED

    @model_serializer(mode="wrap")
    def _without_unset_window(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``window_rounds`` appears only when set: snapshots' fingerprints of bounds written
        before the field existed stay valid."""
        out: dict[str, Any] = handler(self)
        if out.get("window_rounds", 0) is None:
            del out["window_rounds"]
        return out

    def refusal(self, policy: PolicyConfigBase) -> str | None:
        """Why this bound cannot apply to ``policy`` (one line), or None."""
        from ..policies.user_level import GROUP_CALIBRATED, SLATE_GROUP_CALIBRATED

        name = policy.policy
        have = ", ".join(GROUP_CALIBRATED)
        if not policy.private:
            return (
                f"user_level: policy {name} is not private (user-level privacy applies to {have})"
            )
        if name not in GROUP_CALIBRATED:
            return f"user_level: no group calibration for policy {name} yet (supported: {have})"
        if name == "private-lasso" and getattr(policy, "calibration", None) == "paper":
            return "user_level: private-lasso calibration=paper is not a valid DP guarantee"
        slate = name in SLATE_GROUP_CALIBRATED
        if slate and getattr(policy, "calibration", None) == "paper":  # certified as 2ε only
            return f"user_level: {name} calibration=paper is for reproducing the thesis only"
        if slate and self.max_releases_per_user is not None:  # one release: the whole run
            return (
                f"user_level: max_releases_per_user does not apply to {name}: its one guarantee "
                "covers the whole run, so k already bounds a user's slates over the run"
            )
        if name == "ldp-glb":
            from ..policies.ldp_user_level import ldp_glb_refusal

            if self.window_rounds is not None and self.max_releases_per_user is None:
                return "user_level: window_rounds needs max_releases_per_user (E)"
            return ldp_glb_refusal(policy.params())
        if self.window_rounds is not None:
            return (
                f"user_level: window_rounds is for local-DP bandits (ldp-glb); policy {name}'s "
                "windows are its releases"
            )
        return None

    def build(self, policy: PolicyConfigBase, seed: int | None = None, **overrides: Any) -> Any:
        """The policy at the group calibration for k, wrapped in ``UserLevel``."""
        from ..policies.user_level import UserLevel, group_params

        why = self.refusal(policy)
        if why is not None:
            raise ValueError(why)
        given = policy.params()
        eps, delta = float(given["epsilon"]), float(given.get("delta", 0.0))  # slates: pure ε
        k = self.max_contributions_per_user
        params: dict[str, Any] = {}
        if k > 1:  # (DP-LinUCB's ε′ depends on every parameter; FLIPHAT's on ε, δ, k only)
            base = policy.params() if policy.policy in ("dp-linucb", "ldp-glb") else {}
            g = group_params(policy.policy, base, k, eps, delta)
            params = {"epsilon": g["epsilon"]}
            if "delta" in given:
                params["delta"] = g["delta"]
        inner = policy.build(seed=seed, **{**overrides, **params})
        if policy.policy == "ldp-glb":  # local: the δ its reports use (0 for the pure ℓ2 ball)
            delta = float(inner.model_spec().report_guarantee()[1])
        return UserLevel(
            inner,
            k,
            self.max_releases_per_user,
            self.max_users,
            seed=self.key_seed(seed),
            delta_per_release=delta,
            epsilon_per_release=eps,
            window_rounds=self.window_rounds,
        )

    def describe(self) -> str:
        """One line for summaries: ``k = 2 events per user per release, E = 3 releases``."""
        e = self.max_releases_per_user
        return f"k = {self.max_contributions_per_user} events per user per release, " + (
            f"E = {e} releases" if e is not None else "no cap on releases"
        )


def _read_key(path: Path) -> bytes:
    """The key file's bytes (surrounding whitespace stripped); ValueError (one line, never the
    content) when unreadable or shorter than 16 bytes."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as err:
        raise ValueError(f"user_level.key_file {str(path)!r}: {err.strerror or err}") from None
    if len(key) < 16:
        raise ValueError(f"user_level.key_file {str(path)!r}: the key needs at least 16 bytes")
    return key
