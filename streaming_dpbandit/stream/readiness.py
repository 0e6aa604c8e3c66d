"""The probes' view of a service process: ``/livez`` and ``/readyz`` (``probes.py``).

:func:`service_readiness` is what a process that has not opened yet answers; :func:`opened`
marks its state restored and its ledger verified, and returns the callback its loop calls at
every turn (liveness, and the partitions it is assigned). ``runner.py`` wires them into every
service shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..probes import Readiness
from ..settings import ServiceSettings

__all__ = ["assigned_partitions", "opened", "service_readiness"]


def service_readiness(settings: ServiceSettings) -> Readiness:
    """The probes' state of a service process, before it opens: nothing restored, verified or
    assigned yet; the Kafka bootstrap servers watched when there is a broker."""
    m = settings.metrics
    broker = settings.kafka.bootstrap_servers if settings.kafka is not None else None
    readiness = Readiness(broker, m.broker_timeout_s, m.stall_timeout_s)
    readiness.require("state", "restoring the snapshot")
    readiness.require("ledger", "verifying the privacy ledger")
    readiness.require("partitions", "no input partition assigned yet")
    return readiness


def assigned_partitions(svc: Any) -> int:
    """How many input partitions a running shape reads now."""
    if hasattr(svc, "assigned"):  # a decision replica
        return len(svc.assigned())
    if hasattr(svc, "tasks"):  # a group replica: a task per partition index, opened (restored)
        return 2 * len(svc.tasks)  # when assigned; each reads its contexts and feedback partition
    return len(svc.transport.assigned())


def opened(readiness: Readiness, service: Any) -> Callable[[Any], None]:
    """Mark a just-opened service's state restored and ledger verified; returns the loop's
    callback that beats the liveness and follows the partition assignment."""
    readiness.set("state", True, "restored")
    readiness.set("ledger", True, "verified against the snapshot")
    last = [-float("inf")]

    def turned(svc: Any) -> None:
        readiness.beat()
        now = time.monotonic()
        if now - last[0] >= 0.5:  # an assignment is a set to build: twice a second is enough
            last[0] = now
            n = assigned_partitions(svc)
            readiness.set("partitions", n > 0, f"{n} input partitions assigned")

    turned(service)
    return turned
