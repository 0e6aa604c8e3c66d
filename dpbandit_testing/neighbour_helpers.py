"""Neighbouring input streams through the real service loop (issue 31, item 2; the claims are
docs/privacy/service-level.md's, the tests tests/stream/test_service_neighbours.py).

A stream is a list of records in topic order — ``{"topic", "value" (a dict), "timestamp" (ms)}``
— stamped as a broker with ``LogAppendTime`` stamps them: by position, non-decreasing. A
neighbouring stream changes only the records of one unit (the records carrying the unit's event
ids: one event, or every event of one user): their values, their presence, their number, their
event times and their positions. A record put at another position takes the timestamp its new
position gets (the broker's clock at the append), and every other record keeps its own.

:func:`learned_rows` runs the service over a stream and returns every row handed to the
policy's ``learn`` (the rows that reach its accumulators), by round.

Each context offers one arm (``arms``: 1 by default), so the row a decision learns from is its
context whatever the released models say: the claim is about what the service hands a release
*given the releases before it* (adaptive composition takes care of the rest), and with one arm
the decisions cannot differ through the earlier releases.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from streaming_dpbandit.stream.arms import SingleArms

from .stream_helpers import BANDIT, D, decisions, run_file

__all__ = ["NEIGHBOURS", "Stream", "base_stream", "differing_rounds", "learned_rows"]

T0 = 1_760_000_000.0
DT = 0.1

Stream = list[dict]


def _stamp(t: float) -> int:
    return round(t * 1000)


def base_stream(
    n: int = 800,
    *,
    seed: int = 0,
    users: int | None = None,
    missing: float = 0.1,
    delay_mean: float = 0.6,
    arms: int = 1,
) -> Stream:
    """Contexts ``DT`` apart, rewards after an exponential delay (some never, some after the
    2 s window), a heartbeat every 20 contexts and a last one a day after the end; with
    ``users``, each context carries one of that many users (Zipf-popular)."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, arms, D)), 6)
    rewards = np.round(rng.normal(size=n), 6)
    delays = rng.exponential(delay_mean, n)
    rewarded = rng.random(n) >= missing
    who = None
    if users is not None:
        w = 1.0 / np.arange(1, users + 1)
        who = rng.choice(users, size=n, p=w / w.sum())
    items: list[tuple[float, int, dict]] = []  # (append time, order, record)
    for i in range(n):
        t = T0 + i * DT
        ctx = {
            "v": 1,
            "event_id": f"e{i}",
            "bandit_id": BANDIT,
            "event_time": t,
            "arms": [{"arm_id": f"arm-{k}", "features": X[i, k].tolist()} for k in range(arms)],
        }
        if who is not None:
            ctx["user_id"] = f"u{who[i]}"
        items.append((t, 2 * i, {"topic": "contexts", "value": ctx}))
        if rewarded[i]:
            f = t + delays[i]
            fb = {"v": 1, "event_id": f"e{i}", "bandit_id": BANDIT, "reward": float(rewards[i])}
            items.append((f, 2 * i + 1, {"topic": "feedback", "value": fb | {"event_time": f}}))
        if i % 20 == 19:
            hb = {"v": 1, "type": "watermark", "bandit_id": BANDIT, "event_time": t}
            items.append((t, 2 * i + 1, {"topic": "feedback", "value": hb}))
    end = T0 + n * DT + 86_400.0
    hb = {"v": 1, "type": "watermark", "bandit_id": BANDIT, "event_time": end}
    items.append((end, 2 * n, {"topic": "feedback", "value": hb}))
    items.sort(key=lambda x: (x[0], x[1]))
    return [rec | {"timestamp": _stamp(at)} for at, _, rec in items]


# -- neighbours: change only the records of the unit's event ids ------------------------------
def _of(stream: Stream, ids: set[str], topic: str) -> list[int]:
    return [
        j for j, r in enumerate(stream) if r["topic"] == topic and r["value"].get("event_id") in ids
    ]


def _move(stream: Stream, j: int, to: int) -> None:
    """Move record ``j`` to position ``to``: it takes the timestamp of the record before it
    there (the broker's clock at its new append)."""
    rec = stream.pop(j)
    to = min(to, len(stream))
    rec["timestamp"] = stream[to - 1]["timestamp"]
    stream.insert(to, rec)


def _features(s: Stream, ids: set[str]) -> None:
    rng = np.random.default_rng(99)
    for j in _of(s, ids, "contexts"):
        for arm in s[j]["value"]["arms"]:
            arm["features"] = np.round(rng.normal(size=D) * 3, 6).tolist()
    for j in _of(s, ids, "feedback"):
        s[j]["value"]["reward"] = -s[j]["value"]["reward"] + 7.0


def _no_reward(s: Stream, ids: set[str]) -> None:
    for j in reversed(_of(s, ids, "feedback")):
        del s[j]


def _reward_twice(s: Stream, ids: set[str]) -> None:
    for j in reversed(_of(s, ids, "feedback")):
        again = copy.deepcopy(s[j])
        other = copy.deepcopy(s[j])
        other["value"]["reward"] = 3.0
        s.insert(j + 1, again)  # the same reward, right after it
        s.insert(j + 6, other)  # and a conflicting one a few records later
        s[j + 6]["timestamp"] = s[j + 5]["timestamp"]


