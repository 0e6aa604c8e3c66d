"""The episode schedule: doubling episodes from a configurable first length.

FLIPHAT spec §3.4 and §14.3. With first length N₀ (``first_len``):

* episode 0 is rounds 1 … N₀;
* episode k ≥ 1 starts at t_k = N₀·(2^k − 1) + 1 and lasts N₀·2^k rounds.

N₀ = 1 is the paper's schedule (episode ℓ = rounds 2^ℓ … 2^{ℓ+1} − 1). The fit released at the
start of episode k uses the rows of episode k − 1, with the *public* nominal size
``fit_size(k) = length(k − 1)``. Episode boundaries depend on round counts only, never on data.
An optional cap ``max_len`` (off by default; a documented deviation for non-stationary streams,
spec §11) stops the doubling once episodes reach that length. All arithmetic is integer.

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np

from ..utils.arrays import AnyArray, ArrayLike, IntArray

__all__ = ["DoublingSchedule"]


class DoublingSchedule:
    """Doubling episodes of public, data-independent lengths.

    Parameters
    ----------
    first_len
        N₀, the length of episode 0 (≥ 1).
    max_len
        Optional cap on an episode's length (``None``: no cap).

    Examples
    --------
    >>> sch = DoublingSchedule()
    >>> [sch.start(k) for k in range(5)], [sch.length(k) for k in range(5)]
    ([1, 2, 4, 8, 16], [1, 2, 4, 8, 16])
    >>> sch.episode_of(1), sch.episode_of(7), sch.episode_of(8), sch.fit_size(4)
    (0, 2, 3, 8)
    >>> sch = DoublingSchedule(first_len=100)
    >>> sch.start(1), sch.length(1), sch.episode_of(100), sch.episode_of(101), sch.fit_size(1)
    (101, 200, 0, 1, 100)
    >>> DoublingSchedule(first_len=1, max_len=4).start(5)
    16

    """

    def __init__(self, first_len: int = 1, max_len: int | None = None):
        self.first_len = first_len
        self.max_len = max_len

    def _check(self) -> None:
        if int(self.first_len) != self.first_len or self.first_len < 1:
            raise ValueError("first_len must be an integer >= 1")
        if self.max_len is not None and self.max_len < self.first_len:
            raise ValueError("max_len must be >= first_len")

    def _cap_episode(self) -> int | None:
        """First episode whose uncapped length would reach ``max_len``."""
        if self.max_len is None:
            return None
        k = 0
        while self.first_len << k < self.max_len:
            k += 1
        return k

    def length(self, k: int) -> int:
        self._check()
        if k < 0:
            raise ValueError("episode index must be >= 0")
        n = self.first_len << k
        return n if self.max_len is None else min(n, self.max_len)

    def start(self, k: int) -> int:
        """First round (1-based) of episode ``k``."""
        self._check()
        kc = self._cap_episode()
        if kc is None or k <= kc:
            return self.first_len * ((1 << k) - 1) + 1
        assert self.max_len is not None  # kc is None without a cap
        return self.first_len * ((1 << kc) - 1) + 1 + (k - kc) * self.max_len

    def end(self, k: int) -> int:
        """Last round (inclusive) of episode ``k``."""
        return self.start(k + 1) - 1

    def fit_size(self, k: int) -> int:
        """Public nominal size n of the fit released at the start of episode ``k`` ≥ 1."""
        if k < 1:
            raise ValueError("the first fit is released at the start of episode 1")
        return self.length(k - 1)

    def _episode_of_one(self, t: int) -> int:
        """:meth:`episode_of` of one round, in integers (the same value)."""
        if t < 1:
            raise ValueError("rounds are 1-based")
        k = ((t - 1) // self.first_len + 1).bit_length() - 1  # floor(log2(q))
        kc = self._cap_episode()
        if kc is not None:
            assert self.max_len is not None  # kc is None without a cap
            tc = self.start(kc)
            if t >= tc:
                k = kc + (t - tc) // self.max_len
        return k

    @overload
    def episode_of(self, t: int | np.integer[Any]) -> int: ...
    @overload
    def episode_of(self, t: AnyArray | Sequence[int]) -> IntArray: ...
    @overload
    def episode_of(self, t: ArrayLike) -> int | IntArray: ...
    def episode_of(self, t: ArrayLike) -> int | IntArray:
        """Episode of round ``t`` (1-based); accepts an int or an integer array."""
        self._check()
        scalar = np.isscalar(t)
        tt = np.asarray(t, dtype=np.int64)
        if tt.size == 1:  # one round (a served request): integer arithmetic, no array passes
            k1 = self._episode_of_one(int(tt.reshape(-1)[0]))
            return k1 if scalar else np.full(tt.shape, k1, dtype=np.int64)
        if tt.size and tt.min() < 1:
            raise ValueError("rounds are 1-based")
        q = (tt - 1) // self.first_len + 1
        # floor(log2(q)) exactly: frexp gives q = m·2^e with m in [0.5, 1).
        k = np.frexp(q.astype(np.float64))[1].astype(np.int64) - 1
        kc = self._cap_episode()
        if kc is not None:
            assert self.max_len is not None  # kc is None without a cap
            tc = self.start(kc)
            k = np.where(tt >= tc, kc + (tt - tc) // self.max_len, k)
        return int(k) if scalar else k
