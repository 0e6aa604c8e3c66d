"""The compact binary context form (``DPBC``): a context event as raw little-endian numbers.

A JSON context of three arms of 100 features is 3.3 KB and its numbers are parsed from text;
the base64 float64 form (``arm_features_f64``) is no smaller. This form puts the feature matrix
into the message value as raw IEEE-754 numbers (float64, exact; or float32, half the size)
behind a 24-byte header, followed by the ids (docs/events.md, "Binary context messages"):

======  ==========  ============================================================================
offset  size        field
======  ==========  ============================================================================
0       4           magic ``b"DPBC"`` (no JSON document starts with it)
4       1           format version: 1 (a context event of schema version 1)
5       1           flags: bit 0 — features are float32 (else float64); bit 1 — a ``user_id``
                    is present; the other bits are 0
6       2           K, the number of arms (uint16, 1–10,000)
8       4           d, features per arm (uint32, ≥ 1)
12      4           reserved, 0
16      8           ``event_time`` (float64, epoch seconds)
24      K·d·w       the feature matrix, row-major (arm i's d values are the i-th block);
                    w = 8 (float64) or 4 (float32)
…       2·(2+u+K)   the byte lengths (uint16) of ``event_id``, ``bandit_id``, ``user_id`` (only
                    when flagged, u = 1) and the K arm ids, in that order
…       Σ lengths   those ids, UTF-8, concatenated
======  ==========  ============================================================================

All integers and floats are little-endian; the message ends exactly after the last id. Ids
follow the JSON schema's rules (1–200 characters, arm ids unique); numbers must be finite.
float32 features are widened to float64 on reading, which is exact: a producer that sends
float32 sends its values rounded to the nearest float32 (``np.float32(x)``), and the service
learns exactly those.

>>> import numpy as np
>>> raw = encode_binary_context("e-1", "shop", 1700000123.25, np.array([[0.5, -1.0]]), ["a"])
>>> len(raw), raw[:4]
(54, b'DPBC')
>>> ev = decode_binary_context(raw)
>>> ev.event_id, ev.bandit_id, ev.event_time, ev.candidate_ids(), ev.arm_features().tolist()
('e-1', 'shop', 1700000123.25, ['a'], [[0.5, -1.0]])
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "BINARY_ENCODINGS",
    "MAGIC",
    "BadBinaryContext",
    "BinaryContext",
    "decode_binary_context",
    "encode_binary_context",
]

MAGIC = b"DPBC"
VERSION = 1
#: magic, version, flags, K, d, reserved, event time
HEADER = struct.Struct("<4sBBHI4xd")
F32, USER = 1, 2
MAX_ARMS = 10_000
MAX_ID_CHARS = 200
#: feature encodings (``simulation.feature_encoding``) that write this form, by feature dtype
BINARY_ENCODINGS: dict[str, np.dtype] = {"raw-f64": np.dtype("<f8"), "raw-f32": np.dtype("<f4")}

_LENGTHS = [struct.Struct(f"<{n}H") for n in range(64)]
_TIME = struct.Struct("<d")
_F8, _F4 = np.dtype("<f8"), np.dtype("<f4")  # (a dtype object: parsing "<f8" costs 1 µs)
#: valid headers (bytes 4–16: version, flags, K, d, reserved) without a user id: their
#: layout, and by the ids after the event id (their lengths and bytes) of valid messages with
#: that header, (bandit id, arm ids)
_LAYOUTS: dict[bytes, tuple] = {}
_TAILS_CACHED = 0  # entries in the layouts' id caches
_CACHED = 256
_CACHED_KEY_BYTES = 1024  # ids after the event id longer than this are not remembered


class BadBinaryContext(ValueError):
    """A binary context message the service cannot use: its dead-letter ``reason`` and
    ``detail`` (the service turns it into a :class:`~.parsing.BadInput`)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class BinaryContext:
    """A context event read from the binary form: what the service reads of a
    :class:`~.schemas.ContextEvent` (ids, event time, user id, the per-arm feature matrix),
    without a pydantic model (building one costs more than reading the message).
    """

    __slots__ = ("_X", "arm_ids", "bandit_id", "event_id", "event_time", "user_id")

    v: Literal[1] = 1
    #: never a slate request, never a shared context
    slate_size: None = None

    def __init__(
        self,
        event_id: str,
        bandit_id: str,
        event_time: float,
        arm_ids: list[str],
        X: np.ndarray,
        user_id: str | None = None,
    ) -> None:
        self.event_id = event_id
        self.bandit_id = bandit_id
        self.event_time = event_time
        self.arm_ids = arm_ids
        self.user_id = user_id
        self._X = X

    def candidate_ids(self) -> list[str]:
        """The candidate arm ids, in order (the event's own list: read, never change it)."""
        return self.arm_ids

    def arm_features(self) -> np.ndarray:
        """The per-arm feature matrix (K, d), float64 (read-only)."""
        return self._X

    def shared_features(self) -> None:
        """None: this form carries per-arm features only."""
        return None

    def feature_objects(self) -> None:
        """None: this form carries per-arm feature vectors, not feature objects."""
        return None


