"""Slates end to end in the service (DP-matroid spec §7; docs/events.md): slate requests,
slate decisions, per-item feedback joined under the single-arm event-time rules, default fill
at expiry, determinism under batching and crashes, releases persisted and never re-drawn, no
secrets in logs or metrics."""

import io
import json
import logging
import random

import numpy as np
import pytest
from prometheus_client import generate_latest

from dpbandit_testing.slate_helpers import (
    SYNTHETIC,
    PartitionEnv,
    record_slate_stream,
    slate_bandit,
)
from dpbandit_testing.stream_helpers import (
    BANDIT,
    decisions,
    ledger_digests,
    run_file,
    settings,
)
from streaming_dpbandit.cli import main
from streaming_dpbandit.envs import MatroidSyntheticEnv
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.bandit import BanditRuntime
from streaming_dpbandit.stream.parsing import BadInput, Pending
from streaming_dpbandit.stream.runner import print_summary
from streaming_dpbandit.stream.schemas import (
    ContextEvent,
    Feedback,
    SlateFeedback,
    parse_decision,
)
from streaming_dpbandit.stream.slates.runtime import slate_runtime

ITEMS40 = [f"sku-{i:02d}" for i in range(40)]
CASES = {
    "dpucb-mat-linear": (
        MatroidSyntheticEnv(),
        {"policy": "dpucb-mat", "matroid": SYNTHETIC, "epsilon": 2.0, "update_every": 16},
        600,
        None,
    ),
    "dpts-mat-partition": (
        PartitionEnv(),
        {
            "policy": "dpts-mat",
            "matroid": {
                "type": "partition",
                "categories": [i % 4 for i in range(40)],
                "capacities": [2, 1, 1, 1],
            },
            "epsilon": 1.0,
            "update_every": 32,
            "items": ITEMS40,
        },
        600,
        ITEMS40,
    ),
    "dpts-mat-synchronous": (  # the thesis's protocol: every decision waits for the last one
        MatroidSyntheticEnv(),
        {"policy": "dpts-mat", "matroid": SYNTHETIC, "epsilon": 2.0, "update_every": 1},
        0,
        None,
    ),
}


def slates_by_event(transport) -> dict:
    out = {}
    for d in decisions(transport):
        out[d["event_id"]] = [x["item_id"] for x in d["slate"]]
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_slate_bandit_is_deterministic_under_batching_and_crashes(name, tmp_path):
    env, policy, lag, items = CASES[name]
    bandit = slate_bandit(policy, lag=lag)
    path = tmp_path / "stream.jsonl"
    events = 800 if lag == 0 else 1500
    record_slate_stream(path, events, env, bandit, seed=3, state_dir=tmp_path / "rec", items=items)
    ref, tr_ref, summary = run_file(tmp_path / "a", path, max_batch=500, bandits={BANDIT: bandit})
    b = summary["bandits"][BANDIT]
    assert b["rounds"] == events and b["policy"] == policy["policy"]
    assert b["stats"]["expired"] > 0 and b["stats"]["items_defaulted"] > 0  # default fill used
    assert b["stats"]["joined"] > 0 and b["model_version"] > 3
    ref_slates = slates_by_event(tr_ref)
    assert len(ref_slates) == events
    other, tr_other, _ = run_file(tmp_path / "b", path, max_batch=7, bandits={BANDIT: bandit})
    assert other.state_bytes() == ref.state_bytes()
    assert ledger_digests(tmp_path / "b") == ledger_digests(tmp_path / "a")
    assert slates_by_event(tr_other) == ref_slates
    # abrupt crashes: stop without a final snapshot, restart from the last one
    rng = random.Random(11)
    crashes, out, seen = 0, None, {}
    over = {"snapshots": {"directory": str(tmp_path / "c"), "interval_s": 0.01}}
    while out is None:
        crash = rng.randint(1, 6) if crashes < 6 else None
        svc, tr, out = run_file(
            tmp_path / "c",
            path,
            max_batch=rng.choice([20, 60]),
            crash_after=crash,
            bandits={BANDIT: bandit},
            **over,
        )
        for eid, s in slates_by_event(tr).items():  # repeats after a restart are identical
            assert seen.setdefault(eid, s) == s
        crashes += crash is not None
    assert crashes == 6
    assert svc.state_bytes() == ref.state_bytes()
    assert ledger_digests(tmp_path / "c") == ledger_digests(tmp_path / "a")
    assert seen == ref_slates
    # every decision is a valid slate of the configured catalogue; loops never served
    pol = ref.bandits[BANDIT].policy
    ids = items or [f"item-{i}" for i in range(pol.L)]
    for d in decisions(tr_ref):
        dec = parse_decision(json.dumps(d).encode())
        idx = [x.item_index for x in dec.slate]
        assert pol.structure.is_basis(idx) and [ids[i] for i in idx] == [
            x.item_id for x in dec.slate
        ]
        assert not set(idx) & set(pol.unreachable)


