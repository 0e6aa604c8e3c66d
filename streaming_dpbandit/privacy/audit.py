"""Statistical privacy audits (DESIGN §7).

An audit runs a mechanism many times on a worst-case neighbouring pair (D, D′) and turns the
outcome frequencies of one event E into a lower bound on ε that holds with high confidence:

    ε_lb = ln( (p̲ − δ) / q̄ ),   p̲ ≤ P[M(D) ∈ E],  q̄ ≥ P[M(D′) ∈ E]

where p̲ and q̄ are one-sided Clopper–Pearson bounds at level α/2 each. If the mechanism is
(ε, δ)-DP, then ε_lb ≤ ε except with probability at most α — whatever E is. The harness picks
E = {score ≥ τ} or {score ≤ τ}, bounding P_D/P_D′ or P_D′/P_D, on a separate *pilot* sample,
so the final frequencies are computed on fresh runs and the bound stays valid.

A mechanism passes when ε_lb ≤ claimed ε; an under-noised variant must produce ε_lb above the
claim. Samplers return one real *score* per run (a function of the mechanism's output only),
typically the privacy-loss statistic of the pair, so that E approximates the optimal test.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

__all__ = [
    "AuditResult",
    "audit",
    "clopper_pearson",
    "clopper_pearson_many",
    "epsilon_lower_bound",
]

Sampler = Callable[[int, int, np.random.Generator], npt.NDArray[np.float64]]


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two one-sided (1 − α) Clopper–Pearson bounds of a binomial proportion.

    >>> lo, hi = clopper_pearson(50, 100, 0.05)
    >>> round(lo, 3), round(hi, 3)
    (0.414, 0.586)
    """
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(p_lo: float, q_hi: float, delta: float) -> float:
    """ln((p̲ − δ)/q̄), or 0 when the event carries no evidence.

    >>> round(epsilon_lower_bound(0.5, 0.5 * math.exp(-1), 0.0), 6)
    1.0
    """
    if p_lo <= delta or q_hi <= 0:
        return 0.0
    return max(0.0, math.log((p_lo - delta) / q_hi))


@dataclasses.dataclass
class AuditResult:
    """Outcome of one audit."""

    name: str
    claimed_epsilon: float
    claimed_delta: float
    epsilon_lb: float
    threshold: float
    orientation: str
    p_hat: float
    q_hat: float
    n: int
    alpha: float

    @property
    def passed(self) -> bool:
        """True when the audit found no evidence against the claim."""
        return self.epsilon_lb <= self.claimed_epsilon

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["passed"] = self.passed
        return out


_ORIENTATIONS = ((False, 1.0), (False, -1.0), (True, 1.0), (True, -1.0))


def _oriented(
    sd: npt.NDArray[np.float64], sdp: npt.NDArray[np.float64], swapped: bool, sign: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Scores (a, b) such that the event is {a ≥ τ} and the bound is on P_a / P_b."""
    a, b = (sdp, sd) if swapped else (sd, sdp)
    return sign * a, sign * b


def clopper_pearson_many(
    k_lo: npt.NDArray[np.int64], k_hi: npt.NDArray[np.int64], n_lo: int, n_hi: int, alpha: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`clopper_pearson`'s lower bound of k_lo/n_lo and upper bound of k_hi/n_hi, for
    arrays of counts at once (the same values, one vectorised quantile call each).

    >>> lo, hi = clopper_pearson_many(np.array([0, 50]), np.array([50, 100]), 100, 100, 0.05)
    >>> lo.round(3).tolist(), hi.round(3).tolist()
    ([0.0, 0.414], [0.586, 1.0])
    """
    lo = np.zeros(k_lo.shape)
    pos = k_lo > 0
    lo[pos] = stats.beta.ppf(alpha, k_lo[pos], n_lo - k_lo[pos] + 1)
    hi = np.ones(k_hi.shape)
    below = k_hi < n_hi
    hi[below] = stats.beta.ppf(1 - alpha, k_hi[below] + 1, n_hi - k_hi[below])
    return lo, hi


def _best_event(
    sd: npt.NDArray[np.float64], sdp: npt.NDArray[np.float64], delta: float, alpha: float
) -> tuple[float, tuple[bool, float]]:
    """Threshold and orientation maximising the (pilot) ε lower bound."""
    best: tuple[float, float, tuple[bool, float]] = (-1.0, 0.0, _ORIENTATIONS[0])
    for orient in _ORIENTATIONS:
        a, b = _oriented(sd, sdp, *orient)
        cand = np.unique(np.quantile(a, np.linspace(0.0, 0.999, 200)))
        a_sorted, b_sorted = np.sort(a), np.sort(b)
        k_a = a.size - np.searchsorted(a_sorted, cand, side="left")
        k_b = b.size - np.searchsorted(b_sorted, cand, side="left")
        p_lo, q_hi = clopper_pearson_many(k_a, k_b, a.size, b.size, alpha / 2)
        for tau, pl, qh in zip(cand, p_lo.tolist(), q_hi.tolist()):
            eps = epsilon_lower_bound(pl, qh, delta)
            if eps > best[0]:
                best = (eps, float(tau), orient)
    return best[1], best[2]


def audit(
    sampler: Sampler,
    claimed_epsilon: float,
    claimed_delta: float,
    n: int,
    rng: np.random.Generator,
    alpha: float = 1e-3,
    pilot: int | None = None,
    name: str = "",
) -> AuditResult:
    """Audit a mechanism through ``sampler(which, n, rng)``.

    Parameters
    ----------
    sampler
        ``sampler(0, n, rng)`` runs the mechanism n times on D, ``sampler(1, n, rng)`` on D′;
        each returns n scores.
    claimed_epsilon, claimed_delta
        The guarantee under audit.
    n
        Runs per dataset for the final estimate (the pilot adds ``pilot`` more, default n/4).
    alpha
        Probability that a correct mechanism is flagged.

    Examples
    --------
    The Laplace mechanism with sensitivity 1 and ε = 1 passes; with half its noise it fails:

    >>> import numpy as np
    >>> def lap(scale):
    ...     return lambda which, n, rng: which + rng.laplace(0.0, scale, n)
    >>> rng = np.random.default_rng(0)
    >>> audit(lap(1.0), 1.0, 0.0, 100_000, rng).passed
    True
    >>> audit(lap(0.5), 1.0, 0.0, 100_000, rng).passed
    False

    """
    pilot = pilot or max(1000, n // 4)
    sd, sdp = sampler(0, pilot, rng), sampler(1, pilot, rng)
    tau, orient = _best_event(sd, sdp, claimed_delta, alpha)
    fd, fdp = sampler(0, n, rng), sampler(1, n, rng)
    a, b = _oriented(fd, fdp, *orient)
    k_a, k_b = int(np.count_nonzero(a >= tau)), int(np.count_nonzero(b >= tau))
    p_lo, _ = clopper_pearson(k_a, n, alpha / 2)
    _, q_hi = clopper_pearson(k_b, n, alpha / 2)
    return AuditResult(
        name=name,
        claimed_epsilon=claimed_epsilon,
        claimed_delta=claimed_delta,
        epsilon_lb=epsilon_lower_bound(p_lo, q_hi, claimed_delta),
        threshold=tau,
        orientation=f"{'D′/D' if orient[0] else 'D/D′'}, {'≥' if orient[1] > 0 else '≤'}",
        p_hat=k_a / n,
        q_hat=k_b / n,
        n=n,
        alpha=alpha,
    )
