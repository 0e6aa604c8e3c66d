"""The ℓ2-ball mechanism Ψ_{ε,R} (Duchi, Jordan & Wainwright; LDP-GLB spec §3.1).

Input g ∈ B_R^d. (1) Draw b ~ Bernoulli(½ + ‖g‖/(2R)) and set u = (2b − 1)·g/‖g‖ (u uniform on
the unit sphere when g = 0). (2) With probability e^ε/(1 + e^ε) output a uniform point of the
radius-r_{ε,d} sphere on u's side ({z : zᵀu > 0}), otherwise one on the other side.

Privacy: whatever the input, the output density on the sphere takes only the two values
2e^ε/(1 + e^ε) and 2/(1 + e^ε) (relative to the uniform law), so their ratio is at most e^ε:
ε-LDP. Unbiasedness needs the input inside B_R^d (the caller clips) and the corrected radius.
The sampler is constant time (no rejection loop): a uniform direction is drawn and reflected
across u's hyperplane when it lies on the wrong side, which keeps it uniform.

Secure backend (``rng`` a :class:`~streaming_dpbandit.privacy.secure_noise.SecureGenerator`;
docs/privacy/secure-noise.md, "LDP randomizers"): the reflection above computes the output
from u in floating point, so its low bits depend on the input. The secure path instead draws a
direction w from a base law that is *exactly* sign-symmetric, and outputs w or −w (an exact
negation) according to the side of w, h = ⟨w, ±u⟩ ≥ 0, and an *exact* Bernoulli(1/(1 + e^ε))
coin. Any h with h(−w) = −h(w) (float dot products negate exactly) gives output probabilities
2·base(z)·(e^ε or 1)/(1 + e^ε) — ratio ≤ e^ε, whatever the float geometry — so the report is
exactly ε-LDP; the base law's closeness to uniform only affects unbiasedness.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray

if TYPE_CHECKING:
    from ..privacy.noise import NoiseGenerator
    from ..privacy.secure_noise import SecureGenerator

from .radius import ball_radius

__all__ = ["L2BallMechanism"]


class L2BallMechanism:
    """Ψ_{ε,R} in dimension d.

    Parameters
    ----------
    epsilon
        Privacy level ε of one output (pure ε-LDP).
    R
        Input radius: every input must satisfy ‖g‖ ≤ R (clip before calling).
    d
        Dimension.
    radius
        Output radius; ``None`` (default) is the corrected r_{ε,d}(R). Reproduction profiles
        that mimic the authors' code pass another value (biased; never for production).

    Examples
    --------
    >>> import numpy as np
    >>> mech = L2BallMechanism(epsilon=1.0, R=1.0, d=2)
    >>> round(mech.radius, 3)
    3.399
    >>> Z = mech.privatize(np.tile([0.7, 0.0], (200_000, 1)), np.random.default_rng(0))
    >>> bool(np.allclose(np.linalg.norm(Z, axis=1), mech.radius))   # every output on the sphere
    True
    >>> np.round(Z.mean(axis=0), 1).tolist()                          # unbiased: ≈ g
    [0.7, 0.0]

    """

    def __init__(self, epsilon: float, R: float, d: int, radius: float | None = None):
        if not (epsilon > 0 and math.isfinite(epsilon)):
            raise ValueError("epsilon must be a positive finite number")
        if not R > 0:
            raise ValueError("R must be positive")
        if d < 1:
            raise ValueError("d must be >= 1")
        self.epsilon = float(epsilon)
        self.R = float(R)
        self.d = int(d)
        self.radius = ball_radius(epsilon, d, R) if radius is None else float(radius)

    @property
    def flip_probability(self) -> float:
        """Probability 1/(1 + e^ε) of the output landing on the far hemisphere."""
        return 1.0 / (1.0 + math.exp(self.epsilon))

    def privatize(self, g: ArrayLike, rng: NoiseGenerator) -> FloatArray:
        """Privatise one vector (d,) or a batch (n, d); returns the same shape.

        Raises ``ValueError`` when an input lies outside B_R^d (up to 1e-12 relative). A
        :class:`~streaming_dpbandit.privacy.secure_noise.SecureGenerator` ``rng`` takes the
        secure path (exact coins, sign-symmetric directions: module docstring).
        """
        G = np.asarray(g, dtype=np.float64)
        single = G.ndim == 1
        if single:
            G = G[None, :]
        n, d = G.shape
        if d != self.d:
            raise ValueError(f"expected vectors of dimension {self.d}, got {d}")
        norms = np.sqrt(np.einsum("ij,ij->i", G, G))
        top = norms.max() if n else 0.0
        if not top <= self.R * (1.0 + 1e-12):  # also catches NaN and infinity
            if not np.all(np.isfinite(G)):
                raise ValueError("input contains NaN or infinite values")
            raise ValueError("input outside the ball of radius R: clip before privatising")
        if getattr(rng, "backend", None) == "secure":
            # a secure stream (SecureGenerator): its backend attribute says so
            z = self._privatize_secure(G, norms, cast("SecureGenerator", rng))
            return z[0] if single else z
        # step 1: the direction u, with the sign coin; uniform for g = 0 (spec A2)
        zero = norms == 0.0
        anyzero = not norms.all()
        u = G / (np.where(zero, 1.0, norms) if anyzero else norms)[:, None]
        if anyzero:
            w = rng.standard_normal((int(zero.sum()), d))
            u[zero] = w / np.linalg.norm(w, axis=1, keepdims=True)
        coins = rng.random((2, n))
        u *= np.where(coins[0] < 0.5 + norms / (2.0 * self.R), 1.0, -1.0)[:, None]
        # step 2: a uniform direction, reflected onto the hemisphere the coin chose
        z = rng.standard_normal((n, d))
        zn = np.sqrt(np.einsum("ij,ij->i", z, z))
        dots = np.einsum("ij,ij->i", z, u) / zn
        # same side with probability e^ε/(1 + e^ε); reflect when the draw is on the other side
        wrong = (dots > 0.0) != (coins[1] >= self.flip_probability)
        scale = self.radius / zn
        z *= scale[:, None]
        if wrong.any():
            z[wrong] -= (2.0 * self.radius * dots[wrong])[:, None] * u[wrong]
        return z[0] if single else z

    def _privatize_secure(
        self, G: FloatArray, norms: FloatArray, rng: SecureGenerator
    ) -> FloatArray:
        """Secure path: exact coins, output ±w for a sign-symmetric direction w (docstring)."""
        n, d = G.shape
        zero = norms == 0.0
        u = G / np.where(zero, 1.0, norms)[:, None]
        if zero.any():  # g = 0: a data-independent direction
            w0 = rng.sign_symmetric_normal((int(zero.sum()), d))
            u[zero] = w0 / np.linalg.norm(w0, axis=1, keepdims=True)
        # coin 1 (its exact value only matters for unbiasedness): ±u
        keep = rng.bernoulli(np.minimum(0.5 + norms / (2.0 * self.R), 1.0), n)
        u *= np.where(keep, 1.0, -1.0)[:, None]
        far = rng.logistic_coins(self.epsilon, n)  # exact: the far side w.p. 1/(1 + e^ε)
        w = rng.sign_symmetric_normal((n, d))
        near = np.einsum("ij,ij->i", w, u) >= 0.0  # h(−w) = −h(w) exactly
        flip = near == far
        w[flip] = -w[flip]
        out: FloatArray = w * (self.radius / np.sqrt(np.einsum("ij,ij->i", w, w)))[:, None]
        return out