# -- the join, item by item ---------------------------------------------------------------------
def runtime(update_every=4, lag=0, window=10.0, **policy):
    st = settings(
        "/tmp/unused",
        bandit=slate_bandit(
            {
                "policy": "dpucb-mat",
                "matroid": {"type": "uniform", "n_items": 4, "k": 2},
                "epsilon": 1.0,
                "update_every": update_every,
                "items": ["a", "b", "c", "d"],
                "default_reward": 0.25,
            }
            | policy,
            lag=lag,
            window=window,
        ),
    )
    b = st.bandits[BANDIT]
    return slate_runtime(BANDIT, b, b.policy.build(seed=b.seed))


def ctx(eid, t, **kw):
    return ContextEvent(event_id=eid, bandit_id=BANDIT, event_time=t, **({"slate_size": 2} | kw))


def fb(eid, t, **rewards):
    return SlateFeedback(event_id=eid, bandit_id=BANDIT, event_time=t, rewards=rewards)


class Dead(list):
    def __call__(self, source, reason, detail):
        self.append((source[2], reason))


def decide(rt, *events):
    batch = [Pending(e, *rt.encode(e), 0.0) for e in events]
    out = rt.kind.decide(rt, batch)
    return {d.event_id: [x.item_id for x in d.slate] for d in out}, batch


def test_per_item_feedback_partial_duplicate_and_default_fill():
    rt, dead = runtime(), Dead()
    slates, batch = decide(rt, ctx("e1", 100.0), ctx("e2", 100.5), ctx("e3", 101.0))
    rt.after_decisions(batch, dead)
    s1, s2, s3 = slates["e1"], slates["e2"], slates["e3"]
    rt.on_feedback(fb("e1", 101.0, **{s1[0]: 1.0}), ("f", 0, 1), dead)  # partial
    rt.on_feedback(fb("e1", 101.5, **{s1[0]: 0.0, s1[1]: 0.5}), ("f", 0, 2), dead)  # 1st kept
    rt.on_feedback(fb("e2", 101.0, **{s2[0]: 1.0}), ("f", 0, 3), dead)
    rt.on_feedback(fb("e2", 101.2, **{s2[0]: 0.0}), ("f", 0, 4), dead)  # only a duplicate
    absent = next(x for x in "abcd" if x not in s3)
    rt.on_feedback(fb("e3", 101.2, **{absent: 1.0, s3[0]: 1.0}), ("f", 0, 5), dead)
    rt.on_feedback(fb("e3", 101.3, zz=1.0), ("f", 0, 6), dead)
    rt.on_feedback(fb("e2", 99.0, **{s2[1]: 1.0}), ("f", 0, 7), dead)  # before the decision
    assert rt.join.status("e1") == "joined" and rt.join.status("e2") == "pending"
    rt.advance_watermark(111.0)  # e2 (100.5 + 10) expires; e3 (101 + 10) not yet
    assert rt.join.status("e2") == "expired" and rt.join.status("e3") == "pending"
    rt.on_feedback(fb("e2", 111.0, **{s2[1]: 1.0}), ("f", 0, 8), dead)  # after expiry
    rt.end_of_stream()
    reasons = dict(dead)
    assert reasons[4] == "duplicate_feedback" and reasons[6] == "unknown_item"
    assert reasons[7] == "feedback_before_decision" and reasons[8] == "feedback_after_expiry"
    assert reasons[5] == "item_not_in_slate"  # the whole message is refused
    assert len(dead) == 5 and rt.stats["item_rewards"] == 3
    rows = {r: x for r, x in zip(rt._learn_r, rt._learn_X)}
    assert rows[1][2:].tolist() == [1.0, 0.5]  # e1: first values
    assert rows[2][2].tolist() == 1.0 and np.isnan(rows[2][3])  # e2: s2[1] missing
    rt.policy._since = rt.policy.update_every  # an update is due: rows go to the policy
    rt.refit()
    est = rt.policy._est
    assert est.observations == 6 and rt.stats["items_defaulted"] >= 2
    # what the estimator got: e2's missing item and e3's at the default 0.25
    got = {(int(e), s): tot for e, s, _n, tot, _t in est._sealed}
    assert all(v >= 0 for v in got.values())


