"""A join store's state in a snapshot, and back (``JoinStore.state_dict`` / ``load_state_dict``).

Canonical: pending decisions in insertion order, held feedback as columns, remembered ids
sorted by (decision time, id), so two runs that learned the same write the same bytes whatever
the interleaving of the topics. Records' clocks are kept only where they differ from the event
times (``pending_clocks``, ``resolved_kept_from``): a state of an input without record
timestamps reads as before issue 31.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

__all__ = ["EARLY_SOURCE_KEYS", "join_state", "load_join_state"]

_EVENT_ID, _REWARD, _EVENT_TIME, _SOURCE, _WATERMARK = map(
    operator.attrgetter, ("event_id", "reward", "event_time", "source", "watermark")
)


def _early_state(js: Any) -> dict:
    """Held feedback as columns (one array per field): a catch-up can hold tens of
    thousands, and a snapshot encodes an array in one step, a list item by item (the
    columns are read with ``map``/``zip``, which loop in C)."""
    held = list(itertools.chain.from_iterable(js.early.values()))
    rewards = list(map(_REWARD, held))
    topics, partitions, offsets = zip(*map(_SOURCE, held)) if held else ((), (), ())
    return {
        "early_ids": list(map(_EVENT_ID, held)),
        # per-item dicts for slates; plain rewards as one array
        "early_rewards": (
            rewards if dict in set(map(type, rewards)) else np.array(rewards, dtype=np.float64)
        ),
        "early_times": np.fromiter(map(_EVENT_TIME, held), np.float64, len(held)),
        "early_topics": list(topics),
        "early_partitions": np.array(partitions, dtype=np.int64),
        "early_offsets": np.array(offsets, dtype=np.int64),
        "early_watermarks": np.fromiter(map(_WATERMARK, held), np.float64, len(held)),
    }


def join_state(js: Any) -> dict:
    """A join store's state: its pending decisions, held feedback, remembered ids and
    clocks, in a canonical order (how the topics interleaved does not show)."""
    js._prune(js.feedback_watermark)  # canonical: only what is still remembered
    # by (decision time, id); tuples sort without a key function (tens of thousands)
    resolved = sorted([(t, e, out, keep) for e, (out, t, keep) in js.resolved.items()])
    kept = np.array([k for t, _, _, k in resolved], dtype=np.float64)
    rtimes = np.array([t for t, _, _, _ in resolved], dtype=np.float64)
    ids = list(js.pending)
    times = np.array([js.pending[e].event_time for e in ids], dtype=np.float64)
    clocks = np.array([js.pending[e].clock for e in ids], dtype=np.float64)
    return {
        "pending_ids": ids,
        "pending_rounds": np.array([js.pending[e].round for e in ids], dtype=np.int64),
        "pending_times": times,
        # records' clocks, where they differ from the event times
        **({"pending_clocks": clocks} if (clocks != times).any() else {}),
        "pending_contexts": np.array([js._contexts[js.pending[e].slot] for e in ids]).reshape(
            len(ids), js.d
        ),
        **_early_state(js),
        # canonical order (resolution order depends on how topics interleaved)
        "resolved_ids": [e for _, e, _, _ in resolved],
        "resolved_outcomes": [out for _, _, out, _ in resolved],
        "resolved_times": rtimes,
        **({"resolved_kept_from": kept} if (kept != rtimes).any() else {}),
        "feedback_watermark": js.feedback_watermark,
        "context_watermark": js.context_watermark,
    }


def load_join_state(js: Any, state: dict, early: type) -> Any:
    """Fill an empty join store ``js`` from a :func:`join_state` (of this or an older
    version); ``early``: the class of held feedback (``join.EarlyFeedback``)."""
    for eid, r, t, ctx, c in zip(
        state["pending_ids"],
        state["pending_rounds"],
        state["pending_times"],
        state["pending_contexts"],
        state.get("pending_clocks", state["pending_times"]),
    ):
        js.add(eid, int(r), float(t), np.asarray(ctx), float(c))
    for eid, reward, t, src, wm in _early_rows(state):
        reward = reward if isinstance(reward, dict) else float(reward)  # slates: per item
        source = (str(src[0]), int(src[1]), int(src[2]))
        js.hold_early(early(eid, reward, float(t), source, float(wm)))
    for eid, out, t, keep in zip(
        state["resolved_ids"],
        state["resolved_outcomes"],
        state["resolved_times"],
        state.get("resolved_kept_from", state["resolved_times"]),
    ):
        js._remember(eid, out, float(t), float(keep))
    js.feedback_watermark = float(state["feedback_watermark"])
    js.context_watermark = float(state["context_watermark"])
    return js


#: Where held feedback came from (topic, partition, offset): routing, not learning.
EARLY_SOURCE_KEYS = ("early_topics", "early_partitions", "early_offsets")


def _early_rows(state: dict):
    """(event id, reward, time, source, watermark) of each held feedback in a join state;
    reads the columns and the list of rows that snapshots before the columns held."""
    if "early" in state:  # older snapshots
        yield from state["early"]
        return
    yield from zip(
        state["early_ids"],
        state["early_rewards"],
        state["early_times"],
        zip(state["early_topics"], state["early_partitions"], state["early_offsets"]),
        state["early_watermarks"],
    )
