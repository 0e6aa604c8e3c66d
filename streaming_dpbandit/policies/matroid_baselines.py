"""Non-private matroid bandits for the reproduction: OMM and CTS-Gaussian (spec §6.6).

The thesis gives no formulas; the spec fixes them:

* **OMM** (Kveton et al. 2014): UCB1 on all data, ŵ_e + sqrt(2·ln t / N_e), +∞ if N_e = 0.
* **CTS-Gaussian**: θ_e ~ N(S_e/(N_e + 1), 1/(N_e + 1)), S_e the cumulative reward sum.

Both use cumulative statistics and the same greedy. They give no privacy guarantee and are not
wired into the service (no service configuration exists for them): simulation only.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..privacy.ledger import ReleaseRecord
from ..utils.arrays import FloatArray, IntArray
from .matroid_base import MatroidPolicy, RoundNormals, _key
from .registry import register

__all__ = ["OMM", "CTSGaussian"]


class _CumulativeMatroidPolicy(MatroidPolicy):
    def _init_stats(self) -> None:
        self._N = np.zeros(self.L, dtype=np.int64)
        self._S = np.zeros(self.L, dtype=np.float64)
        self._fresh = False

    def _observe(self, items: IntArray, rewards: FloatArray, rounds: IntArray) -> None:
        if items.min() < 0 or items.max() >= self.L:
            raise ValueError("slate item out of range")
        self._N += np.bincount(items, minlength=self.L)
        self._S += np.bincount(items, weights=rewards, minlength=self.L)
        self._fresh = True

    def _update(self) -> list[ReleaseRecord]:
        if self._fresh:
            self._version += 1
            self._fresh = False
            self._refresh()
        return []

    def state_dict(self) -> dict[str, Any]:
        out = self._base_state()
        out.update({"N": self._N.copy(), "S": self._S.copy(), "fresh": self._fresh})
        return out

    def load_state_dict(self, state: dict[str, Any]) -> _CumulativeMatroidPolicy:
        self._load_base(state)
        self._N = np.asarray(state["N"], dtype=np.int64).copy()
        self._S = np.asarray(state["S"], dtype=np.float64).copy()
        self._fresh = bool(state["fresh"])
        self._refresh()
        return self


@register
class OMM(_CumulativeMatroidPolicy):
    """Optimistic matroid maximisation: UCB1 indices and the greedy (non-private baseline).

    >>> pol = OMM({"type": "uniform", "n_items": 5, "k": 2}, seed=0)
    >>> dec = pol.decide_slates(1)
    >>> bool(np.isinf(dec.keys).all())       # nothing played yet: every index is +∞
    True
    """

    name = "omm"
    configurable = False  # a non-private baseline for simulations only: no service configuration

    def _refresh(self) -> None:
        N = self._N.astype(np.float64)
        played = N > 0
        inv = np.divide(1.0, N, out=np.zeros_like(N), where=played)
        self._base = np.where(played, self._S * inv, np.inf)
        self._a = np.sqrt(inv)

    def _keys(self, rounds: IntArray) -> FloatArray:
        keys = np.multiply.outer(np.sqrt(2.0 * np.log(rounds.astype(np.float64))), self._a)
        keys += self._base
        return keys


@register
class CTSGaussian(_CumulativeMatroidPolicy):
    """Combinatorial Thompson sampling with a Gaussian prior and likelihood (non-private).

    >>> pol = CTSGaussian({"type": "uniform", "n_items": 5, "k": 2}, seed=0)
    >>> bool(np.isfinite(pol.decide_slates(1).keys).all())   # N(0, 1) before any data
    True
    """

    name = "cts-gaussian"
    configurable = False  # a non-private baseline for simulations only: no service configuration
    _fresh_key_order = True

    def _init_stats(self) -> None:
        super()._init_stats()
        self._ts_key = _key(self.seed, 0x75)
        self._normals = RoundNormals(self._ts_key, self.L)

    def _refresh(self) -> None:
        n1 = self._N.astype(np.float64) + 1.0
        self._base = self._S / n1
        self._a = np.sqrt(1.0 / n1)

    def _keys(self, rounds: IntArray) -> FloatArray:
        keys = np.empty((rounds.size, self.L))
        self._normals.fill(int(rounds[0]), keys, scale=self._a)
        keys += self._base
        return keys

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["ts_key"] = self._ts_key
        return out

    def load_state_dict(self, state: dict[str, Any]) -> CTSGaussian:
        super().load_state_dict(state)
        self._ts_key = int(state["ts_key"])
        self._normals = RoundNormals(self._ts_key, self.L)
        return self
