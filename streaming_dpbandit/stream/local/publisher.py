"""Where clients get the models of ``privacy: local`` bandits (LDP-GLB spec §8, broadcast).

Every published version goes to

* the **models topic** (``topics.models``, default ``dpbandit.models``): one ``ldp_model`` message
  per version, key = bandit_id, on a *compacted* topic so the latest version of each bandit is
  always retained (created with ``cleanup.policy=compact`` when ``create_topics`` is on);
* the **HTTP endpoint** (``model_server``, default ``127.0.0.1:9465``):
  ``GET /v1/models`` lists the bandits and their versions, ``GET /v1/models/{bandit_id}``
  returns the latest snapshot with ``ETag: "model_id:version"`` (``If-None-Match`` → 304).

Snapshots are public by design (they are what every device downloads): θ̂ and the public
constants, post-processing of privatised reports. The endpoint logs nothing per request.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["ModelStore", "ensure_models_topic", "start_model_server"]

log = logging.getLogger("streaming_dpbandit.models")


class ModelStore:
    """Latest published snapshot per bandit (thread-safe; filled by the service loop).

    >>> store = ModelStore()
    >>> store.put("shop", "shop-1", 3, b'{"model_version": 3}')
    >>> store.get("shop")
    ('"shop-1:3"', b'{"model_version": 3}')
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._models: dict[str, tuple[str, int, bytes]] = {}

    def put(self, bandit_id: str, model_id: str, version: int, body: bytes) -> None:
        with self._lock:
            self._models[bandit_id] = (model_id, int(version), body)

    def get(self, bandit_id: str) -> tuple[str, bytes] | None:
        with self._lock:
            got = self._models.get(bandit_id)
        if got is None:
            return None
        model_id, version, body = got
        return f'"{model_id}:{version}"', body

    def index(self) -> list[dict]:
        with self._lock:
            return [
                {"bandit_id": b, "model_id": m, "model_version": v}
                for b, (m, v, _) in sorted(self._models.items())
            ]


def _handler(store: ModelStore):
    class Handler(BaseHTTPRequestHandler):
        server_version = "dpbandit-models"

        def _send(self, code: int, body: bytes, etag: str | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-cache")
            if etag:
                self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def do_GET(self):
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/v1/models":
                return self._send(200, json.dumps({"models": store.index()}).encode())
            if path.startswith("/v1/models/"):
                got = store.get(path[len("/v1/models/") :])
                if got is None:
                    return self._send(404, b'{"error": "unknown bandit"}')
                etag, body = got
                if self.headers.get("If-None-Match") == etag:
                    return self._send(304, b"", etag)
                return self._send(200, body, etag)
            return self._send(404, b'{"error": "not found"}')

        def log_message(self, format, *args):
            return

    return Handler


def start_model_server(host: str, port: int, store: ModelStore):
    """Serve ``store`` over HTTP in a daemon thread; returns (server, bound port)."""
    server = ThreadingHTTPServer((host, port), _handler(store))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="model-server").start()
    return server, server.server_address[1]


def ensure_models_topic(kafka_settings, topic: str, partitions: int = 1) -> bool:
    """Create the compacted models topic if missing; True when it was created."""
    from ..kafka.compacted import ensure_compacted_topic

    created = ensure_compacted_topic(kafka_settings, topic, partitions)
    if created:
        log.info("created compacted models topic %s", topic)
    return created
