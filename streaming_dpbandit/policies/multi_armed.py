"""Run a linear policy as a K-armed bandit: the decision set {e_1, …, e_K}.

A standard multi-armed bandit is the special case D_t = {e_1, …, e_K} of the linear bandit
(DP-LinUCB spec §1): the parameter θ* holds the K arm means. :class:`OneHotArms` wraps any
per-arm-feature policy of this package (``d = K``) as a *non-contextual* River policy, so River's
``bandit.evaluate`` — whose harness calls ``pull(arm_ids)`` and ``update(arm, reward)`` without
a context — can drive it honestly: the context is the fixed one-hot decision set, not something
smuggled in from the environment.

Arm identity: arm ids get their coordinate e_i in order of first appearance (not by their
position in ``arm_ids``), so the pulled arms may come in any order and subsets. The wrapped
model has d = K coordinates, so at most ``n_arms`` distinct arms can be served (one more is an
error: a fixed-dimension model cannot forget an arm).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from river.bandit.base import ArmID
from river.bandit.base import Policy as RiverPolicy

from ..utils.arrays import FloatArray
from .base import Policy

__all__ = ["OneHotArms"]


class OneHotArms(RiverPolicy):
    """Non-contextual River policy backed by a linear policy over one-hot arm features.

    Parameters
    ----------
    policy
        A policy of this package with ``d == n_arms`` (e.g. ``LinUCB(d=K)`` or ``DPLinUCB(d=K)``).
    n_arms
        Number of arms K; the i-th distinct arm id seen has feature vector e_i.

    Examples
    --------
    >>> from streaming_dpbandit.policies import LinUCB
    >>> pol = OneHotArms(LinUCB(d=3, beta=1.0, seed=0), n_arms=3)
    >>> for _ in range(200):
    ...     arm = pol.pull(range(3))
    ...     pol.update(arm, [0.0, 1.0, 0.2][arm])
    >>> max(pol._counts, key=pol._counts.get)
    1
    >>> pol.pull([2, 1, 0]) == 1  # the same arm in another position
    True

    """

    def __init__(self, policy: Policy, n_arms: int) -> None:
        super().__init__(reward_obj=None, burn_in=0)
        self.policy = policy
        self.n_arms = n_arms

    def _context(self, arm_ids: list[ArmID]) -> FloatArray:
        if getattr(self.policy, "d", self.n_arms) != self.n_arms:
            raise ValueError(f"the wrapped policy needs d = n_arms = {self.n_arms}")
        index: dict[ArmID, int] = self.__dict__.setdefault("_index", {})
        for a in arm_ids:
            if a not in index:
                if len(index) >= self.n_arms:
                    raise ValueError(f"more than n_arms = {self.n_arms} distinct arms")
                index[a] = len(index)
        return np.eye(self.n_arms)[[index[a] for a in arm_ids]]

    def _pull(self, arm_ids: list[ArmID]) -> ArmID:
        ids = list(arm_ids)
        return self.policy.pull(ids, self._context(ids))

    def update(self, arm_id: ArmID, *reward_args: Any, **reward_kwargs: Any) -> None:
        # River's Policy.update has no annotations (a defect of River's types)
        super().update(arm_id, *reward_args, **reward_kwargs)  # type: ignore[no-untyped-call]
        arm_ids, _ = self.policy._river_last
        self.policy.update(arm_id, self._context(arm_ids), float(reward_args[0]))
