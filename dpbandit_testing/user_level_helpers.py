"""A recorded stream whose contexts carry user ids, and the user-level bandit it feeds
(``tests/stream/test_service_user_level.py``, ``tests/stream/kafka/test_user_level_kafka.py``,
the scaling modes' tests in ``tests/stream/scaling/``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from .stream_helpers import bandit_config, record_stream

K_USER = 3
N_USERS = 40


def user_name(i: int) -> str:
    return f"person-{i:03d}@example.org"


def user_bandit(**bound) -> dict:
    cfg = bandit_config()
    cfg["user_level"] = {"max_contributions_per_user": K_USER, **bound}
    return cfg


def write_user_stream(d, events: int = 1200):
    """A recorded stream whose contexts carry user ids (Zipf-popular users, so many exceed k),
    plus one context without a user id and one malformed context that names a user."""
    plain = d / "plain.jsonl"
    record_stream(plain, events, seed=5, state_dir=d / "rec")
    rng = np.random.default_rng(3)
    w = 1.0 / np.arange(1, N_USERS + 1)
    lines = [json.loads(x) for x in plain.read_text().splitlines()]
    out = []
    for i, line in enumerate(lines):
        if line["topic"] == "contexts":
            ev = json.loads(line["value"])
            if i == 7:
                out.append({**line, "value": json.dumps({**ev, "event_id": "no-user"})})
                out.append({**line, "value": '{"user_id": "' + user_name(999) + '", "event_id": '})
            ev["user_id"] = user_name(int(rng.choice(N_USERS, p=w / w.sum())))
            line = {**line, "value": json.dumps(ev)}
        out.append(line)
    path = d / "users.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in out))
    return path


def raw_ids_in(blob: str) -> list[str]:
    return [u for u in (user_name(i) for i in [*range(N_USERS), 999]) if u in blob]


#: Zipf popularity of the users (exponent 1): the most popular exceed k in every episode
_WEIGHTS = 1.0 / np.arange(1, N_USERS + 1)


def user_for(i: int, seed: int = 3) -> str:
    """The (Zipf-popular) user of event ``i``: a function of ``i`` only, however a stream is
    split or interleaved."""
    rng = np.random.default_rng([seed, i])
    return user_name(int(rng.choice(N_USERS, p=_WEIGHTS / _WEIGHTS.sum())))


def with_user_ids(src: Path, dst: Path) -> Path:
    """Copy a recorded JSONL stream, giving the n-th context the user :func:`user_for` (n)."""
    out = []
    n = 0
    for line in Path(src).read_text().splitlines():
        rec = json.loads(line)
        if rec["topic"] == "contexts":
            raw = isinstance(rec["value"], str)
            ev = json.loads(rec["value"]) if raw else dict(rec["value"])
            ev["user_id"] = user_for(n)
            n += 1
            rec["value"] = json.dumps(ev) if raw else ev
        out.append(json.dumps(rec))
    Path(dst).write_text("".join(x + "\n" for x in out))
    return Path(dst)


def expected_counts(users: list[str], windows, k: int) -> dict[str, int]:
    """Admitted and bounded events of a stream bounded at k per user per window (no cap on
    releases, no window closed early): the closed form, independent of the bounder."""
    n = Counter(zip(users, np.asarray(windows).tolist()))
    return {
        "admitted": sum(min(c, k) for c in n.values()),
        "bounded": sum(max(0, c - k) for c in n.values()),
    }
