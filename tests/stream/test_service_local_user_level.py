"""User-level local DP in ``dpbandit serve`` (issue 22 §2; docs/privacy/user-level-ldp.md): the
model is published at the per-report calibration of k reports per user, the devices bound
themselves (a report beyond k is not sent, counted as bounded), and the ledger, the summary
and ``dpbandit budget`` state the whole-run guarantee per user."""

import json

import pytest
from prometheus_client import generate_latest

from dpbandit_testing.ldp_stream_helpers import (
    BANDIT,
    MODELS,
    TOPICS,
    env_for,
    local_bandit,
    local_settings,
    published,
)
from dpbandit_testing.stream_helpers import run_file
from streaming_dpbandit.cli import main
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.privacy.user_level import user_level_of_records
from streaming_dpbandit.stream.local.clients import SimulatedLDPClients
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import RecordingSource
from streaming_dpbandit.stream.transport import InProcessTransport

K_USER = 2
USERS = 60
REPORTS = 1200


def _bandit():
    return {
        **local_bandit(d=4, refresh_every=50),
        "user_level": {"max_contributions_per_user": K_USER},
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Simulated devices (60 returning users, k = 2 each) talk to the service; recorded."""
    d = tmp_path_factory.mktemp("ldp-user")
    bandit = _bandit()
    src = SimulatedLDPClients(
        env_for(bandit),
        REPORTS,
        BANDIT,
        topics=TOPICS,
        models_topic=MODELS,
        seed=2,
        chunk=97,
        max_reports_per_user=K_USER,
        users=USERS,
    )
    metrics = ServiceMetrics()
    transport = InProcessTransport(RecordingSource(src, d / "reports.jsonl"), keep_outputs=True)
    svc = Service(local_settings(d / "state", bandit), transport, metrics)
    svc.open()
    summary = svc.run()
    return d, src, svc, transport, metrics, summary


def test_devices_bound_themselves_and_the_bounded_rounds_are_counted(served):
    _d, src, svc, _t, metrics, summary = served
    rt = svc.local.runtimes[BANDIT]
    sent = rt.server.reports
    assert 0 < sent <= K_USER * USERS  # each device sent at most k reports
    assert src.bounded == REPORTS - sent and src.summary()["bounded"] == src.bounded
    text = generate_latest(metrics.registry).decode()
    line = f'dpbandit_bounded_events_total{{bandit="{BANDIT}"}} {float(src.bounded)}'
    assert line in text
    ul = summary["local_bandits"][BANDIT]["privacy"]["user_level"]
    assert ul["privacy_model"] == "local" and ul["of_record"]["epsilon"] == pytest.approx(1.0)
    assert (
        "every report their device sends (at most 2 over the run)"
        in (summary["local_bandits"][BANDIT]["statement"])
    )


def test_the_model_is_published_at_the_per_report_split(served):
    _d, _src, _svc, transport, _m, _s = served
    models = published(transport)
    assert models and all(m["spec"]["epsilon"] == pytest.approx(1.0 / K_USER) for m in models)


def test_file_transport_ledger_and_budget_state_the_per_user_guarantee(served, tmp_path, capsys):
    d, _src, svc, _t, _m, _s = served
    state = tmp_path / "state"
    svc2, _tr, _summary = run_file(state, d / "reports.jsonl", bandits={BANDIT: _bandit()})
    assert svc2.state_bytes() == svc.state_bytes()  # the recorded reports, learned the same
    recs, _ = read_ledger(state / "ledger.jsonl")
    assert recs and all(r.user_level["max_contributions_per_user"] == K_USER for r in recs)
    ul = user_level_of_records(recs, BANDIT)
    assert ul.of_record()["epsilon"] == pytest.approx(1.0) and ul.of_record()["delta"] == 0.0
    assert main(["budget", str(state / "ledger.jsonl"), "--json"]) == 0
    out = capsys.readouterr().out
    assert "at most 2 reports sent by their device over the run (local DP)" in out
    assert "every report their device sends (at most 2 over the run)" in out  # the unit
    json.loads(out)


def test_changing_the_bound_on_a_state_directory_is_refused(served, tmp_path):
    d, *_ = served
    state = tmp_path / "state"
    run_file(state, d / "reports.jsonl", bandits={BANDIT: _bandit()})
    other = _bandit()
    other["user_level"] = {"max_contributions_per_user": 3}
    with pytest.raises(RuntimeError, match="changed since the snapshot"):
        run_file(state, d / "reports.jsonl", bandits={BANDIT: other})


def test_windowed_devices_report_again_in_later_windows_and_the_ledger_composes_e(tmp_path):
    bandit = _bandit()
    bandit["user_level"] |= {"window_rounds": 300, "max_releases_per_user": 2}
    src = SimulatedLDPClients(
        env_for(bandit), 900, BANDIT, topics=TOPICS, models_topic=MODELS, seed=4,
        max_reports_per_user=K_USER, users=USERS, window_rounds=300, max_windows_per_user=2,
    )  # fmt: skip
    svc = Service(local_settings(tmp_path, bandit), InProcessTransport(src, keep_outputs=True))
    svc.open()
    summary = svc.run()
    sent = svc.local.runtimes[BANDIT].server.reports
    assert K_USER * USERS < sent <= 2 * K_USER * USERS and src.bounded == 900 - sent
    recs, _ = read_ledger(tmp_path / "ledger.jsonl")
    ul = user_level_of_records(recs, BANDIT)
    assert ul.window_rounds == 300 and ul.of_record()["epsilon"] == pytest.approx(2.0)
    assert summary["local_bandits"][BANDIT]["privacy"]["user_level"]["statement"] == (
        ul.statement()
    )


def test_serve_with_embedded_devices_bounds_them_and_says_so(tmp_path, capsys):
    import yaml

    cfg = {
        "mode": "service",
        "simulation": {"env": "ldp-glb-single", "env_params": {"d": 2, "K": 10}, "events": 500},
        "bandits": {
            "default": {
                "privacy": "local",
                "policy": {"policy": "ldp-glb", "d": 2, "n_arms": 10, "refresh_every": 100},
                "user_level": {
                    "max_contributions_per_user": 3,
                    "max_releases_per_user": 2,
                    "window_rounds": 250,
                },
            }
        },
        "snapshots": {"directory": str(tmp_path / "state"), "interval_s": 3600},
        "metrics": {"enabled": False},
        "model_server": {"enabled": False},
    }
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["serve", "--config", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "per window of 250 rounds, at most 2 windows (local DP), (ε=2, δ=0" in out
    assert "not reported (user-level bound)" in out
    recs, _ = read_ledger(tmp_path / "state" / "ledger.jsonl")
    assert recs and all(r.user_level["window_rounds"] == 250 for r in recs)
