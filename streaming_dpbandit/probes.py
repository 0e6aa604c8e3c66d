"""Liveness and readiness: ``/livez`` and ``/readyz`` beside ``/metrics`` (docs/operations.md).

:class:`Readiness` is the one place that decides both answers. A process sets its conditions as
it starts (``state``: the snapshot is restored; ``ledger``: the privacy ledger is verified
against it; ``partitions``: input partitions are assigned), beats once per turn of its loop,
and may name a Kafka bootstrap address to watch. Any HTTP front serves it: the service's
metrics server (:func:`serve_http`, through :func:`probes_app`) or another framework, which
calls :meth:`Readiness.answer` with the request path.

* **/readyz** — 200 when every condition holds and the broker has not been unreachable for
  ``broker_timeout_s``; otherwise 503. The body names each check with its detail.
* **/livez** — 200 unless the loop has stopped turning for ``stall_timeout_s`` (a hung process
  that a restart would cure); a process that finished its input and lingers is still live.

The broker is watched with a TCP connection to the bootstrap servers when ``/readyz`` is asked
(at most once a second; no thread, no Kafka client): reachable when any of them accepts.

Examples
--------
>>> now = [0.0]
>>> r = Readiness(clock=lambda: now[0])
>>> r.require("state", "restoring the snapshot")
>>> r.answer("/readyz")[0], r.answer("/livez")[0]
(503, 200)
>>> r.set("state", True, "restored")
>>> status, body = r.answer("/readyz")
>>> status, body["status"], body["checks"]["state"]
(200, 'ready', {'ok': True, 'detail': 'restored'})
>>> r.answer("/metrics") is None
True
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["PROBE_PATHS", "Readiness", "probes_app", "serve_http", "tcp_reachable"]

#: The paths :meth:`Readiness.answer` serves.
PROBE_PATHS = ("/livez", "/readyz")


def tcp_reachable(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """Does any of the comma-separated ``host:port`` addresses accept a TCP connection?

    >>> tcp_reachable("127.0.0.1:1", timeout_s=0.2)
    False
    """
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            continue
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return True
        except OSError:
            continue
    return False


class Readiness:
    """What ``/livez`` and ``/readyz`` answer (thread-safe: the loop sets, the server reads).

    Parameters
    ----------
    broker
        Kafka bootstrap servers to watch (``None``: no broker, e.g. the embedded mode).
    broker_timeout_s
        Not ready once the broker has been unreachable this long.
    stall_timeout_s
        Not live once :meth:`beat` has not been called for this long (after the first beat,
        until :meth:`stopped`).
    clock
        Monotonic clock (injectable for tests).
    reachable
        ``reachable(bootstrap) -> bool`` (:func:`tcp_reachable` by default).
    """

    def __init__(
        self,
        broker: str | None = None,
        broker_timeout_s: float = 30.0,
        stall_timeout_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        reachable: Callable[[str], bool] = tcp_reachable,
    ) -> None:
        self.broker = broker
        self.broker_timeout_s = broker_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.clock = clock
        self.reachable = reachable
        self._lock = threading.Lock()
        self._checks: dict[str, tuple[bool, str]] = {}
        self._beat: float | None = None
        self._stopped: str | None = None
        self._broker_ok_at = clock()
        self._broker_checked_at = -float("inf")
        self._broker_ok = True

    # -- what the process sets ---------------------------------------------------------
    def require(self, name: str, detail: str) -> None:
        """A condition that must hold before the process is ready (not yet met)."""
        self.set(name, False, detail)

    def set(self, name: str, ok: bool, detail: str = "") -> None:
        """Set a condition (an unknown name adds one)."""
        with self._lock:
            self._checks[name] = (bool(ok), detail)

    def beat(self) -> None:
        """The loop turned (liveness)."""
        self._beat = self.clock()

    def stopped(self, reason: str) -> None:
        """The loop ended (input finished, or stopping): not ready, and no longer expected
        to beat."""
        with self._lock:
            self._stopped = reason

    # -- what the probes answer ----------------------------------------------------------
    def _broker_check(self) -> tuple[bool, str]:
        assert self.broker is not None
        now = self.clock()
        if now - self._broker_checked_at >= 1.0:
            self._broker_checked_at = now
            self._broker_ok = self.reachable(self.broker)
            if self._broker_ok:
                self._broker_ok_at = now
        down = now - self._broker_ok_at
        if self._broker_ok:
            return True, f"{self.broker} reachable"
        if down < self.broker_timeout_s:
            return True, (
                f"{self.broker} unreachable for {down:.0f} s (not ready after "
                f"{self.broker_timeout_s:g} s)"
            )
        return False, f"{self.broker} unreachable for {down:.0f} s"

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """(ready, body): every condition, the broker's reachability, whether stopped."""
        with self._lock:
            checks = {k: {"ok": ok, "detail": d} for k, (ok, d) in self._checks.items()}
            stopped = self._stopped
        if self.broker is not None:
            ok, detail = self._broker_check()
            checks["broker"] = {"ok": ok, "detail": detail}
        if stopped is not None:
            checks["running"] = {"ok": False, "detail": stopped}
        ready = all(c["ok"] for c in checks.values())
        return ready, {"status": "ready" if ready else "not ready", "checks": checks}

    def live(self) -> tuple[bool, dict[str, Any]]:
        """(live, body): false only when the loop stopped turning for ``stall_timeout_s``."""
        beat, stopped = self._beat, self._stopped
        if beat is None or stopped is not None:
            detail = "starting" if beat is None and stopped is None else stopped or ""
            return True, {"status": "live", "checks": {"loop": {"ok": True, "detail": detail}}}
        idle = self.clock() - beat
        ok = idle < self.stall_timeout_s
        detail = f"last turn {idle:.1f} s ago" + ("" if ok else f" (≥ {self.stall_timeout_s:g} s)")
        return ok, {
            "status": "live" if ok else "not live",
            "checks": {"loop": {"ok": ok, "detail": detail}},
        }

    def answer(self, path: str) -> tuple[int, dict[str, Any]] | None:
        """``(HTTP status, JSON body)`` for ``/livez`` or ``/readyz``; None for another path."""
        if path == "/readyz":
            ok, body = self.ready()
        elif path == "/livez":
            ok, body = self.live()
        else:
            return None
        return (200 if ok else 503), body


_REASONS = {200: "200 OK", 503: "503 Service Unavailable"}


def probes_app(app: Callable[..., Iterable[bytes]], readiness: Readiness) -> Callable[..., Any]:
    """A WSGI app that answers the probe paths from ``readiness`` and hands every other
    request to ``app`` (the Prometheus exposition)."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answered = readiness.answer(environ.get("PATH_INFO", ""))
        if answered is None:
            return app(environ, start_response)
        status, body = answered
        raw = json.dumps(body).encode()
        start_response(
            _REASONS[status],
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(raw))),
                ("Cache-Control", "no-store"),
            ],
        )
        return [raw]

    return serve


def serve_http(host: str, port: int, registry: Any, readiness: Readiness) -> Any:
    """Serve ``/metrics`` (``registry``), ``/livez`` and ``/readyz`` on ``host:port`` in a
    daemon thread; returns the server (``.server_port``, ``.shutdown()``). Raises ``OSError``
    when the address cannot be bound."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import make_wsgi_app

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes and probes every few seconds: not worth a log line each

    Server.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    httpd = make_server(
        host, port, probes_app(make_wsgi_app(registry), readiness), Server, handler_class=Quiet
    )
    threading.Thread(target=httpd.serve_forever, daemon=True, name="dpbandit-http").start()
    return httpd
