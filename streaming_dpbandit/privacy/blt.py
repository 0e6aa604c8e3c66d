"""Buffered linear Toeplitz (BLT) matrix-factorisation mechanism for continual Gram release.

DP-LinUCB spec §11 (beyond the paper); derivation in ``docs/privacy/dp-linucb-blt.md``.
Prefix sums are A·x (A the lower-triangular all-ones matrix). Factor A = B·C with C the
lower-triangular Toeplitz matrix BLT(θ, ω) of b buffers (Dvijotham, McMahan, Pillutla, Steinke
& Thakurta 2024; McMahan et al. 2024):

    c_0 = 1,   c_k = Σ_i ω_i θ_i^{k−1}  (k ≥ 1),   0 < θ_i < 1, ω_i > 0,

and release A·x + B·z = A·C⁻¹·(C·x + z), z_j i.i.d. symmetrised Gaussian node noise. C⁻¹ is
again a BLT with b buffers, BLT(θ̂, ω̂), with θ̂ the eigenvalues of diag(θ) − 𝟙ωᵀ
(:func:`blt_inverse`), so the noise of release t,

    N_t = Σ_{j ≤ t} w_j,   w_j = z_j + Σ_i ω̂_i S_i,   S_i ← θ̂_i S_i + z_j,

needs only b buffers S_i and the running sum N: O((b + 2)·d²) memory, whatever the horizon,
instead of the square-root factorisation's O(T·d²).

Privacy: one replaced row changes one step sum X_s by ‖Δ‖ ≤ L̃² (rescaled coordinates), hence
C·x by at most L̃²·‖C‖_{1→2}; the first column of a lower-triangular Toeplitz matrix is the
longest, and with 0 < θ_i < 1 its squared norm is bounded for *every* horizon:

    ‖C‖²_{1→2} ≤ 1 + Σ_{i,j} ω_i ω_j / (1 − θ_i θ_j)      (:func:`blt_sensitivity`, n=None).

The calibration uses this all-horizon bound, so the guarantee needs no horizon cap. The error
(per-entry noise standard deviation σ·‖B_{t,:}‖₂, increasing in t) does grow with t;
:func:`blt_max_error` gives it in closed form and :func:`blt_parameters` returns parameters
fitted (by :func:`fit_blt`) to minimise ‖C‖_{1→2}·max_{t<T}‖B_{t,:}‖ for a design horizon T.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from scipy import optimize

from .matrix_noise import SymmetricGaussianNoise
from .noise import NoiseSource
from .secure_steps import ExactToeplitzSteps
from .stepwise import StepwisePrefix
from .symmetric import packing

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "BLTAggregator",
    "blt_coefficients",
    "blt_inverse",
    "blt_max_error",
    "blt_noise_step",
    "blt_parameters",
    "blt_sensitivity",
    "counting_lower_bound",
    "fit_blt",
]

BLT_BUFFERS = 5

# k: (θ, ω) fitted by fit_blt(2**k) (bench/bench_blt.py --refit); see blt_parameters
_TABLE: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {
    4: (
        (
            0.12803987967099958,
            0.5932930010123986,
            0.7417543397844515,
            0.8919487602784045,
            0.9999999999978948,
        ),
        (
            0.0971230410058057,
            3.640030387826487e-13,
            8.122927045570309e-22,
            0.4115094804354756,
            1.0107380641496342e-27,
        ),
    ),
    6: (
        (
            0.021347988662739247,
            0.5002938758302011,
            0.6628487719898494,
            0.6628530297702859,
            0.9722280257931768,
        ),
        (
            0.03839662752784962,
            1.2725089373428771e-07,
            0.04244496301825535,
            0.19498805176004544,
            0.22853494001631006,
        ),
    ),
    8: (
        (
            2.430425423350328e-215,
            0.39932717829867165,
            0.5425805174089307,
            0.9005524512011794,
            0.9929951377410002,
        ),
        (
            9.884865761556895e-297,
            0.05502215004475197,
            0.14756693153782974,
            0.18004987585058504,
            0.1176482134929443,
        ),
    ),
    10: (
        (
            0.007804878234739706,
            0.49864662708442026,
            0.8616674378739101,
            0.9746261089844371,
            0.9982469769090869,
        ),
        (
            0.017638548575227373,
            0.1629011127858077,
            0.1641494248223989,
            0.09667859438038688,
            0.059175685710910704,
        ),
    ),
    12: (
        (
            0.42193347596389424,
            0.835139288094252,
            0.9635708888703479,
            0.9936057380843474,
            0.9995615718247592,
        ),
        (
            0.1581689382489201,
            0.16788490045188684,
            0.09467663548147988,
            0.0494178821339384,
            0.02963893557268774,
        ),
    ),
    14: (
        (
            0.5014805568790813,
            0.9052027740844517,
            0.9864209726201562,
            0.9982361443839763,
            0.9998897299786276,
        ),
        (
            0.20855275377058363,
            0.17494536360400442,
            0.07288605644210254,
            0.028567742225736964,
            0.01493522281638534,
        ),
    ),
    16: (
        (
            0.652688279373726,
            0.9558389054313796,
            0.9952170915238059,
            0.9995054924673795,
            0.9999721521788709,
        ),
        (
            0.27431067180777297,
            0.14322393647652765,
            0.04908400806327808,
            0.01641448942078463,
            0.007554780032095883,
        ),
    ),
    18: (
        (
            0.7301716302057178,
            0.9756778037872511,
            0.9980707490943785,
            0.9998505491798467,
            0.9999928808382152,
        ),
        (
            0.3067507317028218,
            0.12305121064364265,
            0.035434293163192035,
            0.010012350970699895,
            0.0038681037149416366,
        ),
    ),
    20: (
        (
            0.7906716219080232,
            0.9863349078224237,
            0.9991935162843473,
            0.999953022277909,
            0.9999981582979166,
        ),
        (
            0.32533840551023385,
            0.10369230387116668,
            0.025507023348999076,
            0.0061879368796219246,
            0.0020002283549894833,
        ),
    ),
    22: (
        (
            0.8378185972889023,
            0.992212630697038,
            0.9996544780159932,
            0.9999847879320306,
            0.9999995177567084,
        ),
        (
            0.3325787837959386,
            0.08630499808799974,
            0.018309877749479876,
            0.003845879021685618,
            0.0010435135728970456,
        ),
    ),
    24: (
        (
            0.8744395442596294,
            0.9955123683654498,
            0.9998492120217198,
            0.9999949587657866,
            0.9999998722663389,
        ),
        (
            0.33093795624434325,
            0.07121935148438245,
            0.013109488135592923,
            0.0023959375116662475,
            0.0005484242884462447,
        ),
    ),
    26: (
        (
            0.9028261738327901,
            0.9973927423386829,
            0.9999333011215026,
            0.9999982991555677,
            0.9999999658073796,
        ),
        (
            0.32258223882453,
            0.05837139393265395,
            0.009357781332906889,
            0.0014930132454326658,
            0.00028991320272513105,
        ),
    ),
    28: (
        (
            0.9247888588682747,
            0.9984738490671416,
            0.9999701459764864,
            0.9999994177647479,
            0.9999999907629932,
        ),
        (
            0.3094474630918222,
            0.047594221170638586,
            0.006665384742714769,
            0.0009300502691414483,
            0.00015394235411961992,
        ),
    ),
}


def _geo(q: npt.NDArray[np.float64], n: int | None) -> npt.NDArray[np.float64]:
    """Σ_{k<n} q^k elementwise (n=None: the infinite sum), for real |q| ≤ 1 (q = 1 needs n)."""
    q = np.asarray(q, dtype=np.float64)
    if n is None:
        return 1.0 / (1.0 - q)
    out = np.full(q.shape, float(n))
    pos = (q > 0) & (q != 1.0)
    neg = q <= 0
    out[pos] = -np.expm1(n * np.log(q[pos])) / (1.0 - q[pos])  # accurate for q near 1
    out[neg] = (1.0 - q[neg] ** n) / (1.0 - q[neg])
    return out


def blt_coefficients(theta: npt.ArrayLike, omega: npt.ArrayLike, n: int) -> npt.NDArray[np.float64]:
    """c_0 … c_{n−1} of BLT(θ, ω): c_0 = 1, c_k = Σ_i ω_i θ_i^{k−1}.

    >>> blt_coefficients([0.5], [0.25], 4).tolist()
    [1.0, 0.25, 0.125, 0.0625]
    """
    theta = np.asarray(theta, dtype=np.float64)
    omega = np.asarray(omega, dtype=np.float64)
    k = np.arange(n - 1, dtype=np.float64)
    return np.concatenate([[1.0], (omega[:, None] * theta[:, None] ** k).sum(axis=0)])


def blt_inverse(
    theta: npt.ArrayLike, omega: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(θ̂, ω̂) with BLT(θ, ω)⁻¹ = BLT(θ̂, ω̂).

    BLT(θ, ω) is the impulse response of s ← diag(θ)s + 𝟙z, y = z + ωᵀs; its inverse system is
    s ← (diag(θ) − 𝟙ωᵀ)s + 𝟙y, z = y − ωᵀs. For distinct θ_i and ω_i > 0 the eigenvalues of the
    rank-one update are real and interlace the θ_i (secular equation Σ_i ω_i/(θ_i − λ) = 1), so
    diagonalising gives the BLT form.

    >>> th, w = blt_inverse([0.5], [0.25]); th.tolist(), w.tolist()
    ([0.25], [-0.25])
    >>> c = blt_coefficients([0.9, 0.5], [0.1, 0.2], 6); ch = blt_coefficients(*blt_inverse(
    ...     [0.9, 0.5], [0.1, 0.2]), 6)
    >>> bool(np.allclose(np.convolve(c, ch)[:6], [1, 0, 0, 0, 0, 0]))
    True
    """
    theta = np.asarray(theta, dtype=np.float64)
    omega = np.asarray(omega, dtype=np.float64)
    lam, V = np.linalg.eig(np.diag(theta) - np.outer(np.ones_like(theta), omega))
    if np.abs(lam.imag).max(initial=0.0) > 1e-12:
        raise ValueError("BLT inverse has complex poles (need distinct θ and ω > 0)")
    lam, V = lam.real, V.real
    w = -(omega @ V) * np.linalg.solve(V, np.ones_like(theta))
    order = np.argsort(lam)
    return lam[order], w[order]


