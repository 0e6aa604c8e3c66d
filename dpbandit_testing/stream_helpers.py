"""Shared helpers of the service tests: settings, recorded streams, runs, crashes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.messages import context_value, encode_f64
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import FileSource, RecordingSource, SimulatedSource
from streaming_dpbandit.stream.transport import InProcessTransport

D, K = 20, 3
BANDIT = "shop"


def kafka_topics(name: str) -> dict:
    """The four topics of a service named ``name`` (one set per test, so tests never share)."""
    return {
        "contexts": f"{name}.contexts",
        "feedback": f"{name}.feedback",
        "decisions": f"{name}.decisions",
        "dead_letter": f"{name}.dead-letter",
    }


def any_policy_config(policy: dict, lag: int = 0) -> dict:
    """Bandit settings for an arbitrary policy config (the stream helpers' d and window)."""
    return {
        "policy": {"d": D} | policy,
        "feedback_window": 2.0,
        "seed": 7,
        "feedback_lag_rounds": lag,
        "reward_bounds": [-50, 50],
    }


def bandit_config(**policy_overrides) -> dict:
    policy = {
        "policy": "fliphat",
        "d": D,
        "s": 4,
        "epsilon": 5.0,
        "delta": 1e-4,
        "b_max": 3.5,
        "first_episode_len": 256,
        "swap_delay": 250,
    } | policy_overrides
    return {"policy": policy, "feedback_window": 2.0, "seed": 7, "reward_bounds": [-50, 50]}


def settings(state_dir, policy=None, bandit=None, **overrides) -> ServiceSettings:
    data = {
        "mode": "service",
        "bandits": {BANDIT: bandit or bandit_config(**(policy or {}))},
        "snapshots": {"directory": str(state_dir), "interval_s": 3600},
        "metrics": {"enabled": False},
        "progress": False,
        "max_batch": 256,
        "idle_timeout_s": 3600,
    }
    data.update(overrides)
    return ServiceSettings.model_validate(data)


def record_stream(
    path: Path,
    events: int,
    seed: int = 0,
    state_dir=None,
    delay: float = 0.2,
    policy=None,
    bandit=None,
):
    """Run the simulated source through a service once and record its input as JSONL."""
    env = FliphatPaperEnv(d=D, K=K, s_star=3)
    src = SimulatedSource(
        env,
        events,
        BANDIT,
        dt=0.01,
        delay_mean=delay,
        feedback_probability=0.95,  # some decisions never get a reward
        seed=seed,
        topics=("dpbandit.contexts", "dpbandit.feedback"),
    )
    st = settings(state_dir or path.parent / "record-state", policy=policy, bandit=bandit)
    svc = Service(st, InProcessTransport(RecordingSource(src, path)))
    svc.open()
    svc.run()
    return src.summary()


def run_file(state_dir, path, max_batch=256, crash_after=None, keep_outputs=True, **over):
    """Run a service over a JSONL file; ``crash_after`` polls: stop without a final snapshot."""
    st = settings(state_dir, max_batch=max_batch, **over)
    source = FileSource(path, ("dpbandit.contexts", "dpbandit.feedback"))
    transport = InProcessTransport(source, keep_outputs=keep_outputs)
    svc = Service(st, transport, ServiceMetrics())
    svc.open()
    if crash_after is None:
        summary = svc.run()
        return svc, transport, summary
    polls = [0]

    class Crash(Exception):
        pass

    def progress(_svc):
        polls[0] += 1
        if polls[0] >= crash_after:
            raise Crash

    try:
        summary = svc.run(progress)
    except Crash:
        svc.ledger.close()  # the process died: its file lock goes with it
        return svc, transport, None
    return svc, transport, summary


def decisions(transport) -> list[dict]:
    return [json.loads(v) for v in transport.outputs.get("dpbandit.decisions", [])]


def dead_letters(transport) -> list[dict]:
    return [json.loads(v) for v in transport.outputs.get("dpbandit.dead-letter", [])]


def ledger_digests(state_dir) -> list[str]:
    recs, torn = read_ledger(Path(state_dir) / "ledger.jsonl")
    assert torn == 0
    return [r.content_digest() for r in recs]


# -- bad input ------------------------------------------------------------------------------
CATALOG = "catalog"  # a second bandit: shared contexts over an arm catalogue


def catalog_config() -> dict:
    return {
        "policy": {"policy": "random", "d": 12},
        "feedback_window": 2.0,
        "arms": ["a", "b", "c"],
        "seed": 1,
    }


def bad_input_stream(valid_path: Path, out_path: Path):
    """Insert one message of every bad kind into a valid recorded stream.

    Returns ({(topic kind, offset): expected dead-letter reason}, {(topic kind, original
    offset): new offset}). Bad feedback is placed where the feedback watermark already passed
    its event time, so it cannot disturb valid joins.
    """
    lines = [json.loads(x) for x in valid_path.read_text().splitlines()]
    ctx = [json.loads(x["value"]) for x in lines if x["topic"] == "contexts"]
    fb = [json.loads(x["value"]) for x in lines if x["topic"] == "feedback"]
    rewarded = {f["event_id"] for f in fb if "event_id" in f}
    t0 = ctx[0]["event_time"]
    e_dup = ctx[10]  # has a reward
    e_nofb = next(c for c in ctx[50:] if c["event_id"] not in rewarded)
    e_before = ctx[60]
    good_arm = e_dup["arms"]

    def ctxmsg(**kw):
        base = {
            "v": 1,
            "event_id": kw.pop("event_id", "bad-x"),
            "bandit_id": BANDIT,
            "event_time": t0 + 0.5,
            "arms": good_arm,
        }
        base.update(kw)
        return json.dumps(base)

    def binmsg(event_id, features, raw=None):
        return json.dumps(
            {
                "v": 1,
                "event_id": event_id,
                "bandit_id": BANDIT,
                "event_time": t0 + 0.5,
                "arm_ids": [a["arm_id"] for a in good_arm],
                "arm_features_f64": encode_f64(features) if raw is None else raw,
            }
        )

    wrong_types = [{"arm_id": a["arm_id"], "features": ["x"] * D} for a in good_arm]
    short = [{"arm_id": a["arm_id"], "features": a["features"][:-1]} for a in good_arm]
    uneven = [good_arm[0], {"arm_id": "z", "features": good_arm[1]["features"][:-2]}]
    nan_arms = json.dumps(good_arm).replace(str(good_arm[0]["features"][0]), "NaN", 1)
    inf_arms = json.dumps(good_arm).replace(str(good_arm[0]["features"][0]), "1e999", 1)
    bad_contexts = [
        ("{not json", "malformed_json"),
        ("[1, 2, 3]", "invalid_event"),
        (
            json.dumps({"v": 1, "bandit_id": BANDIT, "event_time": t0, "arms": good_arm}),
            "invalid_event",
        ),  # missing event_id
        (ctxmsg(event_id="bad-types", arms=wrong_types), "invalid_event"),
        (ctxmsg(event_id="bad-dim", arms=short), "wrong_dimension"),
        (ctxmsg(event_id="bad-uneven", arms=uneven), "invalid_event"),
        (ctxmsg(event_id="bad-empty", arms=[]), "invalid_event"),
        (
            '{"v": 1, "event_id": "bad-nan", "bandit_id": "%s", "event_time": %r, "arms": %s}'
            % (BANDIT, t0 + 0.5, nan_arms),
            "non_finite_number",
        ),
        (
            '{"v": 1, "event_id": "bad-inf", "bandit_id": "%s", "event_time": %r, "arms": %s}'
            % (BANDIT, t0 + 0.5, inf_arms),
            "non_finite_number",
        ),
        (ctxmsg(event_id="bad-bandit", bandit_id="nobody"), "unknown_bandit"),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": "bad-arm",
                    "bandit_id": CATALOG,
                    "event_time": t0 + 0.5,
                    "shared": [0.1, 0.2, 0.3, 0.4],
                    "arm_ids": ["a", "zz"],
                }
            ),
            "unknown_arm",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": "bad-shared",
                    "bandit_id": BANDIT,
                    "event_time": t0,
                    "shared": [0.1] * 4,
                    "arm_ids": ["x"],
                }
            ),
            "shared_context_unsupported",
        ),
        (json.dumps(e_dup), "duplicate_event"),
        # the binary feature form (arm_features_f64, docs/events.md)
        (
            binmsg("bad-bin-nan", [[float("nan"), *a["features"][1:]] for a in good_arm]),
            "non_finite_number",
        ),
        (binmsg("bad-bin-dim", [a["features"][:-1] for a in good_arm]), "wrong_dimension"),
        (binmsg("bad-bin-b64", None, raw="not base64!"), "invalid_event"),
        (
            binmsg("bad-bin-len", None, raw=encode_f64([0.5] * (D * len(good_arm) + 1))),
            "invalid_event",
        ),
        (
            ctxmsg(event_id="bad-big", user_id="x" * 150).replace(
                '"arms"', '"pad": "' + "y" * 120_000 + '", "arms"'
            ),
            "oversized",
        ),
    ]
    good_catalog = json.dumps(
        {
            "v": 1,
            "event_id": "cat-1",
            "bandit_id": CATALOG,
            "event_time": t0 + 0.3,
            "shared": [0.1, 0.2, 0.3, 0.4],
            "arm_ids": ["a", "b"],
        }
    )
    bad_feedback = [
        ("{reward: 1", "malformed_json"),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": e_dup["event_id"],
                    "bandit_id": BANDIT,
                    "reward": "high",
                    "event_time": t0 + 0.4,
                }
            ),
            "invalid_feedback",
        ),
        (
            '{"v": 1, "event_id": "%s", "bandit_id": "%s", "reward": NaN, "event_time": %r}'
            % (e_dup["event_id"], BANDIT, t0 + 0.4),
            "non_finite_number",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": e_dup["event_id"],
                    "bandit_id": BANDIT,
                    "reward": 1e6,
                    "event_time": t0 + 0.4,
                }
            ),
            "reward_out_of_range",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": "never-decided",
                    "bandit_id": BANDIT,
                    "reward": 0.1,
                    "event_time": t0 + 0.4,
                }
            ),
            "unknown_event",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": e_dup["event_id"],
                    "bandit_id": "nobody",
                    "reward": 0.1,
                    "event_time": t0 + 0.4,
                }
            ),
            "unknown_bandit",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": e_before["event_id"],
                    "bandit_id": BANDIT,
                    "reward": 0.1,
                    "event_time": e_before["event_time"] - 0.5,
                }
            ),
            "feedback_before_decision",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "event_id": e_nofb["event_id"],
                    "bandit_id": BANDIT,
                    "reward": 0.1,
                    "event_time": e_nofb["event_time"] + 2.5,
                }
            ),
            "feedback_after_expiry",
        ),
    ]
    # the real reward of e_dup, sent again: a duplicate
    real = next(f for f in fb if f.get("event_id") == e_dup["event_id"])
    bad_feedback.append((json.dumps(real), "duplicate_feedback"))
    # insert contexts after the 100th context; feedback once the watermark passed e_nofb + 3 s
    out, expected = [], {}
    counts = {"contexts": 0, "feedback": 0}
    wm = float("-inf")
    placed_ctx = placed_fb = False

    moved = {}
    orig = {"contexts": 0, "feedback": 0}

    def put(topic, value, reason=None, stamp=None):
        if reason is not None:
            expected[(topic, counts[topic])] = reason
        # (an inserted line has no timestamp: it takes the one of the line before it)
        out.append(
            {"topic": topic, "value": value} | ({} if stamp is None else {"timestamp": stamp})
        )
        counts[topic] += 1

    for line in lines:
        v = json.loads(line["value"])
        moved[(line["topic"], orig[line["topic"]])] = counts[line["topic"]]
        orig[line["topic"]] += 1
        put(line["topic"], line["value"], stamp=line.get("timestamp"))
        if line["topic"] == "feedback":
            wm = max(wm, v["event_time"])
        if line["topic"] == "contexts" and counts["contexts"] == 100 and not placed_ctx:
            for value, reason in bad_contexts:
                put("contexts", value, reason)
            put("contexts", good_catalog)
            placed_ctx = True
        if (
            line["topic"] == "feedback"
            and not placed_fb
            and placed_ctx
            and wm > e_nofb["event_time"] + 3.0
            and wm > real["event_time"] + 3.0
        ):
            for value, reason in bad_feedback:
                put("feedback", value, reason)
            placed_fb = True
    assert placed_ctx and placed_fb
    out_path.write_text("".join(json.dumps(x) + "\n" for x in out))
    return expected, moved


def binary_copy(path: Path, out_path: Path, encoding: str = "f64") -> int:
    """The same recorded stream with every per-arm context in a binary feature form: ``f64``
    (``arm_ids`` + ``arm_features_f64``) or a binary context message (``raw-f64``,
    ``raw-f32``: the line's ``value_b64``); returns the number of contexts converted."""
    n = 0
    with out_path.open("w") as out:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["topic"] == "contexts":
                ev = json.loads(rec["value"])
                arms = ev.pop("arms")
                ids = [a["arm_id"] for a in arms]
                X = np.array([a["features"] for a in arms], dtype=np.float64)
                if encoding == "f64":
                    ev["arm_ids"] = ids
                    ev["arm_features_f64"] = encode_f64(X)
                    rec["value"] = json.dumps(ev)
                else:
                    del rec["value"]
                    raw = context_value(
                        ev["event_id"],
                        ev["bandit_id"],
                        ev["event_time"],
                        X,
                        ids,
                        encoding,
                        ev.get("user_id"),
                    )
                    rec["value_b64"] = base64.b64encode(raw).decode("ascii")
                n += 1
            out.write(json.dumps(rec) + "\n")
    return n