def encode_binary_context(
    event_id: str,
    bandit_id: str,
    event_time: float,
    X: npt.ArrayLike,
    arm_ids: Sequence[str],
    user_id: str | None = None,
    dtype: npt.DTypeLike = "<f8",
) -> bytes:
    """One context event in the binary form (float64 features, or float32 with ``dtype``).

    >>> raw = encode_binary_context("e", "b", 5.0, [[1.0, 2.0]], ["a"], "u-7", dtype="<f4")
    >>> ev = decode_binary_context(raw)
    >>> len(raw), ev.user_id, ev.arm_features().dtype.name
    (46, 'u-7', 'float64')
    """
    dt = np.dtype(dtype).newbyteorder("<")
    if dt.kind != "f" or dt.itemsize not in (4, 8):
        raise ValueError("binary contexts carry float64 or float32 features")
    M = np.ascontiguousarray(X, dtype=dt)
    if M.ndim != 2 or M.shape[0] != len(arm_ids):
        raise ValueError("X must be (K, d), one row per arm id")
    K, d = M.shape
    flags = (F32 if dt.itemsize == 4 else 0) | (USER if user_id is not None else 0)
    ids = [event_id, bandit_id, *([user_id] if user_id is not None else []), *arm_ids]
    texts = [s.encode("utf-8") for s in ids]
    return b"".join(
        [
            HEADER.pack(MAGIC, VERSION, flags, K, d, float(event_time)),
            M.tobytes(),
            struct.pack(f"<{len(texts)}H", *map(len, texts)),
            *texts,
        ]
    )


def _invalid(detail: str) -> BadBinaryContext:
    return BadBinaryContext("invalid_event", f"binary context: {detail}")


def _ids_one_by_one(text: bytes, lengths: tuple[int, ...]) -> list[str]:
    """The ids of a message, each decoded and checked on its own (a non-ASCII or bad id)."""
    ids = []
    at = 0
    try:
        for m in lengths:
            if not 0 < m <= 4 * MAX_ID_CHARS:
                raise _invalid(f"an id of {m} bytes (1–{MAX_ID_CHARS} characters)")
            s = text[at : at + m].decode("utf-8")
            if len(s) > MAX_ID_CHARS:
                raise _invalid(f"an id of {len(s)} characters (at most {MAX_ID_CHARS})")
            ids.append(s)
            at += m
    except UnicodeDecodeError:
        raise _invalid("an id is not UTF-8") from None
    return ids


def decode_binary_context(raw: bytes) -> BinaryContext:
    """Read a binary context message, or raise :class:`BadBinaryContext`: ``invalid_event``
    (truncated, sizes that do not add up, a bad header or id) or ``non_finite_number``.

    >>> good = encode_binary_context("e", "b", 5.0, [[1.0, 2.0]], ["a"])
    >>> for bad in (good[:20], good[:-1], good + b"x", b"DPBC\\x02" + good[5:]):
    ...     try:
    ...         decode_binary_context(bad)
    ...     except BadBinaryContext as err:
    ...         print(err.reason, "|", err.detail)
    invalid_event | binary context: 20 bytes, shorter than its 24-byte header
    invalid_event | binary context: 48 bytes, expected 49 (1 arms × 2 float64 features, ids)
    invalid_event | binary context: 50 bytes, expected 49 (1 arms × 2 float64 features, ids)
    invalid_event | binary context: format version 2, this service reads 1
    >>> try:
    ...     decode_binary_context(encode_binary_context("e", "b", 5.0, [[1.0, np.inf]], ["a"]))
    ... except BadBinaryContext as err:
    ...     print(err.reason)
    non_finite_number
    """
    lay = _LAYOUTS.get(raw[4:16]) if raw[:4] == MAGIC else None
    if lay is not None:  # a header seen before: the per-message part only
        shape, width, start, ids_at, dtype, f32, tails = lay
        n = len(raw)
        m = raw[start] | raw[start + 1] << 8 if n > ids_at else 0  # the event id's bytes
        end = ids_at + m
        tail = tails.get(raw[start + 2 : ids_at] + raw[end:]) if 0 < m <= MAX_ID_CHARS else None
        if tail is not None and end < n:
            event_id = raw[ids_at:end]
            if event_id.isascii():
                t = _TIME.unpack_from(raw, 16)[0]
                top = raw[23 + width : start : width]
                if math.isfinite(t) and b"\x7f" not in top and b"\xff" not in top:
                    X = np.ndarray(shape, dtype, raw, 24)  # a read-only view
                    if f32:
                        X = X.astype(np.float64)
                    return BinaryContext(event_id.decode(), tail[0], t, tail[1], X)
    return _decode(raw)


