"""A closed-loop load generator for a service behind Kafka: a simulated stream in real time.

``dpbandit loadgen`` publishes context events of an ``envs/`` environment at a fixed rate to the
contexts topic, reads the service's decisions from the decisions topic and publishes each
decision's reward — drawn from the environment for the chosen arm — after a random delay to the
feedback topic, followed by a watermark heartbeat at every tick. Unlike the embedded mode's
discrete-event simulation, time is the wall clock: contexts keep arriving at the configured rate
whatever the service does (as real traffic would), event times are wall-clock times, and a
decision that comes back late gets its reward late (possibly after the bandit's feedback window:
a ``feedback_after_expiry`` dead letter, as in production).

It reads the same settings as ``dpbandit serve``: the ``kafka`` section (bootstrap servers,
topics, credentials) and the ``simulation`` section (environment, bandit, reward delay and
probability, seed). Event ids carry a per-run prefix, so a restarted generator never repeats
one, and it never sends an end-of-stream watermark, so it cannot expire a long-lived service's
joins early.
"""

from __future__ import annotations

import heapq
import json
import logging
import signal
import sys
import time

import numpy as np

from ...errors import ConfigError
from ...settings import ServiceSettings
from ..errors import ServiceStartError
from ..messages import context_value
from ..stalls import blocking_load

__all__ = ["RealTimeStream", "check_loadgen_settings", "run_loadgen"]

log = logging.getLogger("streaming_dpbandit.loadgen")


class RealTimeStream:
    """The generator's logic, without Kafka: which messages are due at a given time.

    Parameters
    ----------
    env
        Environment with per-arm contexts and known mean rewards.
    bandit_id
        Bandit the events belong to.
    rate
        Context events per second.
    start
        Time of event 0 (seconds since the epoch).
    delay_mean
        Mean reward delay in seconds (exponential), counted from when the decision arrives.
    feedback_probability
        Probability that a decision gets a reward at all.
    seed
        Seeds contexts, reward noise, delays and dropped rewards.
    id_prefix
        Event ids are ``f"{id_prefix}-{i}"``.
    max_events
        Stop producing contexts after this many (None: unlimited).
    feature_encoding
        ``json`` (number lists), ``f64`` (binary ``arm_features_f64``) or the binary form
        ``raw-f64`` / ``raw-f32`` (docs/events.md); :meth:`contexts` gives the binary form as
        message values (bytes), the others as JSON objects.
    """

    def __init__(
        self,
        env,
        bandit_id: str,
        rate: float,
        start: float,
        delay_mean: float = 0.2,
        feedback_probability: float = 1.0,
        seed: int = 0,
        id_prefix: str | None = None,
        max_events: int | None = None,
        feature_encoding: str = "json",
    ):
        if not rate > 0:
            raise ValueError("rate must be positive")
        self.env = env
        self.bandit_id = bandit_id
        self.rate = float(rate)
        self.start = float(start)
        self.delay_mean = float(delay_mean)
        self.feedback_probability = float(feedback_probability)
        self.id_prefix = bandit_id if id_prefix is None else id_prefix
        self.max_events = max_events
        self.feature_encoding = feature_encoding
        self._rng = np.random.default_rng(seed)
        self._fb_rng = np.random.default_rng([seed, 1])
        self._waiting: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._due: list[tuple[float, int, str, float]] = []  # (time, seq, event id, reward)
        self._seq = 0
        self.events = 0
        self.decisions = 0
        self.rewards_sent = 0
        self.regret = 0.0
        self.reward = 0.0

    @property
    def finished(self) -> bool:
        """Every context was sent, decided, and its reward (if any) sent."""
        return (
            self.max_events is not None
            and self.events >= self.max_events
            and not self._waiting
            and not self._due
        )

    def contexts(self, now: float) -> list[bytes]:
        """The context events whose time has come (event i happens at start + i / rate)."""
        n = int(np.floor((now - self.start) * self.rate)) + 1 - self.events
        if self.max_events is not None:
            n = min(n, self.max_events - self.events)
        if n <= 0:
            return []
        X = self.env.contexts(self._rng, n)
        mu = self.env.mean_rewards(X)
        noise = self.env.reward_noise(self._rng, n)
        Xr = np.round(X, 6)  # what a producer would send; rewards use the exact contexts
        arm_ids = [f"arm-{k}" for k in range(X.shape[1])]
        out: list[bytes] = []
        for j in range(n):
            i = self.events + j
            eid = f"{self.id_prefix}-{i}"
            self._waiting[eid] = (mu[j], noise[j])
            t = self.start + i / self.rate
            out.append(context_value(eid, self.bandit_id, t, Xr[j], arm_ids, self.feature_encoding))
        self.events += n
        return out

    def on_decision(self, decision: dict, now: float) -> None:
        """A decision arrived at ``now``: score it and schedule its reward."""
        got = self._waiting.pop(str(decision.get("event_id")), None)
        if got is None:
            return  # not ours, or a repeat (decisions are at-least-once)
        mu, noise = got
        k = int(decision["arm_index"])
        self.decisions += 1
        self.regret += float(mu.max() - mu[k])
        reward = float(mu[k] + noise[k])
        self.reward += reward
        if self._fb_rng.random() < self.feedback_probability:
            due = now + self._fb_rng.exponential(self.delay_mean) + 1e-6
            heapq.heappush(self._due, (due, self._seq, decision["event_id"], reward))
            self._seq += 1

    def feedback(self, now: float) -> list[dict]:
        """Rewards due by ``now`` (in time order), then a watermark heartbeat at ``now``.

        Every reward scheduled later is due after ``now`` (delays count from the decision's
        arrival), so the heartbeat's promise — no later feedback older than it — holds.
        """
        out = []
        while self._due and self._due[0][0] <= now:
            t, _, eid, reward = heapq.heappop(self._due)
            out.append(
                {
                    "v": 1,
                    "event_id": eid,
                    "bandit_id": self.bandit_id,
                    "reward": reward,
                    "event_time": t,
                }
            )
        self.rewards_sent += len(out)
        out.append({"v": 1, "type": "watermark", "bandit_id": self.bandit_id, "event_time": now})
        return out

    def summary(self) -> dict:
        return {
            "events": self.events,
            "decisions": self.decisions,
            "rewards": self.rewards_sent,
            "pseudo_regret": self.regret,
            "mean_reward": self.reward / self.decisions if self.decisions else 0.0,
        }


