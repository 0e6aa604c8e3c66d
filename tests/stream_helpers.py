"""Shared helpers of the service tests: settings, recorded streams, runs, crashes."""

from __future__ import annotations

import json
from pathlib import Path

from streaming_dpbandit.config import ServiceSettings
from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sources import FileSource, RecordingSource, SimulatedSource
from streaming_dpbandit.stream.transport import InProcessTransport

D, K = 20, 3
BANDIT = "shop"


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


def settings(state_dir, policy=None, **overrides) -> ServiceSettings:
    data = {
        "mode": "service",
        "bandits": {BANDIT: bandit_config(**(policy or {}))},
        "snapshots": {"directory": str(state_dir), "interval_s": 3600},
        "metrics": {"enabled": False},
        "progress": False,
        "max_batch": 256,
        "idle_timeout_s": 3600,
    }
    data.update(overrides)
    return ServiceSettings.model_validate(data)


def record_stream(path: Path, events: int, seed: int = 0, state_dir=None, delay: float = 0.2,
                  policy=None):
    """Run the simulated source through a service once and record its input as JSONL."""
    env = FliphatPaperEnv(d=D, K=K, s_star=3)
    src = SimulatedSource(
        env,
        events,
        BANDIT,
        dt=0.01,
        delay_mean=delay,
        seed=seed,
        topics=("dpbandit.contexts", "dpbandit.feedback"),
    )
    st = settings(state_dir or path.parent / "record-state", policy=policy)
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
