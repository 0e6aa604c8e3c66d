"""User-level privacy for slate bandits in ``dpbandit serve`` (issue 22 §2;
docs/privacy/user-level-slates.md): admission at decision time in round order, per-item rewards
kept, bounded slates counted, restarts neither double count nor forget, the whole-run statement
per user in the ledger and the summary, no user id in any output."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.privacy.user_level import user_level_of_records
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import RecordingSource
from streaming_dpbandit.stream.slates.sources import SlateSimulatedSource
from streaming_dpbandit.stream.transport import InProcessTransport
from streaming_dpbandit.testing.slate_helpers import PartitionEnv, slate_bandit
from streaming_dpbandit.testing.stream_helpers import BANDIT, decisions, run_file, settings

K_USER = 2
N_USERS = 60
EVENTS = 400
LAG = 48
ITEMS = [f"sku-{i:02d}" for i in range(40)]
POLICY = {
    "policy": "dpucb-mat",
    "matroid": {
        "type": "partition",
        "categories": [i % 4 for i in range(40)],
        "capacities": [2, 1, 1, 1],
    },
    "epsilon": 1.0,
    "update_every": 16,
    "items": ITEMS,
}


def user_name(i: int) -> str:
    return f"shopper-{i:03d}@example.org"


def user_slate_bandit(**bound) -> dict:
    return {
        **slate_bandit(POLICY, lag=LAG),
        "user_level": {"max_contributions_per_user": K_USER, **bound},
    }


class UserSlateSource(SlateSimulatedSource):
    """Slate requests from Zipf-popular returning users (each context carries a ``user_id``)."""

    def _send(self, emit, topic, value):
        if topic == self.topics[0]:
            i = int(value["event_id"].rsplit("-", 1)[1])
            value = {**value, "user_id": user_name(int(USERS[i]))}
        super()._send(emit, topic, value)


_w = 1.0 / np.arange(1, N_USERS + 1)
USERS = np.random.default_rng(4).choice(N_USERS, size=EVENTS, p=_w / _w.sum())


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """A slate stream (EVENTS requests, per-item feedback) recorded from a user-level bandit."""
    d = tmp_path_factory.mktemp("slate-users")
    path = d / "users.jsonl"
    src = UserSlateSource(
        PartitionEnv(),
        EVENTS,
        BANDIT,
        dt=0.01,
        delay_mean=0.3,
        feedback_probability=0.85,
        seed=3,
        topics=("dpbandit.contexts", "dpbandit.feedback"),
        item_ids=ITEMS,
    )
    st = settings(d / "record", bandit=user_slate_bandit())
    svc = Service(st, InProcessTransport(RecordingSource(src, path)))
    svc.open()
    svc.run()
    return path


def test_serve_slates_admits_k_per_user_keeps_item_rewards_and_states_the_user_bound(
    stream, tmp_path, caplog
):
    state = tmp_path / "state"
    caplog.set_level(logging.DEBUG)
    svc, transport, summary = run_file(state, stream, bandits={BANDIT: user_slate_bandit()})
    rt = svc.bandits[BANDIT]
    b = summary["bandits"][BANDIT]
    c = rt.policy.user_counters()
    # every decided slate is admitted or bounded, exactly once; popular users exceed k
    assert c["admitted"] + c["bounded"] == b["stats"]["decided"] == EVENTS
    assert c["bounded"] > 100 and c["bounded"] == b["stats"]["bounded"]
    assert c["admitted"] <= K_USER * N_USERS
    metric = svc.metrics.registry.get_sample_value(
        "dpbandit_bounded_events_total", {"bandit": BANDIT}
    )
    assert metric == c["bounded"]
    # every slate is still decided and answered
    assert len(decisions(transport)) == EVENTS
    # the policy learned only admitted slates, with their K per-item rewards (not flattened)
    inner = rt.policy.policy
    learned = inner.counters["rows_learned"]
    assert 0 < learned <= c["admitted"]
    est = inner._est
    assert est.observations == inner.K * learned
    # the ledger and the summary state the whole-run guarantee per user
    recs, _ = read_ledger(state / "ledger.jsonl")
    assert recs and all(r.user_level["max_contributions_per_user"] == K_USER for r in recs)
    assert sum(r.rows_used or 0 for r in recs) <= inner.K * K_USER * N_USERS
    ul = user_level_of_records(recs, BANDIT)
    assert ul is not None
    assert ul.of_record()["epsilon"] == pytest.approx(1.0)  # ε for k slates, ε/k configured
    assert inner.epsilon == pytest.approx(1.0 / K_USER)
    assert b["user_level"]["statement"] == ul.statement()
    assert ul.statement().startswith(f"per user: at most {K_USER} events per release")
    # no raw user id anywhere
    blobs = [
        json.dumps(decisions(transport)),
        (state / "ledger.jsonl").read_text(),
        "".join(p.read_bytes().decode("latin-1") for p in state.rglob("snap*")),
        caplog.text,
        json.dumps(summary, default=str),
    ]
    assert any(state.rglob("snap*"))
    for blob in blobs:
        assert not [u for u in map(user_name, range(N_USERS)) if u in blob]


@pytest.mark.parametrize("crash_after", [3])
def test_slate_restart_neither_double_counts_nor_forgets_a_users_slates(
    stream, tmp_path, crash_after
):
    bandits = {BANDIT: user_slate_bandit()}
    ref, _t, ref_summary = run_file(tmp_path / "ref", stream, max_batch=32, bandits=bandits)
    state = tmp_path / "crash"
    often = {"directory": str(state), "interval_s": 1e-4}  # a snapshot at every poll
    _svc, _t1, crashed = run_file(
        state, stream, max_batch=32, crash_after=crash_after, bandits=bandits, snapshots=often
    )
    assert crashed is None
    from streaming_dpbandit.stream.snapshot import SnapshotStore

    snap = SnapshotStore(state).load()["bandits"][BANDIT]
    assert len(snap["bounded_rounds"]) > 0  # decided-but-bounded slates not yet resolved
    svc, _t2, summary = run_file(state, stream, max_batch=32, bandits=bandits)
    assert svc.state_bytes() == ref.state_bytes()  # counters, admitted set, model: identical
    a, b = ref.bandits[BANDIT].policy.user_counters(), svc.bandits[BANDIT].policy.user_counters()
    assert a == b and a["admitted"] + a["bounded"] == ref_summary["bandits"][BANDIT]["rounds"]
    assert summary["bandits"][BANDIT]["user_level"] == ref_summary["bandits"][BANDIT]["user_level"]


def test_slate_user_level_refuses_the_paper_calibration(tmp_path):
    from streaming_dpbandit.config import ServiceSettings

    bad = user_slate_bandit()
    bad["policy"] = {**POLICY, "calibration": "paper"}
    with pytest.raises(ValueError, match="calibration=paper"):
        settings(tmp_path, bandit=bad, mode="simulation")
    assert isinstance(settings(tmp_path, bandit=user_slate_bandit()), ServiceSettings)
