"""A simulated stream of slate requests with per-item delayed feedback (embedded mode, tests).

The slate counterpart of :class:`~.sources.SimulatedSource`, over a matroid environment
(``envs.MATROID_REGISTRY``). Each context event asks for a slate of K items; when the slate
decision comes back, the source draws the round's reward vector and publishes, for every served
item independently, its reward with probability ``feedback_probability`` after an exponential
delay — so slates are often incomplete at their deadline and the bandit's default reward fills
the rest. Rewards are published in event-time order, each poll up to the simulated clock,
followed by a watermark heartbeat. The source tracks the true pseudo-regret of the slates.
"""

from __future__ import annotations

import heapq
import json
import math

from ...envs.matroid_env import MatroidEnvironment
from ..sim.sources import END_OF_STREAM, SimulatedSource

__all__ = ["SlateSimulatedSource"]


class SlateSimulatedSource(SimulatedSource):
    """Slate requests and per-item feedback from a matroid environment.

    Parameters
    ----------
    env
        A :class:`~streaming_dpbandit.envs.matroid_env.MatroidEnvironment`.
    events, bandit_id, dt, delay_mean, feedback_probability, seed, topics, start_time, chunk
        As for :class:`~.sources.SimulatedSource`; ``feedback_probability`` applies per item.
    item_ids
        The bandit's item catalogue (default ``item-0`` … ``item-{L−1}``).
    """

    def __init__(
        self,
        env: MatroidEnvironment,
        events: int,
        bandit_id: str = "default",
        dt: float = 0.01,
        delay_mean: float = 0.2,
        feedback_probability: float = 1.0,
        seed: int = 0,
        topics: tuple[str, str] = ("contexts", "feedback"),
        start_time: float = 1_700_000_000.0,
        chunk: int = 256,
        item_ids: list[str] | None = None,
    ):
        super().__init__(
            env,
            events,
            bandit_id,
            dt,
            delay_mean,
            feedback_probability,
            seed,
            topics,
            start_time,
            chunk,
        )
        self.item_ids = item_ids or [f"item-{i}" for i in range(env.n_items)]
        self._index = {a: i for i, a in enumerate(self.item_ids)}
        self._opt = env.optimal_return()

    def _emit_feedback(self, emit, until: float) -> None:
        while self._due and self._due[0][0] <= until:
            t, _, eid, rewards = heapq.heappop(self._due)
            value = {
                "v": 1,
                "event_id": eid,
                "bandit_id": self.bandit_id,
                "rewards": rewards,
                "event_time": t,
            }
            self._send(emit, self.topics[1], value)

    def generate(self, emit, max_new: int) -> bool:
        if self._closed:
            return False
        self._gen += 1
        if self._i >= self.events and not self._waiting:
            self._emit_feedback(emit, math.inf)
            self._watermark(emit, END_OF_STREAM)
            self._closed = True
            return False
        self._emit_feedback(emit, self._clock)
        self._watermark(emit, self._clock)
        waiting = self._i >= self.events or (self._waiting and self._stalled())
        new_clock = self._clock + (16 if waiting else self.chunk) * self.dt
        K = self.env.K
        n = 0
        while self._i + n < self.events and n < max_new:
            if self.start_time + (self._i + n) * self.dt > new_clock:
                break
            n += 1
        for _ in range(n):
            t = self.start_time + self._i * self.dt
            eid = f"{self.bandit_id}-{self._i}"
            self._i += 1
            self._waiting[eid] = (None, None, t, self._gen)
            self._send(
                emit,
                self.topics[0],
                {
                    "v": 1,
                    "event_id": eid,
                    "bandit_id": self.bandit_id,
                    "event_time": t,
                    "slate_size": K,
                },
            )
        self._clock = new_clock
        return True

    def on_output(self, topic: str, value: bytes) -> None:
        if not topic.endswith("decisions"):
            return
        dec = json.loads(value)
        got = self._waiting.pop(dec["event_id"], None)
        if got is None:
            return  # a repeated decision (after a restart) is answered once
        _, _, t, gen = got
        decided_at = t if gen == self._gen else self._clock
        items = [int(x["item_index"]) for x in dec["slate"]]
        w = self.env.draw(self._rng, 1)[0]
        self.decisions += 1
        ret = float(self.env.means[items].sum())
        self.regret += self._opt - ret
        self.reward += float(w[items].sum())
        for e in items:
            if self._fb_rng.random() < self.feedback_probability:
                f = decided_at + self._fb_rng.exponential(self.delay_mean) + 1e-6
                heapq.heappush(
                    self._due, (f, self._seq, dec["event_id"], {self.item_ids[e]: float(w[e])})
                )
                self._seq += 1

    def _references(self) -> dict:
        return {}  # slates: the summary reports the optimal return instead

    def summary(self) -> dict:
        out = super().summary()
        out["optimal_return"] = self._opt
        return out
