"""DPTS-MAT: differentially private Thompson sampling for matroid bandits (thesis Alg. 5; §6.2).

For decision t with the released batch statistics (T_e, w̃_e):

    θ_e(t) = +∞                                                      if T_e = 0
    θ_e(t) ~ Normal(mean = w̃_e + 3·ln(K·t)/(ε0·T_e), variance = 1/T_e)   otherwise

then the matroid greedy on θ (never-played items first). The variance is 1/T_e; there is no
√(ln t / T) term, no prior pseudo-count and no clipping of θ. A fresh sample is drawn for every
item at every decision, from a non-private key and the round (safe to log).

That is ``exploration="thesis"``. The default, ``exploration="posterior"``, samples instead

    θ_e(t) ~ Normal(mean = clip(m̂_e, 0, 1), variance = v̂_e)

with m̂_e the precision-weighted pool of every released batch mean of item e and v̂_e its
variance bound (sampling variance ≤ 1/4 per reward plus the Laplace variance; see
:class:`~streaming_dpbandit.estimators.batch_means.DoublingBatchMeans`): the noise the thesis
covers with an additive bonus 3·ln(K·t)/(ε0·T_e) enters the sample's variance instead
(docs/privacy/dp-matroid.md, "Posterior exploration").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..utils.arrays import FloatArray, IntArray
from .matroid_base import RoundNormals, _key
from .matroid_private import PrivateMatroidPolicy
from .registry import register

__all__ = ["DPTSMAT"]

_SCRATCH_MAX = 1 << 17  # entries (1 MiB of float64)


@register
class DPTSMAT(PrivateMatroidPolicy):
    """DPTS-MAT (see :class:`~.matroid_private.PrivateMatroidPolicy` for every parameter).

    Examples
    --------
    >>> import numpy as np
    >>> pol = DPTSMAT({"type": "uniform", "n_items": 20, "k": 4}, epsilon=5.0, seed=3)
    >>> means = np.r_[np.full(16, 0.1), np.full(4, 0.9)]
    >>> rng, returns = np.random.default_rng(1), []
    >>> for _ in range(3000):
    ...     if pol.refit_due():
    ...         _ = pol.refit()
    ...     dec = pol.decide_slates(1)
    ...     w = (rng.random((1, 20)) < means).astype(float)
    ...     pol.learn(dec.slates, np.take_along_axis(w, dec.slates, 1), dec.rounds)
    ...     returns.append(means[dec.slates[0]].sum())
    >>> bool(np.mean(returns[-500:]) > 2.5)   # optimum 3.6, uniformly random slates 1.04
    True

    """

    name = "dpts-mat"
    _fresh_key_order = True

    def _init_stats(self) -> None:
        super()._init_stats()
        self._ts_key = _key(self.seed, 0x75)
        self._normals = RoundNormals(self._ts_key, self.L)

    def _keys(self, rounds: IntArray) -> FloatArray:
        B = rounds.size
        keys = np.empty((B, self.L))
        # standard deviation 1/√T, or the pool's √v̂ (0 for never-played items: base +∞)
        self._normals.fill(int(rounds[0]), keys, scale=self._a)
        keys += self._base
        if self.exploration == "posterior":
            return keys
        bonus = self._scratch(B)
        np.multiply.outer(self._bonus_log(rounds), self._b, out=bonus)
        keys += bonus
        return keys

    def _scratch(self, B: int) -> FloatArray:
        """A reused (B, L) work buffer while it is at most 1 MiB, else a fresh one.

        Reusing it saves the page faults of a fresh 200 KB array per batch (≈ 0.06 µs per
        decision at L = 100, batch 256); larger batches allocate, so memory stays bounded.
        """
        if B * self.L > _SCRATCH_MAX:
            return np.empty((B, self.L))
        buf = getattr(self, "_scratch_buf", None)
        if buf is None or buf.shape[0] < B:
            buf = self._scratch_buf = np.empty((B, self.L))
        return buf[:B]

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["ts_key"] = self._ts_key
        return out

    def load_state_dict(self, state: dict[str, Any]) -> DPTSMAT:
        super().load_state_dict(state)
        self._ts_key = int(state["ts_key"])
        self._normals = RoundNormals(self._ts_key, self.L)
        return self
