"""Helpers of the privacy=local service tests: settings, recorded report streams, leak checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from streaming_dpbandit.envs import LDPMultiParamEnv, LDPSingleParamEnv
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.local.clients import SimulatedLDPClients
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import RecordingSource
from streaming_dpbandit.stream.transport import InProcessTransport
from streaming_dpbandit.utils.serialization import loads

BANDIT = "shop"
TOPICS = ("dpbandit.contexts", "dpbandit.feedback")
MODELS = "dpbandit.models"


def local_bandit(**policy) -> dict:
    base = {
        "policy": "ldp-glb",
        "d": 20,
        "n_arms": 5,
        "variant": "sgd",
        "epsilon": 1.0,
        "c0": 5.0,
        "refresh_every": 200,
    }
    return {"privacy": "local", "policy": base | policy, "seed": 3, "local": {"dedup_window": 5000}}


def multi_bandit(**policy) -> dict:
    return local_bandit(
        setting="multi",
        n_arms=3,
        d=6,
        variant="ols",
        delta=0.1,
        warmup_rounds=300,
        warmup_arm="uniform",
        c_r=1.5,
        **policy,
    )


def local_settings(state_dir, bandit=None, **over) -> ServiceSettings:
    data = {
        "mode": "service",
        "bandits": {BANDIT: bandit or local_bandit()},
        "snapshots": {"directory": str(state_dir), "interval_s": 3600},
        "metrics": {"enabled": False},
        "model_server": {"enabled": False},
        "progress": False,
        "max_batch": 256,
        "idle_timeout_s": 3600,
    }
    data.update(over)
    return ServiceSettings.model_validate(data)


def env_for(bandit: dict):
    pol = bandit["policy"]
    if pol.get("setting") == "multi":
        return LDPMultiParamEnv(d=pol["d"], K=pol["n_arms"], theta_seed=4)
    return LDPSingleParamEnv(d=pol["d"], K=pol["n_arms"], theta_seed=4)


def record_reports(path: Path, reports: int, bandit=None, seed=0, encoding="json"):
    """Devices with the SDK talk to a service once; their report stream is recorded as JSONL.
    Returns the source (raw samples, summary) and the recording service."""
    bandit = bandit or local_bandit()
    src = SimulatedLDPClients(
        env_for(bandit),
        reports,
        BANDIT,
        topics=TOPICS,
        models_topic=MODELS,
        seed=seed,
        chunk=97,
        encoding=encoding,
    )
    svc = Service(
        local_settings(path.parent / f"rec-{path.stem}", bandit),
        InProcessTransport(RecordingSource(src, path), keep_outputs=True),
    )
    svc.open()
    svc.run()
    return src, svc


def published(transport) -> list[dict]:
    return [json.loads(v) for v in transport.outputs.get(MODELS, [])]


# -- leak checks -----------------------------------------------------------------------------------
def raw_values(samples) -> np.ndarray:
    vals = [v for x, r in samples for v in (*x.tolist(), r)]
    return np.array([v for v in vals if v != 0.0 and math.isfinite(v)])


def _key(v: float, digits: int = 12) -> str | None:
    """The start of repr(|v|) up to its ``digits``-th significant digit (None if too short)."""
    s = repr(abs(float(v)))
    if "e" in s or "." not in s:
        return None
    sig = 0
    for i, ch in enumerate(s):
        if ch.isdigit() and (sig or ch != "0"):
            sig += 1
            if sig == digits:
                return s[: i + 1]
    return None


def text_leaks(text: str, raw: np.ndarray) -> list[float]:
    """Raw values whose first 12 significant digits (as printed by repr) occur in ``text``.

    12 digits keep chance matches negligible (≈ 10⁻¹⁰ per pair of numbers) while catching a
    value printed at full or slightly reduced precision.
    """
    out = []
    for v in raw:
        key = _key(v)
        if key is not None and key in text:
            out.append(float(v))
    return out


def _numbers(obj):
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "f":
            yield from obj.ravel().tolist()
        elif obj.dtype == object:
            for x in obj.ravel():
                yield from _numbers(x)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _numbers(v)
    elif isinstance(obj, float):
        yield obj


def state_leaks(snapshot_bytes: bytes, raw: np.ndarray) -> list[float]:
    """Raw values stored exactly anywhere in a snapshot (arrays decoded, not only text)."""
    _head, _, payload = snapshot_bytes.partition(b"\n")
    nums = np.fromiter(_numbers(loads(payload)), dtype=np.float64)
    hit = np.isin(raw, nums)
    return raw[hit].tolist()
