"""Private doubling-batch means (DP-matroid spec §5; thesis Alg. 2 lines 9–14, Alg. 5 lines 10–14).

Every item keeps a private mean computed from its *latest completed batch* only. An item's
batches hold 1, 2, 4, 8, … of its observations, in the order the observations are finalized.
When a batch completes, its exact sum is sealed; the next release draws one Laplace variable Z
of scale 1/ε0 and publishes ``(sum + Z) / size`` once; the raw rewards are then gone. Every
reward enters exactly one release, so the privacy cost does not grow with the horizon.

State per item (spec §5.1), O(1) each:

=========  =====================================================  ===================
``s``      index of the last completed batch (−1 at first)       public (slates)
``T``      size of the last *released* batch (0, 1, 2, 4, …)      public (slates)
``mean``   w̃, the noisy mean of that batch (unclipped)           DP release
``buf``    exact sum of the open batch, in units of 2⁻³²          **raw data**
``cnt``    rewards in the open batch                             public (slates)
``pool``   Σ m_j/v_j and Σ 1/v_j over the released batches       DP release (pooled)
=========  =====================================================  ===================

Exact sums. Rewards must already be mapped into [0, 1] and clipped (the caller's job; spec
§5.3). They are rounded to the grid 2⁻³² and summed as int64, so a batch's sum does not depend
on the order of its rewards: a service that crashed and re-consumed its input reseals the same
integer and — with the labelled noise stream (bandit, "dp-matroid", item, batch) — recomputes a
lost release bit for bit instead of drawing a second noisy copy (spec §7.3). The int64 sum is
exact while a batch holds fewer than 2³¹ rewards.

Pooled estimate (post-processing). Every released batch mean of an item is also folded into a
precision-weighted pool: batch j of size n_j has a noisy mean whose variance is at most
v_j = 1/(4·n_j) + 2·b²/n_j² (a reward in [0, 1] has variance ≤ 1/4; Laplace(b) on the sum has
variance 2b²), so ``pooled_mean`` = Σ_j (m_j/v_j) / Σ_j (1/v_j) and ``pooled_var`` = 1/Σ_j (1/v_j).
The weights are public (sizes and the scale), the means are releases: the pool uses no raw data
and costs no privacy. It keeps the information of every batch, where ``mean`` keeps only the
last one (docs/privacy/dp-matroid.md, "Posterior exploration").

Nothing here logs, and :class:`Release` carries no raw sum and no noise value.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..privacy.noise import NoiseSource
from ..utils.arrays import ArrayLike, FloatArray, IntArray

__all__ = ["DoublingBatchMeans", "Release"]

UNIT_BITS = 32
UNIT = float(1 << UNIT_BITS)
MAX_BATCH_INDEX = 30  # batch 2^30 is the largest whose int64 sum of 2⁻³² units is exact


@dataclasses.dataclass(frozen=True)
class Release:
    """One released batch mean (public: item, batch index, size, closing round, noisy mean)."""

    item: int
    batch: int
    size: int
    closed_at: int
    noisy_mean: float


class DoublingBatchMeans:
    """Per-item doubling batches with one Laplace release per completed batch.

    Parameters
    ----------
    n_items
        L, the number of items.
    epsilon0
        Per-release budget ε0: the Laplace scale is 1/ε0 (a batch sum of rewards in [0, 1]
        has sensitivity 1 for a fixed batch membership).
    scale_multiplier
        Multiplies the Laplace scale. Must stay 1; exists for the privacy audit only.
    rounding_margin
        The secure backend's rounding term (``GRID_MARGIN``): a sum rounded to the grid
        γ ≤ b·2⁻³⁰ moves by at most 1 + γ between neighbours, so the scale is
        b = 1/(ε0 − margin) and (1 + γ)/b ≤ ε0. 0 on the fast backend.

    Examples
    --------
    >>> from streaming_dpbandit.privacy.noise import NoiseSource
    >>> est = DoublingBatchMeans(n_items=2, epsilon0=1.0)
    >>> for t in range(1, 4):                      # item 0 observed at rounds 1, 2, 3
    ...     _ = est.learn_many(np.array([0]), np.array([1.0]), np.array([t]))
    >>> [(r.item, r.batch, r.size, r.closed_at) for r in est.release(NoiseSource(0), "b")]
    [(0, 0, 1, 1), (0, 1, 2, 3)]
    >>> est.T.tolist(), est.cnt.tolist()          # T is the last batch's size, not the count
    ([2, 0], [0, 0])

    """

    def __init__(
        self,
        n_items: int,
        epsilon0: float,
        scale_multiplier: float = 1.0,
        rounding_margin: float = 0.0,
    ):
        self.n_items = n_items
        self.epsilon0 = epsilon0
        self.scale_multiplier = scale_multiplier
        self.rounding_margin = rounding_margin

    # -- state ---------------------------------------------------------------------------
    def _state(self) -> DoublingBatchMeans:
        if not hasattr(self, "s"):
            if not self.epsilon0 > self.rounding_margin >= 0:
                raise ValueError("epsilon0 must be > 0 (and above the secure grid's margin)")
            L = int(self.n_items)
            self.s = np.full(L, -1, dtype=np.int64)
            self.T = np.zeros(L, dtype=np.int64)
            self.mean = np.zeros(L, dtype=np.float64)
            self.buf = np.zeros(L, dtype=np.int64)
            self.cnt = np.zeros(L, dtype=np.int64)
            self.pool_num = np.zeros(L, dtype=np.float64)  # Σ_j m_j / v_j
            self.pool_den = np.zeros(L, dtype=np.float64)  # Σ_j 1 / v_j
            # sealed batches awaiting their release: item, batch, size, exact sum, closing round
            self._sealed: list[tuple[int, int, int, int, int]] = []
            self.observations = 0
            self.releases = 0
        return self

    @property
    def laplace_scale(self) -> float:
        """Scale b = multiplier/ε0 of each release's Laplace noise (on the sum); on the secure
        backend multiplier/(ε0 − margin)."""
        if not self.rounding_margin:
            return float(self.scale_multiplier) / float(self.epsilon0)
        return float(self.scale_multiplier) / (float(self.epsilon0) - self.rounding_margin)

    def batch_variance(self, size: int | IntArray) -> float | FloatArray:
        """Variance bound of one released batch mean of ``size`` rewards in [0, 1]:
        1/(4·size) (sampling) + 2·b²/size² (the Laplace noise on the sum).

        >>> DoublingBatchMeans(2, epsilon0=0.5).batch_variance(4)  # 1/16 + 2·4/16
        0.5625
        """
        b = self.laplace_scale
        n = np.asarray(size, dtype=np.float64)
        v = 0.25 / n + 2.0 * b * b / (n * n)
        return float(v) if v.ndim == 0 else v

    @property
    def pooled_mean(self) -> FloatArray:
        """Precision-weighted mean of every released batch mean of each item (0 if none)."""
        self._state()
        played = self.pool_den > 0
        return np.divide(
            self.pool_num, self.pool_den, out=np.zeros_like(self.pool_num), where=played
        )

    @property
    def pooled_var(self) -> FloatArray:
        """Variance bound of :attr:`pooled_mean`: 1/Σ_j (1/v_j) (+∞ for an unreleased item)."""
        self._state()
        played = self.pool_den > 0
        return np.divide(1.0, self.pool_den, out=np.full_like(self.pool_den, np.inf), where=played)

    @property
    def pending(self) -> int:
        """Completed batches whose release has not been drawn yet."""
        return len(self._state()._sealed)

    # -- intake --------------------------------------------------------------------------
    def learn_many(self, items: ArrayLike, rewards: ArrayLike, rounds: ArrayLike) -> int:
        """Observe rewards in [0, 1] of ``items`` served at ``rounds``, in the order given.

        Callers feed finalized decisions in increasing round (spec §7.2). Returns the number of
        batches that completed (sealed; released by :meth:`release`).
        """
        self._state()
        items = np.asarray(items, dtype=np.int64).reshape(-1)
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        rounds = np.asarray(rounds, dtype=np.int64).reshape(-1)
        if not items.size == rewards.size == rounds.size:
            raise ValueError("items, rewards and rounds must have the same length")
        if items.size == 0:
            return 0
        if not (rewards.min() >= 0.0 and rewards.max() <= 1.0):  # NaN fails too
            raise ValueError("rewards must be finite, mapped into [0, 1] and clipped")
        if items.min() < 0:
            raise ValueError("item index out of range")
        add = np.bincount(items, minlength=self.n_items)
        if add.size != self.n_items:
            raise ValueError("item index out of range")
        units = np.rint(rewards * UNIT)  # integers < 2³³: float64 sums below are exact
        self.observations += int(items.size)
        need = (np.int64(1) << (self.s + 1)) - self.cnt  # rewards until the open batch closes
        closing = np.flatnonzero(add >= need)
        if closing.size == 0:  # common case: no batch completes, exact vectorised sums
            self.buf += self._sums(items, units)
            self.cnt += add
            return 0
        quiet = add < need
        sel = quiet[items]
        self.buf += self._sums(items[sel], units[sel])
        self.cnt[quiet] += add[quiet]
        units = units.astype(np.int64)
        before = len(self._sealed)
        for e in closing.tolist():  # few items per update cross a batch boundary
            pos = np.flatnonzero(items == e)
            self._observe_item(e, units[pos].tolist(), rounds[pos].tolist())
        return len(self._sealed) - before

    def _sums(self, items: IntArray, units: FloatArray) -> IntArray:
        """Exact per-item sums of integer units (float64 bincount is exact below 2⁵³)."""
        if items.size < (1 << 20):
            return np.bincount(items, weights=units, minlength=self.n_items).astype(np.int64)
        out = np.zeros(self.n_items, dtype=np.int64)
        np.add.at(out, items, units.astype(np.int64))
        return out

    def _observe_item(self, e: int, units: list[int], rounds: list[int]) -> None:
        s, cnt, buf = int(self.s[e]), int(self.cnt[e]), int(self.buf[e])
        for u, t in zip(units, rounds):
            buf += u
            cnt += 1
            if cnt == 1 << (s + 1):  # batch sizes 1, 2, 4, 8, …
                s += 1
                if s > MAX_BATCH_INDEX:
                    raise OverflowError(f"item {e}: batch {s} exceeds the exact-sum range")
                self._sealed.append((e, s, cnt, buf, int(t)))
                buf, cnt = 0, 0  # forget: these rewards are never used again
        self.s[e], self.cnt[e], self.buf[e] = s, cnt, buf

    # -- releases ------------------------------------------------------------------------
    def release(self, noise: NoiseSource, *label_prefix: int | str) -> list[Release]:
        """Draw the Laplace noise of every sealed batch and publish its noisy mean.

        Releases come in canonical order (closing round, item, batch), whatever the batching.

        ``noise.generator(*label_prefix, item, batch, track=False)`` supplies each release's
        own stream (a :class:`~streaming_dpbandit.privacy.noise.NoiseSource`); the raw sum is
        dropped as soon as the mean is formed.
        """
        self._state()
        out = []
        scale = self.laplace_scale
        for e, s, size, total, t in sorted(self._sealed, key=lambda x: (x[4], x[0], x[1])):
            g = noise.generator(*label_prefix, e, s, track=False)
            # the sum as loc: a secure stream releases it on its grid (docs/privacy/secure-noise.md)
            m = float(g.laplace(total / UNIT, scale)) / size
            self.T[e] = size
            self.mean[e] = m
            w = 1.0 / self.batch_variance(size)
            self.pool_num[e] += m * w
            self.pool_den[e] += w
            out.append(Release(e, s, size, t, m))
        self.releases += len(out)
        self._sealed = []
        return out

    # -- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Complete state, raw sums included (snapshot-only; never log it)."""
        self._state()
        sealed = np.asarray(self._sealed, dtype=np.int64).reshape(-1, 5)
        return {
            "s": self.s.copy(),
            "T": self.T.copy(),
            "mean": self.mean.copy(),
            "buf": self.buf.copy(),
            "cnt": self.cnt.copy(),
            "pool_num": self.pool_num.copy(),
            "pool_den": self.pool_den.copy(),
            "sealed": sealed,
            "observations": self.observations,
            "releases": self.releases,
        }

    def load_state_dict(self, state: dict[str, Any]) -> DoublingBatchMeans:
        self._state()
        self.s = np.asarray(state["s"], dtype=np.int64).copy()
        self.T = np.asarray(state["T"], dtype=np.int64).copy()
        self.mean = np.asarray(state["mean"], dtype=np.float64).copy()
        self.buf = np.asarray(state["buf"], dtype=np.int64).copy()
        self.cnt = np.asarray(state["cnt"], dtype=np.int64).copy()
        if "pool_num" in state:
            self.pool_num = np.asarray(state["pool_num"], dtype=np.float64).copy()
            self.pool_den = np.asarray(state["pool_den"], dtype=np.float64).copy()
        else:  # a snapshot from before the pool: start it from the last released batch
            w = np.where(self.T > 0, 1.0 / self.batch_variance(np.maximum(self.T, 1)), 0.0)
            self.pool_num, self.pool_den = self.mean * w, w
        self._sealed = [
            (int(e), int(s), int(n), int(total), int(t))
            for e, s, n, total, t in np.asarray(state["sealed"]).tolist()
        ]
        self.observations = int(state["observations"])
        self.releases = int(state["releases"])
        return self
