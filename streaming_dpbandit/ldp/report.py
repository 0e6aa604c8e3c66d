"""The uplink message: one fixed-size report per decision (LDP-GLB spec §8, ``docs/events.md``).

```json
{"v": 1, "type": "ldp_report", "bandit_id": "shop", "model_id": "shop-3fa2c1d09b7e",
 "model_version": 17, "msg_id": "9f1c0b5e2d7a4c3f8e6b1a0d9c8b7a65", "payload": [0.41, ...]}
```

``payload`` holds the privatised floats (their number is fixed by the model and the phase);
``payload_b64`` is the compact alternative, base64 of little-endian float32 (rounding a
privatised value is post-processing). ``arm`` is present only on multi-parameter warm-up reports,
where the arm follows a public, context-independent schedule. ``msg_id`` is random per message
(duplicate detection only). There is no user, event, device or session identifier, no time and
no context, reward or arm of the main phase: nothing else leaves the device.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
from typing import Any

import numpy as np

from ..utils.arrays import FloatArray

__all__ = ["Report", "new_msg_id"]

SCHEMA_VERSION = 1


def new_msg_id() -> str:
    """A random 128-bit message id (hex)."""
    return secrets.token_hex(16)


@dataclasses.dataclass
class Report:
    """One privatised report.

    Examples
    --------
    >>> import numpy as np
    >>> rep = Report("shop", "shop-1a2b", 3, np.array([0.5, -1.25]), msg_id="ab" * 16)
    >>> rep.to_json()
    b'{"v":1,"type":"ldp_report","bandit_id":"shop","model_id":"shop-1a2b","model_version":3,"msg_id":"abababababababababababababababab","payload":[0.5,-1.25]}'
    >>> Report.from_json(rep.to_json(encoding="f32")).payload.tolist()
    [0.5, -1.25]
    """

    bandit_id: str
    model_id: str
    model_version: int
    payload: FloatArray
    arm: int | None = None
    msg_id: str | None = None

    def to_dict(self, encoding: str = "json") -> dict[str, Any]:
        out = {
            "v": SCHEMA_VERSION,
            "type": "ldp_report",
            "bandit_id": self.bandit_id,
            "model_id": self.model_id,
            "model_version": int(self.model_version),
        }
        if self.msg_id is not None:
            out["msg_id"] = self.msg_id
        if self.arm is not None:
            out["arm"] = int(self.arm)
        payload = np.asarray(self.payload, dtype=np.float64)
        if encoding == "json":
            out["payload"] = payload.tolist()
        elif encoding == "f32":
            out["payload_b64"] = base64.b64encode(payload.astype("<f4").tobytes()).decode("ascii")
        else:
            raise ValueError("encoding must be 'json' or 'f32'")
        return out

    def to_json(self, encoding: str = "json") -> bytes:
        return json.dumps(self.to_dict(encoding), separators=(",", ":"), allow_nan=False).encode()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        if data.get("v") != SCHEMA_VERSION or data.get("type") != "ldp_report":
            raise ValueError("not an ldp_report of schema version 1")
        if ("payload" in data) == ("payload_b64" in data):
            raise ValueError("give exactly one of payload and payload_b64")
        if "payload" in data:
            payload = np.asarray(data["payload"], dtype=np.float64)
        else:
            raw = base64.b64decode(data["payload_b64"], validate=True)
            payload = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        return cls(
            bandit_id=str(data["bandit_id"]),
            model_id=str(data["model_id"]),
            model_version=int(data["model_version"]),
            payload=payload,
            arm=None if data.get("arm") is None else int(data["arm"]),
            msg_id=data.get("msg_id"),
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> Report:
        return cls.from_dict(json.loads(raw))