def blt_noise_step(
    N: npt.NDArray[np.float64],
    S: npt.NDArray[np.float64],
    z: npt.NDArray[np.float64],
    th_hat: npt.NDArray[np.float64],
    w_hat: npt.NDArray[np.float64],
) -> None:
    """One step of the release noise N_t = Σ_{j ≤ t} (C⁻¹z)_j, in place.

    N ← N + z + Σ_i ω̂_i S_i, then S_i ← θ̂_i S_i + z, with N and z of shape (P,), the buffers S
    (b, P) and θ̂ as a column (b, 1). Every coordinate evolves on its own, so P may hold many
    independent copies side by side: :class:`BLTAggregator` runs one, the end-to-end privacy
    audit (``experiments/end_to_end_audits.py``) runs its trials through this same step.

    >>> th, w = blt_inverse([0.5], [0.25])
    >>> N, S = np.zeros(2), np.zeros((1, 2))
    >>> for z in ([1.0, 2.0], [0.0, 0.0]):
    ...     blt_noise_step(N, S, np.array(z), th[:, None], w)
    >>> N.tolist()  # (C⁻¹z)_1 + (C⁻¹z)_2 = z_1 + (z_2 + ω̂·z_1)
    [0.75, 1.5]
    """
    N += z + w_hat @ S
    S *= th_hat
    S += z


