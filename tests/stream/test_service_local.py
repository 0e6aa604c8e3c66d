"""The service's privacy=local mode in process: devices with the SDK send privatised reports,
the service learns from them and publishes models (LDP-GLB spec §8; docs/service.md)."""

import json
import logging
import random
import urllib.error
import urllib.request

import numpy as np
import pytest
from prometheus_client import generate_latest

from dpbandit_testing.ldp_stream_helpers import (
    BANDIT,
    MODELS,
    local_bandit,
    local_settings,
    multi_bandit,
    published,
    raw_values,
    record_reports,
    state_leaks,
    text_leaks,
)
from dpbandit_testing.stream_helpers import dead_letters, ledger_digests, run_file
from streaming_dpbandit.errors import ConfigError
from streaming_dpbandit.ldp import LDPClient, ModelSnapshot, fetch_snapshot
from streaming_dpbandit.privacy.accountant import Accountant
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.settings import load_service_settings
from streaming_dpbandit.stream.local.publisher import ModelStore, start_model_server

REPORTS = 3000


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    d = tmp_path_factory.mktemp("ldp-single")
    path = d / "reports.jsonl"
    src, _ = record_reports(path, REPORTS)
    return path, src


@pytest.fixture(scope="module")
def single_ref(single, tmp_path_factory):
    state = tmp_path_factory.mktemp("ldp-ref")
    svc, transport, summary = run_file(state, single[0], bandits={BANDIT: local_bandit()})
    return state, svc, transport, summary


