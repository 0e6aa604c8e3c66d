"""N-IHT: noisy iterative hard thresholding, the private sparse-regression oracle of FLIPHAT.

FLIPHAT spec §3.3 (paper §4, Alg. 1) with the noise calibrations of spec §5. The loss and the
sensitivities live in this one module on purpose (spec §2): the loss is the averaged squared
error **without** ½,

    L(θ) = (1/n) Σ (ỹ_i − x_iᵀθ)²,   ∇L(θ) = (2/n)(Gθ − h),

and the sensitivity of one gradient step under replace-one-row neighbours, with ‖x‖_∞ ≤ x_max,
|ỹ| ≤ R and ‖θ^m‖₁ ≤ c_m, is (derived in ``docs/privacy/fliphat-sensitivity.md``)

    λ_m = 4·η·x_max·(R + x_max·c_m) / n,   c_0 = ‖θ⁰‖₁,  c_m = C for m ≥ 1.

``calibration="paper"`` uses the paper's λ = η·B/n with B = R + x_max·b_max instead, which is
**for reproducing the paper's figures only; not a valid DP guarantee under the stated bounds**.
Each of the M iterations runs Peeling with (ε/M, δ/M), so a fit is (ε, δ)-DP by basic
composition; the Laplace scale is ξ_m = λ_m·2√(3 s ln(M/δ))·M/ε.

Two certified options lower the noise (spec §14.1–§14.2, derived in
``docs/privacy/fliphat-noise-reduction.md``):

* ``grad_clip=G`` (M = 1): every row's gradient contribution is clipped coordinate-wise to
  [−G, G] *before accumulation* (by the caller, see :func:`clip_contributions`), so
  λ = 4·η·G/n whatever x_max and R are. From θ⁰ = 0 the contribution is x_i·ỹ_i (or its sign
  times G); from a public, previously released θ⁰ ("warm start", issue 35) it is the residual
  contribution x_i·(ỹ_i − x_iᵀθ⁰), and θ^{½} = θ⁰ + (2η/n)·h̃ — the same λ, since θ⁰ is a
  fixed public input of the fit (``docs/privacy/fliphat-noise-reduction.md`` §5);
* ``accountant="pld"``: ξ_m = λ_m/ρ with ρ the largest ratio whose exact composition (PLD) of
  the fit's s·M selections and s·M values meets (ε, δ), instead of the closed form.

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..privacy.noise import NoiseSource
from ..privacy.peeling import Peeling
from ..privacy.peeling_accounting import ACCOUNTANTS, closed_form_ratio, peeling_pld_ratio
from ..privacy.projection import project_l1_ball
from ..utils.arrays import ArrayLike, FloatArray, IntArray
from .accumulator import EpisodeAccumulator

__all__ = [
    "ACCOUNTANTS",
    "CALIBRATIONS",
    "NIHT",
    "NIHTFit",
    "clip_contributions",
    "formula_id",
    "iterations_for",
    "niht_sensitivity",
]

CALIBRATIONS = ("certified", "paper")
FORMULA_ID = {"certified": "certified-v1", "paper": "paper"}


def formula_id(
    calibration: str, grad_clip: float | None = None, accountant: str = "closed_form"
) -> str:
    """Ledger identifier of a calibration: ``certified-v1`` is today's closed form.

    >>> formula_id("certified"), formula_id("certified", 2.0, "pld"), formula_id("paper")
    ('certified-v1', 'certified-v2+grad_clip+pld', 'paper')
    """
    if calibration == "paper" or (grad_clip is None and accountant == "closed_form"):
        return FORMULA_ID[calibration]
    flags = (["grad_clip"] if grad_clip is not None else []) + (
        ["pld"] if accountant == "pld" else []
    )
    return "+".join(["certified-v2", *flags])


def clip_contributions(X: ArrayLike, y: ArrayLike, bound: float) -> FloatArray:
    """Per-row gradient contributions x_i·y_i, clipped coordinate-wise to [−bound, bound].

    Feed the result to an ``"h"`` accumulator with unit rewards: h = Σ_i clip(x_i·y_i).
    Callers pass ``grid_floor(G)`` so that the accumulator's rounding cannot cross G.

    >>> clip_contributions(np.array([[1.0, -3.0]]), np.array([2.0]), 2.5).tolist()
    [[2.0, -2.5]]
    """
    P = np.asarray(X, dtype=np.float64) * np.asarray(y, dtype=np.float64)[:, None]
    return np.clip(P, -bound, bound, out=P)


def niht_sensitivity(
    m: int,
    calibration: str,
    *,
    eta: float,
    n: int,
    x_max: float,
    reward_clip: float,
    l1_radius: float,
    b_max: float | None = None,
    theta0_l1: float = 0.0,
    grad_clip: float | None = None,
) -> float:
    """ℓ∞ sensitivity λ_m of iteration ``m``'s gradient step (spec §5.1–§5.3, §14.1).

    With ``grad_clip=G`` (certified, m = 0) every row's contribution lies in [−G, G]^d, so
    replacing one row moves (2η/n)·h by at most 4ηG/n per coordinate, whatever the public
    starting point θ⁰ the contributions were computed against (``theta0_l1`` is not used).

    Examples
    --------
    The unit-test values of spec §5.4 (d = 400, n = 1024, η = 1e-4):

    >>> import math
    >>> x_max, b = math.sqrt(2 * math.log(400)), 3.436219
    >>> R = x_max * b + 0.1 * math.sqrt(2 * math.log(1024))
    >>> kw = dict(eta=1e-4, n=1024, x_max=x_max, reward_clip=R, l1_radius=b, b_max=b)
    >>> lam0 = niht_sensitivity(0, 'certified', **kw)
    >>> f"{lam0:.6e}", f"{niht_sensitivity(1, 'certified', **kw):.6e}"
    ('1.658783e-05', '3.267219e-05')
    >>> R_paper = x_max * b + math.sqrt(2 * math.log(1 + 1024))
    >>> f"{niht_sensitivity(0, 'paper', **{**kw, 'reward_clip': R_paper}):.6e}"
    '2.686860e-06'
    >>> f"{niht_sensitivity(0, 'certified', **kw, grad_clip=2.0):.6e}"  # 4·1e-4·2/1024
    '7.812500e-07'

    """
    if n < 1:
        raise ValueError("nominal n must be >= 1")
    if grad_clip is not None:
        if calibration != "certified":
            raise ValueError("grad_clip is an option of the certified calibration only")
        if not grad_clip > 0:
            raise ValueError("grad_clip must be > 0")
        if m != 0:
            raise ValueError("grad_clip is implemented for one iteration (M = 1)")
        return 4.0 * eta * grad_clip / n
    if calibration == "certified":
        c = theta0_l1 if m == 0 else l1_radius
        return 4.0 * eta * x_max * (reward_clip + x_max * c) / n
    if calibration == "paper":
        if b_max is None:
            raise ValueError("the paper calibration needs b_max")
        return eta * (reward_clip + x_max * b_max) / n
    raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")


def iterations_for(
    n: int,
    schedule: str = "fixed",
    iterations: int = 1,
    m0: float = 0.16,
    b_max: float = 1.0,
    guard: str = "min_one",
) -> int:
    """Number of N-IHT iterations for a fit of nominal size ``n`` (spec §6).

    ``schedule="log"``: M = ⌊M0·ln(1 + n·b_max²)⌋, then the guard (``min_one``: at least 1;
    ``allow_zero``: 0 means "no fit": β̂ = 0, no data touched, no noise drawn).

    >>> [iterations_for(n, "log", m0=0.16, b_max=3.436219, guard="allow_zero")
    ...  for n in (32, 64, 16384, 32768)]
    [0, 1, 1, 2]
    >>> [iterations_for(n, "log", m0=0.15, b_max=3.436219, guard="allow_zero") for n in (64, 128)]
    [0, 1]
    >>> iterations_for(32, "log", m0=0.16, b_max=3.436219)
    1
    """
    if schedule == "fixed":
        if int(iterations) != iterations or iterations < 1:
            raise ValueError("a fixed number of iterations must be an integer >= 1")
        return int(iterations)
    if schedule != "log":
        raise ValueError("schedule must be 'fixed' or 'log'")
    m = math.floor(m0 * math.log1p(n * b_max * b_max))
    if guard == "min_one":
        return max(1, m)
    if guard == "allow_zero":
        return max(0, m)
    raise ValueError("guard must be 'min_one' or 'allow_zero'")


@dataclasses.dataclass
class NIHTFit:
    """Result of one fit: a sparse model and the public constants of its noise."""

    indices: IntArray
    values: FloatArray
    iterations: int
    sensitivities: list[float]
    scales: list[float]
    rows: int

    @property
    def l1_norm(self) -> float:
        return float(np.abs(self.values).sum())


class NIHT:
    """Noisy iterative hard thresholding with Peeling and ℓ1 projection.

    Parameters
    ----------
    s
        Sparsity budget (number of coordinates released per iteration).
    epsilon, delta
        Privacy of one fit, split evenly over its iterations.
    eta
        Step size on the averaged no-½ loss.
    l1_radius
        C, the ℓ1 projection radius (``l1_radius`` in configs).
    x_max
        Coordinate bound of the (clipped) contexts.
    b_max
        Public bound on ‖β*‖₁ (used by ``paper`` only).
    calibration
        ``"certified"`` (default) or ``"paper"``.
    scale_multiplier
        Multiplies every Laplace scale. 1 in the product; < 1 only in the privacy audit.
    grad_clip
        G: the accumulator holds Σ clip(x_i·ỹ_i, ±G) (see :func:`clip_contributions`); then
        λ = 4ηG/n. Certified only, and only for one iteration (M = 1, θ⁰ = 0).
    accountant
        ``"closed_form"`` (spec §3.3) or ``"pld"`` (exact composition of the fit's s·M
        selections and values, spec §14.2).
    rounding_margin
        The secure noise backend's rounding term in noise scales (``GRID_MARGIN``: rounding
        |θ^{m+½}| to the grid γ ≤ ξ·2⁻³⁰ raises each coordinate's sensitivity to λ + γ); the
        scale is ξ = λ/(ρ − margin), so (λ + γ)/ξ ≤ ρ, the ratio the accountant certifies.
        0 on the fast backend.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.estimators.accumulator import EpisodeAccumulator
    >>> from streaming_dpbandit.privacy.noise import NoiseSource
    >>> rng = np.random.default_rng(0)
    >>> X = np.clip(rng.normal(size=(4000, 20)), -3, 3)
    >>> y = X[:, 2] * 2.0 + 0.1 * rng.normal(size=4000)
    >>> acc = EpisodeAccumulator(d=20); acc.learn_many(X, np.clip(y, -9, 9))
    >>> est = NIHT(s=1, epsilon=50.0, delta=0.01, eta=0.25, l1_radius=3.0, x_max=3.0)
    >>> fit = est.fit(acc, n=4000, reward_clip=9.0, iterations=1,
    ...               noise=NoiseSource(seed=1), label=("fit", 1))
    >>> fit.indices.tolist(), round(float(fit.values[0]), 1)
    ([2], 1.0)

    """

    def __init__(
        self,
        s: int,
        epsilon: float,
        delta: float,
        eta: float = 1e-4,
        l1_radius: float = 1.0,
        x_max: float = 1.0,
        b_max: float | None = None,
        calibration: str = "certified",
        scale_multiplier: float = 1.0,
        grad_clip: float | None = None,
        accountant: str = "closed_form",
        rounding_margin: float = 0.0,
    ):
        self.s = s
        self.epsilon = epsilon
        self.delta = delta
        self.eta = eta
        self.l1_radius = l1_radius
        self.x_max = x_max
        self.b_max = b_max
        self.calibration = calibration
        self.scale_multiplier = scale_multiplier
        self.grad_clip = grad_clip
        self.accountant = accountant
        self.rounding_margin = rounding_margin

    def ratio(self, iterations: int, extra_pure: float = 0.0) -> float:
        """ρ = λ_m/ξ_m of every iteration (public; cached for the PLD accountant).

        ``extra_pure`` = ε′: one more pure ε′-DP release on the fit's rows (FLIPHAT's private
        clip scale), composed in — the fit's own share shrinks accordingly."""
        if self.accountant == "pld":
            if self.calibration != "certified":
                raise ValueError("the paper calibration uses the closed form only")
            return peeling_pld_ratio(
                int(self.s),
                int(iterations),
                float(self.epsilon),
                float(self.delta),
                extra_pure=float(extra_pure),
            )
        if self.accountant != "closed_form":
            raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {self.accountant!r}")
        return closed_form_ratio(self.s, iterations, self.epsilon, self.delta, extra_pure)

    def calibrate(
        self, n: int, reward_clip: float, iterations: int, extra_pure: float = 0.0
    ) -> list[dict[str, Any]]:
        """Public noise constants of every iteration: λ_m, ξ_m and the per-step budget."""
        out = []
        if iterations > 1 and self.grad_clip is not None:
            raise ValueError("grad_clip is implemented for one iteration (M = 1)")
        if extra_pure and (iterations != 1 or self.grad_clip is None):
            raise ValueError("a composed scale release needs grad_clip and one iteration")
        rho = self.ratio(iterations, extra_pure) if iterations else None  # validates
        for m in range(iterations):
            lam = niht_sensitivity(
                m,
                self.calibration,
                eta=self.eta,
                n=n,
                x_max=self.x_max,
                reward_clip=reward_clip,
                l1_radius=self.l1_radius,
                b_max=self.b_max,
                grad_clip=self.grad_clip,
            )
            if self.accountant == "pld":
                assert rho is not None  # iterations > 0 inside this loop
                base = lam / rho
            else:  # the closed form, computed exactly as Peeling does (bit-identical scales)
                split = ((self.epsilon - extra_pure) / iterations, self.delta / iterations)
                base = Peeling(self.s, *split, lam).scale
            if self.rounding_margin:  # secure backend: (λ + γ)/ξ ≤ λ/base, the certified ratio
                room = lam / base - self.rounding_margin
                if not room > 0:
                    raise ValueError("the privacy budget is too small for the secure grid")
                base = lam / room
            out.append(
                {
                    "m": m,
                    "sensitivity": lam,
                    "scale": base * self.scale_multiplier,
                    "base_scale": base,
                    "epsilon": self.epsilon / iterations,
                    "delta": self.delta / iterations,
                }
            )
        return out

    def fit(
        self,
        acc: EpisodeAccumulator,
        n: int,
        reward_clip: float,
        iterations: int,
        noise: NoiseSource,
        label: tuple[int | str, ...],
        theta0: tuple[IntArray, FloatArray] | None = None,
        h_scale: float = 1.0,
        extra_pure: float = 0.0,
    ) -> NIHTFit:
        """Run N-IHT on a sealed episode's statistics, spec §3.3.

        ``n`` is the public nominal size (never the actual row count); ``label`` names the
        fit's noise streams, one per iteration. ``theta0`` (indices, values): a public,
        previously released starting point (warm start; one iteration with ``grad_clip``
        only, the accumulator holding the residual contributions clipped against it); default
        θ⁰ = 0. ``h_scale``: the accumulator holds contributions in units of ``h_scale`` (sign
        contributions scaled by a clip G released after they were accumulated; ``grad_clip``
        must then be that G). ``extra_pure``: see :meth:`ratio`.
        """
        if not (self.epsilon > 0 and 0 < self.delta < 1):
            raise ValueError("need epsilon > 0 and 0 < delta < 1")
        if iterations == 0:
            return NIHTFit(np.zeros(0, dtype=np.int64), np.zeros(0), 0, [], [], acc.count)
        warm = theta0 is not None and np.asarray(theta0[0]).size > 0
        if warm and (iterations != 1 or self.grad_clip is None):
            raise ValueError("a warm start needs grad_clip and one iteration (M = 1)")
        if h_scale != 1.0 and (iterations != 1 or self.grad_clip is None or warm):
            raise ValueError("h_scale rescales one cold fit's clipped contributions only")
        consts = self.calibrate(n, reward_clip, iterations, extra_pure)
        idx = np.zeros(0, dtype=np.int64)
        vals = np.zeros(0)
        for m, c in enumerate(consts):
            # θ^{m+½} = θ^m − η·(2/n)·(Gθ^m − h); G·θ only touches supp(θ^m).
            theta_half = (2.0 * self.eta * h_scale / n) * acc.h
            if warm:
                assert theta0 is not None
                # h holds Σ clip(x_i·(ỹ_i − x_iᵀθ⁰)): θ^{½} = θ⁰ − η∇L(θ⁰) up to the clip
                theta_half[np.asarray(theta0[0], dtype=np.int64)] += np.asarray(theta0[1])
            elif idx.size:
                theta_half = theta_half - (2.0 * self.eta / n) * acc.gram_times(idx, vals)
                theta_half[idx] += vals
            peel = Peeling(
                self.s,
                c["epsilon"],
                c["delta"],
                c["sensitivity"],
                self.scale_multiplier,
                noise_scale=c["base_scale"],
            )
            sel, noisy = peel.release(theta_half, noise.generator(*label, "iter", m))
            proj = project_l1_ball(noisy, self.l1_radius)  # Π_C on the s-sparse vector
            keep = proj != 0.0
            idx, vals = sel[keep], proj[keep]
            order = np.argsort(idx)
            idx, vals = idx[order], vals[order]
        return NIHTFit(
            indices=idx,
            values=vals,
            iterations=iterations,
            sensitivities=[c["sensitivity"] for c in consts],
            scales=[c["scale"] for c in consts],
            rows=acc.count,
        )
