"""User-level privacy in ``dpbandit serve`` (issue 22 §2): a bandit's ``user_level`` section
bounds each user's contributions, counts the bounded events, keeps user ids out of every output,
survives restarts without double counting, and states the whole-run guarantee per user."""

from __future__ import annotations

import json
import logging

import pytest

from dpbandit_testing.stream_helpers import (
    BANDIT,
    bandit_config,
    dead_letters,
    decisions,
    run_file,
)
from dpbandit_testing.user_level_helpers import (
    K_USER,
    N_USERS,
    raw_ids_in,
    user_bandit,
    write_user_stream,
)
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.privacy.user_level import user_level_of_records


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    return write_user_stream(tmp_path_factory.mktemp("user-stream"))


def test_serve_bounds_users_counts_bounded_and_never_outputs_a_user_id(stream, tmp_path, caplog):
    state = tmp_path / "state"
    caplog.set_level(logging.DEBUG)
    svc, transport, summary = run_file(state, stream, bandits={BANDIT: user_bandit()})
    rt = svc.bandits[BANDIT]
    c = rt.policy.user_counters()
    decided = summary["bandits"][BANDIT]["stats"]["decided"]
    # every decided event was admitted or bounded, once; popular users exceed k per episode
    assert c["admitted"] + c["bounded"] == decided > 1000
    assert c["bounded"] > 100 and c["bounded"] == summary["bandits"][BANDIT]["stats"]["bounded"]
    metric = svc.metrics.registry.get_sample_value(
        "dpbandit_bounded_events_total", {"bandit": BANDIT}
    )
    assert metric == c["bounded"]
    # the policy saw only admitted rows: FLIPHAT's rows per episode ≤ k × users in it
    assert summary["bandits"][BANDIT]["model_version"] >= 2
    # the event without a user id is dead-lettered; the malformed one is redacted
    dls = dead_letters(transport)
    assert [x["reason"] for x in dls if "no-user" in x["payload"]] == ["missing_user_id"]
    assert any("<redacted>" in x["payload"] for x in dls)
    # no raw user id anywhere: decisions, dead letters, ledger, snapshot, logs, metrics
    from prometheus_client import generate_latest

    blobs = {
        "decisions": json.dumps(decisions(transport)),
        "dead letters": json.dumps(dls),
        "ledger": (state / "ledger.jsonl").read_text(),
        "snapshot": "".join(p.read_bytes().decode("latin-1") for p in state.rglob("snap*")),
        "logs": caplog.text,
        "metrics": generate_latest(svc.metrics.registry).decode(),
        "summary": json.dumps(summary, default=str),
    }
    assert any(state.rglob("snap*"))
    for what, blob in blobs.items():
        assert raw_ids_in(blob) == [], f"user ids in the {what}"
    # the ledger states the whole-run guarantee per user, the same in the summary
    recs, _ = read_ledger(state / "ledger.jsonl")
    assert recs and all(r.user_level["max_contributions_per_user"] == K_USER for r in recs)
    # the bound is enforced, not only counted: each fit read at most k rows of each user
    for r in recs:
        assert r.rows_used is not None and r.event_range is not None
        assert r.rows_used <= K_USER * N_USERS < (r.event_range[1] - r.event_range[0]) // 2
    ul = user_level_of_records(recs, BANDIT)
    assert ul is not None
    assert summary["bandits"][BANDIT]["user_level"]["statement"] == ul.statement()
    assert ul.statement().startswith(f"per user: at most {K_USER} events per release")
    assert summary["bandits"][BANDIT]["privacy"]["of_record"] == ul.of_record()
    import io

    from streaming_dpbandit.stream.runner import print_summary

    text = io.StringIO()
    print_summary(summary, text)
    assert f"bandit {BANDIT}: {ul.statement()}" in text.getvalue()
    rec = svc.metrics.registry.get_sample_value(
        "dpbandit_privacy_epsilon_of_record",
        {"bandit": BANDIT, "calibration": "certified", "accountant": ul.of_record()["accountant"]},
    )
    assert rec == pytest.approx(ul.of_record()["epsilon"])


def test_event_level_bandit_is_unchanged_by_user_ids(stream, tmp_path):
    """No ``user_level`` section: user ids are ignored, nothing is bounded (today's numbers)."""
    _svc, _t, summary = run_file(tmp_path / "a", stream)
    assert "bounded" not in summary["bandits"][BANDIT]["stats"]
    assert "user_level" not in summary["bandits"][BANDIT]
    recs, _ = read_ledger(tmp_path / "a" / "ledger.jsonl")
    assert all(r.user_level is None for r in recs)
    assert '"user_level"' not in (tmp_path / "a" / "ledger.jsonl").read_text()


