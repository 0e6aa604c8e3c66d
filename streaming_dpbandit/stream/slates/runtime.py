"""One slate bandit inside the service: a matroid policy, its per-item reward join, its rows.

The slate runtime is the single-arm :class:`~.bandit.BanditRuntime` with slates in place of
arms; the service loop, the snapshot, the ledger and the release-before-use sequence are the
same. What differs:

* contexts are slate requests (``slate_size`` = the matroid's rank K, no features);
* a decision is a :class:`~.schemas.SlateDecision`: the K served items in greedy order;
* feedback is a :class:`~.schemas.SlateFeedback` of per-item rewards, joined by
  :class:`~.join.SlateJoinStore` under the same event-time rules (window, watermark,
  held-early feedback judged as of its position); a slate's missing items get the policy's
  ``default_reward`` at expiry;
* rows (slate, K rewards) reach the policy exactly once per update, sorted by round, for the
  rounds ≤ (update round − ``feedback_lag_rounds``): the rounds whose rewards form the private
  batches are fixed by the schedule, never by which feedback happened to arrive.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ...config import BanditSettings
from ..bandit import BanditRuntime
from ..join import Resolution
from ..parsing import BadInput, Pending
from ..schemas import ContextEvent, SlateDecision, SlateFeedback, SlateItem
from .join import SlateJoinStore

__all__ = ["SlateBanditRuntime"]

log = logging.getLogger("streaming_dpbandit.service")


class SlateBanditRuntime(BanditRuntime):
    """Policy + join + counters of one slate bandit (see the module docstring).

    Parameters
    ----------
    bandit_id, settings, policy, metrics
        As for :class:`~.bandit.BanditRuntime`; ``policy`` is a matroid policy.
    """

    _plain_rewards = False  # per-item rewards, joined item by item

    def __init__(self, bandit_id: str, settings: BanditSettings, policy, metrics=None):
        self.K = int(policy.K)
        super().__init__(bandit_id, settings, policy, metrics)
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

    def _row_width(self, policy) -> int:
        return 2 * self.K  # a join row: the slate's items | their rewards (no contexts)

    def _new_join(self, retention: float) -> SlateJoinStore:
        s = self.settings
        return SlateJoinStore(self.K, s.feedback_window, s.max_pending, retention)

    # -- contexts ---------------------------------------------------------------------------
    def encode(self, ev: ContextEvent):
        if ev.slate_size is None:
            raise BadInput(
                "slate_required",
                f"bandit {self.bandit_id!r} serves slates: send 'slate_size' and no arms",
            )
        if ev.slate_size != self.K:
            raise BadInput(
                "wrong_slate_size",
                f"slate_size {ev.slate_size}, but this bandit's slates have K = {self.K} items",
            )
        return np.zeros((0, 0)), []

    def decide(self, batch: list[Pending]) -> list[SlateDecision]:
        ids = [p.event.event_id for p in batch]
        dec = self.policy.decide_slates(event_ids=ids)
        now = time.time()
        calibration = getattr(self.policy, "calibration", "non-private")
        out = []
        for i, p in enumerate(batch):
            items = dec.slates[i]
            for early in self.join.add(
                ids[i], int(dec.rounds[i]), p.event.event_time, self.join.row(items)
            ):
                self._resolved(early, forced=False)
            keys = dec.keys[i].tolist()
            out.append(
                SlateDecision(
                    event_id=ids[i],
                    bandit_id=self.bandit_id,
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
                    policy=self.policy.name,
                    decided_at=now,
                )
            )
        self.stats["decided"] += len(batch)
        return out

    def decide_messages(self, batch: list[Pending]) -> list[bytes]:
        return [d.model_dump_json().encode() for d in self.decide(batch)]

    # -- feedback ---------------------------------------------------------------------------
    def on_feedback(self, fb, source: tuple[str, int, int], dead) -> None:
        self.last_feedback_wall = time.monotonic()
        if not isinstance(fb, SlateFeedback):
            self.stats["fb_slate_required"] += 1
            dead(source, "slate_required", "a slate bandit takes per-item 'rewards'")
            return
        bounds = self.settings.reward_bounds
        if bounds is not None and not all(bounds[0] <= v <= bounds[1] for v in fb.rewards.values()):
            self.stats["fb_out_of_range"] += 1
            dead(source, "reward_out_of_range", f"a reward lies outside {list(bounds)}")
            return
        unknown = [a for a in fb.rewards if a not in self.item_index]
        if unknown:
            self.stats["fb_unknown_item"] += 1
            dead(source, "unknown_item", f"item {unknown[0]!r} is not in the catalogue")
            return
        self._judge(fb, dict(fb.rewards), source, dead, "has all its rewards")

    def _feedback_on_pending(self, event_id, rewards, event_time, source, dead) -> None:
        """Apply per-item rewards to a pending slate (also used for held-early feedback)."""
        if self._outside_window(event_id, event_time, source, dead):
            return
        where = {int(e): pos for pos, e in enumerate(self.join.items_of(event_id).tolist())}
        positions, values = [], []
        for item_id, v in rewards.items():
            pos = where.get(self.item_index[item_id])
            if pos is None:
                self.stats["fb_not_in_slate"] += 1
                dead(
                    source, "item_not_in_slate", f"item {item_id!r} was not served to {event_id!r}"
                )
                return
            positions.append(pos)
            values.append(float(v))
        new = self.join.apply(event_id, positions, values)
        if new == 0:
            self.stats["fb_duplicate"] += 1
            dead(source, "duplicate_feedback", "every item of this message already has a reward")
            return
        self.stats["item_rewards"] += new
        if new < len(positions):
            self.stats["item_rewards_duplicate"] += len(positions) - new
        if self.join.complete(event_id):
            self._resolved(self.join.resolve_joined(event_id), forced=False)

    def _resolved(self, res: Resolution, forced: bool) -> None:
        _, values = SlateJoinStore.split(res.context)
        got = ~np.isnan(values)
        if res.outcome == "joined":
            self.stats["joined"] += 1
        else:
            self.stats["expired_forced" if forced else "expired"] += 1
            self.stats["items_defaulted"] += int((~got).sum())
        received = float(values[got].sum())
        self.reward_sum += received
        self.window.append(received + self.default_reward * float((~got).sum()))
        self._learn_X.append(res.context)
        self._learn_y.append(received)
        self._learn_r.append(res.round)

    # -- learning ---------------------------------------------------------------------------
    def flush_learning(self, for_update: bool = False) -> None:
        """Rows reach the policy once per update, sorted by round (see the module docstring)."""
        if not self._learn_r or not for_update:
            return
        rounds = np.asarray(self._learn_r, dtype=np.int64)
        feed = rounds <= self._reads_through()
        if not feed.any():
            return
        X = np.vstack(self._learn_X)
        order = np.argsort(rounds[feed], kind="stable")
        items, values = SlateJoinStore.split(X[feed][order])
        self.policy.learn(items, values, rounds[feed][order])  # NaN → default_reward
        keep = ~feed
        self._learn_X = list(X[keep])
        self._learn_y = np.asarray(self._learn_y, dtype=np.float64)[keep].tolist()
        self._learn_r = rounds[keep].tolist()
