"""The FLIPHAT paper's simulation environment, exactly as FLIPHAT spec §13.1 describes.

For every round and arm independently x_i(t) ~ N(0, Σ) with Σ_jk = ρ^|j−k| (ρ = 0.1, unit
variances); rewards r_i(t) = x_i(t)ᵀβ* + ϵ_i(t) with ϵ i.i.d. N(0, σ²) (or U(−σ, σ) for the
paper's bounded-noise variant, App. F.1). β* is supported on the first s* coordinates; for
s* ≤ 5 its values are the paper's fixed draw (0.7484285, 0.6370087, 0.6344534, 0.6964115,
0.7199168); further coordinates (s* > 5) are drawn U(0.5, 1) with Rademacher signs from the
fixed seed ``EXTRA_BETA_SEED`` so that every run of a configuration sees the same β*.

Contexts are drawn in O(d) per arm by the AR(1) recursion x_1 = z_1,
x_j = ρ·x_{j−1} + √(1−ρ²)·z_j, which equals L·z for the lower Cholesky factor L of Σ exactly
(same values, not only the same law; checked in the tests).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .base import Environment

__all__ = ["PAPER_BETA", "FliphatPaperEnv", "expected_max_normal"]

PAPER_BETA = (0.7484285, 0.6370087, 0.6344534, 0.6964115, 0.7199168)
EXTRA_BETA_SEED = 20240501


def expected_max_normal(k: int) -> float:
    """E[max of k i.i.d. N(0, 1)]; 3/(2√π) for k = 3.

    >>> round(expected_max_normal(3), 6) == round(3 / (2 * math.sqrt(math.pi)), 6)
    True
    """
    if k == 1:
        return 0.0
    from scipy import integrate, special

    f = lambda x: x * k * special.ndtr(x) ** (k - 1) * math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    return integrate.quad(f, -40, 40, limit=200)[0]


#: Batches of fewer rows are filtered by ``scipy.signal.lfilter`` (faster on a few rows);
#: larger ones by the column recurrence of :func:`ar_filter` (as fast, and no scipy.signal import:
#: it imports scipy.stats, ≈ 1 s, more than a short simulation's own work).
LFILTER_MAX_ROWS = 512


def ar_filter(z: np.ndarray, rho: float, out: np.ndarray | None = None) -> np.ndarray:
    """AR(ρ) rows from i.i.d. N(0, 1) rows ``z`` (overwritten): x_1 = z_1, x_j = c z_j + ρ x_{j−1}.

    c = √(1 − ρ²), so that every coordinate has unit variance. Computes
    ``scipy.signal.lfilter([c], [1, −ρ], z, axis=-1)`` with z_1 divided by c first, with the same
    floating-point operations in the same order: both paths give bit-identical results. With
    ``out`` (a (d, rows) array or view), the rows' transpose is written there (column recurrence
    at any number of rows) and ``out.T`` returned.

    >>> rng = np.random.default_rng(0)
    >>> z = rng.standard_normal((600, 4))
    >>> x = ar_filter(z.copy(), 0.5)
    >>> bool(np.allclose(x[:, 1], np.sqrt(0.75) * z[:, 1] + 0.5 * z[:, 0]))
    True
    """
    c = math.sqrt(1.0 - rho**2)
    z[:, 0] /= c  # so that x_1 = z_1 exactly
    if z.shape[0] < LFILTER_MAX_ROWS and out is None:
        from scipy.signal import lfilter

        return lfilter([c], [1.0, -rho], z, axis=-1)
    x = _transpose(z, out)  # (d, rows): one coordinate of every row per line
    x *= c
    tmp = np.empty(x.shape[1])
    lines = list(x)  # the views once, not two indexings per coordinate
    for prev, line in itertools.pairwise(lines):
        np.multiply(prev, rho, out=tmp)
        np.add(line, tmp, out=line)  # c z_j + ρ x_{j−1}
    return x.T


#: Rows per tile of :func:`_transpose` (a tile of 400 coordinates stays in the L2 cache).
TRANSPOSE_TILE = 256
#: Rows per block of :func:`ar_draw`: a block's normals are drawn, transposed and filtered before
#: the next block is drawn (3,072 rows of d = 400, 9.8 MB: a chunk of 2,048 rounds with K = 3 in
#: two blocks; 10% faster than one block of 6,144 rows on the benchmark machine, 25 alternated
#: runs, and than blocks of 1,024 rows).
DRAW_ROWS = 3072


def _transpose(z: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A copy of ``z.T`` (into ``out`` if given, else a new C-contiguous array), copied in tiles
    of rows: the same values as ``np.ascontiguousarray(z.T)``, about 3× faster on a (6144, 400)
    chunk, whose one-shot transposition reads ``z`` column by column, a cache line per value.

    >>> z = np.arange(12.0).reshape(6, 2)
    >>> bool(np.array_equal(_transpose(z), z.T))
    True
    """
    rows = z.shape[0]
    if out is None:
        out = np.empty((z.shape[1], rows))
    for r0 in range(0, rows, TRANSPOSE_TILE):
        out[:, r0 : r0 + TRANSPOSE_TILE] = z[r0 : r0 + TRANSPOSE_TILE].T
    return out


