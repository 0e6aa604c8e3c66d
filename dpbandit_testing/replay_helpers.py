"""Synthetic logged streams with known policy values, for the replay tests."""

from __future__ import annotations

import json

import numpy as np


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class DiscreteProblem:
    """C context types (uniform), K arms, Bernoulli rewards with means mu[c, a].

    The evaluated policy pe[c, :] and the logging policy pb[c, :] are known, so the true value
    V = mean_c sum_a pe[c, a] mu[c, a] is exact.
    """

    def __init__(self, seed: int, C: int = 8, K: int = 5, logging: str = "uniform"):
        rng = np.random.default_rng(seed)
        self.C, self.K = C, K
        self.mu = rng.uniform(0.1, 0.9, (C, K))
        self.pe = softmax(3.0 * rng.normal(size=(C, K)))
        if logging == "uniform":
            self.pb = np.full((C, K), 1.0 / K)
        else:
            self.pb = softmax(rng.normal(size=(C, K)))
        self.value = float((self.pe * self.mu).sum(axis=1).mean())

    def logs(self, rng: np.random.Generator, R: int, n: int) -> dict:
        """R independent logs of n events each, as (R, n) arrays."""
        c = rng.integers(0, self.C, (R, n))
        u = rng.random((R, n))
        cdf = np.cumsum(self.pb[c], axis=2)
        a = np.minimum((u[..., None] > cdf).sum(axis=2), self.K - 1)
        r = (rng.random((R, n)) < self.mu[c, a]).astype(np.float64)
        return {"c": c, "a": a, "r": r, "w": self.pe[c, a] / self.pb[c, a], "pb": self.pb[c, a]}

    def model_terms(self, logs: dict, qhat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """q̂ at the logged action and under the evaluated policy."""
        c, a = logs["c"], logs["a"]
        return qhat[c, a], (self.pe * qhat).sum(axis=1)[c]


def service_log_lines(
    n: int,
    K: int = 3,
    d: int = 2,
    seed: int = 0,
    bandit: str = "b",
    feedback_delay: float = 0.5,
    start: float = 1_700_000_000.0,
) -> list[dict]:
    """A uniformly logged service stream: context, decision, feedback per event (time order)."""
    rng = np.random.default_rng(seed)
    theta = np.arange(1, d + 1) / d
    out = []
    for i in range(n):
        t = start + i
        X = np.round(rng.normal(size=(K, d)), 6)
        a = int(rng.integers(K))
        eid = f"e-{i}"
        out.append(
            {
                "topic": "contexts",
                "value": {
                    "v": 1,
                    "event_id": eid,
                    "bandit_id": bandit,
                    "event_time": t,
                    "arms": [{"arm_id": f"arm-{k}", "features": X[k].tolist()} for k in range(K)],
                },
            }
        )
        out.append(
            {
                "topic": "decisions",
                "value": {
                    "v": 1,
                    "event_id": eid,
                    "bandit_id": bandit,
                    "arm_id": f"arm-{a}",
                    "arm_index": a,
                    "propensity": 1.0 / K,
                    "model_version": 0,
                    "episode": 0,
                    "round": i + 1,
                    "calibration": "non-private",
                    "policy": "random",
                    "decided_at": t,
                },
            }
        )
        reward = float(np.round(X[a] @ theta + 0.1 * rng.normal(), 6))
        out.append(
            {
                "topic": "feedback",
                "value": {
                    "v": 1,
                    "event_id": eid,
                    "bandit_id": bandit,
                    "reward": reward,
                    "event_time": t + feedback_delay,
                },
            }
        )
    return out


def write_jsonl(path, lines) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
