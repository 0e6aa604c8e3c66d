"""Producing context messages (the client side of ``schemas.py``): the JSON form with features
as number lists or base64 float64 (``arm_features_f64``), and the binary form
(``binary_context.py``), as the load generator, the simulated source and the tests send them."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt

from .schemas import F64

__all__ = ["FEATURE_ENCODINGS", "context_value", "encode_f64"]


def encode_f64(values: npt.ArrayLike) -> str:
    """The base64 text of a binary feature field: float64, little-endian, row-major.

    >>> encode_f64([[1.0, -0.5], [0.25, 2.0]])
    'AAAAAAAA8D8AAAAAAADgvwAAAAAAANA/AAAAAAAAAEA='
    """
    import base64

    return base64.b64encode(np.ascontiguousarray(values, dtype=F64).tobytes()).decode("ascii")


#: How producers can send features: JSON number lists, binary ``arm_features_f64`` inside the
#: JSON, or the whole event in the binary form with float64 or float32 features
#: (``binary_context.py``).
FEATURE_ENCODINGS = ("json", "f64", "raw-f64", "raw-f32")


def context_value(
    event_id: str,
    bandit_id: str,
    event_time: float,
    X: np.ndarray,
    arm_ids: list[str],
    encoding: str = "json",
    user_id: str | None = None,
) -> bytes:
    """The message value of a per-arm context event in any of :data:`FEATURE_ENCODINGS`.

    >>> [len(context_value("e1", "shop", 5.0, np.ones((3, 100)), ["a", "b", "c"], e))
    ...  for e in FEATURE_ENCODINGS]
    [1669, 3318, 2443, 1243]
    >>> json.loads(context_value("e1", "shop", 5.0, np.array([[1.0, 2.0]]), ["a"]))["arms"]
    [{'arm_id': 'a', 'features': [1.0, 2.0]}]
    """
    from .binary_context import BINARY_ENCODINGS, encode_binary_context

    dtype = BINARY_ENCODINGS.get(encoding)
    if dtype is not None:
        return encode_binary_context(event_id, bandit_id, event_time, X, arm_ids, user_id, dtype)
    msg: dict[str, Any] = {
        "v": 1,
        "event_id": event_id,
        "bandit_id": bandit_id,
        "event_time": event_time,
    }
    if encoding == "f64":
        msg["arm_ids"] = list(arm_ids)
        msg["arm_features_f64"] = encode_f64(X)
    elif encoding == "json":
        msg["arms"] = [{"arm_id": a, "features": x.tolist()} for a, x in zip(arm_ids, X)]
    else:
        raise ValueError(f"feature encoding {encoding!r}: choose from {FEATURE_ENCODINGS}")
    if user_id is not None:
        msg["user_id"] = user_id
    return json.dumps(msg).encode()
