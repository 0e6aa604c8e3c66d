"""The service's stages work from what they are handed (issue 33): a :class:`StageContext` and
their collaborators, no :class:`Service`; the privacy=local bandits are a collaborator the
service is given, like its other hooks."""

from __future__ import annotations

import collections
import inspect
import json

from dpbandit_testing.stream_helpers import BANDIT, D
from dpbandit_testing.stream_helpers import settings as service_settings
from streaming_dpbandit.stream.contexts import ContextStage
from streaming_dpbandit.stream.feedback import FeedbackStage
from streaming_dpbandit.stream.local.hook import LocalBandits
from streaming_dpbandit.stream.parsing import ContextParser
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.stage import StageContext, StreamState
from streaming_dpbandit.stream.transport import InProcessTransport, Record

CTX, FB = ("dpbandit.contexts", 0), ("dpbandit.feedback", 0)


def _context(i: int) -> bytes:
    arms = [{"arm_id": a, "features": [0.1 * (k + 1)] * D} for k, a in enumerate("abc")]
    event = {"v": 1, "event_id": f"e{i}", "bandit_id": BANDIT, "event_time": 1.7e9 + i}
    return json.dumps(event | {"arms": arms}).encode()


class NoSource:
    topics = ("dpbandit.contexts", "dpbandit.feedback")

    def on_output(self, *_args) -> None:
        pass


class KeepDecisions:
    """A decider that keeps the decision messages instead of publishing them."""

    outcome = "decided"

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def __call__(self, rt, chunk) -> None:
        self.messages.extend(rt.decide_messages(chunk))


def test_the_stages_take_a_context_and_collaborators_not_the_service(tmp_path):
    for stage in (ContextStage, FeedbackStage):
        params = list(inspect.signature(stage).parameters)
        assert params[0] == "ctx" and "service" not in params, params
    svc = Service(service_settings(tmp_path / "s"), InProcessTransport(NoSource()))
    svc.build_bandits()
    svc.transport.open({})  # (where the dead letters go)
    # the bandits and dead letters the service built, a stream state of the test's own
    state = StreamState(wall=1.7e9 + 100)
    ctx = StageContext(
        svc.settings, state, svc.bandits, svc.dead_letters, svc.metrics, svc.missing_bandit
    )
    releases: list[str] = []
    decider = KeepDecisions()
    stage = ContextStage(ctx, ContextParser(), decider, lambda rt: releases.append(rt.bandit_id))
    q = collections.deque((Record(*CTX, i, BANDIT.encode(), _context(i)), 0.0) for i in range(3))
    q.append((Record(*CTX, 3, BANDIT.encode(), b"{"), 0.0))  # malformed: dead-lettered
    stage(CTX, q)
    assert [json.loads(m)["event_id"] for m in decider.messages] == ["e0", "e1", "e2"]
    assert not q and releases == []
    assert state.offsets == {CTX: 4} and not state.blocked  # the state it was handed moved
    assert svc.offsets == {} and svc.dead_count["malformed_json"] == 1
    feedback = FeedbackStage(ctx, svc.local, svc.transport, "dpbandit.feedback")
    fb = {"v": 1, "event_id": "e0", "bandit_id": BANDIT, "reward": 1.0, "event_time": 1.7e9 + 1}
    q = collections.deque([(Record(*FB, 0, BANDIT.encode(), json.dumps(fb).encode()), 0.0)])
    feedback(FB, q)
    assert state.offsets[FB] == 1 and svc.offsets == {}
    assert svc.bandits[BANDIT].stats["joined"] == 1


def test_the_local_bandits_are_injected(tmp_path):
    made = []

    def local(settings, transport, topics, metrics) -> LocalBandits:
        made.append(LocalBandits(settings, transport, topics, metrics))
        return made[-1]

    svc = Service(service_settings(tmp_path / "s"), InProcessTransport(None), local=local)
    svc.build_bandits()
    assert made and svc.local is made[0] and svc.feedback.local is made[0]