def test_reports_are_learned_and_every_version_published_and_recorded(single, single_ref):
    _path, _src = single
    state, svc, transport, summary = single_ref
    rt = svc.local.runtimes[BANDIT]
    assert rt.server.reports == REPORTS and rt.stats["absorbed"] == REPORTS
    assert rt.server.version == REPORTS // 200
    models = published(transport)
    assert [m["model_version"] for m in models] == list(range(0, REPORTS // 200 + 1))
    assert all(m["model_id"] == rt.model_id and m["type"] == "ldp_model" for m in models)
    recs, _ = read_ledger(state / "ledger.jsonl")
    assert [r.model_version for r in recs] == list(range(1, REPORTS // 200 + 1))
    assert [r.event_range for r in recs] == [(200 * i + 1, 200 * (i + 1)) for i in range(15)]
    assert all(r.privacy_model == "local" and r.dp_valid for r in recs)
    sp = Accountant(recs).spend(BANDIT)
    assert sp.basic_epsilon == 1.0 and sp.pure_epsilon == 1.0  # per report, parallel records
    assert summary["local_bandits"][BANDIT]["reports_absorbed"] == REPORTS
    assert "local differential privacy" in summary["local_bandits"][BANDIT]["statement"]
    assert svc.local.runtimes[BANDIT].server.theta.shape == (20,)


def test_the_service_learns_from_reports_alone(tmp_path):
    """At d = 3 and ε = 4 the burn-in (spec P7) is short: the published θ̂ finds θ*'s
    direction from privatised reports only, and the devices' regret falls below uniform play."""
    bandit = local_bandit(d=3, epsilon=4.0, refresh_every=50)
    path = tmp_path / "r.jsonl"
    src, svc = record_reports(path, 4000, bandit=bandit, seed=1)
    theta = svc.local.runtimes[BANDIT].server.theta
    assert theta @ src.env.theta / np.linalg.norm(theta) > 0.9
    assert src.summary()["pseudo_regret"] / 4000 < 0.5 * src.env.random_regret_per_round()


@pytest.mark.parametrize("max_batch", [7, 64, 2048])
def test_batching_does_not_change_what_is_learned_or_published(
    single, single_ref, tmp_path, max_batch
):
    ref_state, ref_svc, ref_transport, _ = single_ref
    svc, transport, _ = run_file(
        tmp_path, single[0], max_batch=max_batch, bandits={BANDIT: local_bandit()}
    )
    assert svc.state_bytes() == ref_svc.state_bytes()
    assert ledger_digests(tmp_path) == ledger_digests(ref_state)
    assert transport.outputs[MODELS] == ref_transport.outputs[MODELS]


def test_crashes_at_random_moments_change_nothing(single, single_ref, tmp_path):
    ref_state, ref_svc, ref_transport, _ = single_ref
    rng = random.Random(5)
    versions: dict[int, set] = {}
    crashes, summary = 0, None
    while summary is None:
        crash_after = rng.randint(1, 5) if crashes < 15 else None
        svc, transport, summary = run_file(
            tmp_path,
            single[0],
            max_batch=rng.choice([30, 90, 150]),
            crash_after=crash_after,
            bandits={BANDIT: local_bandit()},
            snapshots={"directory": str(tmp_path), "interval_s": 0.02},
        )
        for m in transport.outputs.get(MODELS, []):
            versions.setdefault(json.loads(m)["model_version"], set()).add(m)
        crashes += crash_after is not None
    assert crashes == 15
    assert svc.state_bytes() == ref_svc.state_bytes()
    assert ledger_digests(tmp_path) == ledger_digests(ref_state)
    ref = {json.loads(m)["model_version"]: m for m in ref_transport.outputs[MODELS]}
    assert set(versions) == set(ref)
    assert all(v == {ref[k]} for k, v in versions.items())  # a version is never re-drawn


def test_multi_parameter_warmup_switch_is_published_at_exactly_ks0(tmp_path):
    bandit = multi_bandit()
    path = tmp_path / "multi.jsonl"
    record_reports(path, 1200, bandit=bandit, seed=2, encoding="f32")
    svc, transport, _ = run_file(tmp_path / "a", path, bandits={BANDIT: bandit})
    models = published(transport)
    switch = next(m for m in models if m["phase"] == "main")
    assert switch["reports"] == 300 and switch["theta_warmup"] is not None
    assert all(
        m["phase"] == "warmup" for m in models if m["model_version"] < switch["model_version"]
    )
    assert [m["reports"] for m in models[:3]] == [0, 200, 300]  # refresh at 200, switch at 300
    rt = svc.local.runtimes[BANDIT]
    assert rt.server.reports + sum(v for k, v in rt.stats.items() if k != "absorbed") == 1200
    svc2, transport2, _ = run_file(tmp_path / "b", path, max_batch=13, bandits={BANDIT: bandit})
    assert svc2.state_bytes() == svc.state_bytes()
    assert transport2.outputs[MODELS] == transport.outputs[MODELS]


def test_bad_reports_go_to_the_dead_letter_topic_with_reasons(single, tmp_path):
    lines = single[0].read_text().splitlines()
    good = [json.loads(json.loads(x)["value"]) for x in lines[:50]]
    rt_model = good[0]["model_id"]

    def rep(**kw):
        base = dict(good[10])
        base.pop("msg_id")
        base.update(kw)
        return json.dumps({k: v for k, v in base.items() if v is not None})

    z = good[10]["payload"]
    bad = [
        ("{not json", "malformed_json"),
        (rep(extra=1), "invalid_report"),
        (rep(payload=None), "invalid_report"),
        (rep(model_id="other-1"), "unknown_model"),
        (rep(model_version=999), "unknown_model_version"),
        (rep(arm=1), "wrong_phase"),
        (rep(payload=z[:-1]), "wrong_payload_size"),
        (rep(payload=[v / 2 for v in z]), "payload_out_of_range"),  # half the radius
        (rep(bandit_id="nobody"), "unknown_bandit"),
        (rep(bandit_id="central"), "not_a_local_bandit"),
        (rep(msg_id=good[5]["msg_id"]), "duplicate_report"),
        (rep().replace(str(z[0]), "NaN", 1), "non_finite_number"),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": "e1",
                    "bandit_id": BANDIT,
                    "reward": 0.123456789,
                    "event_time": 5.0,
                }
            ),
            "raw_data_for_local_bandit",
        ),
    ]
    raw_ctx = json.dumps(
        {
            "v": 1,
            "event_id": "c1",
            "bandit_id": BANDIT,
            "event_time": 1.0,
            "arms": [{"arm_id": "a", "features": [0.987654321] * 20}],
        }
    )
    out = list(lines[:300])
    out += [json.dumps({"topic": "feedback", "value": v}) for v, _ in bad]
    out += [json.dumps({"topic": "contexts", "value": raw_ctx})]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(out) + "\n")
    bandits = {BANDIT: local_bandit(), "central": {"policy": {"policy": "random", "d": 20}}}
    svc, transport, _ = run_file(tmp_path / "s", path, bandits=bandits)
    dls = dead_letters(transport)
    got = [d["reason"] for d in dls]
    assert sorted(got) == sorted([r for _, r in bad] + ["raw_data_for_local_bandit"])
    for d in dls:
        if d["reason"] == "raw_data_for_local_bandit":
            assert (
                d["payload"] == ""
                and "0.98765" not in json.dumps(d)
                and "0.123456" not in (json.dumps(d))
            )
    assert svc.local.runtimes[BANDIT].server.reports == 300
    assert rt_model == svc.local.runtimes[BANDIT].model_id