def test_held_early_feedback_is_judged_as_of_its_position():
    """Feedback read before its context: applied if, at its position in the feedback
    partition, the decision's window was still open; otherwise the decision had expired."""
    # item ids are unknown before the decision: K = L, so every item is served
    rt2, dead2 = runtime(window=2.0, matroid={"type": "uniform", "n_items": 4, "k": 4}), Dead()
    rt2.advance_watermark(99.0)
    rt2.on_feedback(fb("e1", 100.5, a=1.0, b=0.0), ("f", 0, 1), dead2)  # early, wm 99
    rt2.on_feedback(fb("e2", 102.5, c=1.0), ("f", 0, 2), dead2)  # early, wm 100.5 ≤ 101+2
    rt2.advance_watermark(104.0)  # e1 window [100, 102] is closed at this position
    rt2.on_feedback(fb("e1", 101.0, c=1.0), ("f", 0, 3), dead2)  # early, but wm 104 > 102
    assert rt2.join.early_count == 3
    _, batch = decide(rt2, ctx("e1", 100.0, slate_size=4), ctx("e2", 101.0, slate_size=4))
    rt2.after_decisions(batch, dead2)
    assert dead2 == [(3, "feedback_after_expiry")]
    assert rt2.join.status("e1") == "expired"  # expired with a and b known, c and d defaulted
    row = dict(zip(rt2._learn_r, rt2._learn_X))[1]
    items, vals = row[:4].astype(int).tolist(), row[4:]
    got = {"abcd"[i]: v for i, v in zip(items, vals)}
    assert got["a"] == 1.0 and got["b"] == 0.0 and np.isnan(got["c"]) and np.isnan(got["d"])
    assert rt2.join.status("e2") == "expired"  # watermark 104 > 101 + 2 after applying c
    row2 = dict(zip(rt2._learn_r, rt2._learn_X))[2]
    assert np.count_nonzero(~np.isnan(row2[4:])) == 1  # c, held early, was applied first


@pytest.mark.parametrize(
    "event, make_rt, reason",
    [
        (ctx("x", 1.0, slate_size=3), runtime, "wrong_slate_size"),
        (
            ContextEvent(
                event_id="x",
                bandit_id=BANDIT,
                event_time=1.0,
                arms=[{"arm_id": "a", "features": [0.0] * 20}],
            ),
            runtime,
            "slate_required",
        ),
    ],
)
def test_slate_requests_are_checked(event, make_rt, reason):
    with pytest.raises(BadInput) as err:
        make_rt().encode(event)
    assert err.value.reason == reason


def test_single_arm_bandits_refuse_slate_messages():
    st = settings("/tmp/unused")
    b = st.bandits[BANDIT]
    rt = BanditRuntime(BANDIT, b, b.policy.build(seed=1))
    with pytest.raises(BadInput) as err:
        rt.encode(ctx("x", 1.0))
    assert err.value.reason == "slate_unsupported"
    dead = Dead()
    rt.on_feedback(fb("x", 1.0, a=1.0), ("f", 0, 9), dead)
    assert dead == [(9, "slate_unsupported")]
    srt, dead = runtime(), Dead()
    srt.on_feedback(
        Feedback(event_id="x", bandit_id=BANDIT, reward=1.0, event_time=1.0), ("f", 0, 4), dead
    )
    assert dead == [(4, "slate_required")]


