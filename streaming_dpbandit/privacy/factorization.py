"""Square-root (Toeplitz) matrix-factorisation mechanism for continual Gram release.

DP-LinUCB spec §11 (beyond the paper). Prefix sums are A·x with A the lower-triangular all-ones
matrix; factor A = B·C with B = C = A^{1/2}, the lower-triangular Toeplitz matrix of

    f_0 = 1,   f_k = f_{k−1}·(1 − 1/(2k))          (Fichtenberger, Henzinger, Upadhyay 2023),

and release A·x + B·z = B·(C·x + z) with z_j i.i.d. symmetrised Gaussian node noise (one per
step). The release at step i is therefore

    R_i = Σ_{j ≤ i} X_j + Σ_{j ≤ i} f_{i−j} Z_j,

a post-processing of the Gaussian mechanism C·x + z. Replacing one row changes one step sum X_s
by Δ with ‖Δ‖ ≤ L̃² in the rescaled coordinates, hence C·x by at most L̃²·‖C‖_{1→2} with
‖C‖²_{1→2} = Σ_{k<T} f_k² (the first column is the longest): the whole release sequence is
μ-GDP with μ = L̃²‖C‖_{1→2}/σ, also for adaptively chosen rows because B and C are lower
triangular (Denisov, McMahan, Rush, Smith, Thakurta 2022). The per-entry noise of release i has
standard deviation σ·(Σ_{k<i} f_k²)^{1/2} ≤ σ‖C‖_{1→2}; Σ_{k<T} f_k² ≈ 1 + ln(T)/π.

Secure backend: step j releases the integer rint((C̃x)_j/γ) + Z_j (C̃ the float coefficients
taken exactly, Z discrete Gaussian; :mod:`.secure_steps`) and the release is B·(γY) —
docs/privacy/secure-noise.md, "Factorisations".

A *step* is one release: the rows that arrived since the previous release form its X_j, so with
batched releases (every b rows) the horizon is T = ⌈n_cap/b⌉ steps. The dense factor needs every
past z: O(T·d²) memory and O(T·d²) work per release (spec §11: impractical for T ~ 10⁷; BLT is
the streaming-friendly alternative, not implemented here). When T steps are used the aggregator
freezes (further rows are not inserted).

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .matrix_noise import SymmetricGaussianNoise
from .noise import NoiseSource
from .secure_steps import ExactToeplitzSteps
from .stepwise import StepwisePrefix
from .symmetric import packing

if TYPE_CHECKING:
    from typing import Self

__all__ = ["SqrtToeplitzAggregator", "sqrt_toeplitz_coefficients", "sqrt_toeplitz_norm"]


def sqrt_toeplitz_coefficients(T: int) -> npt.NDArray[np.float64]:
    """f_0 … f_{T−1} of A^{1/2}: f_k = C(2k, k)/4^k.

    >>> sqrt_toeplitz_coefficients(4).tolist()
    [1.0, 0.5, 0.375, 0.3125]
    >>> A12 = np.array([[sqrt_toeplitz_coefficients(4)[i - j] if i >= j else 0.0
    ...                  for j in range(4)] for i in range(4)])
    >>> bool(np.allclose(A12 @ A12, np.tril(np.ones((4, 4)))))
    True
    """
    if T < 1:
        raise ValueError("T must be >= 1")
    k = np.arange(1, T)
    return np.concatenate([[1.0], np.cumprod(1.0 - 1.0 / (2.0 * k))])


def sqrt_toeplitz_norm(T: int) -> float:
    """‖C‖_{1→2} = (Σ_{k<T} f_k²)^{1/2} (≈ (1 + ln T/π)^{1/2}).

    >>> round(sqrt_toeplitz_norm(1), 6), round(sqrt_toeplitz_norm(2048) ** 2, 3)
    (1.0, 3.493)
    """
    f = sqrt_toeplitz_coefficients(T)
    return float(np.sqrt(np.dot(f, f)))


class SqrtToeplitzAggregator(StepwisePrefix):
    """Continual release of packed Gram prefix sums with the square-root factorisation.

    Parameters
    ----------
    p
        Row length d + 1.
    n_steps
        Horizon T in releases (steps).
    sampler
        :class:`~.matrix_noise.SymmetricGaussianNoise` (Gaussian only: Wishart laws are not
        closed under linear combinations, spec §11).
    noise
        Noise source; step j draws from the stream (label…, j).
    label
        Noise-stream label prefix.
    row_norm_sq
        L̃² (enforced by the caller's clipping).

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.privacy.matrix_noise import SymmetricGaussianNoise
    >>> agg = SqrtToeplitzAggregator(p=2, n_steps=8, sampler=SymmetricGaussianNoise(2, 1.0),
    ...                              noise=NoiseSource(seed=1), label=("b", "fact", 0))
    >>> agg.insert_many(np.array([[1.0, 0.5]]))
    1
    >>> R1 = agg.release(); agg.steps
    1
    >>> _ = agg.insert_many(np.array([[0.0, 1.0]])); R2 = agg.release(); agg.steps
    2
    >>> Z = agg.state_dict()["Z"]  # R2 = exact sum + f_1·Z_1 + f_0·Z_2
    >>> bool(np.allclose(R2 - agg.exact_sum(), 0.5 * Z[0] + Z[1]))
    True

    """

    def __init__(
        self,
        p: int,
        n_steps: int,
        sampler: SymmetricGaussianNoise,
        noise: NoiseSource,
        label: tuple[int | str, ...] = ("factorisation",),
        row_norm_sq: float = 2.0,
    ):
        self.p = p
        self.n_steps = n_steps
        self.sampler = sampler
        self.noise = noise
        self.label = tuple(label)
        self.row_norm_sq = row_norm_sq

    _Z: npt.NDArray[np.float64]
    _f: npt.NDArray[np.float64]
    _enc: ExactToeplitzSteps

    def _state(self) -> Self:
        if not hasattr(self, "_M"):
            P = packing(self.p).size
            self._M = np.zeros(P, dtype=np.int64)  # T·b·L̃² rows stay far below 2³¹ in practice
            self._s = 0
            self._pending = 0
            self._step = 0
            self._Z = np.zeros((min(self.n_steps, 64), P))
            self._f = sqrt_toeplitz_coefficients(self.n_steps)
            self._noise_sum = np.zeros(P)
            self._draws = {"node": 0, "pad": 0}
        return self

    def release(self) -> npt.NDArray[np.float64]:
        """R_i = exact prefix + Σ_j f_{i−j} Z_j; a new step only if rows arrived since the last."""
        self._state()
        if self._pending or self._step == 0:
            i = self._step
            if i >= self._Z.shape[0]:
                grow = np.zeros((min(self.n_steps, 2 * self._Z.shape[0]), self._Z.shape[1]))
                grow[:i] = self._Z[:i]
                self._Z = grow
            # issue-once by structure: step i + 1 is drawn exactly when the persisted step
            # counter passes it (no ever-growing issued-label set)
            g = self.noise.generator(*self.label, i + 1, track=False)
            # secure: Z holds the released steps γ·Y_j and the release is B·(γY) alone
            self._Z[i] = self._secure_step(g) if self.secure else self.sampler.sample(g)
            self._draws["node"] += 1
            self._step = i + 1
            self._pending = 0
            self._noise_sum = self._f[i::-1] @ self._Z[: i + 1]
        return self._released()

    def _encoder(self) -> ExactToeplitzSteps:
        enc: ExactToeplitzSteps | None = getattr(self, "_enc", None)
        if enc is None:
            g = self.sampler.grid_exponent(32)
            enc = self._enc = ExactToeplitzSteps(self._state()._f, g)
        return enc

    def state_dict(self) -> dict[str, Any]:
        return {
            **self._counters(),
            "Z": self._Z[: self._step].copy(),
            "draws": dict(self._draws),
        }

    def load_state_dict(self, state: dict[str, Any]) -> SqrtToeplitzAggregator:
        self._state()
        self._load_counters(state)
        Z = np.asarray(state["Z"], dtype=np.float64)
        self._Z = np.zeros((max(min(self.n_steps, 64), Z.shape[0]), packing(self.p).size))
        self._Z[: Z.shape[0]] = Z
        i = self._step
        self._noise_sum = self._f[i - 1 :: -1] @ self._Z[:i] if i else np.zeros(self._Z.shape[1])
        return self

    @property
    def nbytes(self) -> int:
        self._state()
        return int(self._M.nbytes + self._Z.nbytes + self._noise_sum.nbytes + self._f.nbytes)
