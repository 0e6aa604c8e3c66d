"""One slate bandit inside the service: a matroid policy, its per-item reward join, its rows.

A slate bandit is a :class:`~.bandit.BanditRuntime` whose action kind
(:class:`~.arms.ActionKind`) is :class:`SlateArms`: slates in place of arms; the service loop,
the snapshot, the ledger and the release-before-use sequence are the same. What differs:

* contexts are slate requests (``slate_size`` = the matroid's rank K, no features);
* a decision is a :class:`~.schemas.SlateDecision`: the K served items in greedy order;
* feedback is a :class:`~.schemas.SlateFeedback` of per-item rewards, joined by
  :class:`~.join.SlateJoinStore` under the same event-time rules (window, watermark,
  held-early feedback judged as of its position); a slate's missing items get the policy's
  ``default_reward`` at expiry;
* rows (slate, K rewards) reach the policy exactly once per update, sorted by round, for the
  rounds ≤ (update round − ``feedback_lag_rounds``): the rounds whose rewards form the private
  batches are fixed by the schedule, never by which feedback happened to arrive;
* user level (a ``user_level:`` section): each decided batch is admitted in round order at
  decision time (:meth:`~.bandit.BanditRuntime.admit_users`, at most k slates of one user per
  window); a slate beyond the bound is decided and answered, counted as bounded, and its row
  (all K item rewards) is dropped when it resolves (docs/privacy/user-level-slates.md).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ...policies.slate_base import SlatePolicy
from ...settings import BanditSettings
from ..arms import ActionKind
from ..bandit import BanditRuntime
from ..join import Resolution
from ..parsing import AnyContext, BadInput, Pending
from ..schemas import SlateDecision, SlateFeedback, SlateItem
from .join import SlateJoinStore


def _join(rt: BanditRuntime) -> SlateJoinStore:
    """A slate runtime's join (a :class:`SlateJoinStore`, made by :func:`slate_runtime`)."""
    join = rt.join
    assert isinstance(join, SlateJoinStore)
    return join


__all__ = ["SlateArms", "slate_runtime"]

log = logging.getLogger("streaming_dpbandit.service")


def slate_runtime(bandit_id: str, settings: BanditSettings, policy, metrics=None) -> BanditRuntime:
    """The runtime of a slate bandit (``policy``: a matroid policy)."""
    return BanditRuntime(
        bandit_id, settings, policy, metrics, SlateArms(bandit_id, policy, metrics)
    )