@pytest.mark.parametrize(
    "bandit, message",
    [
        ({"calibration": "paper"}, "refused outside mode=simulation"),
        ({"default_reward": 0.5}, "policy.default_reward"),
        ({"arms": ["a", "b"]}, "catalogue is its policy's 'items'"),
        ({"items": ["a", "b"]}, "items must be 4 distinct ids"),
        ({"matroid": {"type": "uniform", "n_items": 4, "k": 2, "expected_rank": 3}}, "expected 3"),
    ],
)
def test_slate_bandit_configuration_errors(bandit, message, tmp_path):
    policy = {
        "policy": "dpts-mat",
        "matroid": {"type": "uniform", "n_items": 4, "k": 2},
        "epsilon": 1.0,
    }
    pkeys = {"calibration", "items", "matroid"}
    b = {"policy": policy | {k: v for k, v in bandit.items() if k in pkeys}}
    b |= {k: v for k, v in bandit.items() if k not in pkeys}
    with pytest.raises(ValueError, match=message):
        ServiceSettings.model_validate({"bandits": {"s": b}})
    if "calibration" in bandit:  # the reproduction flag: simulation mode
        ServiceSettings.model_validate({"mode": "simulation", "bandits": {"s": b}})


def test_no_secret_or_raw_value_in_logs_metrics_or_ledger(tmp_path, caplog):
    """Spec §8: no raw rewards, noise, keys or raw sums in logs, metrics or the ledger."""
    env, policy, lag, _ = CASES["dpucb-mat-linear"]
    bandit = slate_bandit(policy, lag=lag)
    path = tmp_path / "stream.jsonl"
    record_slate_stream(path, 1200, env, bandit, seed=4, state_dir=tmp_path / "rec")
    bandit["seed"] = None  # a production key: 128 bits from OS entropy
    canaries = []
    lines = []
    for i, line in enumerate(path.read_text().splitlines()):  # distinctive reward values
        rec = json.loads(line)
        v = json.loads(rec["value"])
        if "rewards" in v:
            for k in v["rewards"]:
                v["rewards"][k] = 0.123456789 + 1e-10 * i
                canaries.append(repr(v["rewards"][k])[:11])
            rec["value"] = json.dumps(v)
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.DEBUG, logger="streaming_dpbandit"):
        svc, tr, _ = run_file(tmp_path / "s", path, bandits={BANDIT: bandit})
    logs = "\n".join(r.getMessage() for r in caplog.records)
    metrics = generate_latest(svc.metrics.registry).decode()
    ledger = (tmp_path / "s" / "ledger.jsonl").read_text()
    state = svc.bandits[BANDIT].policy.state_dict()
    key = state["noise"]["key"]
    assert "calibration" in ledger and "noisy_means" in ledger and "release" in logs
    for text in (
        logs,
        metrics,
        ledger,
        "\n".join(x.decode() for x in tr.outputs["dpbandit.decisions"]),
    ):
        assert key not in text and str(int(key, 16)) not in text
        assert not any(c in text for c in set(canaries))
    for rec in map(json.loads, ledger.splitlines()):
        fields = set(rec["record"]["params"]) | set(rec["record"].get("release") or {})
        assert not fields & {"sum", "sums", "buf", "noise", "z", "key", "seed"}
    for item in (f"item-{i}" for i in range(7)):  # no per-item series (raw-derived counts)
        assert f'"{item}"' not in metrics
    assert "dpbandit_slate_items" in metrics and 'status="unreachable"' in metrics


def test_embedded_serve_runs_slates(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DPBANDIT_SIMULATION__ENV", "dp-matroid-synthetic")
    out = tmp_path / "summary.json"
    rc = main(
        [
            "serve",
            "--events",
            "800",
            "--no-progress",
            "--no-metrics",
            "--state-dir",
            str(tmp_path / "st"),
            "--summary-json",
            str(out),
        ]
    )
    assert rc == 0
    s = json.loads(out.read_text())
    b = s["bandits"]["default"]
    assert b["policy"] == "dpts-mat" and b["rounds"] == 800
    assert b["privacy"]["pure_epsilon"] == 1.0 and b["privacy"]["calibrations"] == ["certified"]
    assert s["source"]["decisions"] == 800
    assert "DPTS-MAT" in capsys.readouterr().err  # the embedded default is announced
    table = io.StringIO()
    print_summary(s, table)
    assert "ε=1, δ=0 (pure ε, exact sum)" in table.getvalue()
