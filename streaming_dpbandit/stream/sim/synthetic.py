"""A recorded synthetic stream of many bandits, for scaling tests and benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .sources import END_OF_STREAM_TAIL, stamp

__all__ = ["publish_jsonl", "write_multi_bandit_stream"]


def write_multi_bandit_stream(
    path: Path,
    bandits: list[str],
    events_per_bandit: int,
    env,
    seed: int = 0,
    dt: float = 0.01,
    delay_mean: float = 0.2,
    feedback_probability: float = 0.95,
    start_time: float = 1_700_000_000.0,
) -> dict[str, int]:
    """Write the input of many bandits as JSONL (``{"topic", "value"}`` lines, the format of
    :class:`~streaming_dpbandit.stream.sim.sources.FileSource`).

    Every bandit gets ``events_per_bandit`` contexts ``dt`` seconds apart (bandits interleaved in
    event time), a reward for each with probability ``feedback_probability`` after an
    exponential delay (the best arm's mean plus noise: the stream is recorded, not answered), a
    heartbeat watermark every 50 events and, per bandit, a last heartbeat a day after the
    stream's end. Every line is stamped (``timestamp``) with when its message happens (a
    heartbeat: when it is sent). Returns the number of records per topic.

    Examples
    --------
    >>> import tempfile
    >>> from streaming_dpbandit.envs import FliphatPaperEnv
    >>> p = Path(tempfile.mkdtemp()) / "s.jsonl"
    >>> n = write_multi_bandit_stream(p, ["a", "b"], 100, FliphatPaperEnv(d=5, K=2, s_star=2))
    >>> n["contexts"]
    200
    """
    rng = np.random.default_rng(seed)
    items = []  # (time, order, topic, value)
    order = 0
    n = events_per_bandit
    for b in bandits:
        X = np.round(env.contexts(rng, n), 6)
        mu = env.mean_rewards(X).max(axis=1)
        noise = np.asarray(env.reward_noise(rng, n)).reshape(n, -1)[:, 0]
        delay = rng.exponential(delay_mean, n)
        rewarded = rng.random(n) < feedback_probability
        offset = rng.uniform(0, dt)
        for i in range(n):
            t = start_time + offset + i * dt
            arms = [{"arm_id": f"arm-{k}", "features": X[i, k].tolist()} for k in range(X.shape[1])]
            ctx = {"v": 1, "event_id": f"{b}-{i}", "bandit_id": b, "event_time": t, "arms": arms}
            items.append((t, order, "contexts", ctx))
            order += 1
            if rewarded[i]:
                fb = {
                    "v": 1,
                    "event_id": f"{b}-{i}",
                    "bandit_id": b,
                    "reward": float(mu[i] + noise[i]),
                    "event_time": t + delay[i],
                }
                items.append((t + delay[i], order, "feedback", fb))
                order += 1
            if i % 50 == 49:  # a heartbeat a little behind the clock
                wm = {"v": 1, "type": "watermark", "bandit_id": b, "event_time": t - 1.0}
                items.append((t, order, "feedback", wm))
                order += 1
    end = max(x[0] for x in items) + END_OF_STREAM_TAIL
    for b in bandits:
        wm = {"v": 1, "type": "watermark", "bandit_id": b, "event_time": end}
        items.append((end, order, "feedback", wm))
        order += 1
    items.sort(key=lambda x: (x[0], x[1]))
    counts = {"contexts": 0, "feedback": 0}
    with Path(path).open("w") as f:
        for at, _, topic, value in items:
            line = {"topic": topic, "value": value, "timestamp": stamp(at)}
            f.write(json.dumps(line) + "\n")
            counts[topic] += 1
    return counts


def publish_jsonl(
    bootstrap: str, path: Path, topics: dict[str, str], client: str = "kafka-python"
) -> dict[str, int]:
    """Produce a JSONL stream (``{"topic", "value"}`` lines) to Kafka, keyed by ``bandit_id``
    (so a bandit's records share a partition); ``topics`` maps ``contexts``/``feedback`` to
    topic names. Returns the number of records per topic."""
    from ...settings import KafkaSettings
    from ..kafka.seam import kafka_client

    settings = KafkaSettings(bootstrap_servers=bootstrap, client=client)
    producer = kafka_client(client).producer(settings, linger_ms=20, batch_bytes=512 * 1024)
    counts = {"contexts": 0, "feedback": 0}
    try:
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            value = rec["value"]
            producer.send(
                topics[rec["topic"]],
                key=value["bandit_id"].encode(),
                value=json.dumps(value).encode(),
                timestamp_ms=rec.get("timestamp"),  # the recorded stream's clock
            )
            counts[rec["topic"]] += 1
        producer.flush()
    finally:
        producer.close()
    return counts
