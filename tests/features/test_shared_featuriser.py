"""One featuriser for the gateway, the service and replay (issue 36): the same request in
feature objects — a Personalizer Rank, or a context message with ``context_features`` and
``actions`` — gives the same rows wherever it is hashed, with the bandit's ``features`` section."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from streaming_dpbandit.cli import main
from streaming_dpbandit.settings import load_service_settings
from streaming_dpbandit.stream.bandit import BanditRuntime
from streaming_dpbandit.stream.parsing import BadInput, parse_context
from streaming_dpbandit.stream.schemas import DeadLetter, Decision

from ..gateway.conftest import RANK, GatewayProcess, free_port

D = 64
#: not the defaults: a seed, kept namespaces and chosen interactions must reach every place
FEATURES = {
    "seed": 11,
    "namespaces": ["user", "context", "item", "action"],
    "interactions": [["user", "item"], ["context", "*"]],
}
CONTEXT = [
    {"user": {"tier": "gold", "visits": 3, "geo": {"city": "Oslo"}, "new": True}},
    {"weekday": "tue", "hour": 13.5, "device": {"os": "ios"}},  # 'device' is not kept
    {"tags": ["a", "b"], "scores": [0.5, 2]},
]
ACTIONS = [
    {"id": "news", "features": [{"item": {"kind": "news", "words": 420}}, {"fresh": True}]},
    {"id": "sports", "features": [{"item": {"kind": "sports", "live": False}, "price": 1.25}]},
    {"id": "films", "features": [{"item": {"kind": "films", "len": [90, 120]}}]},
]


def _bandit(policy: dict) -> dict:
    return {
        "policy": policy,
        "feedback_window": 5.0,
        "reward_bounds": [0.0, 1.0],
        "seed": 7,
        "features": FEATURES,
    }


def _context_message(eid: str, t: float, context=CONTEXT, bandit: str = "shop") -> dict:
    return {
        "v": 1,
        "event_id": eid,
        "bandit_id": bandit,
        "event_time": t,
        "context_features": context,
        "actions": [{"arm_id": a["id"], "features": a["features"]} for a in ACTIONS],
    }


def _config(tmp_path, policy: dict, **extra) -> tuple[dict, str]:
    cfg = {"bandits": {"shop": _bandit(policy)}, **extra}
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return cfg, str(path)


FLIPHAT = {"policy": "fliphat", "d": D, "s": 4, "epsilon": 1.0, "delta": 1e-6,
           "first_episode_len": 30, "noise_backend": "fast"}  # fmt: skip


def test_gateway_service_and_replay_hash_one_request_to_the_same_rows(tmp_path):
    cfg, path = _config(
        tmp_path,
        FLIPHAT,
        snapshots={"directory": str(tmp_path / "state")},
        gateway={"port": free_port(), "heartbeat_s": 0.2},
    )
    ids = [a["id"] for a in ACTIONS]
    K = len(ids)

    # the gateway (a real process, a real HTTP client): each action chosen once — the others
    # excluded — so that its decision record (in the write-ahead log) carries that action's row
    gp = GatewayProcess(cfg, tmp_path).start()
    try:
        for k, a in enumerate(ids):
            body = {"contextFeatures": CONTEXT, "actions": ACTIONS, "eventId": f"g-{k}",
                    "excludedActions": [b for b in ids if b != a]}  # fmt: skip
            r = gp.client.post(RANK, json=body)
            assert r.status_code == 201, r.text
            assert r.json()["rewardActionId"] == a
    finally:
        assert gp.stop() == 0, gp.text()
    from streaming_dpbandit.gateway.wal import Kind, read_log

    rows = {}
    for e in read_log(tmp_path / "state" / "gateway"):
        if e.kind == Kind.DECISION:
            dec = json.loads(e.value)
            rows[dec["arm_index"]] = dec["features"]
    gateway = np.array([rows[k] for k in range(K)])

    # the service: its one context reader (stream/parsing.py) and the bandit's runtime
    settings = load_service_settings(path)
    bs = settings.bandits["shop"]
    rt = BanditRuntime("shop", bs, bs.policy.build(seed=0))
    raw = json.dumps(_context_message("s-1", 1000.0)).encode()
    got = parse_context(raw, 0.0, {"shop": rt}, max_bytes=1 << 20, time_limit=2e9, skew=None)
    assert not isinstance(got, BadInput), got
    service = got[1].X
    assert got[1].arm_ids == ids

    # replay: a logged stream of the same context, through `dpbandit replay --config`'s reader
    from streaming_dpbandit.commands.replay import _featuriser
    from streaming_dpbandit.replay.build import make_reader

    log = tmp_path / "log.jsonl"
    decision = {"event_id": "s-1", "bandit_id": "shop", "arm_id": "sports", "arm_index": 1,
                "propensity": 1 / 3, "model_version": 0, "episode": 0, "round": 1,
                "calibration": "certified", "policy": "fliphat", "decided_at": 1000.1}  # fmt: skip
    fb = {"event_id": "s-1", "bandit_id": "shop", "reward": 1.0, "event_time": 1001.0}
    logged = [("contexts", _context_message("s-1", 1000.0)), ("decisions", decision),
              ("feedback", fb)]  # fmt: skip
    log.write_text("".join(json.dumps({"topic": t, "value": v}) + "\n" for t, v in logged))
    reader = make_reader(str(log), featuriser=_featuriser(path, {})).open()
    replay = next(reader.chunks()).contexts.X[0]

    assert gateway.shape == service.shape == replay.shape == (K, D)
    assert np.count_nonzero(gateway) > 3 * K  # many features and crosses, not a trivial row
    np.testing.assert_array_equal(gateway, service)
    np.testing.assert_array_equal(gateway, replay)
    # and the settings reached all three: the default featuriser hashes elsewhere
    from streaming_dpbandit.features import FeatureHasher

    default = FeatureHasher(D).transform(CONTEXT, [a["features"] for a in ACTIONS])
    assert not np.array_equal(default, gateway)


@pytest.fixture
def linucb_config(tmp_path) -> str:
    return _config(tmp_path, {"policy": "linucb", "d": 32}, idle_timeout_s=0.5)[1]


def _serve(config: str, lines: list, tmp_path, *extra) -> int:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"topic": t, "value": v}) + "\n" for t, v in lines))
    flags = ["--state-dir", str(tmp_path / "st"), "--no-metrics", "--no-progress"]
    return main(["serve", "--config", config, "--file", str(path), *flags, *extra])


def test_serve_file_decides_feature_objects_and_dead_letters_what_cannot_be_hashed(
    linucb_config, tmp_path, capsys
):
    bad = [{"user": {"visits": 10**400}}]  # beyond float64: the featuriser refuses it
    lines = [
        ("contexts", _context_message("e1", 1000.0)),
        ("feedback", {"event_id": "e1", "bandit_id": "shop", "reward": 1.0, "event_time": 1000.5}),
        ("contexts", _context_message("e2", 1001.0, context=bad)),
        ("contexts", _context_message("e3", 1002.0)),
    ]
    out = tmp_path / "out"
    out.mkdir()
    rc = _serve(linucb_config, lines, tmp_path, "--decisions-out", str(out / "d.jsonl"),
                "--dead-letters-out", str(out / "dl.jsonl"))  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    decisions = [Decision.model_validate_json(x) for x in (out / "d.jsonl").open()]
    assert [d.event_id for d in decisions] == ["e1", "e3"]
    assert {d.arm_id for d in decisions} <= {"news", "sports", "films"}
    (dead,) = [DeadLetter.model_validate_json(x) for x in (out / "dl.jsonl").open()]
    assert dead.reason == "invalid_features"
    assert dead.detail.startswith("context_features[0].user.visits: "), dead.detail


def test_replay_reads_feature_objects_with_the_config_and_says_when_it_is_missing(
    linucb_config, tmp_path, capsys
):
    lines = []
    for i in range(40):
        eid = f"e{i}"
        lines.append(("contexts", _context_message(eid, 1000.0 + i)))
        lines.append(("decisions", {"event_id": eid, "bandit_id": "shop", "arm_id": "news",
                                    "arm_index": 0, "propensity": 1 / 3, "model_version": 0,
                                    "episode": 0, "round": i + 1, "calibration": "non-private",
                                    "policy": "random", "decided_at": 1000.0 + i}))  # fmt: skip
        lines.append(("feedback", {"event_id": eid, "bandit_id": "shop", "reward": float(i % 2),
                                   "event_time": 1000.5 + i}))  # fmt: skip
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"topic": t, "value": v}) + "\n" for t, v in lines))
    args = ["replay", "--log", str(log), "--policy", "linucb", "--estimator", "ips",
            "--bootstrap", "0", "--no-progress"]  # fmt: skip
    assert main([*args, "--config", linucb_config]) == 0
    assert "40 events, K = 3, d = 32" in capsys.readouterr().out
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "carries feature objects" in err[0] and "--config" in err[0], err