def _decode(raw: bytes) -> BinaryContext:
    """:func:`decode_binary_context` of any message (every check on its own), remembering
    the header and the ids after the event id of a valid message without a user id."""
    n = len(raw)
    if n < 24:
        raise _invalid(f"{n} bytes, shorter than its 24-byte header")
    magic, version, flags, K, d, t = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise _invalid("no DPBC magic")
    if version != VERSION:
        raise _invalid(f"format version {version}, this service reads {VERSION}")
    if flags & ~(F32 | USER):
        raise _invalid(f"unknown flags {flags:#04x}")
    if not 1 <= K <= MAX_ARMS or d < 1:
        raise _invalid(f"{K} arms × {d} features (1–{MAX_ARMS} arms, at least 1 feature)")
    f32 = flags & F32
    width = 4 if f32 else 8
    n_ids = 2 + K + (1 if flags & USER else 0)
    start = 24 + K * d * width
    ids_at = start + 2 * n_ids
    if ids_at > n:
        raise _invalid(f"{n} bytes, too short for {K} arms × {d} features and {n_ids} id lengths")
    lengths = (_LENGTHS[n_ids] if n_ids < 64 else struct.Struct(f"<{n_ids}H")).unpack_from(
        raw, start
    )
    if ids_at + sum(lengths) != n:
        kind = "float32" if f32 else "float64"
        raise _invalid(
            f"{n} bytes, expected {ids_at + sum(lengths)} ({K} arms × {d} {kind} features, ids)"
        )
    text = raw[ids_at:]
    if text.isascii() and 0 < min(lengths) and max(lengths) <= MAX_ID_CHARS:
        # the common case: ASCII ids (a byte is a character), sliced from one decoded text
        ends = list(itertools.accumulate(lengths))
        whole = text.decode("ascii")
        ids = [whole[a:b] for a, b in zip([0, *ends], ends)]
    else:
        ids = _ids_one_by_one(text, lengths)
    arm_ids = ids[-K:]
    if len(set(arm_ids)) != K:
        raise _invalid("arm ids must be unique within an event")
    X = np.frombuffer(raw, _F4 if f32 else _F8, K * d, 24)
    # NaN and ±∞ have every exponent bit set, so the last byte of such a value (its sign and
    # highest exponent bits) is 0x7f or 0xff; when no value's last byte is, all are finite
    # (the common case, without a numpy call), else each value is checked
    top = raw[23 + width : start : width]
    if not math.isfinite(t) or ((b"\x7f" in top or b"\xff" in top) and not np.isfinite(X).all()):
        raise BadBinaryContext(
            "non_finite_number", "binary context: NaN or infinity among its numbers"
        )
    if f32:
        X = X.astype(np.float64)
    if not flags & USER:
        _remember(raw, ((K, d), width, start, ids_at, _F4 if f32 else _F8, f32), ids)
    return BinaryContext(
        ids[0], ids[1], t, arm_ids, X.reshape(K, d), ids[2] if flags & USER else None
    )


def _remember(raw: bytes, layout: tuple, ids: list[str]) -> None:
    """Remember a valid message's header and its ids after the event id (bandit id, arm ids),
    keyed by their bytes: the next message with the same header and the same ids is read
    without checking them again (a bounded cache; a message that misses it is read in full)."""
    global _TAILS_CACHED
    start, ids_at = layout[2], layout[3]
    m = raw[start] | raw[start + 1] << 8
    key = raw[start + 2 : ids_at] + raw[ids_at + m :]
    if len(key) > _CACHED_KEY_BYTES:  # (memory stays bounded: a few MB at most)
        return
    lay = _LAYOUTS.get(raw[4:16])
    if lay is None or _TAILS_CACHED >= _CACHED:
        if len(_LAYOUTS) >= _CACHED or _TAILS_CACHED >= _CACHED:
            _LAYOUTS.clear()
            _TAILS_CACHED = 0
        lay = _LAYOUTS[raw[4:16]] = (*layout, {})
    lay[-1][key] = (ids[1], ids[2:])
    _TAILS_CACHED += 1
