"""The join store's early-feedback bookkeeping against a direct reference."""

from __future__ import annotations

import numpy as np

from streaming_dpbandit.stream.join import EarlyFeedback, JoinStore


def reference_orphans(early: dict, t: float) -> list:
    """The definition: ids all of whose held feedback is at or before t, in first-held order."""
    out = []
    for eid in [e for e, fbs in early.items() if all(f.event_time <= t for f in fbs)]:
        out.extend(early.pop(eid))
    return out


def test_orphaned_early_feedback_matches_the_definition_in_order():
    rng = np.random.default_rng(11)
    store = JoinStore(d=2, window=5.0, capacity=64, retention=10.0)
    ref: dict = {}
    t = 0.0
    for step in range(4000):
        op = rng.random()
        if op < 0.55:  # feedback arrives before its decision, event times jitter around t
            eid = f"e{rng.integers(0, 300)}"
            fb = EarlyFeedback(eid, float(step), t + float(rng.normal(0, 3)), ("fb", 0, step), t)
            store.hold_early(fb)
            ref.setdefault(eid, []).append(fb)
        elif op < 0.7:  # its decision arrives: the held feedback is taken
            eid = f"e{rng.integers(0, 300)}"
            assert store.take_early(eid) == ref.pop(eid, [])
        else:  # contexts advance the watermark
            t += float(rng.exponential(0.5))
            assert store.advance_context_watermark(t) == reference_orphans(ref, t)
        assert store.early == ref
        assert store.early_count == sum(len(v) for v in ref.values())


def _store_with_held_feedback() -> JoinStore:
    store = JoinStore(d=2, window=5.0, capacity=8, retention=10.0)
    store.add("a", round=1, event_time=1.0, context=np.array([0.5, -1.0]))
    store.hold_early(EarlyFeedback("b", 0.25, 2.0, ("fb", 3, 17), float("-inf")))
    store.hold_early(EarlyFeedback("b", 1.5, 2.5, ("fb", 3, 18), 2.0))
    store.hold_early(EarlyFeedback("c", -2.0, 3.0, ("fb", 1, 4), 2.5))
    return store


def test_held_feedback_round_trips_through_the_columnar_state():
    from streaming_dpbandit.utils.serialization import dumps, loads

    store = _store_with_held_feedback()
    state = loads(dumps(store.state_dict()))
    assert isinstance(state["early_times"], np.ndarray)  # columns, not one list per feedback
    back = JoinStore(d=2, window=5.0, capacity=8, retention=10.0).load_state_dict(state)
    assert back.early == store.early
    assert dumps(back.state_dict()) == dumps(store.state_dict())


def test_a_snapshot_with_held_feedback_as_rows_still_loads():
    """Snapshots written before the columns held each feedback as one list."""
    store = _store_with_held_feedback()
    state = store.state_dict()
    old = {k: v for k, v in state.items() if not k.startswith("early_")}
    old["early"] = [
        ["b", 0.25, 2.0, ["fb", 3, 17], float("-inf")],
        ["b", 1.5, 2.5, ["fb", 3, 18], 2.0],
        ["c", -2.0, 3.0, ["fb", 1, 4], 2.5],
    ]
    back = JoinStore(d=2, window=5.0, capacity=8, retention=10.0).load_state_dict(old)
    assert back.early == store.early


class _CountingPending(dict):
    """A pending store that counts the decisions read through ``values()``."""

    read = 0

    def values(self):
        for v in super().values():
            _CountingPending.read += 1
            yield v


def test_oldest_pending_round_reads_one_decision_when_rounds_came_in_order():
    """Issue 19, item 6: a bandit waiting for its release asks for the oldest pending round at
    every poll; that read every pending decision (tens of thousands in a catch-up). Decisions
    are added in round order, so the oldest is the first pending one. Out of order (never the
    case in the service), the answer is still the minimum."""
    rng = np.random.default_rng(0)
    js = JoinStore(d=1, window=10.0, capacity=20_000, retention=60.0)
    js.add_many(
        [f"e{i}" for i in range(10_000)],
        list(range(1, 10_001)),
        [1.0] * 10_000,
        np.zeros((10_000, 1)),
    )
    for i in rng.permutation(5_000):  # resolve half of them, in random order
        js.take_joined(f"e{i}")
    import collections

    counting = type("CountingOrdered", (_CountingPending, collections.OrderedDict), {})
    js.pending = counting(js.pending)
    _CountingPending.read = 0
    assert js.oldest_pending_round() == 5_001
    assert _CountingPending.read == 1
    # out of order: the minimum, by looking at all of them
    js2 = JoinStore(d=1, window=10.0, capacity=8, retention=60.0)
    js2.add_many(["a", "b"], [7, 9], [1.0, 1.0], np.zeros((2, 1)))
    js2.add("c", 3, 1.0, np.zeros(1))
    assert js2.oldest_pending_round() == 3
    js3 = JoinStore(d=1, window=10.0, capacity=8, retention=60.0)
    js3.add_many(["a", "b", "c"], [7, 2, 9], [1.0] * 3, np.zeros((3, 1)))
    assert js3.oldest_pending_round() == 2
    js3.take_joined("b")
    assert js3.oldest_pending_round() == 7
    # a restored store keeps the order of the snapshot
    js4 = JoinStore(d=1, window=10.0, capacity=20_000, retention=60.0).load_state_dict(
        js.state_dict()
    )
    assert js4.oldest_pending_round() == 5_001 and js4._rounds_in_order
