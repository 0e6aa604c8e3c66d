"""How evaluators see the evaluated policy on a chunk of logged events.

Two kinds of policies:

* policies with ``action_probabilities`` (:class:`~streaming_dpbandit.policies.TablePolicy`):
  the whole distribution π_e(· | x_i, p_i) is known, per slate position;
* every other policy of the product: its (frozen) decision, a deterministic function of the
  policy's state and the event id (:meth:`~streaming_dpbandit.policies.base.Policy.
  decide_frozen`). Tie-break coins are hashes of the event ids, independent of the logging
  policy's randomness and of the rewards, so using the realised decision, π_e(a | x_i) =
  1[a = decision_i], keeps IPS/DR unbiased for the randomised policy. These policies choose one
  arm per event, whatever the position: on a slate log each event is valued as if the policy's
  choice were shown in the event's slot.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeGuard

import numpy as np

from ..policies.base import Policy
from ..utils.arrays import BoolArray, FloatArray, IntArray
from .batch import LoggedBatch

__all__ = ["frozen_choices", "has_distribution", "target_probabilities"]


class DistributionPolicy(Protocol):
    """A policy that knows its action distribution π_e(· | x, p) (e.g. ``TablePolicy``)."""

    def action_probabilities(
        self, n_arms: int, positions: IntArray, mask: BoolArray | None = None
    ) -> FloatArray: ...

    def sample(
        self, probs: FloatArray, event_ids: Any, rounds: IntArray | None = None
    ) -> IntArray: ...


def has_distribution(policy: object) -> TypeGuard[DistributionPolicy]:
    return callable(getattr(policy, "action_probabilities", None))


def target_probabilities(policy: DistributionPolicy, batch: LoggedBatch) -> FloatArray:
    """π_e(· | x_i, p_i), shape (B, K), for a policy with ``action_probabilities``."""
    return policy.action_probabilities(batch.n_arms, batch.positions, batch.mask)


def frozen_choices(
    policy: Policy, batch: LoggedBatch, need_arms: bool = True
) -> tuple[IntArray | None, FloatArray | None]:
    """The frozen policy's arm per event, and π_e(· | x_i, p_i) when the policy has it (then
    the arms are drawn only if ``need_arms``: estimators use the distribution itself)."""
    if has_distribution(policy):
        probs = target_probabilities(policy, batch)
        return (policy.sample(probs, batch.event_ids) if need_arms else None), probs
    dec = policy.decide_frozen(
        batch.contexts.dense(), batch.event_ids, batch.mask, **batch.arm_id_kwargs(policy)
    )
    return np.asarray(dec.arms, dtype=np.int64), None