class SlateArms(ActionKind):
    """Slates of the matroid policy's rank K from its item catalogue, with per-item rewards
    (see the module docstring).

    Parameters
    ----------
    bandit_id, policy, metrics
        As for :class:`~.bandit.BanditRuntime`; ``policy`` is a matroid policy.
    """

    plain_rewards = False  # per-item rewards, joined item by item

    def __init__(self, bandit_id: str, policy, metrics=None):
        self.K = int(policy.K)
        self.item_ids = list(policy.item_ids or [f"item-{i}" for i in range(policy.L)])
        self.item_index = {a: i for i, a in enumerate(self.item_ids)}
        self.default_reward = float(policy.default_reward)
        loops = policy.unreachable
        if loops:
            shown = ", ".join(self.item_ids[i] for i in loops[:20])
            log.warning(
                "bandit %s: %d of %d items can never be in a slate (matroid loops, tagged "
                "unreachable): %s%s",
                bandit_id,
                len(loops),
                policy.L,
                shown,
                " …" if len(loops) > 20 else "",
            )
        if getattr(policy, "calibration", None) == "paper":
            log.warning(
                "bandit %s: calibration 'paper' is active (ε0 = ε/K, certified as 2ε-DP only); "
                "for reproducing the thesis, never for production",
                bandit_id,
            )
        if metrics is not None and hasattr(metrics, "slate_items"):
            metrics.slate_items.labels(bandit_id, "reachable").set(policy.L - len(loops))
            metrics.slate_items.labels(bandit_id, "unreachable").set(len(loops))

    def row_width(self, policy) -> int:
        return 2 * self.K  # a join row: the slate's items | their rewards (no contexts)

    def new_join(self, settings: BanditSettings, width: int, retention: float) -> SlateJoinStore:
        return SlateJoinStore(self.K, settings.feedback_window, settings.max_pending, retention)

    # -- contexts ---------------------------------------------------------------------------
    def encode(self, rt: BanditRuntime, ev: AnyContext):
        if ev.slate_size is None:
            raise BadInput(
                "slate_required",
                f"bandit {rt.bandit_id!r} serves slates: send 'slate_size' and no arms",
            )
        if ev.slate_size != self.K:
            raise BadInput(
                "wrong_slate_size",
                f"slate_size {ev.slate_size}, but this bandit's slates have K = {self.K} items",
            )
        return np.zeros((0, 0)), []

    def decide(self, rt: BanditRuntime, batch: list[Pending]) -> list[SlateDecision]:
        """The slate decisions of a batch (joined as pending), in batch order."""
        ids = [p.event.event_id for p in batch]
        # a slate runtime serves a slate policy (user level: behind ``UserLevel``, which
        # forwards deciding to it)
        policy = getattr(rt.policy, "policy", rt.policy)
        assert isinstance(policy, SlatePolicy)
        dec = policy.decide_slates(event_ids=ids)
        if rt.user_level:  # before any slate of the batch can resolve (held-early feedback)
            rt.admit_users(batch, dec.rounds)
        now = time.time()
        calibration = getattr(rt.policy, "calibration", "non-private")
        out = []
        for i, p in enumerate(batch):
            items = dec.slates[i]
            for early in _join(rt).add(
                ids[i], int(dec.rounds[i]), p.event.event_time, _join(rt).row(items), p.clock
            ):
                self.resolved(rt, early, forced=False)
            keys = dec.keys[i].tolist()
            out.append(
                SlateDecision(
                    event_id=ids[i],
                    bandit_id=rt.bandit_id,
                    slate=[
                        SlateItem(
                            item_id=self.item_ids[e],
                            item_index=e,
                            key=k if np.isfinite(k) else None,
                        )
                        for e, k in zip(items.tolist(), keys)
                    ],
                    model_version=int(dec.model_version),
                    round=int(dec.rounds[i]),
                    calibration=calibration,
                    policy=rt.policy.name,
                    decided_at=now,
                )
            )
        rt.stats["decided"] += len(batch)
        return out

    def decide_messages(self, rt: BanditRuntime, batch: list[Pending]) -> list[bytes]:
        return [d.model_dump_json().encode() for d in self.decide(rt, batch)]

    # -- feedback ---------------------------------------------------------------------------
    def on_feedback(
        self, rt: BanditRuntime, fb, source: tuple[str, int, int], dead, clock: float
    ) -> None:
        if not isinstance(fb, SlateFeedback):
            rt.stats["fb_slate_required"] += 1
            dead(source, "slate_required", "a slate bandit takes per-item 'rewards'")
            return
        bounds = rt.settings.reward_bounds
        if bounds is not None and not all(bounds[0] <= v <= bounds[1] for v in fb.rewards.values()):
            rt.stats["fb_out_of_range"] += 1
            dead(source, "reward_out_of_range", f"a reward lies outside {list(bounds)}")
            return
        unknown = [a for a in fb.rewards if a not in self.item_index]
        if unknown:
            rt.stats["fb_unknown_item"] += 1
            dead(source, "unknown_item", f"item {unknown[0]!r} is not in the catalogue")
            return
        rt.judge(fb, dict(fb.rewards), source, dead, "has all its rewards", clock)

    def on_pending(self, rt: BanditRuntime, event_id, rewards, event_time, source, dead) -> None:
        """Apply per-item rewards to a pending slate (also used for held-early feedback)."""
        if rt.outside_window(event_id, event_time, source, dead):
            return
        where = {int(e): pos for pos, e in enumerate(_join(rt).items_of(event_id).tolist())}
        positions, values = [], []
        for item_id, v in rewards.items():
            pos = where.get(self.item_index[item_id])
            if pos is None:
                rt.stats["fb_not_in_slate"] += 1
                dead(
                    source, "item_not_in_slate", f"item {item_id!r} was not served to {event_id!r}"
                )
                return
            positions.append(pos)
            values.append(float(v))
        new = _join(rt).apply(event_id, positions, values)
        if new == 0:
            rt.stats["fb_duplicate"] += 1
            dead(source, "duplicate_feedback", "every item of this message already has a reward")
            return
        rt.stats["item_rewards"] += new
        if new < len(positions):
            rt.stats["item_rewards_duplicate"] += len(positions) - new
        if _join(rt).complete(event_id):
            self.resolved(rt, _join(rt).resolve_joined(event_id), forced=False)

    def resolved(self, rt: BanditRuntime, res: Resolution, forced: bool) -> None:
        assert res.context is not None  # a resolution of a pending slate carries its row
        _, values = SlateJoinStore.split(res.context)
        got = ~np.isnan(values)
        if res.outcome == "joined":
            rt.stats["joined"] += 1
        else:
            rt.stats["expired_forced" if forced else "expired"] += 1
            rt.stats["items_defaulted"] += int((~got).sum())
        received = float(values[got].sum())
        rt.reward_sum += received
        rt.window.append(received + self.default_reward * float((~got).sum()))
        rt.queue_row(res.context, received, res.round)

    # -- learning ---------------------------------------------------------------------------
    def learn(self, policy, X: np.ndarray, y: np.ndarray, rounds: np.ndarray) -> None:
        """Rows reach the policy once per update, sorted by round (see the module docstring):
        the slates' items and rewards (a missing reward, NaN, counts as ``default_reward``)."""
        items, values = SlateJoinStore.split(X)
        policy.learn(items, values, rounds)
