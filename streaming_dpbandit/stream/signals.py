"""SIGTERM and SIGINT ask a service to stop: it finishes the poll, snapshots and exits."""

from __future__ import annotations

import signal
from collections.abc import Callable

__all__ = ["StopSwitch", "on_stop_signals"]


def on_stop_signals(request_stop: Callable) -> None:
    """Call ``request_stop(signum, frame)`` on SIGTERM and SIGINT."""
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


class StopSwitch:
    """Whether a loop was asked to stop: by SIGTERM/SIGINT once :meth:`install`-ed, or by
    :meth:`request`.

    >>> stop = StopSwitch()
    >>> stop.requested, (stop.request(), stop.requested)[1]
    (False, True)
    """

    def __init__(self) -> None:
        self.requested = False

    def request(self, *_args: object) -> None:
        self.requested = True

    def install(self) -> None:
        on_stop_signals(self.request)