def _context_twice(s: Stream, ids: set[str]) -> None:
    for j in reversed(_of(s, ids, "contexts")):
        s.insert(j + 4, copy.deepcopy(s[j]))
        s[j + 4]["timestamp"] = s[j + 3]["timestamp"]


def _reward_late(s: Stream, ids: set[str]) -> None:
    for j in reversed(_of(s, ids, "feedback")):
        _move(s, j, j + 40)  # ~2 s of stream time later: after its window closed


def _reward_early(s: Stream, ids: set[str]) -> None:
    """The reward read before its own context (and before others' records)."""
    for j in _of(s, ids, "feedback"):
        first = min(_of(s, {s[j]["value"]["event_id"]}, "contexts"), default=j)
        _move(s, j, max(1, first - 5))


def _reward_ahead(s: Stream, ids: set[str]) -> None:
    for j in _of(s, ids, "feedback"):
        s[j]["value"]["event_time"] = s[j]["timestamp"] / 1000 + 250.0  # within the skew


def _reward_before(s: Stream, ids: set[str]) -> None:
    for j in _of(s, ids, "feedback"):
        s[j]["value"]["event_time"] -= 5.0  # before its decision


def _reward_far_past(s: Stream, ids: set[str]) -> None:
    for j in _of(s, ids, "feedback"):
        s[j]["value"]["event_time"] = 0.0  # beyond the lower bound: dead-lettered


def _reward_out_of_range(s: Stream, ids: set[str]) -> None:
    for j in _of(s, ids, "feedback"):
        s[j]["value"]["reward"] = 1e6  # beyond reward_bounds: dead-lettered


def _context_ahead(s: Stream, ids: set[str]) -> None:
    for j in _of(s, ids, "contexts") + _of(s, ids, "feedback"):
        s[j]["value"]["event_time"] += 250.0  # within the skew (300 s)


def _context_behind(s: Stream, ids: set[str]) -> None:
    for j in _of(s, ids, "contexts"):
        s[j]["value"]["event_time"] -= 3600.0  # within the lag (a day): its join closes at once


def _context_behind_twice(s: Stream, ids: set[str]) -> None:
    _context_behind(s, ids)
    _context_twice(s, ids)  # recognised: its id is remembered from its record's clock


#: How a neighbouring stream differs: one function per kind, changing the unit's records only
NEIGHBOURS: dict[str, Callable[[Stream, set[str]], None]] = {
    "features_and_rewards_changed": _features,
    "rewards_removed": _no_reward,
    "rewards_duplicated": _reward_twice,
    "contexts_duplicated": _context_twice,
    "rewards_moved_late": _reward_late,
    "rewards_moved_early": _reward_early,
    "rewards_stamped_ahead": _reward_ahead,
    "rewards_stamped_before_decision": _reward_before,
    "rewards_stamped_1970": _reward_far_past,
    "rewards_out_of_range": _reward_out_of_range,
    "contexts_stamped_ahead": _context_ahead,
    "contexts_stamped_behind": _context_behind,
    "contexts_stamped_behind_and_duplicated": _context_behind_twice,
}


def neighbour(stream: Stream, kind: str, ids: set[str]) -> Stream:
    out = copy.deepcopy(stream)
    NEIGHBOURS[kind](out, ids)
    return out


def user_ids(stream: Stream, user: str) -> set[str]:
    """The event ids of one user's contexts."""
    return {
        r["value"]["event_id"]
        for r in stream
        if r["topic"] == "contexts" and r["value"].get("user_id") == user
    }


# -- running ------------------------------------------------------------------------------------
def write(path: Path, stream: Stream) -> Path:
    path.write_text(
        "".join(json.dumps(r | {"value": json.dumps(r["value"])}) + "\n" for r in stream)
    )
    return path


@contextlib.contextmanager
def _recording(calls: list):
    original = SingleArms.learn

    def learn(self, policy, X, y, rounds):
        calls.append((np.array(X), np.array(y), np.array(rounds)))
        return original(self, policy, X, y, rounds)

    SingleArms.learn = learn  # type: ignore[method-assign]
    try:
        yield
    finally:
        SingleArms.learn = original  # type: ignore[method-assign]


def learned_rows(tmp: Path, stream: Stream, bandit: dict) -> tuple[dict, dict[str, int], dict]:
    """Run the service over ``stream``: ``({round: (row bytes, reward, learn call)},
    {event id: round}, the bandit's statistics)``. For a policy fed per update the learn call
    (which update read the row) is part of the row; for one that routes rows by round
    (FLIPHAT) it is not."""
    tmp.mkdir(parents=True, exist_ok=True)
    calls: list = []
    with _recording(calls):
        svc, transport, summary = run_file(
            tmp / "state", write(tmp / "in.jsonl", stream), bandit=bandit
        )
    routed = svc.bandits[BANDIT].policy.routes_rows_by_round
    rows = {}
    for k, (X, y, rounds) in enumerate(calls):
        for x, reward, r in zip(X, y, rounds):
            assert int(r) not in rows, "a round learned twice"
            rows[int(r)] = (x.tobytes(), float(reward), None if routed else k)
    rounds = {d["event_id"]: int(d["round"]) for d in decisions(transport)}
    return rows, rounds, summary["bandits"][BANDIT]["stats"]


def differing_rounds(a: dict, b: dict) -> set[int]:
    return {r for r in a.keys() | b.keys() if a.get(r) != b.get(r)}
