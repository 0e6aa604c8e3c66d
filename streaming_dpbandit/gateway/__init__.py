"""``dpbandit gateway``: Azure Personalizer's Rank / Reward / Activate over HTTP, deciding with
the bandit's latest released model and feeding the learner (docs/gateway.md).

:mod:`.api` is the HTTP surface (FastAPI), :mod:`.core` the work behind it, :mod:`.wal` the
write-ahead log that makes every acknowledged record survive a crash, :mod:`.events` the table
of decided events, :mod:`.outlets` the way to the learner (Kafka, or in this process).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
from collections.abc import Iterator
from typing import Any

__all__ = ["run_gateway"]

log = logging.getLogger("streaming_dpbandit.gateway")


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, stopped by SIGTERM/SIGINT without re-raising the signal after
        its shutdown (which would end the process before the gateway delivers its buffer)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            def stop(*_args: object) -> None:
                self.should_exit = True

            old = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in old.items():
                    signal.signal(sig, handler)

    return Server


def run_gateway(settings: Any) -> None:
    """Serve until SIGTERM/SIGINT (then deliver what is buffered, a few seconds at most)."""
    from ..metrics import GatewayMetrics, ServiceMetrics
    from ..stream.errors import ServiceStartError
    from .api import build_app
    from .core import Gateway

    g = settings.gateway
    service_metrics = ServiceMetrics()
    gw = Gateway(settings, GatewayMetrics(service_metrics.registry), service_metrics)
    sock = socket.socket(socket.AF_INET6 if ":" in g.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((g.host, g.port))
    except OSError as err:
        raise ServiceStartError(
            f"cannot listen on {g.host}:{g.port} ({err.strerror or err}): choose another "
            "--port (or gateway.port; 0 picks a free one)"
        ) from None
    try:
        gw.open()
    except ServiceStartError:
        sock.close()
        raise
    except Exception as err:  # e.g. the broker is unreachable at start
        sock.close()
        raise ServiceStartError(f"cannot start the gateway: {type(err).__name__}: {err}") from None
    app = build_app(gw, service_metrics.registry)
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    log.info("gateway: %s/personalizer/v1.0/rank (OpenAPI: %s/openapi.json, metrics: "
             "%s/metrics)", url, url, url, extra={"url": url})  # fmt: skip
    from uvicorn import Config

    config = Config(app, log_level="warning", access_log=False, lifespan="off")
    try:
        _server_class()(config).run(sockets=[sock])
    finally:
        gw.close()
        log.info("gateway stopped")
