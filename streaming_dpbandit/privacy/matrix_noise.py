"""Node-noise laws of the continual-release Gram aggregators (DP-LinUCB spec §3).

Both samplers return *packed* upper triangles (see :mod:`.symmetric`) and can return the sum of
``terms`` i.i.d. node noises in one draw, which is how the padded tree draws all its pads of one
release at once (spec §5: the pads are data-independent, only their law matters):

* :class:`SymmetricGaussianNoise` — Z = (Z′ + Z′ᵀ)/√2 with Z′ i.i.d. N(0, σ²): off-diagonal
  entries N(0, σ²), diagonal entries N(0, 2σ²) (spec §3.1, the paper's footnote 4). The sum of
  j i.i.d. copies is the same law with σ√j.
* :class:`WishartNoise` — W_p(s·I, k) by the Bartlett decomposition, O(p³) per draw whatever k
  (spec §3.3). The sum of j i.i.d. copies is W_p(s·I, j·k).

``scale_multiplier`` exists for the privacy audits only (a deliberately under-noised variant);
it multiplies σ, respectively the Wishart scale s.

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from .noise import NoiseGenerator
from .secure_noise import SecureGenerator
from .symmetric import packing

__all__ = ["SymmetricGaussianNoise", "WishartNoise"]


@functools.lru_cache(maxsize=64)
def _tril(p: int) -> tuple[np.ndarray, np.ndarray]:
    return np.tril_indices(p, -1)


@functools.lru_cache(maxsize=64)
def _flat_indices(p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat (row-major) indices of the diagonal, the strict lower triangle and the packing."""
    r, c = _tril(p)
    pk = packing(p)
    return np.arange(p) * (p + 1), r * p + c, pk.rows * p + pk.cols


@functools.lru_cache(maxsize=256)
def _pair_plan(
    p: int, k: int, terms: int
) -> tuple[npt.NDArray[np.float64], np.ndarray, np.ndarray, np.ndarray]:
    """χ² degrees of freedom and flat indices of two stacked Bartlett factors (k, terms·k)."""
    diag, tril, packed = _flat_indices(p)
    ar = np.arange(p)
    dfs = np.concatenate([k - ar, terms * k - ar]).astype(np.float64)
    # draw order: both matrices' χ² diagonals in one call, then both sets of normals (not the
    # order of two separate sample() calls; a release's stream is only ever used this way)
    diag2 = np.concatenate([diag, diag + p * p])
    tril2 = np.concatenate([tril, tril + p * p])
    for v in (dfs, diag2, tril2):
        v.flags.writeable = False
    return dfs, diag2, tril2, packed


