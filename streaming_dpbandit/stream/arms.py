"""What a bandit's decisions serve: single arms (here) or slates (``slates/runtime.py``).

A :class:`~.bandit.BanditRuntime` holds one :class:`ActionKind` and runs the same loop,
snapshot, ledger and release-before-use sequence for every kind; the kind says how a context
is encoded, how a batch is decided, how feedback is checked and applied to a pending decision,
and how a resolved decision becomes a learning row.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..settings import BanditSettings
from .join import JoinStore, Resolution
from .parsing import AnyContext, BadInput, Pending
from .schemas import Feedback, decision_encoder

if TYPE_CHECKING:
    from .bandit import BanditRuntime

__all__ = ["ActionKind", "SingleArms", "arm_id_kwargs"]


def arm_id_kwargs(policy, batch: list[Pending]) -> dict:
    """``{"arm_ids": ...}`` for a policy keyed by arm id (its per-arm models follow the ids,
    not the positions): one list when every event offers the same arms in the same order,
    else a row per event (shorter rows are padded under the mask). ``{}`` for other policies."""
    if not policy.keyed_by_arm_id:
        return {}
    first = batch[0].arm_ids
    if all(p.arm_ids == first for p in batch):
        return {"arm_ids": first}
    return {"arm_ids": [p.arm_ids for p in batch]}


class ActionKind(abc.ABC):
    """How a :class:`~.bandit.BanditRuntime` serves one kind of action (see the module)."""

    #: Rewards are single numbers joined as they arrive (False: every reward goes through
    #: :meth:`on_pending`).
    plain_rewards = True

    @abc.abstractmethod
    def row_width(self, policy) -> int:
        """Width of a stored join row."""

    @abc.abstractmethod
    def new_join(self, settings: BanditSettings, width: int, retention: float) -> JoinStore:
        """The pending-decision store."""

    @abc.abstractmethod
    def encode(self, rt: BanditRuntime, ev: AnyContext):
        """``(X, arm ids)`` of a validated context event, or :class:`~.parsing.BadInput`."""

    @abc.abstractmethod
    def decide_messages(self, rt: BanditRuntime, batch: list[Pending]) -> list[bytes]:
        """Decide a batch with the frozen model; the decision messages, in batch order."""

    @abc.abstractmethod
    def on_feedback(
        self, rt: BanditRuntime, fb, source: tuple[str, int, int], dead, clock: float
    ) -> None:
        """A parsed feedback message of this bandit, read at stream clock ``clock``."""

    @abc.abstractmethod
    def on_pending(self, rt: BanditRuntime, event_id, reward, event_time, source, dead) -> None:
        """Apply ``reward`` to the pending decision ``event_id`` (or dead-letter it)."""

    @abc.abstractmethod
    def resolved(self, rt: BanditRuntime, res: Resolution, forced: bool) -> None:
        """Count a resolved decision and queue its learning row."""

    @abc.abstractmethod
    def learn(self, policy, X: np.ndarray, y: np.ndarray, rounds: np.ndarray) -> None:
        """Give the policy queued rows (sorted by round)."""


class SingleArms(ActionKind):
    """One arm per decision, chosen among the event's candidates; one reward per decision."""

    def __init__(self) -> None:
        self._encode: Callable[..., list[bytes]] | None = None  # made at the first decision
        self._featuriser = None  # (features.FeatureHasher, built at the first feature objects)

    def row_width(self, policy) -> int:
        return int(policy.d)  # the chosen context

    def new_join(self, settings: BanditSettings, width: int, retention: float) -> JoinStore:
        return JoinStore(width, settings.feedback_window, settings.max_pending, retention)

    # -- contexts ---------------------------------------------------------------------------
    def encode(self, rt: BanditRuntime, ev: AnyContext) -> tuple[np.ndarray, list[str]]:
        """Per-arm feature matrix (K, d) of a validated event, or :class:`BadInput`."""
        if ev.slate_size is not None:
            raise BadInput("slate_unsupported", f"bandit {rt.bandit_id!r} serves single arms")
        d, catalogue = rt.d, rt.catalogue
        ids = ev.candidate_ids()
        X = ev.arm_features()
        if X is None:
            objects = ev.feature_objects()
            if objects is not None:  # hashed into d by the bandit's featuriser
                X = self.featurise(rt, *objects)
        if X is not None:
            width = X.shape[1]
            if width != d:
                raise BadInput("wrong_dimension", f"arms have {width} features, bandit expects {d}")
            if catalogue is not None:
                unknown = [a for a in ids if a not in catalogue]
                if unknown:
                    raise BadInput("unknown_arm", f"arm {unknown[0]!r} is not in the catalogue")
            return X, ids
        shared = ev.shared_features()
        assert shared is not None  # validated: per-arm features, or a shared context
        if rt.policy.keyed_by_arm_id:  # one model per arm id: the context serves every arm
            if shared.shape[0] != d:
                raise BadInput(
                    "wrong_dimension",
                    f"shared context has {shared.shape[0]} features, bandit expects {d}",
                )
            if catalogue is not None:
                unknown = [a for a in ids if a not in catalogue]
                if unknown:
                    raise BadInput("unknown_arm", f"arm {unknown[0]!r} is not in the catalogue")
            return np.broadcast_to(shared, (len(ids), d)), ids
        if catalogue is None:
            raise BadInput(
                "shared_context_unsupported", "this bandit has no arm catalogue for shared contexts"
            )
        k_all = len(catalogue)
        width = len(shared)
        if width * k_all != d:
            raise BadInput(
                "wrong_dimension",
                f"shared context has {width} features; bandit expects {d // k_all}",
            )
        X = np.zeros((len(ids), d))
        for row, a in enumerate(ids):
            k = catalogue.get(a)
            if k is None:
                raise BadInput("unknown_arm", f"arm {a!r} is not in the catalogue")
            X[row, k * width : (k + 1) * width] = shared
        return X, ids

    def featurise(self, rt: BanditRuntime, context: list, actions: list) -> np.ndarray:
        """The (K, d) rows of a context in feature objects, hashed by the bandit's featuriser
        (``BanditSettings.featuriser``), or :class:`BadInput` ``invalid_features``."""
        from ..features import FeatureError

        hasher = self._featuriser
        if hasher is None:
            hasher = self._featuriser = rt.settings.featuriser()
        try:
            X: np.ndarray = hasher.transform(context, actions, ("context_features", "actions"))
        except FeatureError as err:
            raise BadInput("invalid_features", str(err)) from None
        return X

    def decide_messages(self, rt: BanditRuntime, batch: list[Pending]) -> list[bytes]:
        """Decide a batch (same bandit, no model update inside) with the frozen model; returns
        the decision messages (JSON bytes, :class:`~.schemas.Decision`), in batch order."""
        B = len(batch)
        ks = {p.X.shape[0] for p in batch}
        ids = [p.event.event_id for p in batch]
        if len(ks) == 1:  # the common case: every event offers the same number of arms
            X, mask = np.stack([p.X for p in batch]), None
        else:
            X = np.zeros((B, max(ks), rt.d))
            mask = np.zeros((B, max(ks)), dtype=bool)
            for i, p in enumerate(batch):
                k = p.X.shape[0]
                X[i, :k] = p.X
                mask[i, :k] = True
        policy = rt.policy
        dec = policy.decide(X, event_ids=ids, mask=mask, **arm_id_kwargs(policy, batch))
        arms = dec.arms.tolist()
        rounds = dec.rounds.tolist()
        chosen = X[np.arange(B), dec.arms]
        times = [p.event.event_time for p in batch]
        if rt.user_level:  # before any row of the batch can resolve
            rt.admit_users(batch, dec.rounds)
        clocks = [p.clock for p in batch]
        for early in rt.join.add_many(ids, rounds, times, chosen, clocks):
            self.resolved(rt, early, forced=False)
        rt.stats["decided"] += B
        encode = self._encode
        if encode is None:
            encode = self._encode = decision_encoder(
                rt.bandit_id, getattr(policy, "calibration", "non-private"), policy.name
            )
        return encode(
            ids,
            [p.arm_ids[a] for p, a in zip(batch, arms)],
            arms,
            dec.propensities.tolist(),
            int(dec.model_version),
            dec.episodes.tolist(),
            rounds,
            time.time(),
        )

    # -- feedback ---------------------------------------------------------------------------
    def on_feedback(
        self, rt: BanditRuntime, fb, source: tuple[str, int, int], dead, clock: float
    ) -> None:
        if not isinstance(fb, Feedback):  # per-item slate rewards
            rt.stats["fb_slate_unsupported"] += 1
            dead(source, "slate_unsupported", f"bandit {rt.bandit_id!r} serves single arms")
            return
        bounds = rt.settings.reward_bounds
        if bounds is not None and not bounds[0] <= fb.reward <= bounds[1]:
            rt.stats["fb_out_of_range"] += 1
            dead(source, "reward_out_of_range", f"reward outside {list(bounds)}")
            return
        js = rt.join
        p = js.pending.get(fb.event_id)
        if p is not None and p.event_time <= fb.event_time <= p.event_time + js.window:
            # the common case: a reward for a pending decision, in its window (what on_pending
            # and resolved do here, inline: the window is checked)
            rnd, ctx = js.take_joined(fb.event_id)
            rt.learn_joined(rnd, fb.reward, ctx)
            rt.advance_watermark(clock)
            return
        if p is None and fb.event_id not in js.resolved:
            rt.unseen(fb, fb.reward, source, dead)  # (what status() None would do, sooner)
            rt.advance_watermark(clock)
            return
        rt.judge(fb, fb.reward, source, dead, "already has its reward", clock)

    def on_pending(self, rt: BanditRuntime, event_id, reward, event_time, source, dead) -> None:
        if not rt.outside_window(event_id, event_time, source, dead):
            self.resolved(rt, rt.join.match(event_id, reward, event_time), forced=False)

    def resolved(self, rt: BanditRuntime, res: Resolution, forced: bool) -> None:
        assert res.context is not None  # a resolution of a pending decision carries its row
        if res.outcome == "joined":
            assert res.reward is not None
            rt.learn_joined(res.round, res.reward, res.context)
            return
        rt.stats["expired_forced" if forced else "expired"] += 1
        if rt.settings.on_expiry == "drop":
            return
        rt.queue_row(res.context, float(rt.settings.default_reward), res.round)

    def learn(self, policy, X: np.ndarray, y: np.ndarray, rounds: np.ndarray) -> None:
        policy.learn(X, y, rounds)
