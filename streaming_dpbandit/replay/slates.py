"""Replay of slate (matroid) policies on a logged semi-bandit stream: the queue method.

A matroid bandit has no contexts and each item's rewards are i.i.d. over rounds (spec
``dp_matroid.md`` §2). Think of every item as having a *tape* of rewards drawn in advance; any
policy, online, reads the tape of each item it serves in order. A log of served slates with
per-item rewards therefore holds, for each item, a prefix of its tape — whatever policy chose the
logged slates, as long as the order within a tape does not depend on the values. Replaying a
new policy that reads those prefixes in order reproduces an online run of that policy exactly
in distribution, until it asks for an item whose logged tape is used up; the replay stops there
(Mandel, Liu, Brunskill & Popović, *Offline evaluation of online reinforcement learning
algorithms*, AAAI 2016: the queue-based evaluator). Unlike the replay method of single-arm
logs (:mod:`.replay_method`), no event is discarded and the logging policy need not be uniform.

Tape order is **decision order**, never feedback arrival order (arrival time may depend on the
value: a click arrives before a non-click's default). Each served item of each logged decision
contributes exactly one value, as in the service (``docs/service.md``, slates): its first reward
within the feedback window, else the default reward.

What the estimate means: the mean per-round return (sum of the slate's item rewards) of the
policy over the replayed rounds, learning included — the return online interaction would give
if rewards are independent across items and rounds. Within-round correlations of the log (one
user's K rewards) are not kept: the expected return is unchanged, its variance may differ.
The standard error is the per-round one (rounds of a learning policy are not i.i.d.; read it as
a scale, not an interval). IPS/SNIPS/DR are not offered: the service publishes no slate
propensities (``docs/events.md``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from ..privacy.user_bound import UserContributionBound
from ..privacy.user_level import user_level_of_records
from ..utils.arrays import ArrayLike, FloatArray, IntArray
from .errors import LogFormatError, show
from .ledger import InMemoryLedger
from .readers.base import open_text, require_file
from .readers.service_jsonl import topic_kind

if TYPE_CHECKING:
    from ..policies.slate_base import SlatePolicy

__all__ = ["ItemTapes", "SlateReplayResult", "queue_replay", "read_slate_log"]

#: What a log reader returns: served items, their rewards (decision order), the log's
#: per-decision returns, the item ids (or None) and what the reading saw.
_Read = tuple[list[int], list[float], list[float], list[Any] | None, dict[str, Any]]


class _PrivateSlatePolicy(Protocol):
    """What a private slate policy (``private = True``) reports besides its releases."""

    calibration: str

    @property
    def epsilon_certified(self) -> float: ...


class ItemTapes:
    """Per-item reward queues, read in order.

    Parameters
    ----------
    items, rewards
        Served item indices and their rewards, in log (decision) order.
    n_items
        Catalogue size L (items must lie in 0 … L−1).
    item_ids
        Optional item names (for messages).

    Examples
    --------
    >>> t = ItemTapes([0, 1, 0, 2], [1.0, 0.0, 0.5, 1.0], n_items=3)
    >>> t.lengths.tolist()
    [2, 1, 1]
    >>> r, n = t.take(np.array([[0, 1], [0, 2], [1, 2]]))
    >>> n, r.tolist()                       # the third slate needs a second reward of item 1
    (2, [[1.0, 0.0], [0.5, 1.0]])
    >>> t.used.tolist(), t.exhausted(np.array([[1, 2]]))
    ([2, 1, 1], [1, 2])
    """

    def __init__(
        self,
        items: ArrayLike,
        rewards: ArrayLike,
        n_items: int,
        item_ids: Iterable[Any] | None = None,
    ) -> None:
        items = np.asarray(items, dtype=np.int64).reshape(-1)
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if items.shape != rewards.shape:
            raise ValueError("items and rewards differ in length")
        if items.size and (items.min() < 0 or items.max() >= n_items):
            raise ValueError(f"item indices must lie in 0 … {n_items - 1}")
        order = np.argsort(items, kind="stable")  # keeps log order within each item
        self.data = rewards[order]
        self.lengths = np.bincount(items, minlength=n_items).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.used = np.zeros(n_items, dtype=np.int64)
        self.n_items = int(n_items)
        self.item_ids = list(item_ids) if item_ids is not None else None

    def rewind(self) -> None:
        """Start every tape again from its first reward (to replay another policy)."""
        self.used[:] = 0

    def name(self, e: int) -> str:
        return str(self.item_ids[e]) if self.item_ids is not None else str(e)

    def _positions(self, slates: IntArray) -> IntArray:
        """Tape position each served item of ``slates`` (B, K) reads, in row order."""
        flat = slates.reshape(-1)
        order = np.argsort(flat, kind="stable")
        srt = flat[order]
        starts = np.flatnonzero(np.r_[True, srt[1:] != srt[:-1]])
        sizes = np.diff(np.r_[starts, srt.size])
        rank = np.empty_like(flat)
        rank[order] = np.arange(flat.size) - np.repeat(starts, sizes)
        pos: IntArray = (self.used[flat] + rank).reshape(slates.shape)
        return pos

    def take(self, slates: ArrayLike) -> tuple[FloatArray, int]:
        """Rewards of the longest prefix of ``slates`` (B, K) the tapes can serve; its length."""
        slates = np.asarray(slates, dtype=np.int64)
        pos = self._positions(slates)
        ok = (pos < self.lengths[slates]).all(axis=1)
        n = int(ok.size if ok.all() else np.argmin(ok))
        head = slates[:n]
        rewards = self.data[self.offsets[head] + pos[:n]]
        self.used += np.bincount(head.reshape(-1), minlength=self.n_items)
        return rewards, n

    def exhausted(self, slates: ArrayLike) -> list[int]:
        """Items of the first slate of ``slates`` whose tapes are used up."""
        s = np.asarray(slates, dtype=np.int64)[0]
        return sorted(int(e) for e in s if self.used[e] >= self.lengths[e])


# -- reading logs ------------------------------------------------------------------------------
@dataclasses.dataclass
class SlateLog:
    """Tapes read from a log, and what the reading saw."""

    tapes: ItemTapes
    decisions: int
    on_policy_return: float  # mean per-decision return of the logging policy
    on_policy_se: float
    info: dict[str, Any]


def _service_jsonl(
    path: Path,
    bandit_id: str | None,
    feedback_window: float,
    default_reward: float,
    bound: UserContributionBound | None = None,
) -> _Read:
    from ..stream.schemas import (
        ContextEvent,
        Feedback,
        SlateDecision,
        SlateFeedback,
        Watermark,
        parse_feedback,
    )

    times: dict[str, float] = {}  # event_id -> context event time
    users: dict[str, Any] = {}  # event_id -> user id (user level only; never output)
    decisions: list[tuple[str, list[int]]] = []  # (event_id, item indices), decision order
    seen_decision: dict[str, list[int]] = {}
    catalogue: dict[int, str] = {}
    values: dict[tuple[str, int], float] = {}  # (event_id, item_index) -> first value in window
    late = dup = foreign = unknown = 0
    bandit = bandit_id
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            ev: ContextEvent | SlateDecision | Feedback | SlateFeedback | Watermark
            try:
                msg = json.loads(line)
                kind = topic_kind(msg.get("topic"))
                value = msg.get("value")
                raw = value if isinstance(value, str) else json.dumps(value)
                if kind == "contexts":
                    ev = ContextEvent.model_validate_json(raw)
                elif kind == "decisions":
                    ev = SlateDecision.model_validate_json(raw)
                elif kind == "feedback":
                    ev = parse_feedback(raw.encode())
                else:
                    continue
            except (ValueError, AttributeError) as err:
                first = str(err).splitlines()[0]
                raise LogFormatError(
                    f"{path}:{lineno}: not a slate bandit message ({first})"
                ) from None
            if getattr(ev, "bandit_id", None) is None:
                continue
            if bandit is None:
                bandit = ev.bandit_id
            if ev.bandit_id != bandit:
                if bandit_id is None:
                    raise LogFormatError(
                        f"{path}: the log holds bandits {show(bandit)} and {show(ev.bandit_id)}; "
                        "name one with --log-param bandit_id=..."
                    )
                foreign += 1
                continue
            if isinstance(ev, ContextEvent):
                times.setdefault(ev.event_id, ev.event_time)
                if bound is not None and ev.user_id is not None:
                    users.setdefault(ev.event_id, ev.user_id)
            elif isinstance(ev, SlateDecision):
                items = [it.item_index for it in ev.slate]
                for it in ev.slate:
                    if catalogue.setdefault(it.item_index, str(it.item_id)) != str(it.item_id):
                        raise LogFormatError(
                            f"{path}:{lineno}: item index {it.item_index} is "
                            f"{show(catalogue[it.item_index])} and {show(it.item_id)}"
                        )
                prev = seen_decision.get(ev.event_id)
                if prev is not None:
                    if prev != items:
                        raise LogFormatError(
                            f"{path}:{lineno}: event {show(ev.event_id)} has two different slates"
                        )
                    continue  # a decision repeated after a crash: the same slate
                seen_decision[ev.event_id] = items
                decisions.append((ev.event_id, items))
            elif isinstance(ev, SlateFeedback):
                slate = seen_decision.get(ev.event_id)
                index = {v: k for k, v in catalogue.items()}
                tau = times.get(ev.event_id)
                if tau is not None and not (tau <= ev.event_time <= tau + feedback_window):
                    late += len(ev.rewards)
                    continue
                for item_id, r in ev.rewards.items():
                    e = index.get(str(item_id))
                    if slate is None or e is None or e not in slate:
                        unknown += 1
                        continue
                    if (ev.event_id, e) in values:
                        dup += 1
                        continue
                    values[(ev.event_id, e)] = float(r)
    if not decisions:
        raise LogFormatError(f"{path}: no slate decisions in the log")
    bounded = 0
    kept = [True] * len(decisions)
    if bound is not None:  # user level: each user's first k decisions (decision order) only
        if any(eid not in users for eid, _ in decisions):
            raise LogFormatError(
                "--max-contributions-per-user needs user ids in the log (the contexts' user_id "
                "field of a service-jsonl slate log)"
            )
        hashes = bound.hash_users([users[eid] for eid, _ in decisions])
        keep = bound.admit(hashes, np.zeros(len(decisions), dtype=np.int64))
        bounded = int((~keep).sum())
        kept = keep.tolist()
        users.clear()
    items = []
    rewards: list[float] = []
    per_decision: list[float] = []
    defaulted = 0
    for (eid, slate), on_tape in zip(decisions, kept):
        total = 0.0
        for e in slate:
            logged = values.get((eid, e))
            if logged is None or not math.isfinite(logged):
                r = float(default_reward)
                defaulted += 1
            else:
                r = logged
            if on_tape:
                items.append(e)
                rewards.append(r)
            total += r
        per_decision.append(total)
    L = max(catalogue) + 1
    ids = [catalogue.get(i, str(i)) for i in range(L)]
    info = {
        "bandit_id": bandit,
        "defaulted": defaulted,
        "late": late,
        "duplicates": dup,
        "unknown_or_unserved": unknown,
        "other_bandits": foreign,
    }
    if bound is not None:
        info["bounded"] = bounded  # decisions beyond their user's k: not on the tapes
    return items, rewards, per_decision, ids, info


def _csv(
    path: Path, mapping: Mapping[str, str], item_ids: Sequence[Any] | None, default_reward: float
) -> _Read:
    col_e = mapping.get("event", "event_id")
    col_i = mapping.get("item", "item")
    col_r = mapping.get("reward", "reward")
    index = {str(x): i for i, x in enumerate(item_ids)} if item_ids is not None else None
    items: list[int] = []
    rewards: list[float] = []
    per_decision: list[float] = []
    last: object = object()
    defaulted = 0
    with open_text(path) as fh:
        rows = csv.DictReader(fh)
        missing = {col_i, col_r} - set(rows.fieldnames or [])
        if missing:
            raise LogFormatError(
                f"{path}: no column {', '.join(sorted(missing))} (map one with --map item=COL, "
                "--map reward=COL)"
            )
        for lineno, row in enumerate(rows, 2):
            raw_item = row[col_i]
            if index is not None:
                if raw_item not in index:
                    raise LogFormatError(f"{path}:{lineno}: unknown item {show(raw_item)}")
                e = index[raw_item]
            else:
                try:
                    e = int(raw_item)
                except ValueError:
                    raise LogFormatError(
                        f"{path}:{lineno}: item {show(raw_item)} is not an index (give the "
                        "catalogue with --policy-param item_ids=[...])"
                    ) from None
            try:
                r = float(row[col_r]) if row[col_r] not in ("", None) else math.nan
            except ValueError:
                raise LogFormatError(f"{path}:{lineno}: reward {show(row[col_r])}") from None
            if not math.isfinite(r):
                r = float(default_reward)
                defaulted += 1
            eid = row.get(col_e, lineno)
            if eid != last or col_e not in row:
                per_decision.append(0.0)
                last = eid
            per_decision[-1] += r
            items.append(e)
            rewards.append(r)
    if not items:
        raise LogFormatError(f"{path}: no rows")
    if index is None and min(items) < 0:
        raise LogFormatError(f"{path}: negative item index")
    info: dict[str, Any] = {"defaulted": defaulted}
    return items, rewards, per_decision, None if item_ids is None else list(item_ids), info


def read_slate_log(
    path: str | Path,
    fmt: str | None = None,
    n_items: int | None = None,
    mapping: Mapping[str, str] | None = None,
    item_ids: Sequence[Any] | None = None,
    bandit_id: str | None = None,
    feedback_window: float = 60.0,
    default_reward: float = 0.0,
    user_bound: UserContributionBound | None = None,
) -> SlateLog:
    """Read per-item reward tapes from a slate log.

    ``service-jsonl``: the service's topics (``{"topic": ..., "value": ...}`` lines) of one slate
    bandit; each decision's K items give one value each, in decision order — the first reward
    whose event time lies in [τ, τ + ``feedback_window``] of the context's time τ, else
    ``default_reward`` (the service's rules). ``csv``: one row per served item in decision order,
    columns ``item`` (an index, or an id of ``item_ids``) and ``reward`` (empty: default), and
    optionally ``event_id`` (rows of one decision are consecutive; used for the log's own
    per-decision return).

    ``user_bound`` (user level, service-jsonl only): only each user's first k decisions, in
    decision order, give values to the tapes (``UserContributionBound.admit``, one window: the
    slate policies' one guarantee covers the run); the rest are counted in ``info["bounded"]``.
    The logged slates are the logging service's published decisions; a user's data in the log
    are the rewards of their decisions (docs/privacy/user-level-slates.md, replay).
    """
    path = require_file(Path(path), "--log")
    fmt = fmt or ("csv" if path.name.endswith((".csv", ".csv.gz")) else "service-jsonl")
    if fmt == "service-jsonl":
        items, rewards, per, ids, info = _service_jsonl(
            path, bandit_id, float(feedback_window), default_reward, user_bound
        )
        if item_ids is not None:
            ids = list(item_ids)
    elif fmt == "csv":
        if user_bound is not None:
            raise LogFormatError(
                "--max-contributions-per-user with slate policies reads service-jsonl logs "
                "(the contexts' user_id), not csv"
            )
        items, rewards, per, ids, info = _csv(path, mapping or {}, item_ids, default_reward)
    else:
        raise LogFormatError(f"slate replay reads service-jsonl or csv logs, not {fmt!r}")
    L = max(items) + 1
    if n_items is not None:
        if L > n_items:
            raise LogFormatError(
                f"{path}: the log serves item index {L - 1}, the policy's catalogue has "
                f"{n_items} items"
            )
        L = n_items
    returns = np.asarray(per, dtype=np.float64)
    se = float(returns.std(ddof=1) / math.sqrt(returns.size)) if returns.size > 1 else math.nan
    info.update({"format": fmt, "path": str(path), "served_items": len(items)})
    return SlateLog(
        ItemTapes(items, rewards, L, ids), int(returns.size), float(returns.mean()), se, info
    )


# -- the evaluator -----------------------------------------------------------------------------
@dataclasses.dataclass
class SlateReplayResult:
    """Outcome of :func:`queue_replay` for one policy."""

    label: str
    rounds: int
    mean_return: float
    se: float
    stop: str
    curve_rounds: list[int]
    curve_return: list[float]
    privacy: dict[str, Any]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in out.items()
        }


def queue_replay(
    policy: SlatePolicy,
    tapes: ItemTapes,
    label: str = "",
    max_rounds: int | None = None,
    ledger: InMemoryLedger | None = None,
    curve_points: Iterable[int] | None = None,
) -> SlateReplayResult:
    """Run ``policy`` (a slate policy) against ``tapes`` until a tape runs out.

    The policy decides as many rounds as its update schedule allows, reads each served item's
    next logged reward, learns, updates when due (releases go to ``ledger``), and so on. It
    stops before the first round that needs an item whose tape is used up (or at
    ``max_rounds``). ``tapes`` is consumed.

    Examples
    --------
    >>> from streaming_dpbandit.policies import OMM
    >>> rng = np.random.default_rng(0)
    >>> items = rng.integers(0, 4, 3000); rewards = (rng.random(3000) < 0.2 * items).astype(float)
    >>> res = queue_replay(OMM({"type": "uniform", "n_items": 4, "k": 2}, seed=0),
    ...                    ItemTapes(items, rewards, 4))
    >>> res.rounds, round(res.mean_return, 2)   # best slate {2, 3}: 0.4 + 0.6 = 1.0
    (808, 0.95)
    >>> res.stop
    'the logged rewards of item 3 are used up'
    """
    t0 = time.perf_counter()
    ledger = ledger if ledger is not None else InMemoryLedger()
    points = sorted({int(p) for p in (() if curve_points is None else curve_points)})
    total = 0.0
    sq = 0.0
    n = 0
    curve_r: list[int] = []
    curve_v: list[float] = []
    stop = "max_rounds"
    while max_rounds is None or n < max_rounds:
        if policy.refit_due():
            ledger.append(policy.refit())
        b = policy.max_decide_batch()
        if max_rounds is not None:
            b = min(b, max_rounds - n)
        dec = policy.decide_slates(b)
        rewards, m = tapes.take(dec.slates)
        if m:
            policy.learn(dec.slates[:m], rewards, dec.rounds[:m])
            per = rewards.sum(axis=1)
            cum = total + np.cumsum(per)
            while points and points[0] <= n + m:
                p = points.pop(0)
                if p > n:
                    curve_r.append(p)
                    curve_v.append(float(cum[p - n - 1] / p))
            total += float(per.sum())
            sq += float((per * per).sum())
            n += m
        if m < b:
            gone = ", ".join(tapes.name(e) for e in tapes.exhausted(dec.slates[m:]))
            stop = f"the logged rewards of item {gone} are used up"
            break
    if policy.refit_due():
        ledger.append(policy.refit())
    mean = total / n if n else math.nan
    var = (sq - n * mean * mean) / (n - 1) if n > 1 else math.nan
    se = math.sqrt(max(var, 0.0) / n) if n > 1 else math.nan
    if n and (not curve_r or curve_r[-1] != n):
        curve_r.append(n)
        curve_v.append(mean)
    privacy: dict[str, Any] = {
        "private": bool(getattr(policy, "private", False)),
        "releases": ledger.releases,
    }
    if privacy["private"]:
        privacy.update(ledger.spend())
        private = cast(_PrivateSlatePolicy, policy)  # private slate policies report these
        privacy["calibration"] = private.calibration
        privacy["epsilon_certified"] = private.epsilon_certified
        recs = ledger.records
        privacy["noise_backend"] = ledger.noise_backend(policy)
        ul = user_level_of_records(recs, recs[0].bandit_id) if recs else None
        if ul is not None:  # behind a user bound: the guarantee of record is per user
            privacy["of_record"] = ul.of_record()
            privacy["user_level"] = ul.to_dict()
            privacy["epsilon_certified"] = ul.of_record()["epsilon"]
    return SlateReplayResult(
        label or policy.name,
        n,
        mean,
        se,
        stop,
        curve_r,
        curve_v,
        privacy,
        time.perf_counter() - t0,
    )