def ar_draw(rng: np.random.Generator, rows: int, d: int, rho: float) -> np.ndarray:
    """``rows`` AR(ρ) rows of dimension d: exactly ``ar_filter(rng.standard_normal((rows, d)),
    rho)`` (the same normals from ``rng``, in the same order, and the same values), drawn and
    filtered in blocks of about :data:`DRAW_ROWS` rows that stay in the cache, instead of three
    passes over the whole (rows, d) array in memory. Returns a (rows, d) array (F-ordered from
    :data:`LFILTER_MAX_ROWS` rows on).

    >>> a = ar_draw(np.random.default_rng(1), 7000, 7, 0.1)  # three blocks
    >>> b = ar_filter(np.random.default_rng(1).standard_normal((7000, 7)), 0.1)
    >>> bool(np.array_equal(a, b))
    True
    """
    if rows < LFILTER_MAX_ROWS:  # one block, filtered by scipy's lfilter (same values)
        return ar_filter(rng.standard_normal((rows, d)), rho)
    x = np.empty((d, rows))
    blocks = max(1, -(-rows // DRAW_ROWS))  # of equal sizes, up to a row
    for i in range(blocks):
        r0, r1 = rows * i // blocks, rows * (i + 1) // blocks
        ar_filter(rng.standard_normal((r1 - r0, d)), rho, out=x[:, r0:r1])
    return x.T


class FliphatPaperEnv(Environment):
    """Sparse linear contextual bandit with AR(ρ) Gaussian contexts (FLIPHAT §13.1).

    Parameters
    ----------
    d
        Context dimension (paper: 400).
    s_star
        True sparsity (paper: 5).
    K
        Number of arms (paper: 3).
    sigma
        Noise level: standard deviation (Gaussian) or half-width (uniform). Paper: 0.1.
    noise
        ``"gaussian"`` (default) or ``"uniform"``.
    rho
        AR correlation of the context coordinates (paper: 0.1).

    Examples
    --------
    >>> import numpy as np
    >>> env = FliphatPaperEnv()
    >>> X = env.contexts(np.random.default_rng(0), 4)
    >>> X.shape, env.mean_rewards(X).shape
    ((4, 3, 400), (4, 3))
    >>> round(float(np.abs(env.beta).sum()), 6), round(env.random_regret_per_round(), 4)
    (3.436219, 1.4075)

    """

    name = "fliphat-paper"

    def __init__(
        self,
        d: int = 400,
        s_star: int = 5,
        K: int = 3,
        sigma: float = 0.1,
        noise: str = "gaussian",
        rho: float = 0.1,
    ):
        self.d = d
        self.s_star = s_star
        self.K = K
        self.sigma = sigma
        self.noise = noise
        self.rho = rho
        self._validate()

    def _validate(self) -> None:
        for name in ("d", "s_star", "K"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"{name} must be an integer, got {v!r}")
        for name in ("sigma", "rho"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)):
                raise ValueError(f"{name} must be a number, got {v!r}")
        if not (1 <= self.s_star <= self.d):
            raise ValueError("need 1 <= s_star <= d")
        if self.K < 2:
            raise ValueError("need at least K = 2 arms")
        if self.noise not in ("gaussian", "uniform"):
            raise ValueError("noise must be 'gaussian' or 'uniform'")
        if not (0 <= self.rho < 1) or self.sigma < 0:
            raise ValueError("need 0 <= rho < 1 and sigma >= 0")

    @property
    def beta(self) -> np.ndarray:
        beta = np.zeros(self.d)
        k = min(self.s_star, len(PAPER_BETA))
        beta[:k] = PAPER_BETA[:k]
        extra = self.s_star - k
        if extra > 0:
            rng = np.random.default_rng(EXTRA_BETA_SEED)
            mags = rng.uniform(0.5, 1.0, size=extra)
            signs = rng.choice([-1.0, 1.0], size=extra)
            beta[k : self.s_star] = mags * signs
        return beta

    @property
    def b_max(self) -> float:
        """‖β*‖₁ (the experiments' oracle value of b_max and C)."""
        return float(np.abs(self.beta).sum())

    def contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        rows = n * self.K
        if self.rho == 0:
            return rng.standard_normal((rows, self.d)).reshape(n, self.K, self.d)
        return ar_draw(rng, rows, self.d, self.rho).reshape(n, self.K, self.d)

    def mean_rewards(self, X: np.ndarray) -> np.ndarray:
        beta = self.beta
        nz = np.nonzero(beta)[0]
        return X[..., nz] @ beta[nz]

    def reward_noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.noise == "gaussian":
            return rng.normal(0.0, self.sigma, size=(n, self.K))
        return rng.uniform(-self.sigma, self.sigma, size=(n, self.K))

    def signal_variance(self) -> float:
        """β*ᵀΣβ* (2.766119 for the paper's setting)."""
        beta = self.beta
        nz = np.nonzero(beta)[0]
        sub = self.rho ** np.abs(np.subtract.outer(nz, nz))
        return float(beta[nz] @ sub @ beta[nz])

    def random_regret_per_round(self) -> float:
        """E[max_i x_iᵀβ*] − E[x_aᵀβ*] = E[max of K std normals]·√(β*ᵀΣβ*)."""
        return expected_max_normal(self.K) * math.sqrt(self.signal_variance())

    def describe(self) -> dict:
        return {
            "name": self.name,
            "d": self.d,
            "s_star": self.s_star,
            "K": self.K,
            "sigma": self.sigma,
            "noise": self.noise,
            "rho": self.rho,
            "b_max": self.b_max,
        }
