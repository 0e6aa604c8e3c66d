"""A simulated population of devices running the LDP client SDK (embedded input of local mode).

Each simulated user draws a context from an environment, decides on the "device" with the latest
model snapshot the service published (read back from the models topic), observes the reward of
the chosen arm and sends only the privatised report (:class:`~streaming_dpbandit.ldp.Report`)
to the feedback topic. The raw contexts and rewards stay inside this source — the stand-in for
the devices — which also tracks the population's true pseudo-regret for the summary.
"""

from __future__ import annotations

import numpy as np

from ...envs.base import Environment
from ...ldp.client import LDPClient
from ...ldp.model import ModelSnapshot
from ...privacy.user_bound import UserContributionBound
from ..transport import Source

__all__ = ["SimulatedLDPClients"]


class SimulatedLDPClients(Source):
    """Devices with the SDK, one report per simulated user.

    Parameters
    ----------
    env
        Environment of the users (per-arm contexts, known mean rewards).
    reports
        Number of users (reports) to simulate.
    bandit_id
        The ``privacy: local`` bandit they talk to.
    topics
        (contexts topic, feedback topic); reports go to the feedback topic.
    models_topic
        Where the service publishes snapshots.
    seed
        Seeds the contexts, rewards and the devices' randomness (reproducible tests only; real
        devices use OS entropy).
    chunk
        Users per poll.
    encoding
        ``"json"`` or ``"f32"`` report payloads.
    max_epsilon, max_delta
        The privacy level the simulated app accepts.
    max_reports_per_user
        User level (docs/privacy/user-level-ldp.md): each simulated device sends at most this
        many reports (k) over the run; a round beyond it is still decided on the device, its
        reward never leaves it, and it is counted in ``bounded`` (``bounded_by_bandit``, which
        the service exports as ``dpbandit_bounded_events_total``). ``None``: one report per
        round, event level.
    users, zipf_exponent
        With ``max_reports_per_user``: the number of distinct simulated users and their Zipf
        popularity (user i ∝ (i + 1)^−a), who return; each device keeps its own counter.
    window_rounds, max_windows_per_user
        Windowed bound: at most k reports per window of ``window_rounds`` rounds of the
        population (round i in window (i − 1) // W), in at most E windows per device.
    """

    def __init__(
        self,
        env: Environment,
        reports: int,
        bandit_id: str = "default",
        *,
        topics: tuple[str, str] = ("contexts", "feedback"),
        models_topic: str = "dpbandit.models",
        seed: int = 0,
        chunk: int = 256,
        encoding: str = "json",
        max_epsilon: float = 8.0,
        max_delta: float = 0.1,
        max_reports_per_user: int | None = None,
        users: int = 2000,
        zipf_exponent: float = 1.1,
        window_rounds: int | None = None,
        max_windows_per_user: int | None = None,
    ):
        self.env = env
        self.reports = reports
        self.bandit_id = bandit_id
        self.seed = seed
        self.topics = topics
        self.models_topic = models_topic
        self.chunk = chunk
        self.encoding = encoding
        self.max_epsilon = max_epsilon
        self.max_delta = max_delta
        self._rng = np.random.default_rng([seed, 11])
        self._device_rng = np.random.default_rng([seed, 12])
        self.client: LDPClient | None = None
        self._i = 0
        self.regret = 0.0
        self.reward = 0.0
        self.raw_samples: list[tuple[np.ndarray, float]] = []  # a few raw values, for leak tests
        self.max_reports_per_user = max_reports_per_user
        self.users = users
        self.zipf_exponent = zipf_exponent
        self._bound = (
            None
            if max_reports_per_user is None
            else UserContributionBound(max_reports_per_user, max_windows_per_user, seed=seed)
        )
        self.window_rounds = window_rounds
        self._user_rng = np.random.default_rng([seed, 13])
        self.bounded = 0
        self.bounded_by_bandit: dict[str, int] = {}

    def on_output(self, topic: str, value: bytes) -> None:
        if topic != self.models_topic:
            return
        snap = ModelSnapshot.from_json(value)
        if snap.bandit_id != self.bandit_id:
            return
        if self.client is None:
            self.client = LDPClient(
                snap,
                max_epsilon=self.max_epsilon,
                max_delta=self.max_delta,
                rng=self._device_rng,
                allow_authors_code=True,
            )
        else:
            self.client.update(snap)

    def generate(self, emit, max_new: int) -> bool:
        if self._i >= self.reports:
            return False
        if self.client is None:  # no model published yet
            return True
        n = min(self.chunk, max_new, self.reports - self._i)
        X = self.env.contexts(self._rng, n)
        mu = self.env.mean_rewards(X)
        noise = self.env.reward_noise(self._rng, n)
        snapshot = self.client.snapshot
        assert snapshot is not None  # a client exists once a model is published
        multi = snapshot.spec.setting == "multi"
        key = self.bandit_id.encode()
        send = np.ones(n, dtype=bool)
        if self._bound is not None:  # each device's own counter (the devices, not the server)
            w = (np.arange(self.users) + 1.0) ** (-self.zipf_exponent)
            who = self._user_rng.choice(self.users, size=n, p=w / w.sum())
            win = np.zeros(n, dtype=np.int64)
            if self.window_rounds is not None:
                win = (self._i + np.arange(n, dtype=np.int64)) // self.window_rounds
                self._bound.close_below(max(0, int(win[0]) - 1))
            send = self._bound.admit(self._bound.hash_users(who), win)
        for j in range(n):
            choice = self.client.decide(X[j, 0] if multi else X[j])
            a = choice.arm
            r = float(self.env.rewards(mu[j, a : a + 1], noise[j, a : a + 1])[0])
            self.regret += float(mu[j].max() - mu[j, a])
            self.reward += r
            if len(self.raw_samples) < 200:
                self.raw_samples.append((X[j, a].copy(), r))
            if not send[j]:  # decided on the device; the reward never leaves it
                self.bounded += 1
                self.bounded_by_bandit[self.bandit_id] = self.bounded
                continue
            emit(self.topics[1], key, self.client.report(choice, r).to_json(self.encoding))
        self._i += n
        return self._i < self.reports

    def summary(self) -> dict:
        return {
            "reports": self._i,
            "pseudo_regret": self.regret,
            "mean_reward": self.reward / self._i if self._i else 0.0,
            "decisions": self._i,
            **({} if self._bound is None else {"bounded": self.bounded}),
        }
