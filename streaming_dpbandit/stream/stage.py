"""What the service's stages are handed (Quix Streams' processing context is the model): the
loop's shared stream state and the collaborators every stage reads, never the service itself.

:class:`StreamState` is what the stages change: where each input partition resumes, which
contexts partitions wait (and for which bandit), which feedback partitions are paused, and the
wall clock of the loop's pass. :class:`StageContext` adds what they read: the settings, the
bandits' runtimes, the dead-letter writer and the metrics. The contexts stage
(``contexts.py``) is also given the parser, the decider and the release step; the feedback
stage (``feedback.py``) the privacy=local bandits and the transport's pause and resume.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from .parsing import BadInput, event_time_limit
from .transport import TP, Record

if TYPE_CHECKING:
    from ..metrics import ServiceMetrics
    from ..settings import ServiceSettings
    from .bandit import BanditRuntime
    from .dead_letters import DeadLetters

__all__ = ["StageContext", "StreamState"]


@dataclasses.dataclass
class StreamState:
    """The loop's state that its stages change.

    >>> st = StreamState()
    >>> st.offsets[("dpbandit.contexts", 0)] = 7
    >>> st.reset({("dpbandit.feedback", 0): 3}); st.offsets, st.blocked
    ({('dpbandit.feedback', 0): 3}, {})
    """

    #: the next offset of every input partition (what a snapshot resumes at)
    offsets: dict[TP, int] = dataclasses.field(default_factory=dict)
    #: contexts partitions waiting for a bandit's release or join room, by bandit
    blocked: dict[TP, str] = dataclasses.field(default_factory=dict)
    #: feedback partitions paused while far ahead of the contexts
    feedback_paused: set[TP] = dataclasses.field(default_factory=set)
    #: the wall clock of the event-time bound (set once per pass of the loop)
    wall: float = 0.0

    def reset(self, offsets: dict[TP, int]) -> None:
        """Start from a snapshot's offsets: nothing blocked or paused."""
        self.offsets = dict(offsets)
        self.blocked = {}
        self.feedback_paused = set()


@dataclasses.dataclass
class StageContext:
    """What every stage reads, and the stream state it changes."""

    settings: ServiceSettings
    state: StreamState
    bandits: dict[str, BanditRuntime]
    dead_letters: DeadLetters
    metrics: ServiceMetrics
    #: ``missing_bandit(bandit_id) -> BadInput`` for a message naming a bandit not decided here
    missing_bandit: Callable[[str], BadInput]

    def dead(self, r: Record, reason: str, detail: str = "", bandit: str | None = None) -> None:
        """Dead-letter a polled record."""
        self.dead_letters.record(r, reason, detail, bandit)

    def time_limit(self, record: Record) -> float:
        """The latest event time accepted for ``record`` (:func:`.parsing.event_time_limit`)."""
        return event_time_limit(record, self.settings.max_event_time_skew_s, self.state.wall)
