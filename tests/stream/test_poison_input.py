"""No input may stop the loop (issue 19, item 1).

Whatever one message holds — a 400-digit integer, a nested container where a number belongs,
every JSON type at every field, bytes that are no JSON at all, a tombstone — reading it either
yields a usable event or sends that message to the dead-letter topic with a reason; the loop
goes on. Hypothesis throws arbitrary JSON values at both input topics of the service, at the
broadcast learner's decisions topic and at a decision replica's parser.
"""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dpbandit_testing.poison_helpers import (
    CONTEXTS,
    FEEDBACK,
    FIXED,
    HUGE,
    T0,
    dumps,
    features,
    good_binary_context,
    good_context,
    good_feedback,
    good_slate_feedback,
    good_watermark,
    malformed_raw_contexts,
)
from dpbandit_testing.stream_helpers import BANDIT, D, K
from dpbandit_testing.stream_helpers import settings as service_settings
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.settings import TopicsSettings
from streaming_dpbandit.stream.bandit import BanditRuntime
from streaming_dpbandit.stream.binary_context import MAGIC, decode_binary_context
from streaming_dpbandit.stream.messages import context_value
from streaming_dpbandit.stream.scaling.broadcast import learner_service
from streaming_dpbandit.stream.scaling.replica import DecisionReplica, dead_letters_of
from streaming_dpbandit.stream.schemas import ContextEvent, parse_feedback
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.transport import InProcessTransport, Source

leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.just(HUGE)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
json_values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


CONTEXT_PATHS = [
    ("v",),
    ("event_id",),
    ("bandit_id",),
    ("event_time",),
    ("arms",),
    ("arms", 0),
    ("arms", 0, "arm_id"),
    ("arms", 0, "features"),
    ("arms", 0, "features", 0),
    ("arm_ids",),
    ("arm_features_f64",),
    ("shared",),
    ("shared_f64",),
    ("user_id",),
    ("slate_size",),
    ("extra_field",),
]
FEEDBACK_PATHS = [
    ("v",),
    ("type",),
    ("event_id",),
    ("bandit_id",),
    ("reward",),
    ("event_time",),
    ("rewards",),
    ("rewards", "a0"),
    ("extra_field",),
]


