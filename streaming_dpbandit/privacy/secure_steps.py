"""Exact encoded steps of a Toeplitz factorisation, for the secure noise backend.

The square-root and BLT mechanisms (DP-LinUCB spec §11) release B·(C·x + z). On the secure backend
(docs/privacy/secure-noise.md, "Factorisations") step j releases the *integer*

    Y_j = rint((C̃·x)_j / γ) + Z_j,       Z_j ~ N_ℤ(0, σ_i²/γ²) per packed entry,

where C̃ is the lower-triangular Toeplitz matrix of the mechanism's float coefficients c̃_k taken
*exactly* (a float is a dyadic rational), x_j are the exact step sums (integers in units of
2⁻³²), and γ = 2^−g. (C̃·x)_j/γ = S_j·2^(g−32−e) with S_j = Σ_k W_{j−k}·x_k an exact Python
integer (W_k = c̃_k·2^e, e the largest denominator exponent), so the rounding is exact
(half to even) and a recomputed step is bit-identical. The aggregator then outputs the
post-processing B·(γ·Y).

Cost: the exact sum needs every past step sum (O(T·P) integers held, SENSITIVE) and O(j·P)
integer operations at step j.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from typing import Self

__all__ = ["ExactToeplitzSteps"]


def _rint_shift(S: int, sh: int) -> int:
    """rint(S·2^sh), half to even, exactly."""
    if sh >= 0:
        return S << sh
    k = -sh
    q, r = divmod(S, 1 << k)  # floor division: 0 ≤ r < 2^k
    twice = r << 1
    if twice > (1 << k) or (twice == (1 << k) and q & 1):
        q += 1
    return q


class ExactToeplitzSteps:
    """The exact integers rint((C̃·x)_j/γ) of a stream of step sums.

    Parameters
    ----------
    coeffs
        c̃_0 … c̃_{T−1} (float64; taken exactly).
    g
        Grid exponent: γ = 2^−g.
    data_bits
        The step sums are integers in units of 2^−data_bits.

    Examples
    --------
    >>> enc = ExactToeplitzSteps(np.array([1.0, 0.5, 0.375]), g=1, data_bits=0)
    >>> enc.push(np.array([3, 1])).tolist(), enc.push(np.array([1, 0])).tolist()
    ([6, 2], [5, 1])
    >>> enc.push(np.array([0, 0])).tolist()   # (0.375·3 + 0.5·1)·2 = 3.25 → 3
    [3, 1]
    """

    def __init__(self, coeffs: npt.NDArray[np.float64], g: int, data_bits: int = 32):
        self.coeffs = coeffs
        self.g = g
        self.data_bits = data_bits

    def _state(self) -> Self:
        if not hasattr(self, "_X"):
            ratios = [float(c).as_integer_ratio() for c in self.coeffs]
            e = max(den.bit_length() - 1 for _, den in ratios)  # dens are powers of two
            self._W = [num << (e - (den.bit_length() - 1)) for num, den in ratios]
            self._sh = self.g - self.data_bits - e
            self._X: list[list[int]] = []
        return self

    def push(self, x: npt.ArrayLike) -> npt.NDArray[Any]:
        """Append step sum x_j (integer units) and return rint((C̃·x)_j/γ) (object ints)."""
        self._state()
        if len(self._X) >= len(self._W):
            raise RuntimeError("the factorisation's horizon is used up")
        self._X.append([int(v) for v in np.asarray(x).tolist()])
        j = len(self._X) - 1
        W, X = self._W, self._X
        P = len(X[-1])
        out = np.empty(P, dtype=object)
        for i in range(P):
            S = 0
            for k in range(j + 1):
                S += W[j - k] * X[k][i]
            out[i] = _rint_shift(S, self._sh)
        return out

    @property
    def steps(self) -> int:
        return len(self._state()._X)

    def state_dict(self) -> dict[str, Any]:
        """The exact step sums (SENSITIVE: owner-only snapshots)."""
        return {"X": [list(map(int, row)) for row in self._state()._X]}

    def load_state_dict(self, state: dict[str, Any]) -> ExactToeplitzSteps:
        self._state()
        self._X = [[int(v) for v in row] for row in state["X"]]
        return self
