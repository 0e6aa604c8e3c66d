"""What a policy learns from must match what its sensitivity assumes (issue 31 §3).

Every private policy's noise is calibrated for a privacy unit whose data reaches its statistics
in a bounded way: one row per round (FLIPHAT, DP-LinUCB, PrivateLASSO-R, the LDP-GLB simulation),
one reward per item per round (DPUCB-MAT, DPTS-MAT), at most k rows per user per window (the
user-level variants). The service's join de-duplicates, but the policy itself refuses a
violation — a round learned twice, a slate that repeats an item, a row beyond its user's bound —
by raising :class:`RowRefused`: nothing of the refused call is learned, and the exception names
the offending rows so that a caller can learn the others (the service dead-letters the refused
rows and keeps serving; ``stream/bandit.py``).

:class:`LearnedRounds` is the record of the rounds a policy has learned from: sorted disjoint
intervals of rounds, so a run learned in round order is one interval whatever its length; its
memory grows with the gaps (rounds never learned: expired or dropped rewards), 16 bytes each.
Checking a call costs O(B) array operations when its rounds come after every learned round (the
usual order) and O(B log m) otherwise (m intervals).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
ArrayLike = npt.ArrayLike

__all__ = ["LearnedRounds", "ReleaseRefused", "RowRefused"]


class RowRefused(ValueError):
    """A policy refused rows that would break the assumption its noise is calibrated for.

    Nothing of the refused call was learned. ``refused`` marks the offending rows of the call
    (a bool mask over its rows; ``None`` when the call had no rows of its own, e.g. a device's
    second report of one decision); the other rows may be learned by calling again without
    them. ``reason`` is a short code (``duplicate_round``, ``slate_repeats_item``,
    ``beyond_user_bound``, ``duplicate_report``).
    """

    def __init__(self, message: str, reason: str, refused: BoolArray | None = None):
        super().__init__(message)
        self.reason = reason
        self.refused = refused


class ReleaseRefused(RuntimeError):
    """A policy refused to release: the statistics it would release from break its privacy
    unit's bound (e.g. an episode holding more rows than it has rounds). Nothing is released."""


#: Calls of at most this many rows are checked in plain Python (numpy's per-call overhead
#: dominates below it).
_SMALL = 32


def _as_rounds(rounds: ArrayLike) -> IntArray:
    return np.asarray(rounds, dtype=np.int64).reshape(-1)


