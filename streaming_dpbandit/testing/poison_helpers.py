"""Good and hand-picked poison input messages of the service (``tests/stream/test_poison_input.py``
and its Kafka twin ``tests/stream/kafka/test_poison_kafka.py``)."""

from __future__ import annotations

import json

import numpy as np

from ..stream.schemas import encode_f64
from .stream_helpers import BANDIT, D, K

CONTEXTS, FEEDBACK = "dpbandit.contexts", "dpbandit.feedback"
T0 = 1_700_000_000.0
HUGE = int("1" * 400)


def features(i: int) -> list[float]:
    return np.round(np.sin(np.arange(D) + i), 3).tolist()


def good_context(i: int) -> dict:
    return {
        "v": 1,
        "event_id": f"e{i}",
        "bandit_id": BANDIT,
        "event_time": T0 + i,
        "arms": [{"arm_id": f"a{k}", "features": features(i + k)} for k in range(K)],
    }


def good_binary_context(i: int) -> dict:
    X = np.array([features(i + k) for k in range(K)])
    return {
        "v": 1,
        "event_id": f"e{i}",
        "bandit_id": BANDIT,
        "event_time": T0 + i,
        "arm_ids": [f"a{k}" for k in range(K)],
        "arm_features_f64": encode_f64(X),
    }


def good_feedback(i: int) -> dict:
    return {"v": 1, "event_id": f"e{i}", "bandit_id": BANDIT, "reward": 1.0, "event_time": T0 + i}


def good_watermark(i: int) -> dict:
    return {"type": "watermark", "bandit_id": BANDIT, "event_time": T0 + i}


def good_slate_feedback(i: int) -> dict:
    return {"event_id": f"e{i}", "bandit_id": BANDIT, "rewards": {"a0": 1}, "event_time": T0 + i}


def dumps(doc) -> bytes:
    return json.dumps(doc).encode()  # NaN and Infinity as Python writes them: also input


#: Hand-picked poison, one message each, always tried.
FIXED = [
    (CONTEXTS, dumps(good_context(0) | {"event_time": HUGE})),  # the crash
    (FEEDBACK, dumps(good_feedback(0) | {"event_time": HUGE})),
    (FEEDBACK, dumps(good_watermark(0) | {"event_time": HUGE})),
    (FEEDBACK, dumps(good_slate_feedback(0) | {"event_time": HUGE})),
    (CONTEXTS, dumps(good_context(1) | {"event_time": -HUGE})),
    (CONTEXTS, dumps(good_context(2) | {"event_time": "9" * 5000})),
    (CONTEXTS, b'{"v": 1, "event_id": "e3", "event_time": ' + b"1" * 5000 + b"}"),
    (CONTEXTS, b"[" * 100_000 + b"]" * 100_000),
    (FEEDBACK, b"[" * 100_000 + b"]" * 100_000),
    (CONTEXTS, b'{"a":' * 5000 + b"1" + b"}" * 5000),
    (CONTEXTS, b"\xff\xfe\x00"),
    (FEEDBACK, b"\xff\xfe\x00"),
    (CONTEXTS, None),  # tombstones
    (FEEDBACK, None),
    (CONTEXTS, b""),
    (FEEDBACK, b'"watermark"'),
    (FEEDBACK, b'{"type": "watermark", "rewards": "ldp_report"}'),
    (CONTEXTS, dumps(good_context(4) | {"arms": [{"arm_id": "a", "features": [HUGE] * D}]})),
    (CONTEXTS, dumps(good_context(5) | {"event_time": "+999999-01-01T00:00:00"})),
]
