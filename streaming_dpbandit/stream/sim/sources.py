"""Inputs of the embedded (in-process) transport: a simulated stream and a JSONL file."""

from __future__ import annotations

import base64
import heapq
import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

import numpy as np

from ...envs.base import Environment
from ..binary_context import MAGIC
from ..messages import context_value
from ..transport import Source

if TYPE_CHECKING:
    from ...envs.matroid_env import MatroidEnvironment

__all__ = ["END_OF_STREAM_TAIL", "FileSource", "RecordingSource", "SimulatedSource", "stamp"]

log = logging.getLogger("streaming_dpbandit.sources")

#: A finite simulated stream ends with a heartbeat this long after its last event, stamped
#: then: the stream clock passes every feedback window of a day or less, so every pending
#: decision expires (docs/service.md, The stream clock).
END_OF_STREAM_TAIL = 86_400.0


def stamp(t: float) -> int:
    """The record timestamp (ms) of a message written when it happens, at event time ``t``.

    >>> stamp(1_700_000_000.0012)
    1700000000002
    """
    return math.ceil(t * 1000)


class SimulatedSource(Source):
    """A simulated stream of context events with delayed rewards, from an environment.

    A discrete-event emulation of real time. Context i happens at ``start + i·dt`` whether or
    not earlier decisions were made. Every record is stamped (its Kafka-like timestamp,
    :func:`stamp`) with the time its message happens, as a producer writing each message when it
    happens would have it: the service's stream clock is then the simulated clock. A decision
    that comes back in the poll right after its context counts as immediate; one that comes back
    later (the service was waiting for feedback before a release) happens at the simulated clock
    of its arrival. The reward then happens an exponential delay after the decision. Rewards are
    published in event-time order, each poll up to the clock, followed by a heartbeat watermark
    (``{"type": "watermark"}``) at the clock, so the service can expire joins even when rewards
    are sparse; the stream ends with a heartbeat :data:`END_OF_STREAM_TAIL` after its last
    event. The source also tracks the true pseudo-regret of the decisions for the end-of-run
    summary, and, on the same contexts, the two reference policies a reader compares it with:
    the uniform random policy (its expected regret and mean reward given the contexts, so no
    extra randomness) and the oracle that always picks the arm of highest mean reward (regret
    0).

    Parameters
    ----------
    env
        Environment with per-arm contexts and known mean rewards.
    events
        Number of context events.
    bandit_id
        Bandit the events belong to.
    dt
        Seconds of event time between events.
    delay_mean
        Mean reward delay (seconds).
    feedback_probability
        Probability that a decision gets a reward at all.
    seed
        Seeds the stream (contexts, noise, delays).
    topics
        (contexts topic, feedback topic).
    chunk
        Context events per poll (simulated time advances by chunk·dt per poll).
    feature_encoding
        ``json`` (number lists), ``f64`` (binary ``arm_features_f64``) or the binary form
        ``raw-f64`` / ``raw-f32`` (docs/events.md).
    """

    def __init__(
        self,
        env: Environment | MatroidEnvironment,
        events: int,
        bandit_id: str = "default",
        dt: float = 0.01,
        delay_mean: float = 0.2,
        feedback_probability: float = 1.0,
        seed: int = 0,
        topics: tuple[str, str] = ("contexts", "feedback"),
        start_time: float = 1_700_000_000.0,
        chunk: int = 256,
        feature_encoding: str = "json",
    ):
        self.env: Any = env  # an Environment (a MatroidEnvironment for the slate source)
        self.events = events
        self.bandit_id = bandit_id
        self.dt = dt
        self.delay_mean = delay_mean
        self.feedback_probability = feedback_probability
        self.seed = seed
        self.topics = topics
        self.start_time = start_time
        self.chunk = chunk
        self.feature_encoding = feature_encoding
        self._i = 0
        self._gen = 0
        self._rng = np.random.default_rng(seed)
        self._fb_rng = np.random.default_rng([seed, 1])
        # event_id -> (mean rewards, noise, context time, generation emitted)
        # event id -> (mean rewards, noise, event time, generation); the slate source keeps
        # only the time and generation
        self._waiting: dict[str, tuple[Any, Any, float, int]] = {}
        # (time, seq, event_id, reward): a number, or per-item rewards for the slate source
        self._due: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._clock = start_time
        self.regret = 0.0
        self.reward = 0.0
        self.decisions = 0
        self.mean_reward_sum = 0.0  # Σ mean reward of the chosen arm (no noise)
        self.oracle_sum = 0.0  # Σ max_k mean reward
        self.uniform_sum = 0.0  # Σ mean over arms of the mean reward
        self._closed = False

    #: The feedback message's field holding what :meth:`on_output` queued as the reward.
    reward_field = "reward"

    def _send(self, emit, topic: str, value: dict) -> None:
        """Emit a message, stamped with its event time (it is written when it happens)."""
        emit(topic, self.bandit_id.encode(), json.dumps(value).encode(), stamp(value["event_time"]))

    def _emit_feedback(self, emit, until: float) -> None:
        while self._due and self._due[0][0] <= until:
            t, _, eid, reward = heapq.heappop(self._due)
            value = {
                "v": 1,
                "event_id": eid,
                "bandit_id": self.bandit_id,
                self.reward_field: reward,
                "event_time": t,
            }
            self._send(emit, self.topics[1], value)

    def _watermark(self, emit, t: float) -> None:
        self._send(
            emit,
            self.topics[1],
            {"v": 1, "type": "watermark", "bandit_id": self.bandit_id, "event_time": t},
        )

    def generate(self, emit, max_new: int) -> bool:
        if self._closed:
            return False
        self._gen += 1
        if self._i >= self.events and not self._waiting:
            last = max([self._clock] + [due[0] for due in self._due])
            self._emit_feedback(emit, math.inf)
            self._watermark(emit, last + END_OF_STREAM_TAIL)
            self._closed = True
            return False
        # decisions at or before the clock are known (or will happen later): publish rewards
        # up to the clock and a heartbeat at the clock
        self._emit_feedback(emit, self._clock)
        self._watermark(emit, self._clock)
        # advance simulated time: a whole chunk, or a small tick while the service is waiting
        waiting = self._i >= self.events or (self._waiting and self._stalled())
        step = (16 if waiting else self.chunk) * self.dt
        new_clock = self._clock + step
        n = 0
        while self._i + n < self.events and n < max_new:
            if self.start_time + (self._i + n) * self.dt > new_clock:
                break
            n += 1
        if n > 0:
            self._emit_contexts(emit, n)
        self._clock = new_clock
        return True

    def _emit_contexts(self, emit, n: int) -> None:
        """The next ``n`` context events (their mean rewards and noise kept for the reward)."""
        X = self.env.contexts(self._rng, n)
        mu = self.env.mean_rewards(X)
        noise = self.env.reward_noise(self._rng, n)
        Xr = np.round(X, 6)  # what a producer would send; rewards use the exact contexts
        arm_ids = [f"arm-{k}" for k in range(X.shape[1])]
        for j in range(n):
            t = self.start_time + self._i * self.dt
            eid = f"{self.bandit_id}-{self._i}"
            self._i += 1
            self._waiting[eid] = (mu[j], noise[j], t, self._gen)
            value = context_value(eid, self.bandit_id, t, Xr[j], arm_ids, self.feature_encoding)
            emit(self.topics[0], self.bandit_id.encode(), value, stamp(t))

    def _stalled(self) -> bool:
        """Decisions older than the last poll are missing: the service is waiting."""
        oldest = next(iter(self._waiting.values()))
        return oldest[3] < self._gen - 1

    def _decision(self, topic: str, value: bytes) -> tuple[dict, tuple, float] | None:
        """A decision this source waits for: the message, what :meth:`_emit_contexts` kept
        for its event, and when it happened (simulated). None for any other output, and for a
        repeated decision (after a restart: it is answered once)."""
        if not topic.endswith("decisions"):
            return None
        dec = json.loads(value)
        got = self._waiting.pop(dec["event_id"], None)
        if got is None:
            return None
        t, gen = got[2], got[3]
        return dec, got, (t if gen == self._gen else self._clock)  # immediate, or after a wait

    def on_output(self, topic: str, value: bytes) -> None:
        decision = self._decision(topic, value)
        if decision is None:
            return
        dec, (mu, noise, _t, gen), decided_at = decision
        k = int(dec["arm_index"])
        self.decisions += 1
        best = float(mu.max())
        self.regret += best - float(mu[k])
        self.mean_reward_sum += float(mu[k])
        self.oracle_sum += best
        self.uniform_sum += float(mu.mean())
        reward = float(mu[k] + noise[k])
        self.reward += reward
        if self._fb_rng.random() < self.feedback_probability:
            f = max(decided_at, self._clock if gen != self._gen else decided_at)
            f += self._fb_rng.exponential(self.delay_mean) + 1e-6
            heapq.heappush(self._due, (f, self._seq, dec["event_id"], reward))
            self._seq += 1

    def summary(self) -> dict:
        return {
            "events": self._i,
            "decisions": self.decisions,
            "pseudo_regret": self.regret,
            "mean_reward": self.reward / self.decisions if self.decisions else 0.0,
            "seed": self.seed,
            **self._references(),
        }

    def _references(self) -> dict:
        """The decisions' mean rewards and the uniform and oracle policies on these contexts."""
        n = max(self.decisions, 1)
        return {
            "mean_expected_reward": self.mean_reward_sum / n,
            "uniform_pseudo_regret": self.oracle_sum - self.uniform_sum,
            "uniform_mean_expected_reward": self.uniform_sum / n,
            "oracle_mean_expected_reward": self.oracle_sum / n,
        }