def test_stale_reports_are_dropped(tmp_path):
    bandit = local_bandit(refresh_every=10)
    bandit["local"]["max_staleness"] = 2
    path = tmp_path / "r.jsonl"
    record_reports(path, 400, bandit=bandit, seed=1)
    lines = path.read_text().splitlines()
    old = json.loads(json.loads(lines[0])["value"])  # computed against version 0
    assert old["model_version"] == 0
    old["msg_id"] = "ab" * 16
    lines.append(json.dumps({"topic": "feedback", "value": json.dumps(old)}))
    path.write_text("\n".join(lines) + "\n")
    svc, transport, _ = run_file(tmp_path / "s", path, bandits={BANDIT: bandit})
    dls = dead_letters(transport)
    # devices report against the model of their chunk (97 users): with a version every 10
    # reports some are more than 2 versions old, and so is the version-0 report appended last
    assert {d["reason"] for d in dls} == {"stale_report"}
    assert dls[-1]["offset"] == 400
    rt = svc.local.runtimes[BANDIT]
    assert rt.server.reports + rt.stats["stale_report"] == 401 and rt.server.reports > 100


def test_no_raw_context_or_reward_in_logs_snapshots_ledger_models_or_metrics(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    src, _ = record_reports(path, 1500, seed=9)
    raw = raw_values(src.raw_samples)
    assert raw.size > 1000
    with caplog.at_level(logging.DEBUG, logger="streaming_dpbandit"):
        svc, transport, _ = run_file(tmp_path / "s", path, bandits={BANDIT: local_bandit()})
    texts = {
        "logs": caplog.text,
        "ledger": (tmp_path / "s" / "ledger.jsonl").read_text(),
        "models": "\n".join(v.decode() for v in transport.outputs[MODELS]),
        "metrics": generate_latest(svc.metrics.registry).decode(),
        "reports on the wire": path.read_text(),  # what the devices sent
    }
    for name, text in texts.items():
        assert text_leaks(text, raw) == [], name
    snap = (tmp_path / "s" / "snapshot.json").read_bytes()
    assert state_leaks(snap, raw) == []
    # the detectors can fail: a leaked value is found in text and in a snapshot array
    assert text_leaks(caplog.text + f" x={raw[7]!r}", raw) == [raw[7]]
    from streaming_dpbandit.utils.serialization import dumps

    assert state_leaks(b"{}\n" + dumps({"a": np.array([1.5, raw[3]])}), raw) == [raw[3]]


def test_http_endpoint_serves_the_latest_model_to_the_sdk(single, single_ref):
    _, svc, transport, _ = single_ref
    store = ModelStore()
    for body in transport.outputs[MODELS]:
        m = json.loads(body)
        store.put(m["bandit_id"], m["model_id"], m["model_version"], body)
    server, port = start_model_server("127.0.0.1", 0, store)
    try:
        url = f"http://127.0.0.1:{port}/v1/models/{BANDIT}"
        snap = fetch_snapshot(url)
        assert snap.model_version == svc.local.runtimes[BANDIT].server.version
        assert np.array_equal(snap.theta, svc.local.runtimes[BANDIT].server.theta)
        assert fetch_snapshot(url, current=snap) is snap  # 304 Not Modified
        index = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models").read())
        assert index["models"][0]["model_version"] == snap.model_version
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/nobody")
        client = LDPClient(snap, max_epsilon=1.0)
        assert client.report(client.decide(np.ones((5, 20))), 0.3).model_version == 15
    finally:
        server.shutdown()
    assert isinstance(ModelSnapshot.from_json(transport.outputs[MODELS][-1]), ModelSnapshot)


def test_privacy_local_configuration_rules(tmp_path):
    with pytest.raises(Exception, match="privacy=local needs policy ldp-glb"):
        local_settings(tmp_path, {"privacy": "local", "policy": {"policy": "random", "d": 3}})
    with pytest.raises(Exception, match="would see raw data"):
        local_settings(tmp_path, {"policy": {"policy": "ldp-glb", "d": 3}})
    with pytest.raises(Exception, match="authors_code"):
        local_settings(tmp_path, local_bandit(profile="authors_code", score_clip=20.0))
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "bandits:\n  shop:\n    privacy: local\n    policy: {policy: ldp-glb, d: 4,"
        " variant: ols, epsilon: 2.0}\n"
    )
    with pytest.raises(ConfigError, match="ε ≤ 1"):
        load_service_settings(str(cfg))
