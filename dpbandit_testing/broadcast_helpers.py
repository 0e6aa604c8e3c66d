"""Shared helpers of the model-broadcast tests (docs/scaling.md, pattern 2)."""

from __future__ import annotations

import json
from pathlib import Path

from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.stream.scaling.broadcast import (
    BroadcastDecision,
    learner_service,
    user_hashes,
)
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import FileSource
from streaming_dpbandit.stream.transport import InProcessTransport

from .stream_helpers import settings

DECISIONS = "dpbandit.decisions"
FEEDBACK = "dpbandit.feedback"


def numbers(obj) -> list[float]:
    """Every numeric leaf of a JSON-like object (bools excluded)."""
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in numbers(v)]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return [float(obj)]
    return []


def leaked_numbers(message: dict, released: dict) -> list[float]:
    """Numbers of a models-topic message that are neither released values nor header fields
    (version, episode, time, schema version): anything here leaked from private state."""
    allowed = set(numbers(released))
    allowed |= {
        float(message["v"]),
        float(message["model_version"]),
        float(message["episode"]),
        float(message["published_at"]),
    }
    return [x for x in numbers(message) if x not in allowed]


def as_broadcast_decision(decision: dict, context: dict, replica: str = "r0", users=None) -> dict:
    """The decision replica's message for a service decision of ``context``; ``users``: the
    ``UserLevel`` policy whose key hashes the context's user id (a user-level bandit)."""
    a = decision["arm_index"]
    extra = {}
    if users is not None:
        (h,), key = user_hashes(users, [context["user_id"]])
        extra = {"user_hash": h, "user_key": key}
    return BroadcastDecision(
        **{k: v for k, v in decision.items() if k != "round"},
        round=0,
        event_time=context["event_time"],
        features=context["arms"][a]["features"],
        replica=replica,
        **extra,
    ).model_dump(exclude_none=True)


def broadcast_stream(stream: Path, decisions: list[dict], out: Path, users=None) -> None:
    """Replace each context line of a recorded stream by its decision, in place (as the
    learner reads them: decisions and feedback); ``users``: see :func:`as_broadcast_decision`."""
    by_id = {d["event_id"]: d for d in decisions}
    lines = []
    for line in stream.read_text().splitlines():
        rec = json.loads(line)
        if rec["topic"] == "contexts":
            try:
                ctx = json.loads(rec["value"]) if isinstance(rec["value"], str) else rec["value"]
            except ValueError:  # a malformed context: dead-lettered, never decided
                continue
            dec = by_id.get(ctx.get("event_id"))
            if dec is None:
                continue
            msg = as_broadcast_decision(dec, ctx, users=users)
            # a replica stamps a decision with its context record's timestamp
            rec = {"topic": "contexts", "value": json.dumps(msg)} | (
                {"timestamp": rec["timestamp"]} if "timestamp" in rec else {}
            )
        lines.append(json.dumps(rec))
    out.write_text("".join(x + "\n" for x in lines))


def run_learner_file(state_dir, path: Path, **over) -> tuple[Service, InProcessTransport, dict]:
    """A learner over a JSONL file of decisions (as "contexts" lines) and feedback."""
    st = settings(state_dir, broadcast={"role": "learner"}, **over)
    transport = InProcessTransport(FileSource(path, (DECISIONS, FEEDBACK)), keep_outputs=True)
    learner = learner_service(st, transport, ServiceMetrics())
    learner.open()
    summary = learner.run()
    return learner, transport, summary


def pickup_delays(pickups, published: dict[int, float], versions) -> dict[int, float]:
    """Per model version v: first time the replica held a version ≥ v, minus v's publication."""
    out = {}
    for v in versions:
        loaded = [t for (_b, ver, _p, t) in pickups if ver >= v]
        out[v] = (min(loaded) - published[v]) if loaded else float("inf")
    return out
