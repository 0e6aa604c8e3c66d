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

from ...envs.matroid_env import MatroidEnvironment
from ..sim.sources import SimulatedSource

__all__ = ["SlateSimulatedSource"]


class SlateSimulatedSource(SimulatedSource):
    """Slate requests and per-item feedback from a matroid environment.

    Parameters
    ----------
    env
        A :class:`~streaming_dpbandit.envs.matroid_env.MatroidEnvironment`.
    events, bandit_id, dt, delay_mean, feedback_probability, seed, topics, start_time, chunk
        As for :class:`~streaming_dpbandit.stream.sim.sources.SimulatedSource` (and in its
        order); ``feedback_probability`` applies per item.
    item_ids
        The bandit's item catalogue (default ``item-0`` … ``item-{L−1}``).
    """

    def __init__(
        self,
        env: MatroidEnvironment,
        events: int,
        *args,
        item_ids: list[str] | None = None,
        **kwargs,
    ):
        super().__init__(env, events, *args, **kwargs)
        self.item_ids = item_ids or [f"item-{i}" for i in range(env.n_items)]
        self._index = {a: i for i, a in enumerate(self.item_ids)}
        self._opt = env.optimal_return()

    reward_field = "rewards"  # per item

    def _emit_contexts(self, emit, n: int) -> None:
        K = self.env.K
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

    def on_output(self, topic: str, value: bytes) -> None:
        decision = self._decision(topic, value)
        if decision is None:
            return
        dec, _, decided_at = decision
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