class FileSource(Source):
    """Records from a JSONL file: one ``{"topic": "contexts"|"feedback", "value": {...}}`` per line.

    ``topic`` is the short name or the topic's full name (``topics`` here, e.g.
    ``dpbandit.contexts``: the ``service-jsonl`` log format of ``dpbandit replay``).

    ``value`` may be an object or a string (sent as is, so malformed payloads can be replayed);
    ``"value_b64"`` instead of ``value`` carries a binary message value (a binary context,
    docs/events.md) as base64 text.
    An optional ``"timestamp"`` (integer milliseconds since the epoch, as a Kafka record's
    timestamp in a topic dump) is the record's timestamp: the service's stream clock (join
    expiry, the event-time bounds ``max_event_time_skew_s`` and ``max_event_time_lag_s``).
    A line without one takes the timestamp of the line before it; lines before the first
    timestamp have none, and the service then reads a message's own event time as its clock,
    bounded by the wall clock only (docs/service.md, "The stream clock"; a warning says so
    once). Lines that are not of this shape are delivered to the contexts topic verbatim, where
    they end up in the dead-letter topic with their reason.
    """

    def __init__(self, path: str | Path, topics: tuple[str, str] = ("contexts", "feedback")):
        self.path = Path(path)
        self.topics = topics
        self._fh: BinaryIO | None = None
        self._done = False
        self._stamp: int | None = None  # the last timestamp read (lines without one take it)
        self._warned = False

    def generate(self, emit, max_new: int) -> bool:
        if self._done:
            return False
        if self._fh is None:
            self._fh = self.path.open("rb")
        contexts, feedback = self.topics
        names = {"contexts": contexts, "feedback": feedback, contexts: contexts, feedback: feedback}
        for _ in range(max_new):
            line = self._fh.readline()
            if not line:
                self._fh.close()
                self._done = True
                return False
            line = line.rstrip(b"\n")
            if not line.strip():
                continue
            topic, value, key, ts = self.topics[0], line, None, None
            try:
                obj = json.loads(line)
                if (
                    isinstance(obj, dict)
                    and obj.get("topic") in names
                    and ("value" in obj or isinstance(obj.get("value_b64"), str))
                ):
                    topic = names[obj["topic"]]
                    v = obj.get("value")
                    if "value" not in obj:  # a binary message value (e.g. a binary context)
                        value = base64.b64decode(obj["value_b64"], validate=True)
                    else:
                        value = v.encode() if isinstance(v, str) else json.dumps(v).encode()
                    if isinstance(v, dict) and isinstance(v.get("bandit_id"), str):
                        key = v["bandit_id"].encode()
                    ts = obj.get("timestamp")
                    if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
                        ts = None
            except (ValueError, UnicodeDecodeError):
                pass
            if ts is not None:
                self._stamp = ts
            ts = self._stamp
            if ts is None:
                if not self._warned:
                    self._warned = True
                    log.warning(
                        '%s: lines without a "timestamp": their own event times are their '
                        "clock, bounded by the wall clock only (docs/service.md, The stream "
                        "clock)",
                        self.path.name,
                    )
                emit(topic, key, value)
            else:
                emit(topic, key, value, ts)
        return True


