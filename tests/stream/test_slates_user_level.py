"""User-level privacy for slate bandits in ``dpbandit serve`` (issue 22 §2;
docs/privacy/user-level-slates.md): admission at decision time in round order, per-item rewards
kept, bounded slates counted, restarts neither double count nor forget, the whole-run statement
per user in the ledger and the summary, no user id in any output."""

from __future__ import annotations

import json
import logging

import pytest

from dpbandit_testing.slate_user_helpers import (
    K_USER,
    N_USERS,
    POLICY,
    raw_shoppers_in,
    user_slate_bandit,
    write_user_slate_stream,
)
from dpbandit_testing.stream_helpers import BANDIT, decisions, run_file, settings
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.privacy.user_level import user_level_of_records

EVENTS = 400


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    return write_user_slate_stream(tmp_path_factory.mktemp("slate-users"), EVENTS)


def test_serve_slates_admits_k_per_user_keeps_item_rewards_and_states_the_user_bound(
    stream, tmp_path, caplog, capsys
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
    # dpbandit budget over the service's ledger states the same figure
    from streaming_dpbandit.cli import main

    capsys.readouterr()
    assert main(["budget", str(state / "ledger.jsonl"), "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)["bandits"]
    assert item["user_level"]["statement"] == ul.statement()
    assert item["statement"]["epsilon"] == pytest.approx(1.0)
    assert "one user" in item["statement_text"]
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
        assert raw_shoppers_in(blob) == []


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
    from streaming_dpbandit.settings import ServiceSettings

    bad = user_slate_bandit()
    bad["policy"] = {**POLICY, "calibration": "paper"}
    with pytest.raises(ValueError, match="calibration=paper"):
        settings(tmp_path, bandit=bad, mode="simulation")
    assert isinstance(settings(tmp_path, bandit=user_slate_bandit()), ServiceSettings)
