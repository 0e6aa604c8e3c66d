"""A chunk of logged bandit events: the unit every reader yields and every evaluator reads."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..utils.arrays import AnyArray, BoolArray, FloatArray, IntArray
from .contexts import Contexts
from .errors import LogFormatError, show

__all__ = ["LoggedBatch"]


@dataclasses.dataclass
class LoggedBatch:
    """B logged events.

    Attributes
    ----------
    event_ids
        Event ids (B,): non-negative integers or strings. A policy's decision is a function of
        (state, event id), so replaying an event always gives the same decision.
    actions
        Index of the logged arm among the event's K candidates (B,).
    rewards
        Observed rewards (B,).
    propensities
        Probability π_b(a_i | x_i, p_i) with which the logging policy chose the logged arm at
        its position (B,), in (0, 1].
    positions
        Slate position of the event (B,), 0-based; 0 for single-arm logs.
    contexts
        Per-arm features, built on demand (:class:`~.contexts.Contexts`).
    mask
        (B, K) available arms when events have different candidate sets; ``None``: all K.
    times
        Event times (seconds since the epoch), when the log has them.
    arm_ids
        (B, K) ids of the candidate arms (object array; ``None`` under the mask), when the log
        names them; ``None``: the arm at position k is arm k (a fixed catalogue). Policies
        with per-arm models (``keyed_by_arm_id``) key their models by these ids.
    user_ids
        (B,) user id of each event, when the log has them (the contexts' ``user_id``): the
        replay method bounds each user's contributions with ``--max-contributions-per-user``
        (``docs/privacy/user-level.md``). Never printed.

    Examples
    --------
    >>> from streaming_dpbandit.replay.contexts import ConstantContexts
    >>> b = LoggedBatch(np.arange(3), np.array([0, 1, 1]), np.array([1.0, 0.0, 1.0]),
    ...                 np.full(3, 0.5), np.zeros(3, dtype=np.int64), ConstantContexts(3, 2))
    >>> len(b), b.n_arms, len(b.take(np.array([0, 2])))
    (3, 2, 2)
    """

    event_ids: AnyArray
    actions: IntArray
    rewards: FloatArray
    propensities: FloatArray
    positions: IntArray
    contexts: Contexts
    mask: BoolArray | None = None
    times: FloatArray | None = None
    arm_ids: AnyArray | None = None
    user_ids: AnyArray | None = None

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def n_arms(self) -> int:
        return self.contexts.n_arms

    @property
    def d(self) -> int:
        return self.contexts.d

    def n_available(self) -> IntArray:
        """Candidate arms per event (B,)."""
        if self.mask is None:
            return np.full(len(self), self.n_arms, dtype=np.int64)
        counts: IntArray = self.mask.sum(axis=1)
        return counts

    def take(self, idx: IntArray | BoolArray) -> LoggedBatch:
        """The events ``idx`` (index array or boolean mask), in that order."""
        return LoggedBatch(
            event_ids=self.event_ids[idx],
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            propensities=self.propensities[idx],
            positions=self.positions[idx],
            contexts=self.contexts.take(np.arange(len(self))[idx]),
            mask=None if self.mask is None else self.mask[idx],
            times=None if self.times is None else self.times[idx],
            arm_ids=None if self.arm_ids is None else self.arm_ids[idx],
            user_ids=None if self.user_ids is None else self.user_ids[idx],
        )

    def arm_id_kwargs(
        self, policy: object, rows: slice | IntArray = slice(None)
    ) -> dict[str, AnyArray]:
        """``{"arm_ids": ...}`` of ``rows`` for a policy keyed by arm id, else ``{}``."""
        if not getattr(policy, "keyed_by_arm_id", False) or self.arm_ids is None:
            return {}
        return {"arm_ids": self.arm_ids[rows]}

    def validate(self, where: str = "log") -> None:
        """Check shapes and values; raise :class:`LogFormatError` naming the first bad event."""
        B = len(self)
        for name in ("event_ids", "rewards", "propensities", "positions"):
            if getattr(self, name).shape[0] != B:
                raise LogFormatError(f"{where}: {name} has a different length from actions")
        if len(self.contexts) != B:
            raise LogFormatError(f"{where}: contexts have a different length from actions")
        K = self.n_arms
        bad = np.flatnonzero((self.actions < 0) | (self.actions >= K))
        if bad.size:
            i = int(bad[0])
            raise LogFormatError(
                f"{where}: event {show(self.event_ids[i])}: action {int(self.actions[i])} is not "
                f"among the {K} arms"
            )
        if self.mask is not None:
            off = ~self.mask[np.arange(B), self.actions]
            if off.any():
                i = int(np.flatnonzero(off)[0])
                raise LogFormatError(
                    f"{where}: event {show(self.event_ids[i])}: the logged arm was not a candidate"
                )
        p = self.propensities
        bad = np.flatnonzero(~(np.isfinite(p) & (p > 0) & (p <= 1)))
        if bad.size:
            i = int(bad[0])
            raise LogFormatError(
                f"{where}: event {show(self.event_ids[i])}: propensity {show(p[i])} is not in "
                "(0, 1] (off-policy estimates need the logging policy's positive propensities)"
            )
        bad = np.flatnonzero(~np.isfinite(self.rewards))
        if bad.size:
            i = int(bad[0])
            raise LogFormatError(
                f"{where}: event {show(self.event_ids[i])}: reward {show(self.rewards[i])} "
                "is not finite"
            )
        if (self.positions < 0).any():
            i = int(np.flatnonzero(self.positions < 0)[0])
            raise LogFormatError(f"{where}: event {show(self.event_ids[i])}: negative position")
