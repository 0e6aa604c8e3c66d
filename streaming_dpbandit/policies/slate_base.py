"""The interface of the slate policies: a slate of items per round, a reward per served item.

A slate policy is not a :class:`~.base.Policy`: it has no per-arm contexts, no ``decide`` and no
River ``pull``/``update``. It shares :class:`~.base.BasePolicy` (parameters, validation, the
update schedule, the privacy statement, persistence) and adds

``decide_slates(n, event_ids)``
    The slates of n rounds (a :class:`~.matroid_base.SlateBatch`).
``learn(slates, rewards, rounds)``
    Per-item rewards (B, K) of the slates of earlier rounds.

The service gives a slate policy a slate runtime (``slates`` is True).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..utils.arrays import AnyArray, ArrayLike, MaybeArray
from .base import BasePolicy

if TYPE_CHECKING:
    from .matroid_base import SlateBatch

__all__ = ["SlatePolicy"]


class SlatePolicy(BasePolicy):
    """Base class of the slate (matroid) policies.

    Examples
    --------
    >>> from streaming_dpbandit.policies import DPUCBMAT, Policy
    >>> pol = DPUCBMAT({"type": "uniform", "n_items": 4, "k": 2}, epsilon=1.0, seed=0)
    >>> isinstance(pol, SlatePolicy), isinstance(pol, Policy), hasattr(pol, "decide")
    (True, False, False)
    """

    #: Marks slate policies (the service gives them a slate runtime).
    slates = True

    @abc.abstractmethod
    def decide_slates(
        self, n: int | None = None, event_ids: Sequence[Any] | AnyArray | None = None
    ) -> SlateBatch:
        """The slates of ``n`` rounds (a :class:`~.matroid_base.SlateBatch`)."""

    @abc.abstractmethod
    def learn(
        self, slates: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        """Per-item rewards (B, K) of the slates of ``rounds`` (increasing, each round once)."""
