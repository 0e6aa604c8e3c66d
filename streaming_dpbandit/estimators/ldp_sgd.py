"""LDP-SGD server: projected SGD on privatised gradients (LDP-GLB spec §4.1, eq. (6)).

Per report Z (already privatised on the device, so everything here is post-processing):

    n ← n + 1;   θ̂ ← Π_S(θ̂ − η_n Z),   η_n = c0/(n + n0),

with Π_S the projection onto {‖θ‖ ≤ S} (valid because ‖θ*‖ ≤ S; non-expansive). The updates
are sequential, so one writer owns a model and feeds reports in a fixed order (the service: the
partition order); identical report sequences give bit-identical estimates.

Mini-batching (``batch_size`` B > 1, an unbiased variant not in the paper): the reports of a
batch are averaged and one step θ̂ ← Π_S(θ̂ − η_k Z̄) is taken per batch, η_k = c0/(k + n0) with
k the batch count. B = 1 is the paper's per-report update. ``weight_decay`` λ (the authors'
code only) steps on Z + λθ̂.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray

__all__ = ["LDPSGD", "project_l2"]


def project_l2(theta: FloatArray, S: float | None) -> FloatArray:
    """Π_S(θ) = θ·min(1, S/‖θ‖), in place; ``S=None`` leaves θ unchanged.

    >>> project_l2(np.array([3.0, 4.0]), 1.0).tolist()
    [0.6000000000000001, 0.8]
    """
    if S is not None:
        nrm = math.sqrt(float(theta @ theta))
        if nrm > S:
            theta *= S / nrm
    return theta


class LDPSGD:
    """One LDP-SGD model θ̂ ∈ R^d.

    Parameters
    ----------
    d
        Dimension.
    c0, n0
        Step size η_n = c0/(n + n0) (n counts this report; tuned offline, spec P6).
    S
        Projection radius (``None``: no projection, the authors' code).
    weight_decay
        λ ≥ 0 (the authors' code; 0 in the product).
    batch_size
        Reports per step (1: the paper's update).
    theta0
        Initial θ̂ (default 0).

    Examples
    --------
    >>> import numpy as np
    >>> sgd = LDPSGD(d=2, c0=1.0, n0=0.0, S=1.0)
    >>> sgd.learn_many(np.array([[-1.0, 0.0], [0.0, 4.0]]))
    >>> sgd.theta.tolist(), sgd.n          # θ = 0 − 1·Z₁ = (1, 0); then Π(θ − ½Z₂) = Π((1, −2))
    ([0.4472135954999579, -0.8944271909999159], 2)

    """

    def __init__(
        self,
        d: int,
        c0: float,
        n0: float = 1.0,
        S: float | None = 1.0,
        weight_decay: float = 0.0,
        batch_size: int = 1,
        theta0: ArrayLike | None = None,
    ):
        if d < 1 or not c0 > 0 or n0 < 0 or batch_size < 1 or weight_decay < 0:
            raise ValueError("need d >= 1, c0 > 0, n0 >= 0, batch_size >= 1, weight_decay >= 0")
        if S is not None and not S > 0:
            raise ValueError("S must be positive (or None)")
        self.d = d
        self.c0 = float(c0)
        self.n0 = float(n0)
        self.S = S
        self.weight_decay = float(weight_decay)
        self.batch_size = int(batch_size)
        self.theta = np.zeros(d) if theta0 is None else np.array(theta0, dtype=np.float64)
        if self.theta.shape != (d,):
            raise ValueError(f"theta0 must have shape ({d},)")
        project_l2(self.theta, S)
        self.n = 0  # reports absorbed
        self.steps = 0
        self._buf = np.zeros(d)
        self._buffered = 0

    def learn_one(self, z: ArrayLike) -> None:
        self.learn_many(np.asarray(z, dtype=np.float64)[None, :])

    def learn_many(self, Z: ArrayLike) -> None:
        """Absorb reports in row order."""
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.d:
            raise ValueError(f"expected reports of shape (n, {self.d})")
        theta, S, c0, n0, lam = self.theta, self.S, self.c0, self.n0, self.weight_decay
        if self.batch_size == 1:
            n = self.n
            for z in Z:
                n += 1
                eta = c0 / (n + n0)
                if lam:
                    theta -= eta * (z + lam * theta)
                else:
                    theta -= eta * z
                if S is not None:
                    nrm = math.sqrt(float(theta @ theta))
                    if nrm > S:
                        theta *= S / nrm
            self.n = self.steps = n
            return
        for z in Z:
            self._buf += z
            self._buffered += 1
            self.n += 1
            if self._buffered == self.batch_size:
                self.steps += 1
                eta = c0 / (self.steps + n0)
                theta -= eta * (self._buf / self.batch_size + lam * theta)
                project_l2(theta, S)
                self._buf[:] = 0.0
                self._buffered = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "theta": self.theta.copy(),
            "n": self.n,
            "steps": self.steps,
            "buf": self._buf.copy(),
            "buffered": self._buffered,
        }

    def load_state_dict(self, state: dict[str, Any]) -> LDPSGD:
        self.theta = np.array(state["theta"], dtype=np.float64)
        self.n = int(state["n"])
        self.steps = int(state["steps"])
        self._buf = np.array(state["buf"], dtype=np.float64)
        self._buffered = int(state["buffered"])
        return self
