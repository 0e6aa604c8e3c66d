"""Good and hand-picked poison input messages of the service (``tests/stream/test_poison_input.py``
and its Kafka twin ``tests/stream/kafka/test_poison_kafka.py``)."""

from __future__ import annotations

import json
import struct

import numpy as np

from streaming_dpbandit.stream.binary_context import MAGIC, encode_binary_context
from streaming_dpbandit.stream.messages import encode_f64

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


# -- the binary context form (stream/binary_context.py) -----------------------------------------
def good_raw_context() -> bytes:
    """A good binary context: 2 arms × 3 features (not the service tests' dimension)."""
    return encode_binary_context("e1", BANDIT, T0, np.ones((2, 3)), ["a", "b"])


def _patched(offset: int, fmt: str, value: object) -> bytes:
    raw = bytearray(good_raw_context())
    struct.pack_into(fmt, raw, offset, value)
    return bytes(raw)


def raw_context_with_ids(*ids: str, d: int = 3) -> bytes:
    """A binary context with these arm ids, written as given (unchecked)."""
    texts = [s.encode() for s in ("e1", BANDIT, *ids)]
    head = struct.pack("<4sBBHI4xd", MAGIC, 1, 0, len(ids), d, T0)
    lengths = struct.pack(f"<{len(texts)}H", *map(len, texts))
    return head + np.ones(len(ids) * d).tobytes() + lengths + b"".join(texts)


def malformed_raw_contexts() -> dict[str, tuple[bytes, str, str]]:
    """Malformed binary contexts by name: (message, dead-letter reason, part of the detail)."""
    good = good_raw_context()
    return {
        "truncated header": (good[:23], "invalid_event", "shorter than its 24-byte header"),
        "truncated features": (good[:40], "invalid_event", "too short"),
        "truncated ids": (good[:-1], "invalid_event", "expected"),
        "a byte too many": (good + b"\0", "invalid_event", "expected"),
        "version 2": (_patched(4, "<B", 2), "invalid_event", "format version 2"),
        "unknown flag": (_patched(5, "<B", 4), "invalid_event", "unknown flags"),
        "no arms": (_patched(6, "<H", 0), "invalid_event", "0 arms"),
        "no features": (_patched(8, "<I", 0), "invalid_event", "0 features"),
        "too many arms": (_patched(6, "<H", 10_001), "invalid_event", "10001 arms"),
        "huge d": (_patched(8, "<I", 2**32 - 1), "invalid_event", "too short"),
        "float32 flag on float64 data": (_patched(5, "<B", 1), "invalid_event", "expected"),
        "empty arm id": (raw_context_with_ids("a", ""), "invalid_event", "an id of 0 bytes"),
        "201-character id": (
            raw_context_with_ids("a", "x" * 201),
            "invalid_event",
            "201 characters",
        ),
        "not UTF-8": (
            raw_context_with_ids("a", "b")[:-1] + b"\xff",
            "invalid_event",
            "not UTF-8",
        ),
        "duplicate arm ids": (raw_context_with_ids("a", "a"), "invalid_event", "unique"),
        "NaN feature": (_patched(24, "<d", float("nan")), "non_finite_number", "NaN or inf"),
        "inf feature": (_patched(32, "<d", float("inf")), "non_finite_number", "NaN or inf"),
        "-inf event time": (_patched(16, "<d", -float("inf")), "non_finite_number", "NaN or inf"),
        "float32 inf": (
            encode_binary_context("e", BANDIT, T0, [[np.inf]], ["a"], dtype="<f4"),
            "non_finite_number",
            "NaN or inf",
        ),
    }
