"""The service's extension points: what happens to a decided chunk, and after a release.

A service shape is a :class:`~streaming_dpbandit.stream.service.Service` given other
collaborators, never a subclass: the broadcast learner records decisions made elsewhere
(:class:`RecordRounds`) and publishes each released model (a :class:`ReleaseHook`); the
single service and a group task publish their own decisions (:class:`PublishDecisions`).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..metrics import ServiceMetrics, observe_many
from ..settings import BanditSettings, ServiceSettings, TopicsSettings
from .bandit import BanditRuntime
from .parsing import Pending
from .slates.runtime import slate_runtime

if TYPE_CHECKING:
    from .local.hook import LocalBandits
    from .transport import Transport

__all__ = [
    "Decider",
    "LocalFactory",
    "PublishDecisions",
    "RecordRounds",
    "ReleaseHook",
    "RuntimeFactory",
    "build_runtime",
]

#: ``runtime(name, bandit_settings, policy, metrics)``: a bandit's runtime
RuntimeFactory = Callable[[str, BanditSettings, Any, ServiceMetrics], BanditRuntime]
#: ``local(settings, transport, topics, metrics)``: the privacy=local bandits of a service
LocalFactory = Callable[
    [ServiceSettings, "Transport", TopicsSettings, ServiceMetrics], "LocalBandits"
]


def build_runtime(
    name: str, settings: BanditSettings, policy: Any, metrics: ServiceMetrics
) -> BanditRuntime:
    """The runtime of a central bandit: a slate runtime for a slate policy."""
    if getattr(policy, "slates", False):
        return slate_runtime(name, settings, policy, metrics)
    return BanditRuntime(name, settings, policy, metrics)


class Decider(abc.ABC):
    """Turns a chunk of validated contexts of one bandit into rounds.

    ``outcome`` is the ``dpbandit_events_total{outcome}`` label of the chunk's events.
    """

    outcome = "decided"

    @abc.abstractmethod
    def __call__(self, rt: BanditRuntime, chunk: list[Pending]) -> None:
        """Decide (or record) ``chunk``; it never crosses a model update."""


class PublishDecisions(Decider):
    """Decide with the frozen private model and publish to ``topic`` (the default)."""

    def __init__(self, transport: Transport, topic: str, metrics: ServiceMetrics) -> None:
        self.transport = transport
        self.topic = topic
        self.metrics = metrics

    def __call__(self, rt: BanditRuntime, chunk: list[Pending]) -> None:
        messages = rt.decide_messages(chunk)
        now = time.perf_counter()
        self.transport.send_many(self.topic, rt.bandit_id.encode(), messages)
        observe_many(
            self.metrics.decision_latency.labels(rt.bandit_id), [now - p.received for p in chunk]
        )


@runtime_checkable
class RecordsRounds(Protocol):
    """A runtime that registers decisions made elsewhere (the broadcast learner's)."""

    def record(self, batch: list[Pending]) -> None: ...


class RecordRounds(Decider):
    """Register decisions made elsewhere (a broadcast's replicas) as the next rounds."""

    outcome = "recorded"

    def __call__(self, rt: BanditRuntime, chunk: list[Pending]) -> None:
        if not isinstance(rt, RecordsRounds):
            raise TypeError(f"bandit {rt.bandit_id}: its runtime cannot record decisions")
        rt.record(chunk)


class ReleaseHook(abc.ABC):
    """Called by the service once a release is durable (snapshot written, ledger appended),
    and once at start for every bandit (a release persisted before a crash may not have
    reached its consumers)."""

    @abc.abstractmethod
    def __call__(self, rt: BanditRuntime) -> None:
        """``rt``'s model in force is durable: hand it on."""