@pytest.mark.parametrize("crash_after", [3, 9])
def test_restart_neither_double_counts_nor_forgets_a_users_events(stream, tmp_path, crash_after):
    bandits = {BANDIT: user_bandit(max_releases_per_user=2)}
    ref, _t, ref_summary = run_file(tmp_path / "ref", stream, max_batch=64, bandits=bandits)
    state = tmp_path / "crash"
    often = {"directory": str(state), "interval_s": 1e-4}  # a snapshot at every poll
    _svc, _t1, crashed = run_file(
        state, stream, max_batch=64, crash_after=crash_after, bandits=bandits, snapshots=often
    )
    assert crashed is None
    from streaming_dpbandit.stream.snapshot import SnapshotStore

    held = SnapshotStore(state).load()["bandits"][BANDIT]["bounded_rounds"]
    assert len(held) > 0  # the snapshot holds decided-but-bounded rows not yet resolved
    svc, _t2, summary = run_file(state, stream, max_batch=64, bandits=bandits)
    assert svc.state_bytes() == ref.state_bytes()  # counters, admitted set, model: identical
    a, b = ref.bandits[BANDIT].policy.user_counters(), svc.bandits[BANDIT].policy.user_counters()
    assert a == b and a["admitted"] + a["bounded"] == ref_summary["bandits"][BANDIT]["rounds"]
    assert a["bounded_releases"] > 0  # E = 2 stopped popular users
    assert summary["bandits"][BANDIT]["user_level"] == ref_summary["bandits"][BANDIT]["user_level"]


def test_a_changed_user_level_bound_is_refused_on_restart(stream, tmp_path):
    from streaming_dpbandit.stream.errors import ServiceStartError

    state = tmp_path / "state"
    run_file(state, stream, max_batch=64, crash_after=2, bandits={BANDIT: user_bandit()})
    with pytest.raises(ServiceStartError, match="user_level"):
        run_file(state, stream, bandits={BANDIT: user_bandit(max_releases_per_user=5)})
    with pytest.raises(ServiceStartError, match="user_level"):
        run_file(state, stream, bandits={BANDIT: bandit_config()})


def test_serve_private_lasso_bounds_users_per_block(stream, tmp_path):
    """PrivateLASSO-R served user-level (in-process transport): admission at decision time
    uses its forgetful blocks as windows, so each block's release reads ≤ k rows of each user
    and a user is learned from again in the next block; the ledger states the per-user figure."""
    from dpbandit_testing.stream_helpers import D

    lasso = {"policy": "private-lasso", "d": D, "s0": 2, "horizon": 2048, "epsilon": 4.0}
    lasso |= {"delta": 1e-5, "clip_l2": 3.0, "reward_bound": 3.0}
    cfg = bandit_config() | {"policy": lasso, "user_level": {"max_contributions_per_user": K_USER}}
    _svc, _t, summary = run_file(tmp_path / "state", stream, bandits={BANDIT: cfg})
    rt = _svc.bandits[BANDIT]
    c = rt.policy.user_counters()
    decided = summary["bandits"][BANDIT]["stats"]["decided"]
    assert c["admitted"] + c["bounded"] == decided > 1000 and c["bounded"] > 100
    recs, _ = read_ledger(tmp_path / "state" / "ledger.jsonl")
    blocks = [r for r in recs if r.data_slice.startswith("block:")]
    assert len(blocks) == 3  # boundaries at slots 256, 512 and 1024
    assert all(r.rows_used <= K_USER * N_USERS for r in blocks)
    # per-block windows, not one for the run: more admitted than one window could hold
    assert sum(r.rows_used for r in blocks) > K_USER * N_USERS
    assert all(r.user_level["max_contributions_per_user"] == K_USER for r in recs)
    ul = user_level_of_records(recs, BANDIT)
    assert ul is not None and ul.releases_per_user == 3
    assert summary["bandits"][BANDIT]["user_level"]["statement"] == ul.statement()
    # the policy behind the bound was built at ρ(ε′, δ) = ρ(4, δ)/k²
    from streaming_dpbandit.privacy.zcdp import rho_from_epsilon_delta

    assert K_USER**2 * rt.policy.policy.rho == pytest.approx(rho_from_epsilon_delta(4.0, 1e-5))