class SymmetricGaussianNoise:
    """Symmetrised Gaussian node noise, packed.

    Parameters
    ----------
    p
        Matrix size (d + 1).
    sigma
        σ_noise: the standard deviation of the off-diagonal entries.
    scale_multiplier
        Audit only: multiplies σ.

    Examples
    --------
    >>> import numpy as np
    >>> noise = SymmetricGaussianNoise(p=3, sigma=2.0)
    >>> v = noise.sample_many(np.random.default_rng(0), 200_000)
    >>> v.shape, np.round(v.std(axis=0) / 2.0, 1).tolist()
    ((200000, 6), [1.4, 1.0, 1.0, 1.4, 1.0, 1.4])
    >>> round(float(noise.sample_many(np.random.default_rng(1), 100_000, terms=4)[:, 1].std()), 1)
    4.0

    """

    def __init__(self, p: int, sigma: float, scale_multiplier: float = 1.0):
        self.p = p
        self.sigma = sigma
        self.scale_multiplier = scale_multiplier

    def _scales(self) -> npt.NDArray[np.float64]:
        scales: npt.NDArray[np.float64] | None = getattr(self, "_scale_vec", None)
        if scales is None:
            pk = packing(self.p)
            s = self.sigma * self.scale_multiplier
            scales = self._scale_vec = np.where(pk.is_diag, s * np.sqrt(2.0), s)
        return scales

    def sample(self, rng: NoiseGenerator, terms: int = 1) -> npt.NDArray[np.float64]:
        """One packed draw: the sum of ``terms`` i.i.d. node noises."""
        z = rng.standard_normal(packing(self.p).size)
        z *= self._scales()
        if terms != 1:
            z *= np.sqrt(terms)
        return z

    def sample_many(self, rng: NoiseGenerator, n: int, terms: int = 1) -> npt.NDArray[np.float64]:
        z = rng.standard_normal((n, packing(self.p).size))
        out: npt.NDArray[np.float64] = z * (self._scales() * np.sqrt(terms))
        return out

    def sample_pair(
        self, rng: NoiseGenerator, terms: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """One node noise and, independently, the sum of ``terms`` more, from one stream."""
        P = packing(self.p).size
        z = rng.standard_normal(2 * P)
        node, pad = z[:P], z[P:]
        node *= self._scales()
        pad *= self._scales()
        if terms != 1:
            pad *= np.sqrt(terms)
        return node, pad

    # -- the secure backend (docs/privacy/secure-noise.md, "Gram tree") ----------------------
    def grid_exponent(self, data_exponent: int) -> int:
        """g of the node grid γ = 2^−g: γ divides the data's unit 2^−``data_exponent`` and
        σ/γ ≥ 2³⁰ (σ the smallest entry scale, the off-diagonal one)."""
        s = self.sigma * self.scale_multiplier
        return max(data_exponent, 30 - (math.frexp(s)[1] - 1))

    def _variances_units(self, g: int, terms: int) -> list[Fraction]:
        cache: dict[tuple[int, int, float, float], list[Fraction]]
        cache = self.__dict__.setdefault("_var_cache", {})
        key = (g, terms, self.sigma, self.scale_multiplier)
        if key not in cache:
            s2 = Fraction(self.sigma * self.scale_multiplier) ** 2 * Fraction(4) ** g * terms
            cache[key] = [2 * s2 if diag else s2 for diag in packing(self.p).is_diag]
        return cache[key]

    def sample_units(self, rng: SecureGenerator, g: int, terms: int = 1) -> npt.NDArray[np.int64]:
        """Secure: one packed node noise as int64 units of γ = 2^−g, entry i exactly
        N_ℤ(0, σ_i²/γ²) (σ_i = σ off the diagonal, σ√2 on it; ``terms``·σ_i² for pads)."""
        return rng.normal_units(self._variances_units(g, terms))

    def sample_pair_units(
        self, rng: SecureGenerator, g: int, terms: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Secure: a node noise and the pad (``terms``·σ² per entry), from one stream."""
        return self.sample_units(rng, g), self.sample_units(rng, g, terms)

    def law(self) -> dict[str, Any]:
        return {"law": "symmetrised gaussian", "sigma": float(self.sigma)}


class WishartNoise:
    """Wishart node noise W_p(scale·I, dof), packed, by the Bartlett decomposition.

    Let A be lower triangular with A_ii = √χ²(k − i) (i = 0…p−1) and A_ij ~ N(0, 1) for i > j;
    then scale·A·Aᵀ ~ W_p(scale·I, k). Never forms the k Gaussian vectors (spec §3.3).

    Parameters
    ----------
    p
        Matrix size (d + 1).
    scale
        Scale s of the scale matrix s·I (L̃² for DP-LinUCB).
    dof
        Degrees of freedom k (≥ p).
    scale_multiplier
        Audit only: multiplies the scale.

    Examples
    --------
    >>> import numpy as np
    >>> noise = WishartNoise(p=3, scale=2.0, dof=50)
    >>> v = noise.sample_many(np.random.default_rng(0), 20_000)
    >>> np.round(v.mean(axis=0) / 100.0, 2).tolist()  # E[W] = k·s·I
    [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    >>> W = noise.sample(np.random.default_rng(1), terms=3)  # W_3(2·I, 150)
    >>> bool(np.all(np.linalg.eigvalsh(noise.unpack(W)) > 0))
    True

    """

    def __init__(self, p: int, scale: float, dof: int, scale_multiplier: float = 1.0):
        self.p = p
        self.scale = scale
        self.dof = dof
        self.scale_multiplier = scale_multiplier

    def unpack(self, v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return packing(self.p).unpack(v)

    def _bartlett(self, rng: NoiseGenerator, n: int, dof: int) -> npt.NDArray[np.float64]:
        p = self.p
        if dof < p:
            raise ValueError(f"Wishart degrees of freedom {dof} < dimension {p}")
        chi = rng.chisquare(dof - np.arange(p), size=(n, p))
        low_r, low_c = _tril(p)
        A = np.zeros((n, p, p))
        A[:, np.arange(p), np.arange(p)] = np.sqrt(chi)
        A[:, low_r, low_c] = rng.standard_normal((n, low_r.size))
        W = A @ A.transpose(0, 2, 1)
        return packing(p).pack(W) * (self.scale * self.scale_multiplier)

    def sample(self, rng: NoiseGenerator, terms: int = 1) -> npt.NDArray[np.float64]:
        """One packed draw of W_p(scale·I, terms·dof): the sum of ``terms`` node noises."""
        p = self.p
        dof = int(self.dof) * terms
        if dof < p:
            raise ValueError(f"Wishart degrees of freedom {dof} < dimension {p}")
        diag, tril, packed = _flat_indices(p)
        chi = rng.chisquare(dof - np.arange(p))  # same draw order as _bartlett
        A: npt.NDArray[np.float64] = np.zeros(p * p)
        A[diag] = np.sqrt(chi)
        A[tril] = rng.standard_normal(tril.size)
        A = A.reshape(p, p)
        W = A @ A.T
        out: npt.NDArray[np.float64] = W.ravel()[packed] * (self.scale * self.scale_multiplier)
        return out

    def sample_many(self, rng: NoiseGenerator, n: int, terms: int = 1) -> npt.NDArray[np.float64]:
        return self._bartlett(rng, n, int(self.dof) * terms)

    def sample_pair(
        self, rng: NoiseGenerator, terms: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """W_p(s·I, k) and, independently, W_p(s·I, terms·k), from one stream (one χ² call)."""
        p, k = self.p, int(self.dof)
        if k < p:
            raise ValueError(f"Wishart degrees of freedom {k} < dimension {p}")
        dfs, diag2, tril2, packed = _pair_plan(p, k, terms)
        A: npt.NDArray[np.float64] = np.zeros(2 * p * p)
        A[diag2] = np.sqrt(rng.chisquare(dfs))
        A[tril2] = rng.standard_normal(tril2.size)
        A = A.reshape(2, p, p)
        scale = self.scale * self.scale_multiplier
        a, b = A[0], A[1]
        node = (a @ a.T).ravel()[packed]
        pad = (b @ b.T).ravel()[packed]
        node *= scale
        pad *= scale
        return node, pad

    def law(self) -> dict[str, Any]:
        return {"law": "wishart", "scale": float(self.scale), "dof": int(self.dof)}