def _put(doc, path, value):
    """``doc`` with the value at ``path`` replaced (created where missing; a non-container on
    the way is replaced by the container the path needs)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        doc = list(doc) if isinstance(doc, list) and doc else [None]
        doc[0] = _put(doc[0], rest, value)
        return doc
    doc = dict(doc) if isinstance(doc, dict) else {}
    doc[head] = _put(doc.get(head), rest, value)
    return doc


@st.composite
def poison(draw, kind: str):
    """One message of an input topic: a good message with some fields replaced by arbitrary
    JSON values, an arbitrary JSON document, arbitrary bytes, or (contexts) a good binary
    context with some bytes overwritten, cut off or appended."""
    i = draw(st.integers(0, 30))
    forms = ["fields", "fields", "fields", "document", "bytes"]
    form = draw(st.sampled_from(forms + (["binary"] if kind == "contexts" else [])))
    if form == "bytes":
        return draw(st.binary(max_size=64))
    if form == "binary":  # a binary context with bytes overwritten, cut off or appended
        good = good_context(i)
        raw = bytearray(
            context_value(
                good["event_id"],
                BANDIT,
                good["event_time"],
                np.array([a["features"] for a in good["arms"]]),
                [a["arm_id"] for a in good["arms"]],
                draw(st.sampled_from(["raw-f64", "raw-f32"])),
            )
        )
        for at, byte in draw(st.lists(st.tuples(st.integers(0, 80), st.integers(0, 255)))):
            raw[at] = byte
        cut = draw(st.integers(0, len(raw)))
        return bytes(raw[: max(4, len(raw) - cut)]) + draw(st.binary(max_size=8))
    if form == "document":
        return dumps(draw(json_values))
    if kind == "contexts":
        doc = draw(st.sampled_from([good_context, good_binary_context]))(i)
        paths = CONTEXT_PATHS
    else:
        doc = draw(st.sampled_from([good_feedback, good_watermark, good_slate_feedback]))(i)
        paths = FEEDBACK_PATHS
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3)):
        doc = _put(doc, path, draw(json_values))
    return dumps(doc)


class ListSource(Source):
    """Given records (topic, value), in order; values may be None (a tombstone)."""

    def __init__(self, records, topics=(CONTEXTS, FEEDBACK)):
        self.records = records
        self.topics = topics

    def generate(self, emit, max_new: int) -> bool:
        for topic, value in self.records:
            emit(topic, BANDIT.encode(), value)
        return False


def _valid_context(value) -> bool:
    try:
        if value.startswith(MAGIC):
            ev = decode_binary_context(value)
        else:
            ev = ContextEvent.model_validate_json(value)
    except Exception:
        return False
    X = ev.arm_features()
    return (
        ev.bandit_id == BANDIT
        and X is not None
        and X.shape[1] == D
        and ev.slate_size is None
        and math.isfinite(ev.event_time)
    )


def _valid_feedback(value) -> bool:
    try:
        parse_feedback(value)
    except Exception:
        return False
    return True


def _outcomes(transport, topic: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for v in transport.outputs.get("dpbandit.dead-letter", []):
        dl = json.loads(v)
        if dl["source_topic"] == topic and dl["payload_bytes"] >= 0:
            out.setdefault(dl["offset"], []).append(dl["reason"])
    return out


def run_records(tmp_path, records):
    st_ = service_settings(tmp_path, max_message_bytes=1_000_000)
    transport = InProcessTransport(ListSource(records), keep_outputs=True)
    svc = Service(st_, transport, ServiceMetrics())
    svc.open()
    svc.run()  # must return: no input may stop the loop
    return svc, transport


def check_every_message_has_its_outcome(transport, records):
    """Each context: exactly one decision or one dead letter. Each feedback message that
    cannot be read: dead-lettered (once, with a reason)."""
    ctx = [v for t, v in records if t == CONTEXTS]
    fb = [v for t, v in records if t == FEEDBACK]
    decided = [json.loads(v)["event_id"] for v in transport.outputs.get("dpbandit.decisions", [])]
    dead_ctx = _outcomes(transport, CONTEXTS)
    assert all(len(r) == 1 for r in dead_ctx.values())
    assert len(decided) + len(dead_ctx) == len(ctx)
    for off, value in enumerate(ctx):
        if off not in dead_ctx:
            assert _valid_context(value), value[:200]
    dead_fb = _outcomes(transport, FEEDBACK)
    for off, value in enumerate(fb):
        if not _valid_feedback(value):
            assert off in dead_fb, value[:200] if value else value
        for reason in dead_fb.get(off, []):
            assert reason and reason.replace("_", "").isalpha()


def test_the_issues_400_digit_event_time_is_dead_lettered(tmp_path):
    records = [(CONTEXTS, dumps(good_context(0) | {"event_time": HUGE}))]
    records += [(CONTEXTS, dumps(good_context(1)))]
    records += [(FEEDBACK, dumps(good_feedback(1) | {"event_time": HUGE}))]
    _svc, transport = run_records(tmp_path, records)
    dead = [json.loads(v) for v in transport.outputs["dpbandit.dead-letter"]]
    assert [(d["source_topic"], d["reason"]) for d in dead] == [
        (CONTEXTS, "invalid_event"),
        (FEEDBACK, "invalid_feedback"),
    ]
    assert "out of range" in dead[0]["detail"]
    assert len(transport.outputs["dpbandit.decisions"]) == 1


def test_hand_picked_poison_never_stops_the_loop(tmp_path):
    records = FIXED + [(CONTEXTS, dumps(good_context(i))) for i in range(6, 10)]
    _svc, transport = run_records(tmp_path, records)
    check_every_message_has_its_outcome(transport, records)
    assert len(transport.outputs["dpbandit.decisions"]) == 4


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.one_of(
            poison("contexts").map(lambda v: (CONTEXTS, v)),
            poison("feedback").map(lambda v: (FEEDBACK, v)),
        ),
        min_size=1,
        max_size=12,
    )
)
@example([(CONTEXTS, dumps(good_context(0) | {"event_time": HUGE}))])
def test_arbitrary_json_at_every_field_never_stops_the_loop(tmp_path_factory, records):
    # good messages around the poison: the loop must still decide and join them
    good = [(CONTEXTS, dumps(good_context(100 + i))) for i in range(3)]
    good += [(FEEDBACK, dumps(good_feedback(100 + i))) for i in range(3)]
    records = good[:3] + records + good[3:]
    _svc, transport = run_records(tmp_path_factory.mktemp("poison"), records)
    check_every_message_has_its_outcome(transport, records)
    decided = {json.loads(v)["event_id"] for v in transport.outputs["dpbandit.decisions"]}
    assert {"e100", "e101", "e102"} <= decided


def test_the_service_dead_letters_malformed_binary_contexts_and_decides_good_ones(tmp_path):
    good = [
        context_value(
            f"g{i}",
            BANDIT,
            T0 + i,
            np.array([features(i + k) for k in range(K)]),
            [f"a{k}" for k in range(K)],
            "raw-f64",
            user_id="u1",
        )
        for i in range(3)
    ]
    wrong_d = context_value("w", BANDIT, T0, np.ones((K, D + 1)), ["a", "b", "c"], "raw-f32")
    unknown = context_value("u", "nobody", T0, np.ones((K, D)), ["a", "b", "c"], "raw-f64")
    malformed = malformed_raw_contexts()
    bad = [raw for raw, _, _ in malformed.values()]
    records = [(CONTEXTS, v) for v in [good[0], *bad, wrong_d, unknown, good[1], good[2]]]
    _svc, transport = run_records(tmp_path, records)
    check_every_message_has_its_outcome(transport, records)
    decided = [json.loads(v)["event_id"] for v in transport.outputs["dpbandit.decisions"]]
    assert decided == ["g0", "g1", "g2"]
    dead = [json.loads(v) for v in transport.outputs["dpbandit.dead-letter"]]
    assert [d["reason"] for d in dead] == [
        *(reason for _, reason, _ in malformed.values()),
        "wrong_dimension",
        "unknown_bandit",
    ]
    assert all(d["detail"] for d in dead)


# -- the broadcast learner and the decision replica have parsers of their own ------------------
def _broadcast_decision(i: int) -> dict:
    return {
        "v": 1,
        "event_id": f"e{i}",
        "bandit_id": BANDIT,
        "arm_id": "a0",
        "arm_index": 0,
        "propensity": 1.0,
        "model_version": 0,
        "episode": 0,
        "round": 0,
        "calibration": "certified",
        "policy": "fliphat",
        "decided_at": T0 + i,
        "event_time": T0 + i,
        "features": features(i),
        "replica": "r0",
    }


DECISION_PATHS = [(k,) for k in _broadcast_decision(0)] + [("features", 0), ("extra",)]


@st.composite
def poison_decision(draw):
    form = draw(st.sampled_from(["fields", "fields", "document", "bytes"]))
    if form == "bytes":
        return draw(st.binary(max_size=64))
    if form == "document":
        return dumps(draw(json_values))
    doc = _broadcast_decision(draw(st.integers(0, 30)))
    for path in draw(st.lists(st.sampled_from(DECISION_PATHS), min_size=1, max_size=3)):
        doc = _put(doc, path, draw(json_values))
    return dumps(doc)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(poison_decision(), min_size=1, max_size=10))
@example([dumps(_broadcast_decision(0) | {"event_time": HUGE}), None])
def test_the_broadcast_learner_survives_arbitrary_decisions(tmp_path_factory, values):
    good = [dumps(_broadcast_decision(100 + i)) for i in range(3)]
    decisions = good + values
    records = [("dpbandit.decisions", v) for v in decisions]
    records += [(FEEDBACK, dumps(good_feedback(100)))]
    st_ = service_settings(
        tmp_path_factory.mktemp("learner"), broadcast={"role": "learner"}, max_message_bytes=10**6
    )
    transport = InProcessTransport(
        ListSource(records, ("dpbandit.decisions", FEEDBACK)), keep_outputs=True
    )
    learner = learner_service(st_, transport, ServiceMetrics())
    learner.open()
    learner.run()
    dead = _outcomes(transport, "dpbandit.decisions")
    recorded = learner.bandits[BANDIT].stats["decided"]
    assert recorded + len(dead) == len(decisions)
    assert recorded >= 3


class _Producer:
    def __init__(self):
        self.sent = []

    def send(self, topic, key=None, value=None):
        self.sent.append((topic, json.loads(value)))


def _replica(tmp_path) -> DecisionReplica:
    """A decision replica's parser without its Kafka clients."""
    st_ = service_settings(tmp_path, max_message_bytes=10**6)
    rep = DecisionReplica(st_)
    rep.topics = TopicsSettings()
    b = st_.bandits[BANDIT]
    rep.bandits = {BANDIT: BanditRuntime(BANDIT, b, b.policy.build(seed=b.seed), None)}
    rep.producer = _Producer()
    rep.dead_letters = dead_letters_of(rep.producer, rep.topics.dead_letter, st_, ServiceMetrics())
    return rep


class _Msg:
    def __init__(self, offset, value):
        self.offset, self.value, self.key = offset, value, BANDIT.encode()


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(poison("contexts"), min_size=1, max_size=10))
@example([dumps(good_context(0) | {"event_time": HUGE}), None, b"[" * 100_000])
def test_a_decision_replica_parses_arbitrary_contexts_or_dead_letters_them(tmp_path, values):
    rep = _replica(tmp_path)
    for off, v in enumerate(values):
        out = rep.parse("contexts", 0, _Msg(off, v), 0.0)
        dead = [m for t, m in rep.producer.sent if m["offset"] == off]
        assert (out is None) == (len(dead) == 1)
        if out is not None:
            assert _valid_context(v)
