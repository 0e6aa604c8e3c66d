"""Fetch a published model snapshot over HTTP (standard library only).

The service serves ``GET /v1/models/{bandit_id}`` (``docs/events.md``); the response carries an
``ETag`` of the model version, and a request with ``If-None-Match`` gets ``304 Not Modified``
while the version is unchanged.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from .model import ModelSnapshot

__all__ = ["fetch_snapshot"]


def fetch_snapshot(
    url: str, timeout: float = 5.0, current: ModelSnapshot | None = None
) -> ModelSnapshot:
    """GET a snapshot; with ``current``, return it unchanged on 304 Not Modified."""
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    if current is not None:
        req.add_header("If-None-Match", f'"{current.model_id}:{current.model_version}"')
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return ModelSnapshot.from_json(resp.read())
    except urllib.error.HTTPError as err:
        if err.code == 304 and current is not None:
            return current
        raise
