"""Slots of per-arm models keyed by arm id, bounded by least-recently-used eviction.

A per-arm model (one ridge model per arm, as in disjoint LinUCB) must follow the arm's identity,
not its position in the decision set: in production recommendation the candidate set changes
from request to request as items appear and retire. :class:`ArmSlots` maps arm ids to rows
("slots") of the model's arrays:

* an arm it has not seen gets a fresh slot — the caller resets that row to the prior (cold
  start);
* at most ``max_arms`` arms are kept: when a new arm needs a slot and all are taken, the arm
  used least recently (by round of its last decision or update) gives its slot up — it is
  forgotten, and comes back cold if it reappears. Memory is bounded by ``max_arms`` slots;
* slot 0 is never assigned: it holds the prior, which scores arms that are looked up without
  being inserted (the frozen policy of off-policy evaluation inserts nothing);
* every assignment bumps the slot's generation, so that feedback for a decision whose arm was
  evicted meanwhile is recognised and dropped (not learned by the arm now in that slot).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ..utils.arrays import IntArray

__all__ = ["ArmSlots"]


class ArmSlots:
    """Arm id → slot (1 … capacity), growing by doubling up to ``max_arms``, LRU beyond it.

    Examples
    --------
    >>> s = ArmSlots(max_arms=2)
    >>> s.lookup(["a", "b"], stamp=1).tolist(), s.take_assigned()
    ([1, 2], [1, 2])
    >>> s.lookup(["b", "c"], stamp=2).tolist(), s.take_assigned(), s.evicted  # "a" is LRU
    ([2, 1], [1], 1)
    >>> s.lookup(["a"], stamp=3, insert=False).tolist()  # unknown, not inserted: the prior
    [0]

    """

    def __init__(self, max_arms: int, initial: int = 16) -> None:
        if max_arms < 1:
            raise ValueError("max_arms must be >= 1")
        self.max_arms = int(max_arms)
        self.capacity = min(self.max_arms, max(1, initial))
        self.slot: dict[Hashable, int] = {}
        self.ids: list[Hashable | None] = [None] * (self.capacity + 1)
        self.stamp = np.zeros(self.capacity + 1, dtype=np.int64)
        self.gen = np.zeros(self.capacity + 1, dtype=np.int64)
        self.evicted = 0
        self._next = 1  # first never-used slot
        self._assigned: list[int] = []
        self._last: tuple[list[Hashable], IntArray] | None = None  # (ids, slots) of the last lookup

    def __len__(self) -> int:
        return len(self.slot)

    def take_assigned(self) -> list[int]:
        """Slots (re)assigned since the last call: the caller resets them to the prior."""
        out, self._assigned = self._assigned, []
        return out

    def _grow(self) -> None:
        new = min(self.max_arms, 2 * self.capacity)
        extra = new - self.capacity
        self.ids.extend([None] * extra)
        self.stamp = np.concatenate([self.stamp, np.zeros(extra, dtype=np.int64)])
        self.gen = np.concatenate([self.gen, np.zeros(extra, dtype=np.int64)])
        self.capacity = new

    def _free_slot(self, stamp: int) -> int:
        if self._next > self.capacity and self.capacity < self.max_arms:
            self._grow()
        if self._next <= self.capacity:
            s = self._next
            self._next += 1
            return s
        s = 1 + int(np.argmin(self.stamp[1:]))
        if self.stamp[s] >= stamp:
            raise ValueError(f"one batch offers more than max_arms = {self.max_arms} distinct arms")
        del self.slot[self.ids[s]]
        self.evicted += 1
        self._last = None
        return s

    def lookup(self, arm_ids: Sequence[Hashable], stamp: int, insert: bool = True) -> IntArray:
        """Slots of ``arm_ids`` (a list of hashable ids); marks them used at ``stamp``.

        ``insert=False``: unknown arms get slot 0 (the prior) and nothing is marked.
        """
        last = self._last
        if last is not None and last[0] == arm_ids:  # the same decision set as last time
            slots = last[1]
            if insert:
                self.stamp[slots] = stamp
            return slots
        get = self.slot.get
        out = [get(a, 0) for a in arm_ids]
        if not insert:
            return np.asarray(out, dtype=np.int64)
        slots = np.asarray(out, dtype=np.int64)
        self.stamp[slots] = stamp  # before any eviction: an arm of this batch is never evicted
        if 0 in out:
            for i, a in enumerate(arm_ids):
                if out[i] == 0:
                    s = get(a, 0)
                    if s == 0:
                        s = self._free_slot(stamp)
                        self.slot[a] = s
                        self.ids[s] = a
                        self.gen[s] += 1
                        self._assigned.append(s)
                    self.stamp[s] = stamp
                    out[i] = s
            slots = np.asarray(out, dtype=np.int64)
        self.stamp[0] = 0
        if 0 not in out:
            self._last = (list(arm_ids), slots)
        return slots

    def touch(self, slots: IntArray, stamp: int) -> None:
        self.stamp[slots] = np.maximum(self.stamp[slots], stamp)

    # -- persistence -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "max_arms": self.max_arms,
            "capacity": self.capacity,
            "ids": list(self.ids),
            "stamp": self.stamp.copy(),
            "gen": self.gen.copy(),
            "evicted": self.evicted,
            "next": self._next,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], max_arms: int | None = None) -> ArmSlots:
        """Restore; ``max_arms`` (the policy's parameter now) may grow the bound, not shrink
        it below the slots the snapshot uses."""
        cap = int(state["capacity"])
        if max_arms is not None and max_arms < cap:
            raise ValueError(
                f"the snapshot keeps up to {cap} arm models; max_arms = {max_arms} is smaller"
            )
        out = cls(int(state["max_arms"]) if max_arms is None else int(max_arms), cap)
        out.capacity = int(state["capacity"])
        out.ids = [_hashable(a) for a in state["ids"]]
        out.stamp = np.asarray(state["stamp"], dtype=np.int64).copy()
        out.gen = np.asarray(state["gen"], dtype=np.int64).copy()
        out.evicted = int(state["evicted"])
        out._next = int(state["next"])
        out.slot = {
            a: s for s, a in enumerate(out.ids) if s > 0 and s < out._next and a is not None
        }
        return out


def _hashable(a: Any) -> Hashable:
    """Ids come back from JSON snapshots as lists when they were tuples."""
    return tuple(_hashable(x) for x in a) if isinstance(a, list) else a
