"""Run a linear policy as a K-armed bandit: the decision set {e_1, …, e_K}.

A standard multi-armed bandit is the special case D_t = {e_1, …, e_K} of the linear bandit
(DP-LinUCB spec §1): the parameter θ* holds the K arm means. :class:`OneHotArms` wraps any
per-arm-feature policy of this package (``d = K``) as a *non-contextual* River policy, so River's
``bandit.evaluate`` — whose harness calls ``pull(arm_ids)`` and ``update(arm, reward)`` without
a context — can drive it honestly: the context is the fixed one-hot decision set, not something
smuggled in from the environment.
"""

from __future__ import annotations

import numpy as np
from river.bandit.base import Policy as RiverPolicy

from .base import Policy

__all__ = ["OneHotArms"]


class OneHotArms(RiverPolicy):
    """Non-contextual River policy backed by a linear policy over one-hot arm features.

    Parameters
    ----------
    policy
        A policy of this package with ``d == n_arms`` (e.g. ``LinUCB(d=K)`` or ``DPLinUCB(d=K)``).
    n_arms
        Number of arms K; arm i of ``arm_ids`` is feature vector e_i.

    Examples
    --------
    >>> from streaming_dpbandit.policies import LinUCB
    >>> pol = OneHotArms(LinUCB(d=3, beta=1.0, seed=0), n_arms=3)
    >>> for _ in range(200):
    ...     arm = pol.pull(range(3))
    ...     pol.update(arm, [0.0, 1.0, 0.2][arm])
    >>> max(pol._counts, key=pol._counts.get)
    1

    """

    def __init__(self, policy: Policy, n_arms: int):
        super().__init__(reward_obj=None, burn_in=0)
        self.policy = policy
        self.n_arms = n_arms

    def _context(self, k: int) -> np.ndarray:
        if k > self.n_arms or getattr(self.policy, "d", k) != self.n_arms:
            raise ValueError(f"the wrapped policy needs d = n_arms = {self.n_arms}")
        return np.eye(self.n_arms)[:k]

    def _pull(self, arm_ids):
        arm_ids = list(arm_ids)
        return self.policy.pull(arm_ids, self._context(len(arm_ids)))

    def update(self, arm_id, *reward_args, **reward_kwargs):
        super().update(arm_id, *reward_args, **reward_kwargs)
        arm_ids, _ = self.policy._river_last
        self.policy.update(arm_id, self._context(len(arm_ids)), float(reward_args[0]))
