"""SIGTERM and SIGINT ask a service to stop: it finishes the poll, snapshots and exits."""

from __future__ import annotations

import signal
from collections.abc import Callable

__all__ = ["on_stop_signals"]


def on_stop_signals(request_stop: Callable) -> None:
    """Call ``request_stop(signum, frame)`` on SIGTERM and SIGINT."""
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
