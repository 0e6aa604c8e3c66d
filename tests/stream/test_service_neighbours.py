"""The service-level privacy claim, checked on the real service loop (issue 31, item 2).

docs/privacy/service-level.md: on two input streams that differ only in the records of one
unit — one event (its context at its round, its feedback records), or at user level every
event of one user — the rows handed to the policy's ``learn`` (what reaches every accumulator,
and for a policy fed per update, which update reads them) differ only at the unit's rounds.
Whatever the unit's records do: other values, no reward, a reward twice (the same and a
conflicting one), its context twice, its reward moved seconds later or ahead of its context,
event times ahead within the skew, before the decision, from 1970, a reward out of range — the
join's expiry, the overload valve (``max_pending``, small here so that it fires), the
de-duplication and the dead letters treat every other event exactly the same.

Before issue 31 these failed: the feedback watermark (the largest feedback event time) and the
contexts watermark let one reward's or one context's event time expire or orphan other events'
joins, and the valve expired the oldest pending decision by count, so one missing reward chose
which other decision expired.
"""

from __future__ import annotations

import pytest

from dpbandit_testing.neighbour_helpers import (
    NEIGHBOURS,
    base_stream,
    differing_rounds,
    learned_rows,
    neighbour,
    user_ids,
)
from dpbandit_testing.stream_helpers import any_policy_config, bandit_config

#: a decision 12 or more rounds older than the newest expires (1.2 s of the 0.1 s stream):
#: the valve fires for about one reward in seven
VALVE = {"max_pending": 12, "on_expiry": "default", "default_reward": 0.0}
FLIPHAT = bandit_config(first_episode_len=128, swap_delay=100) | VALVE
DP_LINUCB = (
    any_policy_config(
        {"policy": "dp-linucb", "epsilon": 2.0, "delta": 0.1, "n_cap": 2048, "batch_size": 32},
        lag=40,
    )
    | VALVE
)
UNIT = "e300"


@pytest.fixture(scope="module")
def event_level(tmp_path_factory):
    stream = base_stream(800, seed=1)
    return stream, *learned_rows(tmp_path_factory.mktemp("nb-base"), stream, FLIPHAT)


def _check(rows, rounds, rows2, rounds2, unit_ids: set[str]) -> None:
    assert rounds.keys() - unit_ids == rounds2.keys() - unit_ids  # every other event decided
    assert {e: r for e, r in rounds.items() if e not in unit_ids} == {
        e: r for e, r in rounds2.items() if e not in unit_ids
    }  # ... at the same round (the unit's context stays decided: a substitution)
    mine = {rounds[e] for e in unit_ids if e in rounds} | {
        rounds2[e] for e in unit_ids if e in rounds2
    }
    assert differing_rounds(rows, rows2) <= mine


@pytest.mark.parametrize("kind", list(NEIGHBOURS))
def test_one_event_changes_only_its_own_row(event_level, tmp_path, kind):
    stream, rows, rounds, _ = event_level
    rows2, rounds2, _ = learned_rows(tmp_path, neighbour(stream, kind, {UNIT}), FLIPHAT)
    _check(rows, rounds, rows2, rounds2, {UNIT})


def test_the_base_stream_exercises_every_path(event_level, tmp_path):
    """The claim is not vacuous: in the base stream rewards join, decisions expire by the
    clock and by the valve, and the unit's own row really changes in a neighbour."""
    stream, rows, rounds, stats = event_level
    assert len(rows) == 800  # on_expiry: default — every decision is a row
    joined = sum(1 for x, y, _ in rows.values() if y != 0.0)
    assert 500 < joined < 800
    assert stats["join_full"] > 0 and stats["expired"] > 50  # max_pending reached
    rows2, _, _ = learned_rows(
        tmp_path, neighbour(stream, "features_and_rewards_changed", {UNIT}), FLIPHAT
    )
    assert differing_rounds(rows, rows2) == {rounds[UNIT]}


@pytest.fixture(scope="module")
def fed_per_update(tmp_path_factory):
    stream = base_stream(800, seed=2)
    return stream, *learned_rows(tmp_path_factory.mktemp("nb-linucb"), stream, DP_LINUCB)


@pytest.mark.parametrize(
    "kind", ["rewards_stamped_ahead", "rewards_removed", "contexts_stamped_ahead"]
)
def test_a_policy_fed_per_update_reads_the_same_rows_at_the_same_update(
    fed_per_update, tmp_path, kind
):
    """DP-LinUCB gets its rows once per update, sorted by round: which update reads a row is
    part of what it learns, and it is the same on neighbours."""
    stream, rows, rounds, _ = fed_per_update
    rows2, rounds2, _ = learned_rows(tmp_path, neighbour(stream, kind, {UNIT}), DP_LINUCB)
    _check(rows, rounds, rows2, rounds2, {UNIT})


USER_LEVEL = FLIPHAT | {"user_level": {"max_contributions_per_user": 2}}


@pytest.fixture(scope="module")
def user_level(tmp_path_factory):
    stream = base_stream(800, seed=3, users=40)
    return stream, *learned_rows(tmp_path_factory.mktemp("nb-users"), stream, USER_LEVEL)


@pytest.mark.parametrize(
    "kind",
    [
        "features_and_rewards_changed",
        "rewards_removed",
        "rewards_moved_late",
        "rewards_stamped_ahead",
        "contexts_stamped_ahead",
    ],
)
def test_one_user_changes_only_their_own_rows(user_level, tmp_path, kind):
    stream, rows, rounds, _ = user_level
    ids = user_ids(stream, "u1")  # the second most frequent: most beyond the bound of 2
    assert len(ids) > 20
    rows2, rounds2, _ = learned_rows(tmp_path, neighbour(stream, kind, ids), USER_LEVEL)
    _check(rows, rounds, rows2, rounds2, ids)
