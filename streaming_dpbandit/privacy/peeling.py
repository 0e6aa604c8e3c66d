"""Peeling: private top-s selection with Laplace noise (Dwork, Su & Zhang 2021).

FLIPHAT spec §3.1 / paper App. A, Alg. 3. If every neighbouring pair satisfies
‖v(D) − v(D′)‖_∞ ≤ λ, the output is (ε, δ)-DP with Laplace scale

    ξ = λ · 2·√(3·s·ln(1/δ)) / ε.

Each of the s rounds draws a *fresh* d-vector of noise, adds it to |v|, masks the coordinates
already chosen (after adding noise) and picks the argmax; finally the s selected values get
fresh Laplace noise of the same scale. Drawing one noise vector for all rounds ("one-shot
top-s") is a different mechanism and is deliberately not offered.

``accountant="pld"`` calibrates the same mechanism by exact composition of privacy-loss
distributions instead (spec §14.2, :mod:`.peeling_accounting`): a smaller ξ for the same (ε, δ).

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .noise import NoiseGenerator
from .peeling_accounting import ACCOUNTANTS, peeling_pld_ratio

__all__ = ["Peeling", "peeling_scale"]


def peeling_scale(
    sensitivity: float, s: int, epsilon: float, delta: float, accountant: str = "closed_form"
) -> float:
    """Laplace scale ξ of one Peeling call meeting (ε, δ).

    ``closed_form``: ξ = λ·2√(3 s ln(1/δ))/ε (spec §3.1); ``pld``: ξ = λ/ρ with ρ from the
    exact composition of the s selections and s values (spec §14.2).

    >>> round(peeling_scale(1.0, 10, 1.0, 0.01), 4)
    23.5079
    >>> round(peeling_scale(1.0, 10, 1.0, 0.01, "pld") / 23.5079, 2)
    0.56
    """
    if not (sensitivity > 0 and epsilon > 0 and 0 < delta < 1 and s >= 1):
        raise ValueError("need sensitivity > 0, epsilon > 0, 0 < delta < 1 and s >= 1")
    if accountant == "pld":
        return sensitivity / peeling_pld_ratio(int(s), 1, float(epsilon), float(delta))
    if accountant != "closed_form":
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    return sensitivity * 2.0 * math.sqrt(3.0 * s * math.log(1.0 / delta)) / epsilon


class Peeling:
    """Private top-``s`` selection and release of a vector with ℓ∞ sensitivity λ.

    Parameters
    ----------
    s
        Number of coordinates to select.
    epsilon, delta
        Privacy of this one call.
    sensitivity
        λ, the declared ℓ∞ sensitivity of the input vector.
    scale_multiplier
        Multiplies the calibrated Laplace scale. Always 1 in the product; the privacy audit
        sets it below 1 to prove that the audit catches an under-noised variant.
    accountant
        ``"closed_form"`` (spec §3.1) or ``"pld"`` (exact composition, spec §14.2).
    noise_scale
        A Laplace scale calibrated by the caller for a larger composition (N-IHT's PLD over its
        M iterations); ``None`` calibrates this one call from (ε, δ, λ) with ``accountant``.

    Examples
    --------
    >>> import numpy as np
    >>> v = np.array([0.0, 5.0, -4.0, 0.1, 3.0])
    >>> idx, vals = Peeling(s=2, epsilon=1e6, delta=0.1, sensitivity=1e-6).release(
    ...     v, np.random.default_rng(1))
    >>> sorted(idx.tolist())
    [1, 2]
    >>> np.round(vals, 3).tolist()
    [5.0, -4.0]

    """

    def __init__(
        self,
        s: int,
        epsilon: float,
        delta: float,
        sensitivity: float,
        scale_multiplier: float = 1.0,
        accountant: str = "closed_form",
        noise_scale: float | None = None,
    ):
        self.s = s
        self.epsilon = epsilon
        self.delta = delta
        self.sensitivity = sensitivity
        self.scale_multiplier = scale_multiplier
        self.accountant = accountant
        self.noise_scale = noise_scale

    @property
    def scale(self) -> float:
        """ξ, the Laplace scale actually drawn with."""
        if self.noise_scale is not None:
            base = float(self.noise_scale)
        else:
            base = peeling_scale(
                self.sensitivity, self.s, self.epsilon, self.delta, self.accountant
            )
        return base * self.scale_multiplier

    def release(
        self, v: npt.ArrayLike, rng: NoiseGenerator
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Select ``s`` coordinates of ``v`` privately; return (indices in order, noisy values)."""
        v = np.asarray(v, dtype=np.float64)
        if v.ndim != 1:
            raise ValueError("Peeling.release expects a vector; use release_many for a batch")
        idx, vals = self.release_many(v[None, :], rng)
        return idx[0], vals[0]

    def release_many(
        self, V: npt.ArrayLike, rng: NoiseGenerator
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Run independent Peeling calls on each row of ``V`` (n × d), vectorised over rows.

        For one row the draws are exactly those of :meth:`release`: s noise vectors of size d,
        then s noise values for the selected coordinates.
        """
        V = np.asarray(V, dtype=np.float64)
        if V.ndim != 2:
            raise ValueError("expected a 2-D array (n × d)")
        n, d = V.shape
        if not 1 <= self.s <= d:
            raise ValueError(f"sparsity s={self.s} must be between 1 and d={d}")
        if not np.all(np.isfinite(V)):
            raise ValueError("input to Peeling contains NaN or infinite values")
        xi = self.scale
        absV = np.abs(V)
        chosen = np.zeros((n, self.s), dtype=np.int64)
        taken = np.zeros((n, d), dtype=bool)
        rows = np.arange(n)
        for i in range(self.s):
            score = rng.laplace(absV, xi, size=(n, d))  # fresh vector every round (value as loc:
            # the secure backend rounds it to its grid, docs/privacy/secure-noise.md)
            score[taken] = -np.inf  # mask after adding noise
            j = np.argmax(score, axis=1)
            chosen[:, i] = j
            taken[rows, j] = True
        values = rng.laplace(V[rows[:, None], chosen], xi, size=(n, self.s))
        return chosen, values

    def accounting(self) -> dict[str, Any]:
        return {"type": "eps_delta", "epsilon": float(self.epsilon), "delta": float(self.delta)}