class LearnedRounds:
    """The rounds learned so far, as sorted disjoint closed intervals [lo, hi].

    Examples
    --------
    >>> lr = LearnedRounds()
    >>> lr.claim([1, 2, 3], "policy")
    >>> lr.claim([5, 4], "policy")
    >>> lr.intervals()
    [(1, 5)]
    >>> try:
    ...     lr.claim([6, 3, 6], "policy")
    ... except RowRefused as err:
    ...     print(err.reason, err.refused.tolist())
    duplicate_round [False, True, True]
    >>> len(lr), 6 in lr
    (5, False)
    """

    __slots__ = ("_hi", "_lo")

    def __init__(self) -> None:
        self._lo = array("q")
        self._hi = array("q")

    # -- queries ----------------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of rounds learned (tracked ones)."""
        if not self._lo:
            return 0
        lo = np.frombuffer(self._lo, dtype=np.int64)
        hi = np.frombuffer(self._hi, dtype=np.int64)
        return int((hi - lo + 1).sum())

    def __contains__(self, r: object) -> bool:
        if not isinstance(r, (int, np.integer)):
            return False
        i = bisect_right(self._lo, int(r)) - 1
        return i >= 0 and self._hi[i] >= int(r)

    def contains(self, rounds: ArrayLike) -> BoolArray:
        """Mask of the rows of ``rounds`` that are in the record."""
        r = _as_rounds(rounds)
        if not self._lo or r.size == 0:
            return np.zeros(r.size, dtype=bool)
        return self._learned_mask(r)

    def add_new(self, rounds: ArrayLike) -> None:
        """Record ``rounds``, skipping repeats and rounds already recorded."""
        r = np.unique(_as_rounds(rounds))
        seen = self.contains(r)
        self.add(r[~seen] if seen.any() else r)

    def intervals(self) -> list[tuple[int, int]]:
        return list(zip(self._lo.tolist(), self._hi.tolist()))

    def refused(self, rounds: ArrayLike) -> BoolArray | None:
        """Mask of the rows of ``rounds`` that may not be learned — already learned, or a repeat
        of an earlier row of the same call — or None when every row may be."""
        r = _as_rounds(rounds)
        n = r.size
        if n == 0:
            return None
        hi = self._hi
        if 1 < n <= _SMALL:  # a few rows (a service pass): plain Python is cheaper
            seen: set[int] = set()
            flags = []
            for x in r.tolist():
                flags.append(x in seen or x in self)
                seen.add(x)
            return np.array(flags) if any(flags) else None
        if n == 1:
            x = int(r[0])
            if not hi or x > hi[-1] or x not in self:
                return None
            return np.ones(1, dtype=bool)
        if bool((r[1:] > r[:-1]).all()):  # strictly increasing: no repeat within the call
            if not hi or int(r[0]) > hi[-1]:
                return None
            bad = self._learned_mask(r)
            return bad if bad.any() else None
        s = np.sort(r, kind="stable")
        repeat = np.zeros(n, dtype=bool)
        if bool((s[1:] == s[:-1]).any()):
            order = np.argsort(r, kind="stable")
            rep_sorted = np.concatenate(([False], s[1:] == s[:-1]))  # later ones (call order)
            repeat[order[rep_sorted]] = True
        bad = repeat
        if hi and int(s[0]) <= hi[-1]:
            bad = bad | self._learned_mask(r)
        return bad if bad.any() else None

    def _learned_mask(self, r: IntArray) -> BoolArray:
        lo = np.frombuffer(self._lo, dtype=np.int64)
        hi = np.frombuffer(self._hi, dtype=np.int64)
        i = np.searchsorted(lo, r, side="right") - 1
        ok = i >= 0
        out: BoolArray = ok & (hi[np.maximum(i, 0)] >= r)
        return out

    # -- updates ----------------------------------------------------------------------------
    def claim(self, rounds: ArrayLike, who: str) -> None:
        """Record ``rounds`` as learned, or raise :class:`RowRefused` (recording nothing) if
        one was learned before or repeats within the call. ``who`` names the policy in the
        message."""
        r = _as_rounds(rounds)
        n = r.size
        if n == 0:
            return
        hi = self._hi
        first = int(r[0])
        if not hi or first > hi[-1]:  # the usual order: after every learned round
            last = int(r[-1])
            if last - first == n - 1 and (n == 1 or bool((r[1:] > r[:-1]).all())):
                if hi and first == hi[-1] + 1:  # one run, continuing the last interval
                    hi[-1] = last
                else:
                    self._lo.append(first)
                    hi.append(last)
                return
        bad = self.refused(r)
        if bad is not None:
            first = int(r[bad][0])
            raise RowRefused(
                f"{who}: round {first} (and {int(bad.sum()) - 1} other rows of this call) was "
                "already learned; one row per round is what the noise is calibrated for, so "
                "nothing of this call was learned",
                "duplicate_round",
                bad,
            )
        self.add(r)

    def add(self, rounds: ArrayLike) -> None:
        """Record distinct, not yet learned ``rounds`` (:meth:`claim` checks first)."""
        r = _as_rounds(rounds)
        if r.size == 0:
            return
        lo, hi = self._lo, self._hi
        if r.size == 1:
            x = int(r[0])
            if not hi or x > hi[-1]:
                if hi and x == hi[-1] + 1:
                    hi[-1] = x
                else:
                    lo.append(x)
                    hi.append(x)
                return
            self._insert(x, x)
            return
        if r.size <= _SMALL:
            run_lo: list[int] = []
            run_hi: list[int] = []
            for x in sorted(r.tolist()):
                if run_hi and x == run_hi[-1] + 1:
                    run_hi[-1] = x
                else:
                    run_lo.append(x)
                    run_hi.append(x)
        else:
            s = r if bool((r[1:] > r[:-1]).all()) else np.sort(r)
            cut = np.flatnonzero(s[1:] - s[:-1] != 1) + 1
            run_lo = s[np.concatenate(([0], cut))].tolist()
            run_hi = s[np.concatenate((cut - 1, [s.size - 1]))].tolist()
        if not hi or run_lo[0] > hi[-1]:  # after every learned round: append
            if hi and run_lo[0] == hi[-1] + 1:
                hi[-1] = run_hi[0]
                run_lo, run_hi = run_lo[1:], run_hi[1:]
            lo.extend(run_lo)
            hi.extend(run_hi)
            return
        if len(run_lo) > 64:  # many runs among the learned ones: merge in one pass
            self._merge(run_lo, run_hi)
            return
        for a, b in zip(run_lo, run_hi):
            self._insert(a, b)

    def _insert(self, a: int, b: int) -> None:
        """Insert the run [a, b] (disjoint from every interval), merging with neighbours."""
        lo, hi = self._lo, self._hi
        i = bisect_right(lo, a)  # intervals [0, i) start before a
        left = i > 0 and hi[i - 1] == a - 1
        right = i < len(lo) and lo[i] == b + 1
        if left and right:
            hi[i - 1] = hi[i]
            del lo[i], hi[i]
        elif left:
            hi[i - 1] = b
        elif right:
            lo[i] = a
        else:
            lo.insert(i, a)
            hi.insert(i, b)

    def _merge(self, run_lo: list[int], run_hi: list[int]) -> None:
        lo = np.concatenate([np.frombuffer(self._lo, dtype=np.int64), run_lo])
        hi = np.concatenate([np.frombuffer(self._hi, dtype=np.int64), run_hi])
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], hi[order]
        start = np.concatenate(([True], lo[1:] != hi[:-1] + 1))
        end = np.concatenate((start[1:], [True]))
        self._lo = array("q", lo[start].tolist())
        self._hi = array("q", hi[end].tolist())

    def forget_below(self, r: int) -> None:
        """Stop tracking rounds below ``r`` (their rows can no longer be learned: a released
        episode's late rows are dropped before any check)."""
        lo, hi = self._lo, self._hi
        if not lo or lo[0] >= r:
            return
        i = bisect_right(hi, r - 1)  # intervals [0, i) end below r
        del lo[:i], hi[:i]
        if lo and lo[0] < r:
            lo[0] = r

    # -- persistence ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "lo": np.frombuffer(self._lo, dtype=np.int64).copy(),
            "hi": np.frombuffer(self._hi, dtype=np.int64).copy(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any] | None) -> LearnedRounds:
        """Restore; ``None`` (a snapshot written before rounds were tracked) gives an empty
        record: the rounds learned before it are not known (the service's join still
        de-duplicates them)."""
        out = cls()
        if state is not None:
            out._lo = array("q", np.asarray(state["lo"], dtype=np.int64).tolist())
            out._hi = array("q", np.asarray(state["hi"], dtype=np.int64).tolist())
        return out
