"""The slate interface shared by the matroid bandits (DP-matroid spec §6).

A matroid bandit serves a *slate*: a basis of a matroid over L items, always K items (the
rank), and observes the reward of every served item (semi-bandit feedback). Its vectorised
interface (:class:`~.slate_base.SlatePolicy`) mirrors :class:`~.base.Policy`'s:

``decide_slates(n, event_ids)``
    Compute an index per item for each of n rounds (a UCB, a Thompson sample, …) and run the
    matroid greedy on it. Returns a :class:`SlateBatch`: the slates in greedy acceptance order
    (never-played items, index +∞, first), the served items' keys, the rounds.
``learn(slates, rewards, rounds)``
    Per-item rewards (B, K) of earlier rounds, in increasing round order; NaN means "no
    feedback by the deadline" and is replaced by ``default_reward`` (spec §5.3, §7.2).
``refit_due()`` / ``refit()`` / ``max_decide_batch()``
    As for every policy: after ``update_every`` decisions the model (index statistics) is
    updated from the rows learned since; private policies make their releases there and return
    the ledger records, which the caller persists before deciding again.

Decisions are deterministic given (state, event id): keys are a function of the state and of
the round t (the event's position, itself state), ties are broken with a generator seeded by a
non-private key and the event id (or the round). Thompson samples come from a non-private key
and the round (:class:`RoundNormals`), so a batch of decisions gives the same slates however it
is split. None of this randomness is a privacy mechanism; it is kept apart from the DP noise.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Self

import numpy as np

from ..matroids import Matroid, from_description, greedy_many
from ..privacy.contribution import RowRefused
from ..privacy.ledger import ReleaseRecord
from ..utils.arrays import AnyArray, ArrayLike, FloatArray, IntArray, MaybeArray
from ..utils.hashing import hash_ids
from .slate_base import SlatePolicy

__all__ = ["MatroidPolicy", "RoundNormals", "SlateBatch"]


@dataclasses.dataclass
class SlateBatch:
    """Slates for a batch of rounds.

    Attributes
    ----------
    slates
        Item indices (B, K) in greedy acceptance order.
    keys
        The served items' keys (B, K): UCB indices or Thompson samples; +∞ for never-played.
    rounds
        Round t (1-based) of each decision (B,).
    model_version
        Version of the index statistics used.
    """

    slates: IntArray
    keys: FloatArray
    rounds: IntArray
    model_version: int

    def __len__(self) -> int:
        return int(self.slates.shape[0])


def _key(seed: int | None, tag: int) -> int:
    if seed is None:
        return secrets.randbits(64)
    return int(np.random.SeedSequence([int(seed), tag]).generate_state(2, np.uint64)[0])


class RoundNormals:
    """Standard normal draws per (round, item), a function of (key, round) only.

    Rounds are grouped in blocks of R (a power of two, R·L ≤ 2¹⁷ when L allows); block b is
    ``Generator(SFC64(SeedSequence([key, b]))).standard_normal((R, L))``, cached while in use.
    Any split of a range of rounds into batches therefore yields the same draws. SFC64 (a
    chaotic small-state generator that passes BigCrush and PractRand) draws the Thompson
    normals about 20% faster than PCG64; they are exploration noise, not privacy noise.

    >>> rn = RoundNormals(key=5, n_items=3)
    >>> a = rn.fill(1, np.empty((4, 3)))
    >>> b = RoundNormals(5, 3).fill(3, np.empty((2, 3)))
    >>> bool((a[2:] == b).all())
    True
    """

    def __init__(self, key: int, n_items: int) -> None:
        self.key = key
        self.n_items = n_items
        r = max(1, (1 << 17) // max(1, n_items))
        self.block = min(256, 1 << (r.bit_length() - 1))
        self._cached: tuple[int, FloatArray] | None = None

    def _draws(self, b: int) -> FloatArray:
        if self._cached is None or self._cached[0] != b:
            seq = np.random.SeedSequence([self.key & 0xFFFFFFFFFFFFFFFF, b])
            Z = np.random.Generator(np.random.SFC64(seq)).standard_normal(
                (self.block, self.n_items)
            )
            self._cached = (b, Z)
        return self._cached[1]

    def fill(
        self, first_round: int, out: FloatArray, scale: FloatArray | None = None
    ) -> FloatArray:
        """Write the draws of rounds first_round, first_round + 1, … into the rows of ``out``
        (multiplied by the per-item ``scale`` when given, in the same pass)."""
        R = self.block
        i, n = 0, out.shape[0]
        while i < n:
            t = first_round + i
            b, off = divmod(t - 1, R)
            m = min(n - i, R - off)
            Z = self._draws(b)[off : off + m]
            if scale is None:
                out[i : i + m] = Z
            else:
                np.multiply(Z, scale, out=out[i : i + m])
            i += m
        return out


class MatroidPolicy(SlatePolicy):
    """Base class of the matroid (slate) bandits.

    Parameters
    ----------
    matroid
        A :class:`~streaming_dpbandit.matroids.Matroid` or its description, e.g.
        ``{"type": "uniform", "n_items": 100, "k": 10}``.
    update_every
        Decisions per model update (1: the statistics move after every round, as in the
        thesis; larger values let a service decide while feedback is in flight).
    reward_range
        Public, fixed affine map (lo, hi) → [0, 1] applied to every reward before clipping
        (spec §5.3); (0, 1) is the identity.
    default_reward
        Reward in [0, 1] of a served item whose feedback did not arrive by the deadline (and of
        a non-finite reward).
    item_ids
        Optional names of the L items (the service's item catalogue).
    bandit_id
        Name used in ledger records and noise-stream labels.
    seed
        Seeds the non-private keys (and the DP noise key of private policies); tests and
        simulations only. ``None`` draws them from OS entropy.
    """

    name = "matroid"

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        """Small valid constructor parameters for the generic checks in
        ``streaming_dpbandit.checks`` and the tests: a rank-2 uniform matroid on 5 items, then
        a rank-3 partition matroid."""
        yield {"matroid": {"type": "uniform", "n_items": 5, "k": 2}}
        yield {
            "matroid": {"type": "partition", "categories": [0, 0, 1, 1, 1], "capacities": [1, 2]}
        }

    #: the keys are resampled every round (Thompson), so their order never repeats: a speed
    #: hint for the greedy's fast path (``Matroid.greedy_fast_sorted``), never a change of slate
    _fresh_key_order = False

    def __init__(
        self,
        matroid: Matroid | Mapping[str, Any],
        update_every: int = 1,
        reward_range: tuple[float, float] = (0.0, 1.0),
        default_reward: float = 0.0,
        item_ids: list[str] | None = None,
        bandit_id: str = "default",
        seed: int | None = None,
    ) -> None:
        self.matroid = matroid
        self.update_every = update_every
        self.reward_range = reward_range
        self.default_reward = default_reward
        self.item_ids = item_ids
        self.bandit_id = bandit_id
        self.seed = seed

    # -- set-up --------------------------------------------------------------------------------
    def _validate(self) -> None:
        if int(self.update_every) < 1:
            raise ValueError("update_every must be >= 1")
        lo, hi = (float(x) for x in self.reward_range)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError("reward_range must be (lo, hi) with finite lo < hi")
        if not 0.0 <= float(self.default_reward) <= 1.0:
            raise ValueError("default_reward must be in [0, 1]")
        m = from_description(self.matroid)  # validates; computes rank and loops
        if self.item_ids is not None:
            ids = list(self.item_ids)
            if len(ids) != m.n_items or len(set(ids)) != len(ids):
                raise ValueError(
                    f"items must be {m.n_items} distinct ids (one per matroid item; the "
                    "policy's item_ids)"
                )

    def _state(self) -> Self:
        if not hasattr(self, "_t"):
            self._validate()
            self._matroid = from_description(self.matroid)
            self._t = 0
            self._since = 0
            self._version = 0
            self._last_learned = 0
            self._coin_key()
            self._counters = {"clipped_rewards": 0, "default_filled": 0, "rows_learned": 0}
            self._init_stats()
            self._refresh()
        return self

    @property
    def structure(self) -> Matroid:
        """The matroid (built from the ``matroid`` parameter)."""
        return self._state()._matroid

    @property
    def K(self) -> int:
        """Slate size: the matroid's rank."""
        return self.structure.rank

    @property
    def L(self) -> int:
        """Number of items."""
        return self.structure.n_items

    @property
    def counters(self) -> dict[str, Any]:
        return dict(self._state()._counters)

    @property
    def unreachable(self) -> list[int]:
        """Items that can never be in a slate (the matroid's loops, spec §4.4)."""
        return sorted(self.structure.loops)

    # -- subclass hooks ------------------------------------------------------------------------
    @abc.abstractmethod
    def _init_stats(self) -> None:
        """Create the per-item statistics."""

    @abc.abstractmethod
    def _observe(self, items: IntArray, rewards: FloatArray, rounds: IntArray) -> None:
        """Take finalized rewards in [0, 1] (in round order)."""

    @abc.abstractmethod
    def _update(self) -> list[ReleaseRecord]:
        """Model update at ``refit`` (then :meth:`_refresh` if anything changed): returns the
        ledger records (private policies)."""

    @abc.abstractmethod
    def _refresh(self) -> None:
        """Recompute the per-item arrays the index reads, from the statistics."""

    @abc.abstractmethod
    def _keys(self, rounds: IntArray) -> FloatArray:
        """Index of every item for every round, (B, L)."""

    def _has_pending(self) -> bool:
        return False

    # -- schedule ------------------------------------------------------------------------------
    def refit_due(self) -> bool:
        self._state()
        return self._since >= self.update_every or self._has_pending()

    def max_decide_batch(self) -> int:
        self._state()
        return 0 if self.refit_due() else int(self.update_every) - self._since

    def refit(self) -> list[ReleaseRecord]:
        """Update the index statistics from the rows learned since the last update."""
        self._state()
        if not self.refit_due():
            return []
        records = self._update()
        self._since = 0
        return records

    # -- deciding ------------------------------------------------------------------------------
    def decide_slates(
        self, n: int | None = None, event_ids: Sequence[Any] | AnyArray | None = None
    ) -> SlateBatch:
        """Decide ``n`` rounds (or one per event id) with the current statistics."""
        self._state()
        if event_ids is not None:
            event_ids = list(event_ids)
            if n is not None and n != len(event_ids):
                raise ValueError("n and event_ids disagree")
            n = len(event_ids)
        n = 1 if n is None else int(n)
        if self.refit_due():
            raise RuntimeError("a model update is due: call refit() before deciding")
        if n > self.max_decide_batch():
            raise ValueError(
                f"batch of {n} rounds crosses a model update "
                f"(at most {self.max_decide_batch()} decidable now)"
            )
        batch = self._slates(n, event_ids)
        self._t += n
        self._since += n
        return batch

    def preview_slates(self, n: int) -> SlateBatch:
        """The slates the next ``n`` rounds would get (ties broken by round, as without event
        ids) if the statistics stayed as they are now; changes nothing.

        Simulation only: :func:`~streaming_dpbandit.experiments.matroid_runner.simulate_slates`
        previews a stretch of rounds, keeps the prefix before the statistics can change (see
        :meth:`~.matroid_private.PrivateMatroidPolicy.quiet_rounds`) and decides it with
        :meth:`decide_slates`, which gives the same slates.
        """
        self._state()
        return self._slates(int(n), None)

    def _slates(self, n: int, event_ids: list[Any] | None) -> SlateBatch:
        rounds = np.arange(self._t + 1, self._t + n + 1, dtype=np.int64)
        keys = self._keys(rounds)
        tie = self._tie_key

        def tie_rng(r: int) -> np.random.Generator:
            ident = [event_ids[r]] if event_ids is not None else rounds[r : r + 1]
            h = int(hash_ids(ident)[0])
            return np.random.Generator(np.random.PCG64(np.random.SeedSequence([tie, h])))

        slates, served = greedy_many(
            self._matroid, keys, tie_rng, with_keys=True, fresh_order=self._fresh_key_order
        )
        return SlateBatch(slates, served, rounds, self._version)

    # -- learning ------------------------------------------------------------------------------
    def intake(self, rewards: ArrayLike) -> FloatArray:
        """Map rewards into [0, 1] (fixed affine map), fill non-finite ones, clip (spec §5.3)."""
        lo, hi = (float(x) for x in self.reward_range)
        r = np.asarray(rewards, dtype=np.float64)
        if lo != 0.0 or hi != 1.0:
            r = (r - lo) / (hi - lo)
        if not np.isfinite(r.sum()):
            bad = ~np.isfinite(r)
            r = np.where(bad, float(self.default_reward), r)
            self._counters["default_filled"] += int(bad.sum())
        out: FloatArray = np.clip(r, 0.0, 1.0)
        if r.min() < 0.0 or r.max() > 1.0:
            self._counters["clipped_rewards"] += int(np.count_nonzero(out != r))
        return out

    def learn(
        self, slates: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        """Per-item rewards (B, K) of the slates of ``rounds`` (increasing, each round once)."""
        self._state()
        S = np.asarray(slates, dtype=np.int64)
        R = np.asarray(rewards, dtype=np.float64)
        rnd = np.asarray(rounds, dtype=np.int64).reshape(-1)
        B = rnd.size
        if S.shape != (B, self.K) or R.shape != (B, self.K):
            raise ValueError(f"learn expects slates and rewards of shape (B, {self.K})")
        if B == 0:
            return
        if rnd[-1] > self._t:
            raise ValueError("learn() got a round that was never decided")
        if rnd[0] <= self._last_learned or (B > 1 and np.any(np.diff(rnd) <= 0)):
            # each round once (the Laplace scale assumes one reward per item per round)
            bad = rnd <= np.maximum.accumulate(np.r_[self._last_learned, rnd[:-1]])
            if bad.any():
                raise RowRefused(
                    f"{self.name}: round {int(rnd[bad][0])} comes at or before a round already "
                    "learned (rounds are learned once each, in increasing order); nothing of "
                    "this call was learned",
                    "duplicate_round",
                    bad,
                )
        if self.K > 1:
            srt = np.sort(S, axis=1)
            rep = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
            if rep.any():
                raise RowRefused(
                    f"{self.name}: the slate of round {int(rnd[rep][0])} holds an item twice; "
                    "its noise is calibrated for one reward per item per round, so nothing of "
                    "this call was learned",
                    "slate_repeats_item",
                    rep,
                )
        r = self.intake(R)  # item indices are checked by the statistics
        self._observe(S.reshape(-1), r.reshape(-1), np.repeat(rnd, self.K))
        self._last_learned = int(rnd[-1])
        self._counters["rows_learned"] += B

    # -- persistence ---------------------------------------------------------------------------
    def public_params(self) -> dict[str, Any]:
        p = super().public_params()
        p["matroid"] = self.structure.describe()
        return p

    def _params_state(self) -> dict[str, Any]:
        params = self._get_params()
        params["matroid"] = self.structure.describe()
        return params

    def _base_state(self) -> dict[str, Any]:
        self._state()
        return {
            "policy": self.name,
            "params": self._params_state(),
            "t": self._t,
            "since": self._since,
            "version": self._version,
            "last_learned": self._last_learned,
            "tie_key": self._tie_key,
            "counters": dict(self._counters),
        }

    def _load_base(self, state: dict[str, Any]) -> None:
        self._state()
        self._t = int(state["t"])
        self._since = int(state["since"])
        self._version = int(state["version"])
        self._last_learned = int(state["last_learned"])
        self._tie_key = int(state["tie_key"])
        self._counters = dict(state["counters"])

    def __repr__(self) -> str:
        m = self.matroid
        desc = m.describe()["type"] if isinstance(m, Matroid) else dict(m).get("type")
        return f"{type(self).__name__}(matroid={desc!r}, update_every={self.update_every})"