def blt_sensitivity(theta: npt.ArrayLike, omega: npt.ArrayLike, n: int | None = None) -> float:
    """‖C‖_{1→2} of the n×n BLT(θ, ω) (n=None: the bound valid for every horizon).

    ‖C‖²_{1→2} = 1 + Σ_{i,j} ω_iω_j Σ_{k<n−1} (θ_iθ_j)^k (all terms positive: no cancellation).

    >>> th, w = [0.5], [0.25]
    >>> round(blt_sensitivity(th, w, 4) ** 2, 6), round(blt_sensitivity(th, w) ** 2, 6)
    (1.082031, 1.083333)
    """
    theta = np.asarray(theta, dtype=np.float64)
    omega = np.asarray(omega, dtype=np.float64)
    if n is not None and n <= 1:
        return 1.0
    s2 = 1.0 + float(omega @ _geo(np.outer(theta, theta), None if n is None else n - 1) @ omega)
    return math.sqrt(s2)


def blt_max_error(theta: npt.ArrayLike, omega: npt.ArrayLike, n: int) -> float:
    """max_{t<n} ‖(A·C⁻¹)_{t,:}‖₂ = (Σ_{k<n} β_k²)^{1/2}, β_k = Σ_{j≤k} ĉ_j (closed form).

    With C⁻¹ = BLT(θ̂, ω̂): β_k = a_0 + Σ_i a_i θ̂_i^k, a_i = −ω̂_i/(1 − θ̂_i), a_0 = 1 − Σ a_i.
    The row norms of A·C⁻¹ grow with t, so the maximum is the last row.

    >>> th, w = [0.9, 0.5], [0.1, 0.2]
    >>> beta = np.cumsum(blt_coefficients(*blt_inverse(th, w), 50))
    >>> bool(np.isclose(blt_max_error(th, w, 50), np.sqrt((beta**2).sum())))
    True
    """
    th, wh = blt_inverse(theta, omega)
    a = -wh / (1.0 - th)
    a0 = 1.0 - a.sum()
    e2 = n * a0 * a0 + 2.0 * a0 * float(a @ _geo(th, n)) + float(a @ _geo(np.outer(th, th), n) @ a)
    return math.sqrt(max(e2, 0.0))


