"""The compact binary context form (``stream/binary_context.py``, docs/events.md): exact round
trips, a documented float32 rounding, every malformed message dead-lettered with its reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpbandit_testing.poison_helpers import (
    T0,
    good_raw_context,
    malformed_raw_contexts,
    raw_context_with_ids,
)
from dpbandit_testing.stream_helpers import D, K
from streaming_dpbandit.stream.binary_context import (
    BadBinaryContext,
    decode_binary_context,
    encode_binary_context,
)
from streaming_dpbandit.stream.messages import FEATURE_ENCODINGS, context_value
from streaming_dpbandit.stream.schemas import ContextEvent

IDS = ["shoes", "hats", "ü-☃"]


def _matrix(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((K, D)) * 10.0 ** rng.integers(-300, 300, size=(K, D))
    X[0, :3] = [-0.0, 5e-324, np.finfo(np.float64).max]  # signed zero, subnormal, largest
    return X


def test_float64_round_trips_bit_for_bit_with_every_field():
    X = _matrix()
    raw = encode_binary_context("e-1042", "shop", 1700000123.25, X, IDS, user_id="u-77")
    ev = decode_binary_context(raw)
    assert (ev.event_id, ev.bandit_id, ev.event_time, ev.user_id, ev.v) == (
        "e-1042",
        "shop",
        1700000123.25,
        "u-77",
        1,
    )
    assert ev.candidate_ids() == IDS and ev.slate_size is None and ev.shared_features() is None
    assert ev.arm_features().tobytes() == X.astype("<f8").tobytes()
    assert decode_binary_context(encode_binary_context("e", "b", 1.0, X, IDS)).user_id is None


def test_float32_is_the_nearest_float32_of_each_value_and_half_the_features_bytes():
    X = np.random.default_rng(3).standard_normal((K, D))
    raw32 = context_value("e", "b", 1.0, X, IDS, "raw-f32")
    raw64 = context_value("e", "b", 1.0, X, IDS, "raw-f64")
    got = decode_binary_context(raw32).arm_features()
    assert got.dtype == np.float64
    assert got.tobytes() == X.astype(np.float32).astype(np.float64).tobytes()
    assert len(raw64) - len(raw32) == 4 * K * D


def test_the_binary_form_reads_like_the_json_form():
    X = np.round(np.random.default_rng(1).standard_normal((K, D)), 6)
    js = ContextEvent.model_validate_json(context_value("e", "b", 7.5, X, IDS, "json", "u"))
    bi = decode_binary_context(context_value("e", "b", 7.5, X, IDS, "raw-f64", "u"))
    for name in ("event_id", "bandit_id", "event_time", "user_id", "slate_size"):
        assert getattr(bi, name) == getattr(js, name)
    assert bi.candidate_ids() == js.candidate_ids()
    assert bi.arm_features().tobytes() == js.arm_features().tobytes()


def test_binary_contexts_are_smaller_than_json():
    X = np.round(np.random.default_rng(0).standard_normal((3, 100)), 6)
    size = {e: len(context_value("shop-123", "shop", T0, X, IDS, e)) for e in FEATURE_ENCODINGS}
    assert size["raw-f64"] < 0.8 * size["json"] and size["raw-f32"] < 0.4 * size["json"]


GOOD = good_raw_context()
MALFORMED = malformed_raw_contexts()


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_binary_contexts_are_rejected_with_a_reason(name):
    raw, reason, detail = MALFORMED[name]
    with pytest.raises(BadBinaryContext) as err:
        decode_binary_context(raw)
    assert err.value.reason == reason and detail in err.value.detail


def test_overflowing_finite_values_are_not_mistaken_for_infinity():
    X = np.full((2, 3), np.finfo(np.float64).max)  # their sum overflows; each is finite
    assert decode_binary_context(encode_binary_context("e", "b", 1.0, X, ["a", "b"])) is not None


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([GOOD, raw_context_with_ids("a", "b", "c"), MALFORMED["float32 inf"][0]]),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
    st.integers(0, 200),
    st.binary(max_size=8),
)
def test_mutated_binary_contexts_decode_or_are_rejected_never_crash(base, flips, cut, tail):
    raw = bytearray(base)
    for at, byte in flips:
        if at < len(raw):
            raw[at] = byte
    raw = bytes(raw[: max(4, len(raw) - cut % (len(raw) + 1))]) + tail
    try:
        ev = decode_binary_context(raw)
    except BadBinaryContext as err:
        assert err.reason in ("invalid_event", "non_finite_number") and err.detail
    else:
        assert np.isfinite(ev.arm_features()).all() and np.isfinite(ev.event_time)
        assert len(set(ev.arm_ids)) == len(ev.arm_ids) == ev.arm_features().shape[0]


@pytest.mark.parametrize("encoding", ["raw-f64", "raw-f32"])
def test_the_load_generator_and_the_simulated_source_write_the_binary_form(encoding):
    from streaming_dpbandit.envs import FliphatPaperEnv
    from streaming_dpbandit.stream.sim.loadgen import RealTimeStream
    from streaming_dpbandit.stream.sim.sources import SimulatedSource

    env = FliphatPaperEnv(d=D, K=K, s_star=3)
    live = RealTimeStream(env, "shop", rate=100, start=0.0, feature_encoding=encoding)
    values = live.contexts(0.025)
    sent: list[tuple[str, bytes]] = []
    SimulatedSource(env, 3, "shop", feature_encoding=encoding).generate(
        lambda topic, key, value, *_ts: sent.append((topic, value)), 3
    )
    values += [v for topic, v in sent if topic == "contexts"]
    events = [decode_binary_context(v) for v in values]  # type: ignore[arg-type]
    assert [e.event_id for e in events] == [
        "shop-0",
        "shop-1",
        "shop-2",
        "shop-0",
        "shop-1",
        "shop-2",
    ]
    assert all(e.arm_features().shape == (K, D) and e.bandit_id == "shop" for e in events)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["<f8", "<f4"]),
    st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=12),
    st.lists(st.sampled_from([np.nan, -np.nan, np.inf, -np.inf, 1e306, -3e38, 0.0]), max_size=3),
)
def test_any_bit_pattern_is_read_exactly_when_every_value_is_finite(dtype, bits, specials):
    """The finiteness check (a look at each value's last byte first) against numpy's, on
    arbitrary bit patterns (every NaN payload, both signs) and values near the largest."""
    width = np.dtype(dtype).itemsize
    values = np.array(bits, dtype="<u8").view(np.uint8)[: len(bits) * width].view(dtype).copy()
    for i, x in enumerate(specials):
        with np.errstate(over="ignore"):
            values[(7 * i) % len(values)] = x
    raw = encode_binary_context("e", "b", 1.0, values.reshape(1, -1), ["a"], dtype=dtype)
    try:
        got = decode_binary_context(raw).arm_features()
    except BadBinaryContext as err:
        assert err.reason == "non_finite_number" and not np.isfinite(values).all()
    else:
        assert np.isfinite(values).all()
        assert got.tobytes() == values.astype(np.float64).tobytes()


def test_a_recorded_stream_keeps_binary_contexts_and_replays_them_byte_for_byte(tmp_path):
    """RecordingSource writes a binary value as the line's ``value_b64``; FileSource reads it
    back as the same bytes (JSON values stay ``value``)."""
    from streaming_dpbandit.stream.sim.sources import FileSource, RecordingSource
    from streaming_dpbandit.stream.transport import Source

    X = np.arange(K * D, dtype=float).reshape(K, D)
    values = [
        ("contexts", context_value("e1", "shop", 5.0, X, IDS, "raw-f32")),
        (
            "feedback",
            b'{"v": 1, "event_id": "e1", "bandit_id": "shop", "reward": 1.0, "event_time": 5.5}',
        ),
        ("contexts", context_value("e2", "shop", 6.0, X, IDS, "raw-f64", user_id="u")),
    ]

    class Given(Source):
        topics = ("contexts", "feedback")

        def generate(self, emit, max_new):
            for topic, value in values:
                emit(topic, b"shop", value)
            return False

    path = tmp_path / "rec.jsonl"
    RecordingSource(Given(), path).generate(lambda *a: None, 10)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    binary, plain = ["topic", "value_b64"], ["topic", "value"]
    assert [sorted(x) for x in lines] == [binary, plain, binary]
    got: list[tuple[str, bytes]] = []
    FileSource(path).generate(lambda topic, key, value: got.append((topic, value)), 10)
    assert got == values


def _read(fn, raw: bytes):
    """Everything a reader gets from a message, or its dead-letter reason and detail."""
    try:
        ev = fn(raw)
    except BadBinaryContext as err:
        return ("bad", err.reason, err.detail)
    X = ev.arm_features()
    return (ev.event_id, ev.bandit_id, ev.user_id, ev.event_time, ev.arm_ids, X.dtype.str,
            X.shape, X.tobytes(), X.flags.writeable)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["e-1", "e-22", "é", "x" * 200, "y" * 201]), min_size=1, max_size=4),
    st.sampled_from([["a0", "a1", "a2"], ["a0", "a1"], ["a0", "ü"], ["a0", "a0"]]),
    st.sampled_from(["<f8", "<f4"]),
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
    st.sampled_from([1.0, 2.0, np.inf]),
)
def test_a_message_like_one_read_before_is_read_exactly_as_on_its_own(
    event_ids, arms, dtype, flips, value
):
    # the reader remembers the header and the ids after the event id of a valid message
    # without a user id, and reads the next such message's event id, time and features only:
    # every message (the remembered ones, and mutations of them) must read as the full check
    # of that message alone reads it, or be rejected with the same reason and detail
    from streaming_dpbandit.stream import binary_context as bc

    X = np.full((len(arms), 2), value)
    for eid in event_ids:
        raw = bytearray(encode_binary_context(eid, "shop", 5.0, X, arms, dtype=dtype))
        for at, byte in flips:
            if at < len(raw):
                raw[at] = byte
        for message in (bytes(raw), bytes(encode_binary_context(eid, "shop", 6.0, X, arms))):
            full = _read(bc._decode, message)
            assert _read(decode_binary_context, message) == full
            assert _read(decode_binary_context, message) == full  # remembered now, if valid


def test_the_remembered_ids_stay_bounded():
    # a stream of valid messages with ever new ids (or very many arms) cannot grow the cache
    from streaming_dpbandit.stream import binary_context as bc

    for i in range(3 * bc._CACHED):
        bc.decode_binary_context(encode_binary_context("e", f"b{i}", 1.0, [[1.0]], ["a"]))
    assert sum(len(lay[-1]) for lay in bc._LAYOUTS.values()) <= bc._CACHED
    many = [f"arm-{k}" for k in range(400)]
    raw = encode_binary_context("e", "b", 1.0, np.zeros((400, 1)), many)
    assert bc.decode_binary_context(raw).arm_ids == many
    assert all(many not in [v[1] for v in lay[-1].values()] for lay in bc._LAYOUTS.values())
