"""FLIPHAT: joint-DP sparse linear contextual bandit (Chakraborty, Roy & Basu, AISTATS 2025).

FLIPHAT spec §3.4 (paper §5.1, Alg. 2): greedy decisions with a model frozen for a whole
episode; episodes double in length; at each episode boundary N-IHT (with Peeling) privately
re-estimates β from the previous episode's rows only, which are then forgotten. Every row enters
exactly one fit and fits use disjoint data, so the whole unbounded run is (ε, δ)-JDP (spec §4).

Since issue 35 the certified defaults also use more of the past at no privacy cost: each fit
starts from the model in force when its episode began (a *warm start*: rows contribute their
clipped residual x̄·(ỹ − x̄ᵀθ⁰), and the fit is θ⁰ plus one step; θ⁰ is a release, so this is
post-processing of earlier fits plus the same per-fit mechanism), the first fit's rows contribute
G·sign(x̄·ỹ) (scale-free), and the first episode is long enough for that fit to find a support
(N₀ = κ₀·ln d/ρ rounds of the default policy, ρ the fit's public noise ratio); derivations in
``docs/privacy/fliphat-noise-reduction.md`` §5–§6.

Calibrations (spec §5): ``certified`` (default; contexts and rewards clipped, sensitivity
derived in ``docs/privacy/fliphat-sensitivity.md``) and ``paper`` (reproduction only, labelled
"for reproducing the paper's figures only; not a valid DP guarantee under the stated bounds").

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal, Self

import numpy as np

from ..estimators.accumulator import EpisodeAccumulator, grid_floor
from ..estimators.episodes import DoublingSchedule
from ..estimators.niht import (
    ACCOUNTANTS,
    CALIBRATIONS,
    NIHT,
    clip_contributions,
    formula_id,
    iterations_for,
)
from ..privacy.contribution import LearnedRounds, ReleaseRefused
from ..privacy.ledger import ReleaseRecord
from ..privacy.noise import NoiseSource
from ..privacy.peeling_accounting import (
    accountant_record,
    closed_form_ratio,
    peeling_pld_epsilon,
    peeling_pld_ratio,
)
from ..privacy.scale_release import SCALE_GRID, scale_bins, scale_release
from ..privacy.secure_noise import GRID_MARGIN
from ..privacy.statement import PAPER_LABEL, PrivacyStatement, per_unit_caveat
from ..utils.arrays import AnyArray, ArrayLike, FloatArray, IntArray, MaybeArray, sorted_distinct
from ._argmax import argmax_ties_by_coins, take_ids
from .base import UNBOUNDED, DecisionBatch, Policy
from .registry import register
from .types import (
    AtLeastOne,
    NoiseBackend,
    NonNegative,
    NonNegativeInt,
    OpenUnit,
    Positive,
    PositiveInt,
)

__all__ = [
    "FIRST_EPISODE_FACTOR",
    "FLIPHAT",
    "GRAD_CLIP_FACTOR",
    "SCALE_MIN_EVIDENCE",
    "SCALE_SHARE",
    "WARM_ETA",
    "WARM_MIN_X_MAX",
    "auto_first_episode_len",
    "default_grad_clip",
]

#: κ of the default contribution clip G = κ·√(b_max² + σ_prior²) (tuned on d = 100, K = 5;
#: docs/privacy/fliphat-noise-reduction.md).
GRAD_CLIP_FACTOR = 0.3


def default_grad_clip(b_max: float, sigma_prior: float) -> float:
    """The default contribution clip G = κ·√(b_max² + σ_prior²), a function of public priors.

    √(b_max² + σ_prior²) bounds the reward's standard deviation when the standardised features
    have unit variance (Var(xᵀβ) ≤ (Σ_j |β_j|)² = b_max²), so G is κ reward standard
    deviations of one coordinate of x·y.

    >>> round(default_grad_clip(3.436219, 0.1), 6)
    1.031302
    """
    return GRAD_CLIP_FACTOR * math.sqrt(b_max * b_max + sigma_prior * sigma_prior)


#: κ₀ of the default first episode N₀ = ⌈κ₀·ln(d)/ρ⌉ (tuned on d = 100, K = 5;
#: docs/privacy/fliphat-noise-reduction.md §6).
FIRST_EPISODE_FACTOR = 4.5

#: Share of ε spent on the private clip scale (``grad_clip="private"``): the first fit composes a
#: pure (SCALE_SHARE·ε)-DP release of the median |ỹ| with its Peeling (exact PLD).
SCALE_SHARE = 0.05

#: ``grad_clip="auto"`` releases the clip scale privately only when the first fit's rows make the
#: median reliable: n₀·ε′ ≥ SCALE_MIN_EVIDENCE (report-noisy-max over 81 grid points misranks by
#: about (2/ε′)·ln 81 ≈ 9/ε′ rows); otherwise G comes from the public priors (§1).
SCALE_MIN_EVIDENCE = 30.0

#: ``warm_start="auto"`` needs contexts standardised to unit variance: a coordinate clip
#: x_max ≥ 2 (the default √(2 ln d) is 2.4 at d = 20, 3.5 at d = 400).
WARM_MIN_X_MAX = 2.0

#: Step size of a warm-started fit: with the no-½ loss, θ⁰ − η∇L(θ⁰) = θ⁰ + 2η·(ĉ − Σ̂θ⁰), so
#: η = ½ and standardised contexts (Σ ≈ I) make one step land near the least-squares point.
WARM_ETA = 0.5


@functools.lru_cache(maxsize=256)
def auto_first_episode_len(d: int, ratio: float, factor: float = FIRST_EPISODE_FACTOR) -> int:
    """N₀ = ⌈κ₀·ln(d)/ρ⌉: rounds of the default policy before the first fit (public).

    ρ = λ/ξ is the fit's noise ratio (a function of s, ε, δ and the accountant only): a support
    coordinate whose mean clipped contribution is a fraction c of the sensitivity stands out of
    the d Laplace maxima (≈ ξ·ln d) after about ln(d)/(c·ρ) rows; κ₀ = 1/c.

    >>> auto_first_episode_len(400, 0.0375)
    719
    """
    if not (d >= 1 and ratio > 0):
        raise ValueError("need d >= 1 and ratio > 0")
    return max(1, math.ceil(factor * math.log(max(d, 2)) / ratio))


_EMPTY_MODEL: tuple[IntArray, FloatArray] = (np.zeros(0, dtype=np.int64), np.zeros(0))

PRIVACY_UNIT = "one round: the K contexts and the reward of the user served at that round"
NEIGHBOURING = (
    "replace one round (all its contexts and rewards); every other user's actions are "
    "protected, past and future"
)


@register
class FLIPHAT(Policy):
    """FLIPHAT with N-IHT, Peeling, doubling episodes and forgetting.

    Parameters
    ----------
    d
        Context dimension.
    s
        Sparsity budget of N-IHT (a public guess of s*, up to 2s*).
    epsilon, delta
        Per-fit budget, which is also the whole run's (ε, δ)-JDP guarantee.
    eta
        Step size on the averaged no-½ squared loss; ``"auto"`` (default): ½ with a warm start
        (:data:`WARM_ETA`), else 1e-4 (a cold one-step fit is scale-free).
    b_max
        Public bound on ‖β*‖₁ (domain prior).
    l1_radius
        Projection radius C (default ``b_max``).
    x_max
        Coordinate clip of the standardised contexts (default √(2 ln d)).
    sigma_prior
        Public prior for the reward-noise standard deviation (certified reward clip).
    reward_clip
        Fixed public reward clip R, overriding the per-fit formula of spec §7.
    calibration
        ``"certified"`` (default) or ``"paper"`` (reproduction only).
    grad_clip
        Per-row contribution clip G (certified, M = 1): each chosen row adds
        clip(x̄·ỹ, ±G) coordinate-wise to h, so λ = 4ηG/n. ``"auto"`` (default):
        :func:`default_grad_clip` when the certified fit is one step (fixed M = 1) and ``form``
        is ``auto`` or ``h``, else off;
        ``"off"``: the x_max/R bound of spec §5.1; a number: that G.
    accountant
        Calibration of Peeling's scale: ``"pld"`` (exact composition, spec §14.2),
        ``"closed_form"`` (spec §3.3) or ``"auto"`` (default: ``pld`` for ``certified``, the
        closed form for ``paper``).
    m_schedule, iterations, m0, m_guard
        Number of N-IHT iterations per fit: ``"fixed"`` (``iterations``, default 1) or
        ``"log"`` (⌊m0·ln(1 + n·b_max²)⌋ with guard ``"min_one"`` or ``"allow_zero"``).
    first_episode_len, max_episode_len
        Episode schedule: first length N₀ and an optional cap (off). ``"auto"`` (default):
        :func:`auto_first_episode_len` for the certified calibration with clipped
        contributions, else 1 (the paper's schedule).
    warm_start
        ``"auto"`` (default: on when contributions are clipped and contexts standardised,
        x_max ≥ 2; versions before issue 35 had none: ``False``) or a bool: episode k's rows
        contribute clip(x̄·(ỹ − x̄ᵀθ⁰), ±G) with θ⁰ the model in force at the episode's first
        round, and the next fit is θ⁰ + (2η/n)·h̃ (one step), then Peeling and Π_C.
    cold_contributions
        Contributions of rows learned while no model has been released (θ⁰ = 0): ``"sign"``
        (G·sign(x̄_j·ỹ), scale-free), ``"clipped"`` (clip(x̄_j·ỹ, ±G)) or ``"auto"`` (default:
        ``sign`` with a warm start, else ``clipped``).
    swap_delay
        W: rounds of a new episode still served with the previous model while the last rows of
        the closed episode arrive (spec §11, option b; 0 = swap exactly at the boundary).
    clip_contexts
        Clip standardised contexts to ``x_max`` (required by ``certified``; the paper's
        reproduction runs do not clip).
    feature_mean, feature_scale
        Public standardisation statistics (never estimated from the private stream).
    form
        Accumulator form: ``"auto"`` (cheapest that the fit needs), ``"h"``, ``"gram"``, ``"rows"``.
    bandit_id
        Name used in ledger records and noise-stream labels.
    seed
        Seeds the noise key and the tie-break coins (tests and simulations only; ``None``
        draws both from OS entropy).
    noise_scale_multiplier
        Multiplies the Laplace scales. Must stay 1; exists for the privacy audit only.
    noise_backend
        ``"auto"`` (default: ``"secure"``), ``"secure"`` (exact discrete Laplace noise on a public
        grid, docs/privacy/secure-noise.md) or ``"fast"`` (numpy's floating-point sampler, whose
        low-order bits can leak; for simulations that need its speed, labelled in every output;
        the private release of G, ``grad_clip="private"``, is on it only).

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.policies.fliphat import FLIPHAT
    >>> pol = FLIPHAT(d=20, s=2, epsilon=1.0, delta=0.01, b_max=2.0, seed=0)
    >>> pol.first_len  # N₀: rounds of the default policy before the first fit (public)
    73
    >>> rng = np.random.default_rng(0)
    >>> while pol.t < 1000:
    ...     if pol.refit_due():
    ...         records = pol.refit()          # private N-IHT release; persist before use
    ...     n = min(pol.max_decide_batch(), 1000 - pol.t)
    ...     X = rng.normal(size=(n, 3, 20))
    ...     dec = pol.decide(X)
    ...     chosen = X[np.arange(n), dec.arms]
    ...     pol.learn(chosen, chosen[:, 0] + 0.1 * rng.normal(size=n), dec.rounds)
    >>> pol.t, pol.model_version, pol.privacy.epsilon
    (1000, 3, 1.0)
    >>> idx, val = pol.coefficients  # warm-started fits: β̂ on the scale of β* (β*_0 = 1)
    >>> int(idx[np.argmax(np.abs(val))]), round(float(val.max()), 1)
    (0, 1.0)
    >>> pol.state_dict()["accumulators"].keys()  # only the current episode is kept
    dict_keys(['3'])

    """

    name = "fliphat"
    privacy_unit = PRIVACY_UNIT
    neighbouring = NEIGHBOURING
    #: issue 35 added the warm start, on by default for standardised contexts: a state written
    #: before it resumes only with ``warm_start: false`` (and the old default ``eta: 1e-4``)
    config_before_added: ClassVar[Mapping[str, Any]] = {
        **Policy.config_before_added,
        "warm_start": False,
    }

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "s": 2, "first_episode_len": 4}

    private = True

    def simulation_only(self) -> str | None:
        eta = 1e-4 if self.eta == "auto" else float(self.eta)  # M > 1: no warm start, 1e-4
        if self.m_schedule == "fixed" and self.iterations > 1 and eta < 1e-2:
            reason = "iterations > 1 with eta < 1e-2 adds noise without progress; refused"
        elif self.m_schedule == "log" and eta < 1e-2:
            reason = "m_schedule=log with eta < 1e-2 is refused outside mode=simulation"
        else:
            reason = None
        return super().simulation_only() or reason

    routes_rows_by_round = True
    supports_released_model = True

    def __init__(
        self,
        d: PositiveInt,
        s: PositiveInt = 10,
        epsilon: Positive = 1.0,
        delta: OpenUnit = 1e-6,
        eta: float | Literal["auto"] = "auto",
        b_max: Positive = 1.0,
        l1_radius: Positive | None = None,
        x_max: Positive | None = None,
        sigma_prior: NonNegative = 0.1,
        reward_clip: Positive | None = None,
        calibration: Literal["certified", "paper"] = "certified",
        grad_clip: float | Literal["auto", "off", "private"] = "auto",
        accountant: Literal["auto", "pld", "closed_form"] = "auto",
        m_schedule: Literal["fixed", "log"] = "fixed",
        iterations: AtLeastOne = 1,
        m0: Positive = 0.16,
        m_guard: Literal["min_one", "allow_zero"] = "min_one",
        first_episode_len: int | Literal["auto"] = "auto",
        max_episode_len: AtLeastOne | None = None,
        swap_delay: NonNegativeInt = 0,
        warm_start: bool | Literal["auto"] = "auto",
        cold_contributions: Literal["auto", "sign", "clipped"] = "auto",
        clip_contexts: bool = True,
        feature_mean: list[float] | None = None,
        feature_scale: list[float] | None = None,
        form: Literal["auto", "h", "gram", "rows"] = "auto",
        bandit_id: str = "default",
        seed: int | None = None,
        noise_scale_multiplier: float = 1.0,
        noise_backend: NoiseBackend = "auto",
    ):
        self.d = d
        self.s = s
        self.epsilon = epsilon
        self.delta = delta
        self.eta = eta
        self.b_max = b_max
        self.l1_radius = l1_radius
        self.x_max = x_max
        self.sigma_prior = sigma_prior
        self.reward_clip = reward_clip
        self.calibration = calibration
        self.grad_clip = grad_clip
        self.accountant = accountant
        self.m_schedule = m_schedule
        self.iterations = iterations
        self.m0 = m0
        self.m_guard = m_guard
        self.first_episode_len = first_episode_len
        self.max_episode_len = max_episode_len
        self.swap_delay = swap_delay
        self.warm_start = warm_start
        self.cold_contributions = cold_contributions
        self.clip_contexts = clip_contexts
        self.feature_mean = feature_mean
        self.feature_scale = feature_scale
        self.form = form
        self.bandit_id = bandit_id
        self.seed = seed
        self.noise_scale_multiplier = noise_scale_multiplier
        self.noise_backend = noise_backend

    # -- derived public constants ---------------------------------------------------------------
    @property
    def x_bound(self) -> float:
        return self.x_max if self.x_max is not None else math.sqrt(2.0 * math.log(self.d))

    @property
    def radius(self) -> float:
        return self.l1_radius if self.l1_radius is not None else self.b_max

    @property
    def first_len(self) -> int:
        """N₀ in force (resolved from ``first_episode_len``)."""
        n0 = self.first_episode_len
        if n0 != "auto":
            return int(n0)
        if self.calibration != "certified" or self.contribution_clip is None:
            return 1
        return auto_first_episode_len(int(self.d), self._fit_ratio(self.scale_epsilon))

    def _fit_ratio(self, extra: float = 0.0) -> float:
        """ρ = λ/ξ of a one-step fit (public: s, ε, δ, the accountant; no G needed)."""
        if self.accountant_in_force == "pld":
            return peeling_pld_ratio(
                int(self.s), 1, float(self.epsilon), float(self.delta), extra_pure=extra
            )
        return closed_form_ratio(int(self.s), 1, float(self.epsilon), float(self.delta), extra)

    @property
    def scale_epsilon(self) -> float:
        """ε′ of the private clip scale (``grad_clip="private"``), composed into the first fit."""
        return SCALE_SHARE * float(self.epsilon) if self.private_scale else 0.0

    @property
    def schedule(self) -> DoublingSchedule:
        sch: DoublingSchedule | None = getattr(self, "_schedule", None)
        if sch is None:
            sch = DoublingSchedule(self.first_len, self.max_episode_len)
            if hasattr(self, "_acc"):  # built: the parameters no longer change
                self._schedule = sch
        return sch

    @property
    def warm(self) -> bool:
        """Warm start in force: fits start from the released model (needs clipped contributions).

        ``auto``: on with clipped contributions and standardised contexts — the warm step's
        η = ½ assumes unit-variance coordinates, which a coordinate clip x_max ≥ 2 states (the
        default √(2 ln d)); with x_max < 2 (e.g. unit-norm actions, whose coordinates have mean
        square 1/d) one step would move β̂ by a fraction of the correction and keep the first
        fits' noise, so the default stays the cold one-step fit of issue 20.
        """
        w = self.warm_start
        if w == "auto":
            return self.clips_contributions and self.x_bound >= WARM_MIN_X_MAX
        return bool(w)

    @property
    def cold_form(self) -> str:
        """Contributions of rows learned with no model released: ``sign`` or ``clipped``."""
        c = self.cold_contributions
        if c == "auto":
            return "sign" if self.warm else "clipped"
        return str(c)

    @property
    def step(self) -> float:
        """η in force (resolved from ``eta``)."""
        if self.eta == "auto":
            return WARM_ETA if self.warm else 1e-4
        return float(self.eta)

    @property
    def clips_contributions(self) -> bool:
        """Whether rows add clipped contributions (``grad_clip`` resolved: on for a number or
        ``private``; for ``auto`` where it applies — certified, one step, ``h`` form)."""
        g = self.grad_clip
        if g == "off" or g is None:
            return False
        if g == "auto":
            one_step = self.m_schedule == "fixed" and self.iterations == 1
            return (
                self.calibration == "certified" and one_step and self.form not in ("gram", "rows")
            )
        return True

    @property
    def private_scale(self) -> bool:
        """G is released privately by the first fit (§7 of the derivation): ``grad_clip``
        ``private``, or ``auto`` with the warm start and sign contributions (the default)."""
        g = self.grad_clip
        if g == "private":
            return True
        if not (g == "auto" and self.clips_contributions and self.warm):
            return False
        if self.noise_backend_in_force != "fast":  # the scale release has no secure-grid margin yet
            return False
        if self.cold_form != "sign":
            return False
        n0 = self.first_episode_len
        if n0 == "auto":
            n0 = auto_first_episode_len(int(self.d), self._fit_ratio())
        return int(n0) * SCALE_SHARE * float(self.epsilon) >= SCALE_MIN_EVIDENCE

    @property
    def contribution_clip(self) -> float | None:
        """G in force (resolved from ``grad_clip``), or None when contributions are not clipped.

        With a private scale: 1 (unit sign contributions) until the first fit releases it, then
        the released value; ``auto`` without one: :func:`default_grad_clip` of the public priors.
        """
        if not self.clips_contributions:
            return None
        if self.private_scale:
            q: float | None = getattr(self, "_scale_q", None)
            return 1.0 if q is None else q
        if self.grad_clip == "auto":
            return default_grad_clip(self.b_max, self.sigma_prior)
        return float(self.grad_clip)

    @property
    def accountant_in_force(self) -> str:
        if self.accountant == "auto":
            return "pld" if self.calibration == "certified" else "closed_form"
        return self.accountant

    def reward_clip_for(self, n: int) -> float:
        """R for a fit of nominal size n (spec §7): certified vs the reference form."""
        if self.reward_clip is not None:
            return float(self.reward_clip)
        base = self.x_bound * self.b_max
        if self.calibration == "paper":
            return base + math.sqrt(2.0 * math.log1p(n))
        return base + self.sigma_prior * math.sqrt(2.0 * math.log(n))

    def iterations_for(self, n: int) -> int:
        return iterations_for(
            n, self.m_schedule, self.iterations, self.m0, self.b_max, self.m_guard
        )

    def _estimator(self) -> NIHT:
        return NIHT(
            s=self.s,
            epsilon=self.epsilon,
            delta=self.delta,
            eta=self.step,
            l1_radius=self.radius,
            x_max=self.x_bound,
            b_max=self.b_max,
            calibration=self.calibration,
            scale_multiplier=self.noise_scale_multiplier,
            grad_clip=self.contribution_clip,
            accountant=self.accountant_in_force,
            rounding_margin=GRID_MARGIN if self.noise_backend_in_force == "secure" else 0.0,
        )

    def _validate(self) -> None:
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}")
        if self.accountant not in (*ACCOUNTANTS, "auto"):
            raise ValueError(f"accountant must be 'auto' or one of {ACCOUNTANTS}")
        if self.calibration == "paper" and self.accountant == "pld":
            raise ValueError("the paper calibration is reproduced with the closed form only")
        g = self.grad_clip
        if g == "private":
            if self.calibration != "certified":
                raise ValueError("grad_clip is an option of the certified calibration only")
            if self.m_schedule != "fixed" or self.iterations != 1:
                raise ValueError("grad_clip needs one N-IHT iteration (m_schedule=fixed, M = 1)")
            if self.noise_backend_in_force != "fast":
                raise ValueError(
                    "grad_clip='private' needs noise_backend='fast' (its release has no "
                    "secure-grid rounding margin)"
                )
            if self.warm_start is False or self.cold_contributions == "clipped":
                raise ValueError(
                    "grad_clip='private' needs the warm start and sign contributions of the first "
                    "fit (its scale is released with that fit)"
                )
        elif isinstance(g, str):
            if g not in ("auto", "off"):
                raise ValueError("grad_clip must be 'auto', 'off', 'private' or a number > 0")
        elif g is not None:
            if not (isinstance(g, (int, float)) and math.isfinite(g) and g > 0):
                raise ValueError("grad_clip must be 'auto', 'off' or a number > 0")
            if self.calibration != "certified":
                raise ValueError("grad_clip is an option of the certified calibration only")
            if self.m_schedule != "fixed" or self.iterations != 1:
                raise ValueError("grad_clip needs one N-IHT iteration (m_schedule=fixed, M = 1)")
        if self.contribution_clip is not None and self.form not in ("auto", "h"):
            raise ValueError("grad_clip accumulates clipped contributions: form must be 'h'")
        if self.calibration == "certified" and not self.clip_contexts:
            raise ValueError("the certified calibration requires clip_contexts=true")
        if not (self.epsilon > 0 and 0 < self.delta < 1):
            raise ValueError("need epsilon > 0 and 0 < delta < 1")
        if self.s > self.d:
            raise ValueError(f"s={self.s} cannot exceed d={self.d}")
        if not 1 <= self.s:
            raise ValueError("need 1 <= s <= d")
        for name in ("feature_mean", "feature_scale"):
            v = getattr(self, name)
            if v is not None and len(v) != self.d:
                raise ValueError(f"{name} must have d={self.d} entries")
        if self.feature_scale is not None and min(self.feature_scale) <= 0:
            raise ValueError("feature_scale entries must be positive")
        n0 = self.first_episode_len
        if n0 != "auto" and not (isinstance(n0, int) and not isinstance(n0, bool) and n0 >= 1):
            raise ValueError("first_episode_len must be 'auto' or an integer >= 1")
        if self.eta != "auto" and not (
            isinstance(self.eta, (int, float)) and math.isfinite(self.eta) and self.eta > 0
        ):
            raise ValueError("eta must be 'auto' or a number > 0")
        if self.warm_start not in ("auto", True, False):
            raise ValueError("warm_start must be 'auto', true or false")
        if self.cold_contributions not in ("auto", "sign", "clipped"):
            raise ValueError("cold_contributions must be 'auto', 'sign' or 'clipped'")
        if self.warm and self.contribution_clip is None:
            raise ValueError("warm_start needs clipped contributions (grad_clip, M = 1)")
        if self.cold_contributions == "sign" and self.contribution_clip is None:
            raise ValueError("cold_contributions='sign' needs clipped contributions (grad_clip)")
        if self.max_episode_len is not None and self.max_episode_len < self.first_len:
            raise ValueError("max_episode_len must be >= first_episode_len")
        if self.swap_delay < 0:
            raise ValueError("swap_delay must be >= 0")
        if self.noise_scale_multiplier != 1.0 and self.calibration == "certified":
            # Only the privacy audit lowers the scale; it must never pass as certified.
            self._audit_only = True

    # -- state --------------------------------------------------------------------------------
    def _state(self) -> Self:
        if not hasattr(self, "_acc"):
            self._validate()
            self._t = 0
            self._model_episode = 0
            self._beta_idx = np.zeros(0, dtype=np.int64)
            self._beta_val = np.zeros(0)
            self._acc: dict[int, EpisodeAccumulator] = {}
            #: rounds of the open episodes already learned: each round enters its fit once
            self._learned = LearnedRounds()
            # released models still needed as a warm start: fit number -> (indices, values)
            self._models: dict[int, tuple[IntArray, FloatArray]] = {0: _EMPTY_MODEL}
            # grad_clip="private": the released scale, and the first episode's |ỹ| histogram
            self._scale_q: float | None = None
            self._scale_hist = np.zeros(SCALE_GRID.size + 1, dtype=np.int64)
            self._noise = NoiseSource(self.seed, backend=self.noise_backend_in_force)
            self._coin_key()
            self._counters = {
                "clipped_context_coords": 0,
                "clipped_rewards": 0,
                "late_rows": 0,
                "rows_learned": 0,
            }
            self._mean = None if self.feature_mean is None else np.asarray(self.feature_mean, float)
            self._scale = (
                None if self.feature_scale is None else np.asarray(self.feature_scale, float)
            )
        return self

    @property
    def model_version(self) -> int:
        return self._state()._model_episode

    @property
    def counters(self) -> dict[str, Any]:
        return dict(self._state()._counters)

    @property
    def coefficients(self) -> tuple[IntArray, FloatArray]:
        """The frozen private model β̂ (indices, values): a DP output."""
        self._state()
        return self._beta_idx.copy(), self._beta_val.copy()

    def _accumulator_form(self, episode: int) -> str:
        if self.form != "auto":
            return self.form
        if self.contribution_clip is not None:
            return "h"
        n = self.schedule.length(episode)
        if self.iterations_for(n) <= 1:
            return "h"  # θ⁰ = 0 and M = 1: the fit reads h only
        return "rows" if n * (self.d + 1) < self.d * (self.d + 1) // 2 else "gram"

    def _model_needed_for(self, t: int) -> int:
        """Episode whose fit must be in force to decide round t (with the swap delay)."""
        sch = self.schedule
        k = sch.episode_of(t)
        if k == 0:
            return 0
        swap = sch.start(k) + min(self.swap_delay, sch.length(k) - 1)
        return k if t >= swap else k - 1

    def refit_due(self) -> bool:
        self._state()
        return self._model_needed_for(self._t + 1) > self._model_episode

    def refit_reads_through(self) -> int:
        """The next fit reads the closed episode's rows: rounds up to its last round."""
        self._state()
        return self.schedule.end(self._model_episode)

    def max_decide_batch(self) -> int:
        self._state()
        if self.refit_due():
            return 0
        sch = self.schedule
        k = self._model_episode + 1  # next fit to be released
        swap = sch.start(k) + min(self.swap_delay, sch.length(k) - 1)
        return min(UNBOUNDED, swap - (self._t + 1))

    def contribution_windows(self, rounds: ArrayLike) -> IntArray:
        """A row enters exactly the fit of its round's episode (spec §4): the episode."""
        return np.asarray(self.schedule.episode_of(np.asarray(rounds, dtype=np.int64)))

    def open_windows_from(self) -> int:
        """Episodes below the model in force are released (their late rows are dropped)."""
        return self._state()._model_episode

    # -- transforms -----------------------------------------------------------------------------
    def _standardise(self, X: FloatArray, cols: IntArray | None = None) -> FloatArray:
        if self._mean is None and self._scale is None:
            return X
        mean = 0.0 if self._mean is None else (self._mean if cols is None else self._mean[cols])
        scale = 1.0 if self._scale is None else (self._scale if cols is None else self._scale[cols])
        return (X - mean) / scale

    # -- deciding -------------------------------------------------------------------------------
    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X, rounds = self._decide_batch(X)
        B = X.shape[0]
        scores = self._scores(X)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        # ties (all of them before the first release) are broken by coins hashed from the
        # event ids, computed only for the tied rows
        arms, prop = argmax_ties_by_coins(
            scores, lambda rows: self._coins(rounds[rows], take_ids(event_ids, rows))
        )
        self._t += B
        return DecisionBatch(
            arms=arms,
            propensities=prop,
            rounds=rounds,
            episodes=self.schedule.episode_of(rounds),
            model_version=self._model_episode,
        )

    def _scores(self, X: FloatArray) -> FloatArray:
        """(B, K) scores of the model in force: ⟨β̂, x⟩ of the standardised, clipped rows."""
        idx, val = self._beta_idx, self._beta_val
        if not idx.size:
            return np.zeros(X.shape[:2])
        Xs = self._standardise(X[:, :, idx], idx)  # (a new array: the columns gathered)
        if self.clip_contexts:  # np.clip's values by its two ufuncs, in place (a third the cost)
            b = self.x_bound
            np.minimum(np.maximum(Xs, -b, out=Xs), b, out=Xs)
        scores: FloatArray = Xs @ val
        return scores

    def frozen_scores(self, X: ArrayLike) -> FloatArray:
        """The (B, K) scores :meth:`decide` ranks arms by with the model in force (the
        argmax, its ties broken by the coins, is the decision)."""
        self._state()
        return self._scores(np.asarray(X, dtype=np.float64))

    def rank_frozen(
        self, x: FloatArray, event_id: str | int, mask: AnyArray | None = None
    ) -> tuple[int, float, int, FloatArray]:
        """:meth:`Policy.rank_frozen` with the scores computed once (the decision is
        :meth:`decide`'s: their argmax, ties broken by the coins of the event id)."""
        self._state()
        scores = self._scores(np.asarray(x, dtype=np.float64)[None])
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        row = scores[0]
        arm = int(row.argmax())
        if np.count_nonzero(row == row[arm]) == 1:  # no tie (argmax_ties_by_coins' result)
            return arm, 1.0, self._model_episode, row
        arms, prop = argmax_ties_by_coins(
            scores, lambda rows: self._coins(rows + self._t + 1, take_ids([event_id], rows))
        )
        return int(arms[0]), float(prop[0]), self._model_episode, row

    # -- learning -------------------------------------------------------------------------------
    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        self._state()
        self._check_learner("learn")
        contexts, rewards, rounds = self._learn_rows(contexts, rewards, rounds, "round")
        if rounds.size == 0:
            return
        cmax, cmin = float(contexts.max()), float(contexts.min())  # NaN/inf propagate
        if not (math.isfinite(cmax) and math.isfinite(cmin) and np.isfinite(rewards).all()):
            raise ValueError("contexts and rewards must be finite")
        episodes = self.schedule.episode_of(rounds)
        open_ = episodes >= self._model_episode  # rows of released episodes are late (below)
        # one row per round (the sensitivity λ = 4ηG/n assumes it): a round learned before, or
        # twice in this call, is refused (RowRefused) and nothing of the call is learned
        self._learned.claim(rounds if open_.all() else rounds[open_], "fliphat")
        ids_arr = None if ids is None else np.asarray(ids)
        for k in sorted_distinct(episodes).tolist():
            sel = episodes == k
            if k < self._model_episode:  # its fit was already released: the row is too late
                self._counters["late_rows"] += int(sel.sum())
                continue
            acc = self._acc.get(k)
            if acc is None:
                acc = self._acc[k] = EpisodeAccumulator(self.d, self._accumulator_form(k))
            whole = bool(sel.all())
            Xk = contexts if whole else contexts[sel]  # boolean indexing copies
            owned = not whole
            hi, lo = (cmax, cmin) if whole else (float(Xk.max()), float(Xk.min()))
            if self._mean is not None or self._scale is not None:
                Xk, owned = self._standardise(Xk), True
                hi, lo = float(Xk.max()), float(Xk.min())
            if self.clip_contexts:
                # clip to a grid point ≤ x_max: the accumulator's rounding then keeps the bound
                xb = grid_floor(self.x_bound)
                if hi > xb or lo < -xb:
                    self._counters["clipped_context_coords"] += int(
                        np.count_nonzero(np.abs(Xk) > xb)
                    )
                    Xk, owned = np.clip(Xk, -xb, xb, out=Xk if owned else None), True
                    hi, lo = min(hi, xb), max(lo, -xb)
            R = grid_floor(self.reward_clip_for(self.schedule.length(k)))  # R of the row's fit
            yk = rewards[sel]
            yc = np.clip(yk, -R, R)
            self._counters["clipped_rewards"] += int(np.count_nonzero(yc != yk))
            G = self.contribution_clip
            if G is not None:
                # spec §14.1: h = Σ clip(g_i, ±G), each row's contribution clipped on arrival
                # (to a grid point ≤ G, so the accumulator's rounding keeps the bound):
                # g_i = x̄·ỹ (cold), G·sign(x̄·ỹ) (cold, sign) or x̄·(ỹ − x̄ᵀθ⁰) (warm start)
                Gg = grid_floor(G)
                t_idx, t_val = self._theta0_for(k)
                private = self.private_scale
                if private and k == 0 and self._scale_q is None:
                    self._scale_hist += scale_bins(yc)  # the first fit releases the scale
                if self.warm and t_idx.size:
                    target = yc - Xk[:, t_idx] @ t_val
                elif self.cold_form == "sign":
                    if private:  # unit contributions; the fit scales them by the released G
                        Gg = 1.0
                    Xk, owned = np.sign(Xk, out=Xk if owned else None), True
                    target = np.sign(yc) * Gg
                else:
                    target = yc
                acc.learn_many(
                    clip_contributions(Xk, target, Gg),
                    np.ones(yc.size),
                    None if ids_arr is None else ids_arr[sel],
                    owned=True,
                    bounds=(Gg, 1.0),
                )
            else:
                acc.learn_many(
                    Xk,
                    yc,
                    None if ids_arr is None else ids_arr[sel],
                    owned=owned,
                    bounds=(max(hi, -lo), float(np.abs(yc).max())),
                )
            self._counters["rows_learned"] += int(sel.sum())

    # -- the private release ---------------------------------------------------------------------
    def _release_id(self, k: int) -> str:
        return f"{self.bandit_id}/fliphat/fit/episode={k}"

    def _check_learner(self, what: str) -> None:
        if getattr(self, "_decide_only", False):
            raise RuntimeError(f"{what}: this policy is decide-only (built from a released model)")

    def refit(self) -> list[ReleaseRecord]:
        """Release β̂ for the next episode from the previous episode's rows, then forget them."""
        self._state()
        self._check_learner("refit")
        if not self.refit_due():
            return []
        k = self._model_episode + 1
        sch = self.schedule
        n = sch.fit_size(k)
        R = self.reward_clip_for(n)
        M = self.iterations_for(n)
        acc = self._acc.pop(k - 1, None) or EpisodeAccumulator(self.d, "h")
        if acc.count > n:
            # learn() admits each round once, so this is damaged state: never release from it
            raise ReleaseRefused(
                f"fliphat: episode {k - 1} holds {acc.count} rows, more than its {n} rounds; "
                "its sensitivity assumes one row per round, so it is not released"
            )
        acc.seal()
        label = (self.bandit_id, "fliphat-fit", k)
        start_fit = self._start_fit(k - 1)
        theta0 = self._models[start_fit] if self.warm else _EMPTY_MODEL
        scale_params: dict[str, Any] | None = None
        extra = 0.0
        if self.private_scale and self._scale_q is None:
            # the first fit: release the clip scale (pure ε′) from the same rows, composed
            extra = self.scale_epsilon
            g = self._noise.generator(self.bandit_id, "fliphat-scale", k)
            self._scale_q = scale_release(self._scale_hist, n, extra, g)
            self._scale_hist[:] = 0
            scale_params = {
                "mechanism": "report-noisy-max, Laplace(2/ε′), median of |ỹ| on the grid "
                "2^(m/4), m = −40…40",
                "epsilon": extra,
                "value": self._scale_q,
                "noise_stream": self._noise.stream_id(self.bandit_id, "fliphat-scale", k),
            }
        est = self._estimator()
        cold_private = self.private_scale and not theta0[0].size
        fit = est.fit(
            acc,
            n=n,
            reward_clip=R,
            iterations=M,
            noise=self._noise,
            label=label,
            theta0=theta0 if theta0[0].size else None,
            h_scale=float(self._scale_q) if cold_private and self._scale_q else 1.0,
            extra_pure=extra,
        )
        consumed = acc.digest.hexdigest()
        rows = acc.count
        acc.destroy()  # forgetting: the episode's statistics are gone before the model is used
        self._beta_idx, self._beta_val = fit.indices, fit.values
        self._model_episode = k
        self._learned.forget_below(sch.start(k))  # earlier rounds' rows are late from now on
        if self.warm:  # keep the models that open episodes still start from
            self._models[k] = (fit.indices, fit.values)
            keep = self._start_fit(k)
            self._models = {j: m for j, m in self._models.items() if j >= min(keep, k - 1)}
        record = ReleaseRecord(
            release_id=self._release_id(k),
            bandit_id=self.bandit_id,
            mechanism="n-iht+peeling",
            calibration=self.calibration,
            formula=self._formula(),
            dp_valid=self.calibration == "certified" and self.noise_scale_multiplier == 1.0,
            epsilon=float(self.epsilon) if M > 0 else 0.0,
            delta=float(self.delta) if M > 0 else 0.0,
            accounting=(
                [{"type": "eps_delta", "epsilon": float(self.epsilon), "delta": float(self.delta)}]
                if M > 0
                else [{"type": "zero"}]
            ),
            data_slice=f"episode:{k - 1}",
            composition="parallel",
            event_range=(sch.start(k - 1), sch.end(k - 1)),
            rows_used=rows,
            model_version=k,
            params={
                "n_nominal": n,
                "iterations": M,
                "m_guard": self.m_guard,
                "epsilon_per_iteration": self.epsilon / M if M else 0.0,
                "delta_per_iteration": self.delta / M if M else 0.0,
                "s": self.s,
                "eta": self.step,
                "l1_radius": self.radius,
                "x_max": self.x_bound,
                "b_max": self.b_max,
                "sigma_prior": self.sigma_prior,
                "reward_clip": R,
                "sensitivities": fit.sensitivities,
                "scales": fit.scales,
                "grad_clip": self.contribution_clip,
                "accountant": self._accountant_params(M, extra),
                # secure backend: ξ = λ/(ρ − margin), so the grid's rounding stays within ρ
                "rounding_margin": self._estimator().rounding_margin,
                "scale_release": scale_params,
                "swap_delay": self.swap_delay,
                "first_episode_len": sch.first_len,
                "warm_start": self.warm,
                "contributions": self._contributions_of(theta0),
                "start_model": self._release_id(start_fit) if theta0[0].size else None,
                "consumed_ids_digest": consumed,
                "accumulator_destroyed": True,
                "noise_stream": self._noise.stream_id(*label),
                "loss": "averaged squared error without 1/2",
            },
            release={"indices": fit.indices.tolist(), "values": fit.values.tolist()},
            note=PAPER_LABEL if self.calibration == "paper" else None,
            privacy_model="joint",
            privacy_unit=PRIVACY_UNIT,
            neighbouring=NEIGHBOURING,
            noise_backend=self.noise_backend_in_force,
        )
        return [record]

    def _start_fit(self, k: int) -> int:
        """Number of the fit in force at episode k's first round: the warm start of the fit that
        reads episode k (fit k with no swap delay, k − 1 while the delay serves the old model)."""
        return self._model_needed_for(self.schedule.start(k)) if k > 0 else 0

    def _theta0_for(self, k: int) -> tuple[IntArray, FloatArray]:
        """θ⁰ of episode k's rows: the released model in force at its first round (warm start),
        or the empty model (cold: nothing released yet, or no warm start)."""
        if not self.warm:
            return _EMPTY_MODEL
        return self._models.get(self._start_fit(k), _EMPTY_MODEL)

    def _contributions_of(self, theta0: tuple[IntArray, FloatArray]) -> str | None:
        if self.contribution_clip is None:
            return None
        if self.warm and theta0[0].size:
            return "clip(x·(y − xᵀθ⁰), ±G)"
        return "G·sign(x·y)" if self.cold_form == "sign" else "clip(x·y, ±G)"

    def _formula(self) -> str:
        base = formula_id(self.calibration, self.contribution_clip, self.accountant_in_force)
        if self.contribution_clip is None:
            return base
        flags = [("warm", self.warm), ("sign", self.cold_form == "sign")]
        flags.append(("private_clip", self.private_scale))
        return base + "".join(f"+{name}" for name, on in flags if on)

    def _accountant_params(self, M: int, extra: float = 0.0) -> dict[str, Any]:
        """Ledger entry of the accountant: name, library version, discretisation, and for PLD
        the ratio λ/ξ and the PLD ε (at δ) of the scale actually used (with the composed
        pure ε′ of a private clip scale, when the fit released one)."""
        out = accountant_record(self.accountant_in_force)
        if M > 0:
            est = self._estimator()
            rho = est.ratio(M, extra)
            out["ratio"] = rho
            if extra:
                out["composed_pure_epsilon"] = extra
            if self.accountant_in_force == "pld":
                out["pld_epsilon"] = peeling_pld_epsilon(
                    rho, self.s * M, float(self.delta), extra_pure=extra
                )
        return out

    # -- model broadcast (docs/scaling.md, pattern 2) -----------------------------------------
    def released_model(self) -> dict[str, Any] | None:
        """β̂ in force, exactly as released by N-IHT (the ledger record's ``release``).

        >>> import numpy as np
        >>> pol = FLIPHAT(d=5, s=1, epsilon=1.0, delta=0.01, first_episode_len=1, seed=0)
        >>> pol.released_model() is None  # the initial model (β̂ = 0) was never released
        True
        >>> _ = pol.decide(np.ones((1, 2, 5)))
        >>> rec = pol.refit()[0]
        >>> m = pol.released_model()
        >>> m["payload"] == rec.release, m["release_ids"] == [rec.release_id], m["model_version"]
        (True, True, 1)
        """
        self._state()
        k = self._model_episode
        if k == 0:
            return None
        return {
            "model_version": k,
            "release_ids": [self._release_id(k)],
            "payload": {"indices": self._beta_idx.tolist(), "values": self._beta_val.tolist()},
        }

    def load_released_model(self, model: dict[str, Any]) -> FLIPHAT:
        """Decide with a released β̂ (decide-only from now on; see ``Policy``)."""
        self._state()
        if self._t or self._acc or self._counters["rows_learned"]:
            raise RuntimeError("load_released_model needs a fresh policy (this one has learned)")
        try:
            version = int(model["model_version"])
            payload = model["payload"]
            if set(payload) != {"indices", "values"}:
                raise ValueError(f"payload keys {sorted(payload)}, expected indices and values")
            idx = np.asarray(payload["indices"], dtype=np.int64)
            val = np.asarray(payload["values"], dtype=np.float64)
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed released model: {err}") from None
        if version < 1:
            raise ValueError("a released model has model_version >= 1")
        if idx.ndim != 1 or idx.shape != val.shape or idx.size > self.d:
            raise ValueError("indices and values must be two vectors of one length <= d")
        if idx.size and (idx.min() < 0 or idx.max() >= self.d or np.unique(idx).size != idx.size):
            raise ValueError(f"indices must be distinct and in [0, {self.d})")
        if not np.isfinite(val).all():
            raise ValueError("values must be finite")
        self._beta_idx, self._beta_val, self._model_episode = idx, val, version
        self._decide_only = True
        return self

    def record_rounds(self, n: int) -> IntArray:
        """Count n rounds decided by decision replicas (the learner's ``decide``)."""
        self._state()
        self._check_learner("record_rounds")
        if n > self.max_decide_batch():
            raise ValueError(
                f"{n} rounds cross a model update (at most {self.max_decide_batch()} now)"
            )
        rounds = np.arange(self._t + 1, self._t + n + 1, dtype=np.int64)
        self._t += n
        return rounds

    # -- privacy and explanation --------------------------------------------------------------
    @property
    def privacy(self) -> PrivacyStatement:
        return self._joint_statement(
            calibration=self.calibration,
            noise_backend=self.noise_backend_in_force,
            scope=(
                "the whole, unbounded run: each round enters exactly one fit (forgetting), fits "
                "use disjoint episodes and compose in parallel."
            ),
            caveats=(
                per_unit_caveat("episodes"),
                "A user's own decision is a function of their context and is not protected: "
                "show it only to that user.",
            ),
        )

    def explain(self, horizon: int | None = 1 << 20) -> dict[str, Any]:
        self._validate()
        sch = self.schedule
        est = self._estimator()
        episodes = []
        k = 1
        while horizon is None or sch.start(k) <= horizon:
            n = sch.fit_size(k)
            R = self.reward_clip_for(n)
            M = self.iterations_for(n)
            episodes.append(
                {
                    "episode": k,
                    "rounds": [sch.start(k), sch.end(k)],
                    "fit_rows_nominal": n,
                    "reward_clip": R,
                    "iterations": M,
                    "steps": est.calibrate(n, R, M),
                }
            )
            k += 1
            if horizon is None and k > 30:
                break
        out = {
            "policy": self.name,
            "private": True,
            "model": "joint DP",
            "calibration": self.calibration,
            "formula": self._formula(),
            "grad_clip": self.contribution_clip,
            "accountant": self.accountant_in_force,
            "first_episode_len": sch.first_len,
            "warm_start": self.warm,
            "cold_contributions": self.cold_form if self.contribution_clip is not None else None,
            "eta": self.step,
            "dp_valid": self.calibration == "certified",
            "params": self.public_params(),
            "x_max": self.x_bound,
            "l1_radius": self.radius,
            "episodes": episodes,
            "privacy_statement": self.privacy.text(),
        }
        if self.calibration == "paper":
            out["label"] = PAPER_LABEL
        return out

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            **self._state_header(),
            "model_episode": self._model_episode,
            "beta_idx": self._beta_idx,
            "beta_val": self._beta_val,
            "accumulators": {str(k): a.state_dict() for k, a in self._acc.items()},
            "learned_rounds": self._learned.state_dict(),
            "start_models": {str(j): [i, v] for j, (i, v) in self._models.items() if j},
            "scale_q": self._scale_q,
            "scale_hist": self._scale_hist.copy(),
            "noise": self._noise.state_dict(),
            "tie_key": self._tie_key,
            "counters": dict(self._counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> FLIPHAT:
        self._check_resumed_backend(state)
        self._state()
        self._t = int(state["t"])
        self._model_episode = int(state["model_episode"])
        self._beta_idx = np.asarray(state["beta_idx"], dtype=np.int64)
        self._beta_val = np.asarray(state["beta_val"], dtype=np.float64)
        self._acc = {
            int(k): EpisodeAccumulator.from_state_dict(a) for k, a in state["accumulators"].items()
        }
        self._learned = LearnedRounds.from_state_dict(state.get("learned_rounds"))
        self._scale_q = state.get("scale_q")
        if "scale_hist" in state:
            self._scale_hist = np.asarray(state["scale_hist"], dtype=np.int64).copy()
        self._models = {0: _EMPTY_MODEL}
        for j, (i, v) in state.get("start_models", {}).items():
            self._models[int(j)] = (np.asarray(i, dtype=np.int64), np.asarray(v, dtype=np.float64))
        self._noise = NoiseSource(self.seed, backend=self.noise_backend_in_force).load_state_dict(
            state["noise"]
        )
        self._tie_key = int(state["tie_key"])
        self._counters = dict(state["counters"])
        return self