def counting_lower_bound(n: int) -> float:
    """‖A_n‖_tr / n, a lower bound on ‖B‖_{2→∞}·‖C‖_{1→2} over *all* factorisations A_n = BC.

    γ₂(A) ≥ ‖A‖_tr/√(mn) for an m×n matrix (the trace-norm bound on the factorisation norm
    γ₂; Linial, Mendelson, Schechtman & Shraibman 2007); the singular values of the n×n
    lower-triangular all-ones matrix are 1/(2 sin((2k − 1)π/(4n + 2))), k = 1 … n. It grows
    like ln(n)/π (Matoušek, Nikolov & Talwar 2020; Henzinger, Upadhyay & Upadhyay 2023).

    >>> A = np.tril(np.ones((6, 6))); bool(np.isclose(counting_lower_bound(6),
    ...     np.linalg.svd(A, compute_uv=False).sum() / 6))
    True
    """
    k = np.arange(1, n + 1, dtype=np.float64)
    return float((0.5 / np.sin((2 * k - 1) * math.pi / (4 * n + 2))).sum() / n)


def _unpack(
    x: npt.NDArray[np.float64], b: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    return 1.0 / (1.0 + np.exp(-x[:b])), np.exp(x[b:])


def _log_loss(x: npt.NDArray[np.float64], b: int, n: int) -> float:
    th, w = _unpack(x, b)
    if np.any(np.diff(np.sort(th)) <= 0) or np.any(th >= 1.0):
        return 1e9
    try:
        val = 2 * math.log(blt_sensitivity(th, w)) + 2 * math.log(blt_max_error(th, w, n))
    except (ValueError, np.linalg.LinAlgError):
        return 1e9
    return val if math.isfinite(val) else 1e9


def fit_blt(
    n: int, buffers: int = BLT_BUFFERS, start: tuple[npt.ArrayLike, npt.ArrayLike] | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Fit BLT(θ, ω) minimising ‖C‖_{1→2}(all horizons) · max_{t<n}‖B_{t,:}‖ (design horizon n).

    Deterministic: a Nelder–Mead then L-BFGS polish from ``start`` (default: 1 − θ_i
    log-spaced on [1/n, 1/2]). Any (θ, ω) gives a valid mechanism — the calibration computes
    the sensitivity of the parameters actually used — so the fit only affects utility.

    >>> th, w = fit_blt(64, buffers=2)
    >>> ratio = blt_sensitivity(th, w) * blt_max_error(th, w, 64) / counting_lower_bound(64)
    >>> 1.0 <= ratio < 1.25
    True
    """
    b = buffers
    if start is None:
        one_minus = np.geomspace(1.0 / n, 0.5, b)
        th0, w0 = 1.0 - one_minus, 0.5 * np.sqrt(one_minus)
    else:
        th0, w0 = np.asarray(start[0], dtype=np.float64), np.asarray(start[1], dtype=np.float64)
    x = np.concatenate([np.log(th0 / (1.0 - th0)), np.log(w0)])
    for method, opts in (
        ("Nelder-Mead", {"maxiter": 4000 * b, "maxfev": 4000 * b, "xatol": 1e-9, "fatol": 1e-13}),
        ("L-BFGS-B", {"maxiter": 300}),
    ):
        res = optimize.minimize(_log_loss, x, args=(b, n), method=method, options=opts)
        if res.fun <= _log_loss(x, b, n):
            x = res.x
    th, w = _unpack(x, b)
    order = np.argsort(th)
    return th[order], w[order]


@functools.lru_cache(maxsize=64)
def blt_parameters(n_steps: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The product's BLT(θ, ω) for a design horizon of ``n_steps`` releases (5 buffers).

    Parameters fitted offline by :func:`fit_blt` for the horizons 2^k, k = 4, 6, …, 28
    (``python bench/bench_blt.py --refit`` regenerates them; a test checks that a fresh fit at
    small k is not better); ``n_steps`` uses the tabulated entry with the smallest
    ‖C‖_{1→2}(∞)·max_{t<n_steps}‖B_{t,:}‖ (closed forms, a few microseconds each). Public
    constants: a function of the horizon only. The sensitivity of whatever parameters are used
    is computed, never assumed (any BLT with 0 < θ < 1 is a valid mechanism; the fit only
    affects utility).

    >>> th, w = blt_parameters(10_000); len(th), bool(0 < min(th) and max(th) < 1)
    (5, True)
    """
    if n_steps < 1:
        raise ValueError("n_steps must be >= 1")
    th, w = min(
        _TABLE.values(),
        key=lambda p: blt_sensitivity(*p) * blt_max_error(p[0], p[1], int(n_steps)),
    )
    return tuple(th), tuple(w)


class BLTAggregator(StepwisePrefix):
    """Continual release of packed Gram prefix sums with a BLT factorisation (b buffers).

    Parameters
    ----------
    p
        Row length d + 1.
    n_steps
        Horizon T in releases (steps); the aggregator freezes after T steps.
    theta, omega
        BLT(θ, ω) parameters of C (public; see :func:`blt_parameters`).
    sampler
        :class:`~.matrix_noise.SymmetricGaussianNoise` (Gaussian only).
    noise
        Noise source; step j draws from the stream (label…, j), exactly once.
    label, row_norm_sq
        As for :class:`~.factorization.SqrtToeplitzAggregator`: the noise-stream label prefix,
        L̃² (enforced by the caller's clipping).

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.privacy.matrix_noise import SymmetricGaussianNoise
    >>> th, w = [0.9, 0.5], [0.1, 0.2]
    >>> agg = BLTAggregator(p=2, n_steps=8, theta=th, omega=w,
    ...                     sampler=SymmetricGaussianNoise(2, 1.0), noise=NoiseSource(seed=1),
    ...                     label=("b", "blt", 0))
    >>> R1 = agg.release(); _ = agg.insert_many(np.array([[1.0, 0.5]])); R2 = agg.release()
    >>> Z = agg.replay_noise()        # z_1, z_2 regenerated from the key (tests only)
    >>> ch = blt_coefficients(*blt_inverse(th, w), 2)   # N_2 = (A C⁻¹ z)_2
    >>> bool(np.allclose(R2 - agg.exact_sum(), (1 + ch[1]) * Z[0] + Z[1]))
    True
    >>> agg.nbytes < 8 * 3 * (2 + 3) * 3   # b buffers + N + M, independent of T
    True

    """

    def __init__(
        self,
        p: int,
        n_steps: int,
        theta: npt.ArrayLike,
        omega: npt.ArrayLike,
        sampler: SymmetricGaussianNoise,
        noise: NoiseSource,
        label: tuple[int | str, ...] = ("blt",),
        row_norm_sq: float = 2.0,
    ):
        self.p = p
        self.n_steps = n_steps
        self.theta = theta
        self.omega = omega
        self.sampler = sampler
        self.noise = noise
        self.label = tuple(label)
        self.row_norm_sq = row_norm_sq

    _th_hat: npt.NDArray[np.float64]
    _w_hat: npt.NDArray[np.float64]
    _S: npt.NDArray[np.float64]
    _enc: ExactToeplitzSteps

    def _state(self) -> Self:
        if not hasattr(self, "_M"):
            P = packing(self.p).size
            th_hat, w_hat = blt_inverse(self.theta, self.omega)
            self._th_hat = th_hat[:, None]
            self._w_hat = w_hat
            self._M = np.zeros(P, dtype=np.int64)
            self._s = 0
            self._pending = 0
            self._step = 0
            self._S = np.zeros((th_hat.size, P))  # buffers S_i = Σ_{j<t} θ̂_i^{t−1−j} z_j
            self._noise_sum = np.zeros(P)  # N_t = Σ_{j≤t} (C⁻¹z)_j
            self._draws = {"node": 0, "pad": 0}
        return self

    def _z(self, j: int) -> npt.NDArray[np.float64]:
        return self.sampler.sample(self.noise.generator(*self.label, j, track=False))

    def release(self) -> npt.NDArray[np.float64]:
        """R_t = exact prefix + N_t; a new step (one draw) only if rows arrived since the last."""
        self._state()
        if self._pending or self._step == 0:
            # issue-once by structure: z_{t} is drawn exactly when the persisted step counter
            # passes t, and folded into the buffers at once (never kept, never re-drawn)
            if self.secure:  # the released step γ·Y_t; the release is A·C⁻¹·(γY) alone
                g = self.noise.generator(*self.label, self._step + 1, track=False)
                z = self._secure_step(g)
            else:
                z = self._z(self._step + 1)
            self._draws["node"] += 1
            blt_noise_step(self._noise_sum, self._S, z, self._th_hat, self._w_hat)
            self._step += 1
            self._pending = 0
        return self._released()

    def _encoder(self) -> ExactToeplitzSteps:
        enc: ExactToeplitzSteps | None = getattr(self, "_enc", None)
        if enc is None:
            coeffs = blt_coefficients(self.theta, self.omega, self.n_steps)
            enc = self._enc = ExactToeplitzSteps(coeffs, self.sampler.grid_exponent(32))
        return enc

    def replay_noise(self) -> npt.NDArray[np.float64]:
        """z_1 … z_t regenerated from the key (SENSITIVE; tests and audits only)."""
        self._state()
        return np.array([self._z(j) for j in range(1, self._step + 1)])

    def state_dict(self) -> dict[str, Any]:
        return {
            **self._counters(),
            "S": self._S.copy(),
            "N": self._noise_sum.copy(),
            "draws": dict(self._draws),
        }

    def load_state_dict(self, state: dict[str, Any]) -> BLTAggregator:
        self._state()
        S = np.asarray(state["S"], dtype=np.float64)
        if S.shape != self._S.shape:
            raise ValueError("BLT buffer shape does not match the configured parameters")
        self._load_counters(state)
        self._S = S.copy()
        self._noise_sum = np.asarray(state["N"], dtype=np.float64).copy()
        return self

    @property
    def nbytes(self) -> int:
        self._state()
        return int(self._M.nbytes + self._S.nbytes + self._noise_sum.nbytes)
