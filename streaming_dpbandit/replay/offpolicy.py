"""Off-policy evaluation of a frozen policy over a logged stream."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..policies.base import Policy
from ..utils.arrays import FloatArray
from .batch import LoggedBatch
from .ledger import InMemoryLedger
from .ope import ESTIMATORS, WeightDiagnostics
from .replay_method import ReplayMethod
from .reward_model import RidgeRewardModel
from .target import frozen_choices

__all__ = ["OffPolicyEvaluator"]


class OffPolicyEvaluator:
    """Feed IPS / SNIPS / DM / DR with a frozen policy's choices on each chunk.

    The policy is frozen in the state it has when evaluation starts: as built (plus its initial
    model release if one is due), or after learning from the first ``warmup`` events by the
    replay method (uniform logs only). Its model does not change while the remaining events are
    evaluated.

    Parameters
    ----------
    policy
        The policy to evaluate.
    estimators
        Names from :data:`~.ope.ESTIMATORS`.
    reward_model
        A fitted :class:`~.reward_model.RidgeRewardModel` (needed by DM and DR).
    level, bootstrap, seed
        Intervals.
    warmup
        Events learned (replay method) before the policy is frozen.
    ledger
        Where releases go (warm-up and the initial release).

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.policies import TablePolicy
    >>> from streaming_dpbandit.replay.batch import LoggedBatch
    >>> from streaming_dpbandit.replay.contexts import ConstantContexts
    >>> rng = np.random.default_rng(0)
    >>> n = 20000
    >>> a = rng.integers(0, 2, n); r = (rng.random(n) < np.where(a == 1, 0.8, 0.2)) * 1.0
    >>> log = LoggedBatch(np.arange(n), a, r, np.full(n, 0.5), np.zeros(n, np.int64),
    ...                   ConstantContexts(n, 2))
    >>> ev = OffPolicyEvaluator(TablePolicy([0.25, 0.75], seed=0), ["ips", "snips"], bootstrap=0)
    >>> ev.process(log, offset=0)
    >>> res = ev.result()
    >>> round(res["estimates"]["snips"]["value"], 2), round(res["weights"]["mean_weight"], 2)
    (0.65, 1.0)
    """

    def __init__(
        self,
        policy: Policy,
        estimators: list[str],
        reward_model: RidgeRewardModel | None = None,
        level: float = 0.95,
        bootstrap: int = 1000,
        seed: int = 0,
        warmup: int = 0,
        ledger: InMemoryLedger | None = None,
    ):
        self.policy = policy
        self.names = list(estimators)
        self.estimators = [
            ESTIMATORS[name](level=level, bootstrap=bootstrap, seed=seed + i)
            for i, name in enumerate(self.names)
        ]
        if any(e.needs_model for e in self.estimators) and reward_model is None:
            raise ValueError("DM and DR need a fitted reward model")
        self.reward_model = reward_model
        self.level = level
        self.ledger = ledger if ledger is not None else InMemoryLedger()
        self.warmup = warmup
        self._warm = ReplayMethod(policy, self.ledger, bootstrap=0) if warmup else None
        self._frozen = False
        self.diagnostics = WeightDiagnostics(level)
        self.events = 0

    def _freeze(self) -> None:
        if callable(getattr(self.policy, "refit_due", None)) and self.policy.refit_due():
            self.ledger.append(self.policy.refit())
        self._frozen = True

    def process(self, batch: LoggedBatch, offset: int) -> None:
        """Evaluate one chunk; ``offset`` is the log index of its first event."""
        if self._warm is not None and self._warm.events < self.warmup:
            k = min(len(batch), self.warmup - self._warm.events)
            self._warm.process(batch.take(np.arange(k)), events=offset + k)
            if k == len(batch):
                return
            batch = batch.take(np.arange(k, len(batch)))
            offset += k
        if not self._frozen:
            self._freeze()
        arms, probs = frozen_choices(self.policy, batch, need_arms=False)
        a = batch.actions
        idx = np.arange(len(batch))
        if probs is not None:
            pe = probs[idx, a]
        else:
            assert arms is not None  # frozen_choices returns the arms of a policy without probs
            pe = (arms == a).astype(np.float64)
        w = pe / batch.propensities
        q_logged: FloatArray | None = None
        q_target: FloatArray | None = None
        if self.reward_model is not None and any(e.needs_model for e in self.estimators):
            q_logged = self.reward_model.predict_arms(batch, a, offset)
            if probs is not None:
                q_target = (probs * self.reward_model.predict_all(batch, offset)).sum(axis=1)
            else:
                assert arms is not None  # as above
                q_target = self.reward_model.predict_arms(batch, arms, offset)
        end = offset + len(batch)
        for est in self.estimators:
            est.update(batch.rewards, w, batch.positions, q_logged, q_target, events=end)
        self.diagnostics.update(w, batch.positions)
        self.events += len(batch)

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "estimates": {e.name: e.estimate().to_dict() for e in self.estimators},
            "weights": self.diagnostics.summary(),
            "events": self.events,
        }
        if self._warm is not None:
            w = self._warm.estimate()
            out["warmup"] = {
                "events": self._warm.events,
                "matched": self._warm.matched,
                "value": w.value,
                "ci_normal": list(w.ci_normal),
            }
        return out