def check_loadgen_settings(settings: ServiceSettings, rate: float | None = None):
    """The environment the generator simulates, after checking that the service configured in
    the same settings can use its events (Kafka configured, bandit known, same dimension) and,
    given the ``rate``, would not wait at every release (:func:`~..stalls.blocking_load`).

    Raises :class:`ConfigError` with one line otherwise.
    """
    from ...envs import REGISTRY

    if settings.kafka is None:
        raise ConfigError("loadgen needs Kafka: --kafka HOST:PORT or kafka.bootstrap_servers")
    sim = settings.simulation
    env_cls = REGISTRY.get(sim.env)
    if env_cls is None:
        raise ConfigError(
            f"simulation.env: unknown environment {sim.env!r}; choose from "
            + ", ".join(sorted(REGISTRY))
        )
    try:
        env = env_cls(**sim.env_params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"simulation.env_params: {err}") from None
    if settings.bandits:
        bandit = settings.bandits.get(sim.bandit_id)
        if bandit is None:
            raise ConfigError(
                f"simulation.bandit_id {sim.bandit_id!r} is not a configured bandit "
                f"({', '.join(sorted(settings.bandits))}); the service would dead-letter "
                "every event"
            )
        d = getattr(bandit.policy, "d", None)
        if bandit.arms is None and d is not None and d != env.d:
            raise ConfigError(
                f"bandit {sim.bandit_id!r} has d={d} but the simulated environment has "
                f"d={env.d}; the service would dead-letter every event"
            )
        why = (
            None
            if rate is None
            else blocking_load(sim.bandit_id, bandit, rate, sim.feedback_probability)
        )
        if why is not None:
            raise ConfigError(why)
    return env


