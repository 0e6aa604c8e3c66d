"""The uplink message of a ``privacy: local`` bandit on the feedback topic (``docs/events.md``).

```json
{"v": 1, "type": "ldp_report", "bandit_id": "shop", "model_id": "shop-3fa2c1d09b7e",
 "model_version": 17, "msg_id": "9f1c0b5e2d7a4c3f8e6b1a0d9c8b7a65", "payload": [0.41, ...]}
```

Built by the client SDK (:class:`streaming_dpbandit.ldp.Report`); validated here with pydantic
like every other message. ``payload_b64`` (base64 of little-endian float32) may replace
``payload``; ``arm`` appears only on multi-parameter warm-up reports. Unknown fields are
rejected: a report carries nothing but the privatised payload and public metadata.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...ldp.model import ModelSpec

__all__ = ["LDPModelMessage", "LDPReportMessage", "is_ldp_report"]

Id = Annotated[str, Field(min_length=1, max_length=200)]

#: Largest payload accepted (floats); the service's ``max_message_bytes`` applies first.
MAX_PAYLOAD = 2_000_000


def is_ldp_report(raw: bytes) -> bool:
    """Cheap routing test: does this feedback-topic message claim to be an LDP report?

    >>> is_ldp_report(b'{"v": 1, "type": "ldp_report"}'), is_ldp_report(b'{"reward": 1}')
    (True, False)
    """
    return b'"ldp_report"' in raw


class LDPReportMessage(BaseModel):
    """One privatised report (topic ``feedback``, key = bandit_id).

    >>> m = LDPReportMessage.model_validate_json(
    ...     '{"v": 1, "type": "ldp_report", "bandit_id": "b", "model_id": "b-1", '
    ...     '"model_version": 0, "payload": [0.5, -1]}')
    >>> m.values().tolist()
    [0.5, -1.0]
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    v: Literal[1] = 1
    type: Literal["ldp_report"]
    bandit_id: Id
    model_id: Id
    model_version: int = Field(ge=0)
    msg_id: str | None = Field(None, pattern=r"^[0-9a-f]{16,64}$")
    arm: int | None = Field(None, ge=0)
    payload: list[float] | None = Field(None, min_length=1, max_length=MAX_PAYLOAD)
    payload_b64: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_payload(self):
        if (self.payload is None) == (self.payload_b64 is None):
            raise ValueError("give exactly one of 'payload' and 'payload_b64'")
        if self.payload_b64 is not None:
            try:
                raw = base64.b64decode(self.payload_b64, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("payload_b64 is not base64") from None
            if len(raw) % 4:
                raise ValueError("payload_b64 must hold little-endian float32 values")
            if not np.isfinite(np.frombuffer(raw, dtype="<f4")).all():
                raise ValueError("payload_b64 holds NaN or infinite values")
        return self

    def values(self) -> np.ndarray:
        """The payload as float64."""
        if self.payload is not None:
            return np.asarray(self.payload, dtype=np.float64)
        raw = base64.b64decode(self.payload_b64 or "")
        return np.frombuffer(raw, dtype="<f4").astype(np.float64)


class LDPModelMessage(BaseModel):
    """A published model version of a local bandit (topic ``models``, key = bandit_id; also
    ``GET /v1/models/{bandit_id}``): what :meth:`streaming_dpbandit.ldp.ModelSnapshot.to_dict`
    writes and the client SDK reads (the SDK checks it again, recomputing ``constants`` from
    ``spec``).

    >>> from streaming_dpbandit.ldp.model import ModelSnapshot
    >>> spec = ModelSpec(variant="sgd", setting="single", d=2, K=3, epsilon=1.0)
    >>> snap = ModelSnapshot("shop", "shop-1a2b", 4, spec, theta=[0.5, -0.25])
    >>> LDPModelMessage.model_validate_json(snap.to_json()).theta
    [0.5, -0.25]
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    v: Literal[1] = 1
    type: Literal["ldp_model"]
    bandit_id: Id
    model_id: Id
    model_version: int = Field(ge=0)
    reports: int = Field(ge=0, description="reports absorbed into this version")
    phase: Literal["warmup", "main"]
    theta: list[float] | list[list[float]] = Field(
        description="d numbers (single-parameter), or K rows of d (multi-parameter)"
    )
    theta_warmup: list[list[float]] | None = Field(
        description="the frozen warm-up estimates (multi-parameter main phase)"
    )
    h: float | None = Field(description="elimination threshold (null: none)")
    ticket: int | None = Field(description="warm-up round-robin ticket")
    spec: ModelSpec = Field(description="the public configuration")
    constants: dict[str, dict[str, float | int]] = Field(
        description="per phase, the mechanism constants derived from spec"
    )
