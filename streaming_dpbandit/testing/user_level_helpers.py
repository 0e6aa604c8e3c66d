"""A recorded stream whose contexts carry user ids, and the user-level bandit it feeds
(``tests/stream/test_service_user_level.py``, ``tests/stream/kafka/test_user_level_kafka.py``)."""

from __future__ import annotations

import json

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
