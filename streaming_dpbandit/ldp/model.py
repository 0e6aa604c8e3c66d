"""The public description of an LDP-GLB model: its configuration and its published snapshots.

:class:`ModelSpec` is everything a client needs to decide and build its report apart from the
current estimates: variant (``sgd``/``ols``), setting (``single``/``multi``), link, d, K, the
per-report target (ε, δ), the public bounds (s, c_r, R, S) and the profile. It derives the
mechanism constants (per-block privacy level, ℓ2-ball radius, Gaussian stds, payload sizes) with
the spec's formulas (§3, §6), so a client can recompute them and refuse a snapshot whose
advertised constants differ.

:class:`ModelSnapshot` is one published version: ``model_id``, ``model_version``, the phase
(multi-param warm-up or main), θ̂ (d floats, or K × d), the frozen warm-up estimates θ̂^w and the
elimination threshold h. Its JSON form is documented in ``docs/events.md`` (``ldp_model``).

Profiles: ``paper`` is the product (certified). ``authors_code`` reproduces the authors'
experiments, including their defects (unnormalised contexts, σ_code on every entry, a radius
computed for the wrong dimension); it is simulation-only and clients refuse it by default.

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, cast

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray
from .gaussian import ols_tau, packed_size
from .links import get_link
from .radius import ball_radius

__all__ = ["AUTHORS_CODE_LABEL", "ModelSnapshot", "ModelSpec", "SnapshotError"]

#: Label of every output of the ``authors_code`` profile.
AUTHORS_CODE_LABEL = (
    "a reproduction of the authors' experiment code for comparing figures only; "
    "not a certified LDP guarantee"
)

SCHEMA_VERSION = 1


class SnapshotError(ValueError):
    """A model snapshot that a client must not use."""


def _code_sigma(epsilon: float, delta: float, factor: float) -> float:
    """σ_code = factor·√(2 ln(2.5/δ))/ε (authors' code, spec §11)."""
    return factor * math.sqrt(2.0 * math.log(2.5 / delta)) / epsilon


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Public configuration of one LDP-GLB model (spec §2).

    Parameters
    ----------
    variant
        ``"sgd"`` (ℓ2-ball mechanism, pure ε-LDP, any link) or ``"ols"`` (Gaussian mechanism on
        (xxᵀ, r·x), linear link).
    setting
        ``"single"`` (one θ*, per-arm segments x_a) or ``"multi"`` (one θ*_a per arm).
    link
        ``"linear"``, ``"logistic"`` or ``"poisson"``.
    d, K
        Segment/context dimension and number of arms.
    epsilon, delta
        Per-report target (the whole K-tuple in multi-param); SGD is pure ε-LDP (δ unused).
    gaussian
        ``"classical"`` (needs ε ≤ 1 per mechanism), ``"analytic"``, or ``"discrete"`` (the
        secure noise backend's Rényi-certified calibration; required for secure OLS reports,
        docs/privacy/secure-noise.md).
    context_scale
        Public s: clients use x/s, then clip to ‖x‖ ≤ 1.
    c_r
        Reward clip (linear: [−c_r, c_r]; logistic [0, 1]; Poisson [0, c_r]).
    R
        SGD gradient clip radius = ℓ2-ball input radius.
    S
        Projection radius of θ̂ (server side; published for information).
    multi_sgd_mechanism
        ``"per_arm"`` (K blocks, each Ψ at ε/2) or ``"joint"`` (one Ψ in dimension dK at ε).
    warmup_rounds
        K·s_0 warm-up reports (multi-param; 0 disables the warm-up).
    warmup_arm
        ``"ticket"`` (round robin on a ticket) or ``"uniform"`` (drawn by the client).
    h
        Elimination threshold on the index scale (``None``: no elimination).
    profile
        ``"paper"`` (the product) or ``"authors_code"`` (reproduction only).
    normalise, clip_reward, score_clip, ols_noise, code_sigma_factor, ball_dim, warmup_variant
        Reproduction switches of the ``authors_code`` profile (refused under ``paper``):
        skip context normalisation / reward clipping, clip xᵀθ̂ inside μ, σ_code noise on every
        OLS entry (``ols_noise="code"``), the ℓ2-ball radius computed for dimension
        ``ball_dim`` (the code's multi-param SGD uses d for a dK-vector), private OLS during an
        SGD model's warm-up (``warmup_variant="ols"``).

    Examples
    --------
    >>> spec = ModelSpec(variant="sgd", setting="multi", d=20, K=3, epsilon=1.0, R=2.2, c_r=1.2)
    >>> spec.block_privacy("main"), spec.payload_size("main"), spec.payload_size("warmup")
    ((0.5, 0.0), 60, 20)
    >>> round(spec.radius("main"), 3) == round(ball_radius(0.5, 20, 2.2), 3)
    True
    >>> ols = ModelSpec(variant="ols", setting="single", d=2, K=10, epsilon=1.0, delta=0.01)
    >>> round(ols.tau("main"), 3), ols.payload_size("main")
    (6.215, 5)

    """

    variant: str
    setting: str
    d: int
    K: int
    epsilon: float
    delta: float = 0.0
    link: str = "linear"
    gaussian: str = "classical"
    context_scale: float = 1.0
    c_r: float = 1.0
    R: float | None = None
    S: float = 1.0
    multi_sgd_mechanism: str = "per_arm"
    warmup_rounds: int = 0
    warmup_arm: str = "ticket"
    h: float | None = None
    profile: str = "paper"
    normalise: bool = True
    clip_reward: bool = True
    score_clip: float | None = None
    ols_noise: str = "certified"
    code_sigma_factor: float = 6.0
    ball_dim: int | None = None
    warmup_variant: str = "same"

    def __post_init__(self) -> None:
        if self.R is None:  # spec §2 default: 2·c_r (the paper's 2 c_r C_B with C_B = 1)
            object.__setattr__(self, "R", 2.0 * self.c_r)
        self.validate()

    # -- validation --------------------------------------------------------------------------
    def validate(self) -> None:
        if self.variant not in ("sgd", "ols"):
            raise ValueError("variant must be 'sgd' or 'ols'")
        if self.setting not in ("single", "multi"):
            raise ValueError("setting must be 'single' or 'multi'")
        get_link(self.link)
        if self.variant == "ols" and self.link != "linear":
            raise ValueError("LDP-OLS is for the linear link only")
        if int(self.d) < 1 or int(self.K) < 1 or (self.setting == "single" and self.K < 1):
            raise ValueError("need d >= 1 and K >= 1")
        if self.setting == "multi" and self.K < 2:
            raise ValueError("the multi-parameter setting needs K >= 2 arms")
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError("epsilon must be a positive finite number")
        needs_delta = self.variant == "ols" or (
            self.setting == "multi" and self.warmup_variant == "ols" and self.warmup_rounds > 0
        )
        if needs_delta and not 0 < self.delta < 1:
            raise ValueError("the Gaussian (OLS) mechanism needs 0 < delta < 1")
        if self.gaussian not in ("classical", "analytic", "discrete"):
            raise ValueError("gaussian must be 'classical', 'analytic' or 'discrete'")
        for name in ("context_scale", "c_r", "R", "S"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.multi_sgd_mechanism not in ("per_arm", "joint"):
            raise ValueError("multi_sgd_mechanism must be 'per_arm' or 'joint'")
        if self.warmup_arm not in ("ticket", "uniform"):
            raise ValueError("warmup_arm must be 'ticket' or 'uniform'")
        if self.warmup_rounds < 0:
            raise ValueError("warmup_rounds must be >= 0")
        if self.h is not None and not self.h > 0:
            raise ValueError("h must be positive (or None: no elimination)")
        if self.profile not in ("paper", "authors_code"):
            raise ValueError("profile must be 'paper' or 'authors_code'")
        if self.ols_noise not in ("certified", "code") or self.warmup_variant not in (
            "same",
            "ols",
        ):
            raise ValueError("ols_noise must be certified|code, warmup_variant same|ols")
        quirks = (
            not self.normalise
            or not self.clip_reward
            or self.score_clip is not None
            or self.ols_noise != "certified"
            or self.ball_dim is not None
            or self.warmup_variant != "same"
        )
        if quirks and self.profile != "authors_code":
            raise ValueError(
                "normalise/clip_reward/score_clip/ols_noise/ball_dim/warmup_variant are "
                "reproduction switches of profile='authors_code' only"
            )
        if self.warmup_variant == "ols" and self.variant != "sgd":
            raise ValueError("warmup_variant='ols' applies to SGD models")
        # the calibration must exist (classical needs ε ≤ 1 per Gaussian mechanism, spec A17)
        for phase in ("warmup", "main"):
            if self._block_variant(phase) == "ols" and self.ols_noise == "certified":
                if self.setting == "single" and phase == "warmup":
                    continue
                self.tau(phase)

    # -- derived constants -------------------------------------------------------------------
    @property
    def p(self) -> int:
        """d(d+1)/2."""
        return packed_size(self.d)

    def _block_variant(self, phase: str) -> str:
        if phase == "warmup" and self.setting == "multi" and self.warmup_variant == "ols":
            return "ols"
        return self.variant

    def block_variant(self, phase: str) -> str:
        """Estimator of a phase's blocks: ``"sgd"`` or ``"ols"``."""
        return self._block_variant(phase)

    def joint(self, phase: str) -> bool:
        """True when the main-phase SGD report is one Ψ over the dK-vector."""
        return (
            self.setting == "multi"
            and phase == "main"
            and self.variant == "sgd"
            and self.multi_sgd_mechanism == "joint"
        )

    def block_privacy(self, phase: str = "main") -> tuple[float, float]:
        """(ε, δ) of one block (spec §6: (ε/2, δ/2) per arm in multi-param, warm-up too;
        ``joint`` runs one Ψ at ε; single-param runs at (ε, δ))."""
        delta = self.delta if self._block_variant(phase) == "ols" else 0.0
        if self.setting == "single" or self.joint(phase):
            return self.epsilon, delta
        if self.multi_sgd_mechanism == "joint" and self._block_variant(phase) == "sgd":
            return self.epsilon, 0.0  # warm-up block of a joint model: arm public, one block
        return self.epsilon / 2.0, delta / 2.0

    def ball_dimension(self, phase: str = "main") -> int:
        """Dimension of the ℓ2-ball mechanism's input (dK for ``joint``)."""
        return self.d * self.K if self.joint(phase) else self.d

    def radius(self, phase: str = "main") -> float:
        """ℓ2-ball output radius r_{ε_b, dim}(R) (``ball_dim`` overrides dim, authors_code)."""
        eps_b, _ = self.block_privacy(phase)
        dim = self.ball_dim if self.ball_dim is not None else self.ball_dimension(phase)
        return ball_radius(eps_b, dim, cast(float, self.R))  # None is replaced in __post_init__

    def tau(self, phase: str = "main") -> float:
        """τ of the OLS blocks (the certified calibration, or σ_code/2 for authors_code)."""
        eps_b, delta_b = self.block_privacy(phase)
        if self.ols_noise == "code":
            return _code_sigma(self.epsilon, self.delta, self.code_sigma_factor) / 2.0
        return ols_tau(eps_b, delta_b, self.gaussian, self.p + self.d)

    def secure_refusal(self) -> str | None:
        """Why this model cannot be privatised on the secure backend (``None``: it can).

        OLS blocks need ``gaussian="discrete"``: the classical and analytic calibrations are
        proven for continuous noise only (docs/privacy/secure-noise.md, "LDP randomizers").
        """
        if self.gaussian != "discrete" and any(
            self.block_variant(ph) == "ols" for ph in self.phases()
        ):
            return (
                "secure OLS reports need the model's gaussian='discrete' calibration (this "
                f"model uses {self.gaussian!r}, proven for continuous noise only)"
            )
        return None

    def ols_stds(self, phase: str = "main") -> tuple[float, float]:
        """(matrix std, vector std): (2τ, c_r τ) certified; (σ_code, σ_code) authors_code."""
        if self.ols_noise == "code":
            s = _code_sigma(self.epsilon, self.delta, self.code_sigma_factor)
            return s, s
        tau = self.tau(phase)
        return 2.0 * tau, self.c_r * tau

    def block_size(self, phase: str = "main") -> int:
        """Floats of one arm's block: d (SGD) or d(d+1)/2 + d (OLS)."""
        return self.d if self._block_variant(phase) == "sgd" else self.p + self.d

    def payload_size(self, phase: str = "main") -> int:
        """Floats in a report's payload (fixed per variant, setting and phase, spec §15.5)."""
        if self.setting == "single" or phase == "warmup":
            return self.block_size(phase)
        return self.K * self.block_size(phase)

    def phases(self) -> tuple[str, ...]:
        if self.setting == "multi" and self.warmup_rounds > 0:
            return ("warmup", "main")
        return ("main",)

    def report_guarantee(self) -> tuple[float, float]:
        """The per-report (ε, δ) the configuration targets (spec §1: per report)."""
        if self.variant == "sgd" and self.warmup_variant == "same":
            return self.epsilon, 0.0
        return self.epsilon, self.delta

    def constants(self) -> dict[str, Any]:
        """Derived public constants per phase (sent in snapshots; clients recompute them)."""
        out = {}
        for phase in self.phases():
            eps_b, delta_b = self.block_privacy(phase)
            c = {
                "block_epsilon": eps_b,
                "block_delta": delta_b,
                "payload_size": self.payload_size(phase),
            }
            if self._block_variant(phase) == "sgd":
                c["r_ball"] = self.radius(phase)
                c["ball_dimension"] = self.ball_dimension(phase)
            else:
                c["matrix_std"], c["vector_std"] = self.ols_stds(phase)
            out[phase] = c
        return out

    # -- serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise SnapshotError(f"unknown model spec fields: {sorted(unknown)}")
        return cls(**data)


def _as_array(v: ArrayLike, shape: tuple[int, ...], what: str) -> FloatArray:
    arr = np.asarray(v, dtype=np.float64)
    if arr.shape != shape:
        raise SnapshotError(f"{what} has shape {arr.shape}, expected {shape}")
    if not np.all(np.isfinite(arr)):
        raise SnapshotError(f"{what} contains NaN or infinite values")
    return arr


@dataclasses.dataclass
class ModelSnapshot:
    """One published model version (the downlink message, spec §8).

    Examples
    --------
    >>> import numpy as np
    >>> spec = ModelSpec(variant="sgd", setting="single", d=2, K=3, epsilon=1.0)
    >>> snap = ModelSnapshot("shop", "shop-1a2b", 4, spec, theta=np.array([0.5, -0.25]))
    >>> back = ModelSnapshot.from_json(snap.to_json())
    >>> back.model_version, back.theta.tolist(), back.phase
    (4, [0.5, -0.25], 'main')
    """

    bandit_id: str
    model_id: str
    model_version: int
    spec: ModelSpec
    theta: FloatArray
    phase: str = "main"
    theta_warmup: FloatArray | None = None
    reports: int = 0
    ticket: int | None = None

    def __post_init__(self) -> None:
        s = self.spec
        shape = (s.d,) if s.setting == "single" else (s.K, s.d)
        self.theta = _as_array(self.theta, shape, "theta")
        if self.theta_warmup is not None:
            self.theta_warmup = _as_array(self.theta_warmup, (s.K, s.d), "theta_warmup")
        if self.phase not in s.phases():
            raise SnapshotError(f"phase {self.phase!r} is not a phase of this model")

    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        return {
            "v": SCHEMA_VERSION,
            "type": "ldp_model",
            "bandit_id": self.bandit_id,
            "model_id": self.model_id,
            "model_version": int(self.model_version),
            "reports": int(self.reports),
            "phase": self.phase,
            "theta": self.theta.tolist(),
            "theta_warmup": None if self.theta_warmup is None else self.theta_warmup.tolist(),
            "h": s.h,
            "ticket": self.ticket,
            "spec": s.to_dict(),
            "constants": s.constants(),
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False).encode()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSnapshot:
        if data.get("v") != SCHEMA_VERSION or data.get("type") != "ldp_model":
            raise SnapshotError("not an ldp_model snapshot of schema version 1")
        try:
            spec = ModelSpec.from_dict(dict(data["spec"]))
        except (TypeError, ValueError) as err:
            raise SnapshotError(f"invalid model spec: {err}") from None
        if data.get("h") != spec.h:
            raise SnapshotError("h disagrees with the model spec")
        advertised = data.get("constants")
        if advertised is not None:
            _check_constants(spec.constants(), advertised)
        try:
            return cls(
                bandit_id=str(data["bandit_id"]),
                model_id=str(data["model_id"]),
                model_version=int(data["model_version"]),
                spec=spec,
                theta=data["theta"],
                phase=str(data.get("phase", "main")),
                theta_warmup=data.get("theta_warmup"),
                reports=int(data.get("reports", 0)),
                ticket=data.get("ticket"),
            )
        except KeyError as err:
            raise SnapshotError(f"snapshot lacks {err.args[0]!r}") from None

    @classmethod
    def from_json(cls, raw: bytes | str) -> ModelSnapshot:
        try:
            data = json.loads(raw)
        except ValueError as err:
            raise SnapshotError(f"snapshot is not JSON: {err}") from None
        if not isinstance(data, dict):
            raise SnapshotError("snapshot must be a JSON object")
        return cls.from_dict(data)


def _check_constants(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Refuse advertised constants that differ from the client's own derivation."""
    if set(mine) != set(theirs):
        raise SnapshotError("advertised constants do not match the model's phases")
    for phase, vals in mine.items():
        other = theirs[phase]
        for key, v in vals.items():
            w = other.get(key)
            if w is None or not math.isclose(float(v), float(w), rel_tol=1e-9, abs_tol=0.0):
                raise SnapshotError(
                    f"advertised constant {phase}.{key} = {w!r} differs from the derivation {v!r}"
                )