def _decisions_reader(settings: ServiceSettings, timeout_s: float = 60.0):
    """A group-less reader of every partition of the decisions topic, at its end."""
    from ..kafka.seam import kafka_client

    k = settings.kafka_section()
    topic = k.topics.decisions
    reader = kafka_client(k.client).reader(k, read_committed=False)
    parts = reader.partitions(topic, timeout_s)
    if not parts:
        reader.close()
        raise RuntimeError(f"topic {topic} has no partitions after {timeout_s:g} s")
    tps = [(topic, p) for p in parts]
    # from the end offsets now, before the first context is sent
    reader.assign(tps, reader.end_offsets(tps))
    return reader


def run_loadgen(
    settings: ServiceSettings,
    rate: float = 100.0,
    events: int | None = None,
    duration_s: float | None = None,
    tick_s: float = 0.1,
    report_every_s: float = 10.0,
    out=sys.stderr,
    install_signal_handlers: bool = True,
) -> dict:
    """Publish a simulated stream at ``rate`` events/s until ``events`` were sent, decided and
    rewarded, ``duration_s`` passed, or SIGTERM/SIGINT. Returns the summary (events,
    decisions, rewards sent, true pseudo-regret, mean reward)."""
    from ..kafka.seam import kafka_client
    from ..kafka.transport import ensure_topics

    if not rate > 0:
        raise ConfigError("--rate must be positive")
    env = check_loadgen_settings(settings, rate)
    k = settings.kafka_section()
    sim = settings.simulation
    client = kafka_client(k.client)
    try:
        if k.create_topics:
            ensure_topics(k, client)
        consumer = _decisions_reader(settings)
        producer = client.producer(k, linger_ms=5)
    except Exception as err:  # e.g. no broker at that address
        raise ServiceStartError(
            f"cannot reach Kafka at {k.bootstrap_servers}: {type(err).__name__}: {err}"
        ) from None
    start = time.time()
    stream = RealTimeStream(
        env,
        sim.bandit_id,
        rate,
        start,
        delay_mean=sim.feedback_delay_mean,
        feedback_probability=sim.feedback_probability,
        seed=sim.seed,
        id_prefix=f"{sim.bandit_id}-{int(start * 1000):x}",
        max_events=events,
        feature_encoding=sim.feature_encoding,
    )
    stop = [False]
    if install_signal_handlers:

        def _stop(*_):
            stop[0] = True

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    key = sim.bandit_id.encode()

    def send(topic: str, values: list[bytes] | list[dict]) -> None:
        for v in values:
            producer.send(topic, key, v if isinstance(v, bytes) else json.dumps(v).encode())

    print(
        f"loadgen: {rate:g} events/s of {sim.env} ({env.d} features × {env.K} arms) for bandit "
        f"{sim.bandit_id!r} → {k.topics.contexts}; rewards → {k.topics.feedback}",
        file=out,
        flush=True,
    )
    next_report = time.monotonic() + report_every_s
    end = None if duration_s is None else time.monotonic() + duration_s
    try:
        while not stop[0] and not stream.finished and (end is None or time.monotonic() < end):
            send(k.topics.contexts, stream.contexts(time.time()))
            send(k.topics.feedback, stream.feedback(time.time()))
            producer.flush()
            tick_end = time.monotonic() + tick_s
            while True:  # decisions until the next tick
                wait_ms = int((tick_end - time.monotonic()) * 1000)
                if wait_ms <= 0:
                    break
                for m in consumer.poll(wait_ms / 1000):
                    try:
                        decision = json.loads(m.value)
                    except (TypeError, ValueError):
                        continue
                    if isinstance(decision, dict):
                        stream.on_decision(decision, time.time())
            if time.monotonic() >= next_report:
                s = stream.summary()
                print(
                    f"loadgen: {s['events']:,} events, {s['decisions']:,} decisions, "
                    f"{s['rewards']:,} rewards, mean reward {s['mean_reward']:.3f}",
                    file=out,
                    flush=True,
                )
                next_report += report_every_s
    finally:
        producer.flush()
        producer.close()
        consumer.close()
    summary = stream.summary()
    print(
        f"loadgen: sent {summary['events']:,} events and {summary['rewards']:,} rewards, saw "
        f"{summary['decisions']:,} decisions; pseudo-regret {summary['pseudo_regret']:,.1f}, "
        f"mean reward {summary['mean_reward']:.3f}",
        file=out,
        flush=True,
    )
    return summary