class RecordingSource(Source):
    """Wrap a source and write every input record it emits to a JSONL file (FileSource format).

    Used to capture a simulated stream once and replay it identically — through the in-process
    transport or a Kafka topic — into several runs that must end in the same state.
    """

    def __init__(self, inner: Source, path: str | Path):
        self.inner = inner
        self.path = Path(path)
        self.topics = inner.topics
        self._fh: TextIO | None = None

    def generate(self, emit, max_new: int) -> bool:
        if self._fh is None:
            self._fh = self.path.open("w")
        fh = self._fh
        names = {self.topics[0]: "contexts", self.topics[1]: "feedback"}

        def tee(topic, key, value, timestamp_ms=None):
            line: dict[str, Any] = {"topic": names[topic]}
            if value.startswith(MAGIC):  # a binary context
                line["value_b64"] = base64.b64encode(value).decode("ascii")
            else:
                line["value"] = value.decode()
            if timestamp_ms is not None:
                line["timestamp"] = timestamp_ms
            fh.write(json.dumps(line) + "\n")
            if timestamp_ms is None:
                emit(topic, key, value)
            else:
                emit(topic, key, value, timestamp_ms)

        live = self.inner.generate(tee, max_new)
        if not live:
            fh.close()
        return live

    def on_output(self, topic: str, value: bytes) -> None:
        self.inner.on_output(topic, value)

    def summary(self) -> dict:
        return self.inner.summary()
