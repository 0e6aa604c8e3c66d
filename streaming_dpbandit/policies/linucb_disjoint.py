"""Disjoint LinUCB: one ridge model per arm, keyed by arm id (Li, Chu, Langford & Schapire 2010).

Arm a has its own V_a = reg·I + Σ_{rounds where a was chosen} x xᵀ and u_a; the score of arm a is
⟨θ̂_a, x_a⟩ + β_a‖x_a‖_{V_a⁻¹}, where x_a is the arm's feature vector (row a of the (K, d)
decision set; the classic shared-context setting passes the same context for every arm — a
broadcast view costs one GEMM per batch for all arms).

Arm identity. The models are keyed by the arm's id (``arm_ids`` of :meth:`LinUCBDisjoint.decide`,
or River's ``pull(arm_ids, context)``), never by its position in the decision set, so the
candidate set may change from request to request. An arm never seen starts from the prior
(θ̂ = 0, V = reg·I: cold start). At most ``max_arms`` models are kept: when a new arm needs one
and all are taken, the arm used least recently (last offered in a decision set or updated)
is forgotten; it starts cold if it comes back, and feedback still pending for it is dropped and
counted (``evicted_feedback``). Memory is bounded by ``max_arms`` models of d² + O(d) floats.
Without ``arm_ids``, the arm at position k of the decision set has id k (a fixed arm list, as in
the simulators).

``learn`` receives only (context, reward, round), so the policy remembers the arm it chose per
round in a ring buffer of ``pending_capacity`` rounds; feedback for an older round is dropped and
counted (``expired_feedback``).

Refits. A refit rebuilds the model of every arm that learned rows since the last one: by one
Cholesky factorisation of V_a when many rows arrived, or — when at most d/8 rows did (per event,
b = 1: one) — by one O(d²) square-root Sherman–Morrison step per row on the arm's factor and θ_a
(as ``UCBModel.add_rows`` does for the shared model); an arm refactors from its sums after
``REFACTOR_EVERY`` such steps, which bounds the rounding they accumulate.

Per event. With numba installed, one event (b = 1, one context for every arm, ``ties="lowest"``)
is decided, learned and refitted by compiled kernels (:mod:`..estimators._ucb_kernels`: one call
each instead of a dozen numpy operations); the decisions and models are those of the numpy path
within rounding.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Self

import numpy as np
from scipy.linalg import blas, lapack

from ..estimators import _ucb_kernels
from ..estimators.ucb_model import factor_step, oful_beta, sqnorms
from ..privacy.ledger import ReleaseRecord
from ..utils.arrays import AnyArray, ArrayLike, FloatArray, IntArray, MaybeArray
from ._arm_slots import ArmSlots
from .base import DecisionBatch
from .linucb import REFACTOR_EVERY, BatchSchedule, decide_arms
from .registry import register
from .types import AtLeastOne, NonNegative, OpenUnit, Positive, PositiveInt

__all__ = ["LinUCBDisjoint"]

_dger, _daxpy = blas.dger, blas.daxpy

#: Largest B·d² (floats) for which ``learn`` forms every row's outer product at once.
_OUTER_MAX = 1 << 18
#: Largest d for which ``learn`` stacks the arms' rows into one zero-padded batched product
#: (beyond it one product per arm is as fast: the per-call overhead is small against the flops).
_STACK_MAX_D = 48


@register
class LinUCBDisjoint(BatchSchedule):
    """Per-arm ridge models with UCB scores, keyed by arm id, batched and vectorised.

    Parameters
    ----------
    d
        Feature dimension.
    max_arms
        Most per-arm models kept; beyond it the least recently used arm is forgotten.
    reg, beta, alpha, sigma, S, batch_size, ties, seed
        As in :class:`~.linucb.LinUCB` (the theoretical width is computed per arm).
    pending_capacity
        Rounds whose chosen arm is remembered for delayed feedback.

    Examples
    --------
    The candidate set changes every round (three of five arms, in any order); each arm keeps
    its own model:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> thetas = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [-1.0, 0.0], "d": [0.0, -1.0],
    ...           "e": [0.5, 0.5]}
    >>> pol = LinUCBDisjoint(d=2, beta=0.5, batch_size=1, seed=0)
    >>> for _ in range(2000):
    ...     if pol.refit_due():
    ...         _ = pol.refit()
    ...     ids = rng.permutation(list(thetas))[:3].tolist()
    ...     ctx = rng.normal(size=2)
    ...     dec = pol.decide(np.broadcast_to(ctx, (1, 3, 2)), arm_ids=ids)
    ...     arm = ids[int(dec.arms[0])]
    ...     pol.learn(ctx[None], [ctx @ thetas[arm] + 0.1 * rng.normal()], dec.rounds)
    >>> {a: np.round(th, 1).tolist() for a, th in sorted(pol.coefficients.items())}
    {'a': [1.0, 0.0], 'b': [0.0, 1.0], 'c': [-1.0, -0.0], 'd': [-0.0, -1.0], 'e': [0.5, 0.5]}

    River's shared-context dict works too (``pull(arm_ids, {feature: value})``).

    """

    name = "linucb-disjoint"
    #: ``n_arms``, the name of ``max_arms`` before arm-id keying, is still accepted
    config_aliases: ClassVar[Mapping[str, tuple[str, ...]]] = {"max_arms": ("n_arms",)}

    # the per-slot models (built by _state/_alloc): statistics, θ, C⁻ᵀ and widths
    _G: FloatArray
    _u: FloatArray
    _pt: FloatArray  # (slots, d, d + 1): [C⁻ᵀ | θ] of each slot; _proj and _theta view it
    _theta: FloatArray
    _proj: FloatArray
    _wid: FloatArray
    _logdet: FloatArray  # log det V_a of each slot's model
    _nupd: IntArray  # row-by-row updates since the slot's last factorisation
    _epoch: int
    #: cached side-by-side matrix of the last decision set: ((epoch, slot bytes), P, its
    #: (d, K, d + 1) view of the blocks, widths, slot of each position, slot → positions, the
    #: slots array last looked up), see _concat
    _cat: (
        tuple[
            tuple[int, bytes],
            FloatArray,
            FloatArray,
            FloatArray,
            IntArray,
            dict[int, list[int]],
            IntArray,
        ]
        | None
    )

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "max_arms": 3, "batch_size": 4}

    keyed_by_arm_id = True

    # copy kept (~ linucb.py __init__): River idiom, each constructor stores its own parameters
    def __init__(
        self,
        d: PositiveInt,
        max_arms: PositiveInt = 1024,
        reg: Positive = 1.0,
        beta: NonNegative | None = None,
        alpha: OpenUnit = 0.01,
        sigma: Positive = 1.0,
        S: Positive = 1.0,
        batch_size: AtLeastOne = 1,
        pending_capacity: AtLeastOne = 1 << 16,
        ties: str = "lowest",
        seed: int | None = None,
    ):
        self.d = d
        self.max_arms = max_arms
        self.reg = reg
        self.beta = beta
        self.alpha = alpha
        self.sigma = sigma
        self.S = S
        self.batch_size = batch_size
        self.pending_capacity = pending_capacity
        self.ties = ties
        self.seed = seed

    # -- state ---------------------------------------------------------------------------------
    def _state(self) -> Self:
        if not hasattr(self, "_G"):
            if min(self.d, self.max_arms, self.batch_size, self.pending_capacity) < 1:
                raise ValueError("need d, max_arms, batch_size, pending_capacity >= 1")
            if not self.reg > 0:
                raise ValueError("reg must be > 0 (the prior of a cold arm is reg·I)")
            self._t = 0
            self._since = 0
            self._version = 0
            self._slots = ArmSlots(self.max_arms)
            self._alloc(self._slots.capacity + 1)
            self._ring_slot = np.zeros(self.pending_capacity, dtype=np.int64)
            self._ring_gen = np.zeros(self.pending_capacity, dtype=np.int64)
            self._ring_round = np.zeros(self.pending_capacity, dtype=np.int64)
            #: rows learned since the last refit, for its row-by-row updates while they are few:
            #: (slot, x, y), or None (the refit refactors the dirty arms)
            self._pend: list[tuple[int, FloatArray, float]] | None = []
            self._npend = 0
            self._counters = {
                "rows_learned": 0,
                "expired_feedback": 0,
                "evicted_feedback": 0,
            }
            self._coin_key()
        return self

    def _prior_width(self) -> float:
        if self.beta is not None:
            return float(self.beta)
        d = self.d
        return oful_beta(d * math.log(self.reg), d, self.reg, self.alpha, self.sigma, self.S)

    def _alloc(self, n: int) -> None:
        """Arrays for n slots (slot 0 is the prior), keeping the rows that exist."""
        d = self.d
        old = getattr(self, "_G", None)
        k = 0 if old is None else old.shape[0]
        G = np.empty((n, d, d))
        G[:] = self.reg * np.eye(d)
        u = np.zeros((n, d))
        pt = np.zeros((n, d, d + 1))
        pt[:, :, :d] = np.eye(d) / math.sqrt(self.reg)
        wid = np.full(n, self._prior_width())
        logdet = np.full(n, d * math.log(self.reg))
        nupd = np.zeros(n, dtype=np.int64)  # row-by-row updates since the arm's factorisation
        if k:
            G[:k], u[:k], pt[:k] = self._G, self._u, self._pt
            wid[:k], logdet[:k], nupd[:k] = self._wid, self._logdet, self._nupd
        else:
            self._dirty: set[int] = set()  # slots learned since the model was built
        self._G, self._u, self._wid = G, u, wid
        self._set_models(pt)
        self._logdet, self._nupd = logdet, nupd
        self._epoch = getattr(self, "_epoch", 0) + 1
        self._cat = None

    def _set_models(self, pt: FloatArray) -> None:
        """The slots' models ``[C⁻ᵀ | θ]`` side by side, one (d, d + 1) block per slot (one
        GEMM scores mean and width, one rank-1 update moves both); ``_proj``, ``_theta`` view
        them."""
        self._pt = pt
        self._proj = pt[:, :, :-1]
        self._theta = pt[:, :, -1]

    def _slots_of(self, ids: Sequence[Hashable], stamp: int, insert: bool) -> IntArray:
        """Slots of the arm ids; new arms start from the prior (unless ``insert`` is False)."""
        sl = self._slots
        slots = sl.lookup(ids, stamp, insert)
        if insert:
            fresh = sl.take_assigned()
            if fresh:
                if sl.capacity + 1 > self._G.shape[0]:
                    self._alloc(sl.capacity + 1)
                f = np.asarray(fresh)
                self._G[f] = self.reg * np.eye(self.d)
                self._u[f] = 0.0
                self._theta[f] = 0.0
                self._proj[f] = np.eye(self.d) / math.sqrt(self.reg)
                self._wid[f] = self._prior_width()
                self._logdet[f] = self.d * math.log(self.reg)
                self._nupd[f] = 0
                if self._pend and self._dirty.intersection(fresh):
                    self._pend = None  # (rows of an evicted arm: its successor starts cold)
                self._dirty.difference_update(fresh)
                self._epoch += 1
        return slots

    # -- model ---------------------------------------------------------------------------------
    def _build(self, idx: IntArray) -> None:
        """Refactor the models of slots ``idx`` from their statistics.

        Per arm: Cholesky V = C·Cᵀ (LAPACK ``potrf``) and the triangular inverse C⁻¹
        (``trtri``) — 2d³/3 flops, a quarter of a general inverse; then, stacked over the arms,
        θ = C⁻ᵀ(C⁻¹u), the log-determinants and the cached side-by-side matrix.
        """
        d = self.d
        G, u = self._G, self._u
        n = idx.size
        Cinv = np.empty((n, d, d))
        diag = np.empty((n, d)) if self.beta is None else None
        potrf, trtri = lapack.dpotrf, lapack.dtrtri
        for j, s in enumerate(idx.tolist()):
            C, info = potrf(G[s].T, lower=1)  # G symmetric: its F-order view, no copy
            if info != 0:  # pragma: no cover - reg·I + Σ x xᵀ with reg > 0 is SPD
                raise np.linalg.LinAlgError(f"arm {self._slots.ids[s]!r}: V is not SPD")
            Cinv[j], info = trtri(C, lower=1)
            if diag is not None:
                diag[j] = np.diagonal(C)
        if n == 1:
            s0 = int(idx[0])
            self._theta[s0] = (Cinv[0] @ u[s0]) @ Cinv[0]  # V⁻¹u = C⁻ᵀ C⁻¹ u
        else:
            z = np.matmul(Cinv, u[idx][:, :, None])  # C⁻¹u
            self._theta[idx] = np.matmul(Cinv.transpose(0, 2, 1), z)[:, :, 0]
        self._proj[idx] = Cinv.transpose(0, 2, 1)  # x @ proj[s] = C_s⁻¹ x
        if diag is not None:
            logdet = 2.0 * np.log(diag).sum(axis=1)
            self._logdet[idx] = logdet
            self._wid[idx] = [
                oful_beta(float(ld), d, self.reg, self.alpha, self.sigma, self.S) for ld in logdet
            ]
        self._nupd[idx] = 0
        self._patch_concat(idx)

    def _patch_concat(self, idx: IntArray | list[int]) -> None:
        """Write the rebuilt models of ``idx`` into the cached side-by-side matrix."""
        cat = self._cat
        if cat is None:
            return
        _, _, blocks, wid, at, pos, _ = cat
        K = wid.size
        if 2 * len(idx) < K:  # a few arms (per event: one): their blocks by slicing
            for s in idx if isinstance(idx, list) else idx.tolist():
                for k in pos.get(s, ()):
                    blocks[:, k] = self._pt[s]
                    wid[k] = self._wid[s]
        else:  # many: every block afresh (unchanged arms get their same values)
            blocks[:] = self._pt[at].transpose(1, 0, 2)
            wid[:] = self._wid[at]

    @property
    def arm_ids(self) -> list[Hashable]:
        """Ids of the arms whose models are kept (at most ``max_arms``)."""
        return list(self._state()._slots.slot)

    @property
    def coefficients(self) -> dict[Hashable, FloatArray]:
        """θ̂_a of every kept arm, by arm id (the model in force)."""
        self._state()
        return {a: self._theta[s].copy() for a, s in self._slots.slot.items()}

    @property
    def counters(self) -> dict[str, Any]:
        self._state()
        return {
            **self._counters,
            "arms_kept": len(self._slots),
            "evicted_arms": self._slots.evicted,
        }

    def refit(self) -> list[ReleaseRecord]:
        self._state()
        if self._since < self.batch_size:
            return []
        if self._dirty:
            self._refresh()
        self._since = 0
        self._version += 1
        return []

    def _refresh(self) -> None:
        """The models of the dirty arms: row by row while few rows arrived (an arm due for
        its periodic refactorisation refactors), else refactored from their sums."""
        pend, dirty = self._pend, self._dirty
        if pend is None:
            self._build(np.array(sorted(dirty)))
        else:
            nupd, logdet, pt = self._nupd, self._logdet, self._pt
            limit = REFACTOR_EVERY - 1
            redo = {a for a in dirty if nupd[a] >= limit}
            kern = _ucb_kernels.load()
            for a, x, y in pend:  # the rows in order, each on its arm's model
                if a not in redo:
                    if kern is None:
                        logdet[a] += factor_step(pt[a], x, y)
                    else:  # (compiled: one call instead of a dozen numpy operations)
                        logdet[a] += kern.factor_step(pt, a, x, y)
                    nupd[a] += 1
            ids = sorted(dirty - redo) if redo else sorted(dirty)
            if self.beta is None:
                d = self.d
                for a in ids:
                    self._wid[a] = oful_beta(
                        float(logdet[a]), d, self.reg, self.alpha, self.sigma, self.S
                    )
            self._patch_concat(ids)
            if redo:
                self._build(np.array(sorted(redo)))
        dirty.clear()
        self._pend = []
        self._npend = 0

    # -- deciding ------------------------------------------------------------------------------
    def decide(
        self,
        X: ArrayLike,
        event_ids: ArrayLike | None = None,
        mask: ArrayLike | None = None,
        arm_ids: Sequence[Any] | AnyArray | None = None,
    ) -> DecisionBatch:
        """Decide B rounds. ``X`` is (B, K, d); ``arm_ids`` the K ids of the decision set
        (shared by every round) or a (B, K) table of them (per round; masked cells are
        ignored). Without ids, position k is arm k."""
        self._state()
        X = self._check_batch(X, self.d)
        B, K, _ = X.shape
        frozen = getattr(self, "_frozen_eval", False)
        t0 = self._t
        stamp = t0 + B
        ids, rows = _id_rows(arm_ids, B, K)
        if rows is None:
            assert ids is not None  # _id_rows gives shared ids or per-round rows
            if len(ids) != K:
                raise ValueError(f"{len(ids)} arm ids for a decision set of {K} arms")
            slots = self._slots_of(ids, stamp, not frozen)
            kern = (
                _ucb_kernels.load()
                if B == 1 and mask is None and self.ties == "lowest" and X.strides[1] == 0
                else None
            )
            if kern is not None:  # per event, one context for every arm: one compiled call
                P, wid = self._concat(slots)
                x = X[0, 0]
                a = kern.score_argmax(x if x.flags.c_contiguous else x.copy(), P, wid)
                if a < 0:
                    raise ValueError("contexts must be finite")
                return self._decided(np.array([a]), np.ones(1), t0, slots, None, frozen)
            scores = self._scores_shared_ids(X, slots)
        else:
            S = np.zeros((B, K), dtype=np.int64)
            cells = np.ones((B, K), dtype=bool) if mask is None else np.asarray(mask, bool)
            bi, ki = np.nonzero(cells)
            cell_ids = [rows[b][k] for b, k in zip(bi.tolist(), ki.tolist())]
            if None in cell_ids:
                raise ValueError("an available arm has no id (None) in arm_ids")
            S[bi, ki] = self._slots_of(cell_ids, stamp, not frozen)
            scores = self._scores_by_cell(X, S)
        rounds = np.arange(t0 + 1, t0 + B + 1, dtype=np.int64)
        arms, prop = decide_arms(self, scores, mask, rounds, event_ids)
        if rows is None:
            return self._decided(arms, prop, t0, slots, None, frozen, rounds)
        return self._decided(arms, prop, t0, None, S, frozen, rounds)

    def _decided(
        self,
        arms: IntArray,
        prop: FloatArray,
        t0: int,
        slots: IntArray | None,
        S: IntArray | None,
        frozen: bool,
        rounds: IntArray | None = None,
    ) -> DecisionBatch:
        """The decisions of rounds t0 + 1 … t0 + B: their arms (slots ``slots`` of shared ids,
        else ``S`` per round) remembered for ``learn``, the clock moved."""
        B = arms.size
        if rounds is None:
            rounds = np.arange(t0 + 1, t0 + B + 1, dtype=np.int64)
        if not frozen and B == 1:  # (per event: Python integers, no fancy indexing)
            c = int(slots[arms[0]] if slots is not None else S[0, arms[0]])  # type: ignore[index]
            at = (t0 + 1) % self.pending_capacity
            self._ring_slot[at] = c
            self._ring_gen[at] = self._slots.gen[c]
            self._ring_round[at] = t0 + 1
        elif not frozen:
            chosen = slots[arms] if slots is not None else S[np.arange(B), arms]  # type: ignore[index]
            slot = rounds % self.pending_capacity
            self._ring_slot[slot] = chosen
            self._ring_gen[slot] = self._slots.gen[chosen]
            self._ring_round[slot] = rounds
        self._t = t0 + B
        self._since += B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), self._version)

    def _concat(self, slots: IntArray) -> tuple[FloatArray, FloatArray]:
        """For the K arms of ``slots``: their models side by side, [C_a⁻ᵀ | θ_a] for each arm a
        (d, K·(d + 1)), and their widths (K,). Cached while the arms of the decision set stay
        the same; a refit patches the blocks of the arms it rebuilt (``_patch_concat``)."""
        cat = self._cat
        if cat is not None and cat[6] is slots and cat[0][0] == self._epoch:
            return cat[1], cat[3]  # (the same array of slots: ArmSlots' cached lookup)
        key = (self._epoch, slots.tobytes())
        if cat is None or cat[0] != key:
            K, d = slots.size, self.d
            P = np.empty((d, K * (d + 1)))
            blocks = P.reshape(d, K, d + 1)  # a view: splits the contiguous last axis
            blocks[:] = self._pt[slots].transpose(1, 0, 2)
            pos: dict[int, list[int]] = {}
            for k, s in enumerate(slots.tolist()):
                pos.setdefault(s, []).append(k)
            self._cat = (key, P, blocks, self._wid[slots].copy(), slots.copy(), pos, slots)
        else:
            self._cat = (*cat[:6], slots)
        return self._cat[1], self._cat[3]

    def _scores_shared_ids(self, X: FloatArray, slots: IntArray) -> FloatArray:
        B, K, d = X.shape
        P, wid = self._concat(slots)
        if X.strides[1] == 0 or K == 1:  # one context for every arm: one GEMM for all arms
            Y = (X[:, 0, :] @ P).reshape(B, K, d + 1)  # [C_a⁻¹x, θ_aᵀx] for every arm a
            mean = Y[:, :, d]
            sq = sqnorms(Y[:, :, :d])
        else:
            Y = np.matmul(X.transpose(1, 0, 2), self._pt[slots])  # (K, B, d + 1)
            mean = Y[:, :, d].T
            sq = sqnorms(Y[:, :, :d]).T
        width = np.sqrt(sq, out=sq)
        width *= wid
        width += mean
        out: FloatArray = width
        return out

    def _scores_by_cell(self, X: FloatArray, S: IntArray) -> FloatArray:
        """Scores when the arm ids differ between rounds: grouped by arm, one GEMM per arm."""
        B, K, d = X.shape
        flat = X.reshape(B * K, d)
        s = S.reshape(-1)
        mean = np.einsum("nd,nd->n", flat, self._theta[s])
        width = np.empty(B * K)
        order = np.argsort(s, kind="stable")
        ss = s[order]
        cuts = np.flatnonzero(np.diff(ss)) + 1
        for seg in np.split(order, cuts):
            a = s[seg[0]]
            Y = flat[seg] @ self._proj[a]
            width[seg] = np.sqrt(np.einsum("nd,nd->n", Y, Y)) * self._wid[a]
        scores: FloatArray = (mean + width).reshape(B, K)
        return scores

    # -- learning ------------------------------------------------------------------------------
    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        """Learn the rewards of earlier decisions (by round); the ring remembers their arms."""
        X, y, rounds = self._learn_rows(contexts, rewards, rounds)
        if y.size == 0:
            return
        if y.size == 1:  # one row (per event): the same checks on Python integers
            r = int(rounds[0])
            if not 1 <= r <= self._t:
                raise ValueError("learn() got a round that was never decided")
            at = r % self.pending_capacity
            if self._ring_round[at] != r:
                self._counters["expired_feedback"] += 1
                return
            a = int(self._ring_slot[at])
            if self._slots.gen[a] != self._ring_gen[at]:
                self._counters["evicted_feedback"] += 1
                return
            self._accumulate(X, y, np.array([a]))
            return
        self._check_decided(rounds)
        slot = rounds % self.pending_capacity
        known = self._ring_round[slot] == rounds
        arms = self._ring_slot[slot]
        live = known & (self._slots.gen[arms] == self._ring_gen[slot])
        n_live = int(np.count_nonzero(live))
        self._counters["expired_feedback"] += int(y.size - np.count_nonzero(known))
        self._counters["evicted_feedback"] += int(np.count_nonzero(known) - n_live)
        if n_live < y.size:
            X, y, arms = X[live], y[live], arms[live]
        self._accumulate(X, y, arms)

    def learn_arms(self, contexts: ArrayLike, rewards: ArrayLike, arm_ids: Sequence[Any]) -> None:
        """Learn rows by arm id directly (River's ``update(arm_id, context, reward)`` for any
        arm, e.g. a logged one); arms never seen start from the prior."""
        self._state()
        X = np.asarray(contexts, dtype=np.float64).reshape(-1, self.d)
        y = np.asarray(rewards, dtype=np.float64).reshape(-1)
        ids = list(arm_ids)
        if X.shape[0] != y.size or len(ids) != y.size:
            raise ValueError("learn_arms expects contexts (B, d), rewards (B,) and B arm ids")
        if y.size:
            self._accumulate(X, y, self._slots_of(ids, max(self._t, 1), True))

    def _accumulate(self, X: FloatArray, y: FloatArray, arms: IntArray) -> None:
        if y.size == 0:
            return
        yl = y.tolist()
        kern = _ucb_kernels.load() if y.size == 1 else None
        if kern is not None:  # one row (per event): G_a += xxᵀ, u_a += y·x compiled, if finite
            if not kern.add_row(self._G, self._u, int(arms[0]), X[0], yl[0]):
                raise ValueError("contexts and rewards must be finite")
        elif not math.isfinite(float(np.add.reduce(X, axis=None)) + math.fsum(yl)):
            raise ValueError("contexts and rewards must be finite")  # (or sum beyond 1e308)
        pend = self._pend
        if pend is not None:  # the rows for the next refit's updates, while they are few
            self._npend += y.size
            if self._npend > max(1, self.d // 8):
                self._pend = None
            else:
                pend += zip(arms.tolist(), X.copy(), yl)
        G, u = self._G, self._u
        if arms.size == 1:  # one row: rank-1 updates of the (symmetric) G_a and u_a
            a = int(arms[0])
            if self._slots.stamp[a] < self._t:
                self._slots.stamp[a] = self._t
            if kern is None:  # (else added above)
                x = X[0]
                _dger(1.0, x, x, a=G[a].T, overwrite_a=1)
                _daxpy(x, u[a], a=yl[0])
            self._dirty.add(a)
            self._counters["rows_learned"] += 1
            return
        self._slots.touch(arms, self._t)
        if (arms == arms[0]).all():
            a = int(arms[0])
            G[a] += X.T @ X
            u[a] += X.T @ y
            self._dirty.add(a)
        else:
            order = np.argsort(arms, kind="stable")
            sa = arms[order]
            first = np.empty(sa.size, dtype=bool)
            first[0] = True
            np.not_equal(sa[1:], sa[:-1], out=first[1:])
            starts = np.flatnonzero(first)
            uniq = sa[starts]
            counts = np.empty_like(starts)  # rows per arm (np.diff(append=) costs ≈ 10 µs)
            np.subtract(starts[1:], starts[:-1], out=counts[:-1])
            counts[-1] = sa.size - starts[-1]
            longest = int(counts.max())
            if uniq.size > 64 and y.size * self.d * self.d <= _OUTER_MAX:
                # many arms: every row's x xᵀ at once, summed by arm (a loop costs per arm)
                Xs, ys = X[order], y[order]
                G[uniq] += np.add.reduceat(Xs[:, :, None] * Xs[:, None, :], starts, axis=0)
                u[uniq] += np.add.reduceat(Xs * ys[:, None], starts, axis=0)
            elif self.d <= _STACK_MAX_D and uniq.size * longest <= 2 * y.size:
                G[uniq], u[uniq] = _stacked_sums(X, y, order, starts, counts, longest, G, u, uniq)
            else:  # one SYRK per arm
                Xs, ys = X[order], y[order]
                for i, j in itertools.pairwise([*starts.tolist(), sa.size]):
                    a = int(sa[i])
                    Xa = Xs[i:j]
                    G[a] += Xa.T @ Xa
                    u[a] += ys[i:j] @ Xa
            self._dirty.update(uniq.tolist())
        self._counters["rows_learned"] += int(y.size)

    # -- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._state()
        live = self._ring_round > max(0, self._t - self.pending_capacity)
        return {
            **self._state_header(),
            "since": self._since,
            "version": self._version,
            "arms": self._slots.state_dict(),
            "G": self._G.copy(),
            "u": self._u.copy(),
            "theta": self._theta.copy(),
            "proj": self._proj.copy(),
            "width": self._wid.copy(),
            "logdet": self._logdet.copy(),
            "updates_since_factor": self._nupd.copy(),
            "dirty": sorted(self._dirty),
            # the rows of the next refit's row-by-row updates (None: it refactors)
            "pending_updates": None
            if self._pend is None
            else [(a, x.copy(), y) for a, x, y in self._pend],
            "pending_rounds": self._ring_round[live].copy(),
            "pending_slots": self._ring_slot[live].copy(),
            "pending_gens": self._ring_gen[live].copy(),
            "counters": dict(self._counters),
            "features": getattr(self, "_river_features", None),
            "tie_key": self._tie_key,
        }

    def load_state_dict(self, state: dict[str, Any]) -> LinUCBDisjoint:
        self._state()
        if "arms" not in state:
            raise ValueError(
                "this linucb-disjoint snapshot predates arm-id keying (its models follow list "
                "positions); start this bandit from a fresh state"
            )
        self._t = int(state["t"])
        self._since = int(state["since"])
        self._version = int(state["version"])
        self._slots = ArmSlots.from_state(state["arms"], self.max_arms)
        self._G = np.asarray(state["G"], dtype=np.float64).copy()
        self._u = np.asarray(state["u"], dtype=np.float64).copy()
        theta = np.asarray(state["theta"], dtype=np.float64)
        pt = np.empty((*theta.shape, theta.shape[1] + 1))
        pt[:, :, :-1] = np.asarray(state["proj"], dtype=np.float64)
        pt[:, :, -1] = theta
        self._set_models(pt)
        self._wid = np.asarray(state["width"], dtype=np.float64).copy()
        self._dirty = {int(a) for a in state["dirty"]}
        n = self._G.shape[0]
        logdet = state.get("logdet")  # (absent from a state before row-by-row updates)
        self._logdet = (
            np.linalg.slogdet(self._G)[1]  # (the dirty arms' models are rebuilt at the refit)
            if logdet is None
            else np.asarray(logdet, dtype=np.float64).copy()
        )
        nupd = state.get("updates_since_factor")
        self._nupd = np.zeros(n, np.int64) if nupd is None else np.asarray(nupd, np.int64).copy()
        pend = state.get("pending_updates")
        if pend is None:
            self._pend, self._npend = None, 0
        else:
            self._pend = [(int(a), np.asarray(x, np.float64), float(y)) for a, x, y in pend]
            self._npend = len(self._pend)
        self._epoch += 1
        self._cat = None
        r = np.asarray(state["pending_rounds"], dtype=np.int64)
        self._ring_round[:] = 0
        self._ring_round[r % self.pending_capacity] = r
        self._ring_slot[r % self.pending_capacity] = np.asarray(state["pending_slots"])
        self._ring_gen[r % self.pending_capacity] = np.asarray(state["pending_gens"])
        self._counters = dict(state["counters"])
        feats = state.get("features")
        if feats is not None:
            self._river_features = dict(feats)
        self._tie_key = int(state["tie_key"])
        return self


def _stacked_sums(
    X: FloatArray,
    y: FloatArray,
    order: IntArray,
    starts: IntArray,
    counts: IntArray,
    longest: int,
    G: FloatArray,
    u: FloatArray,
    uniq: IntArray,
) -> tuple[FloatArray, FloatArray]:
    """G[uniq] + Σ x xᵀ and u[uniq] + Σ y x per arm, stacked: the rows of each arm (sorted by
    ``order``, arm j's at ``starts[j]``, ``counts[j]`` of them) in a zero-padded
    (arms, longest, d + 1) array of [x, y] and one batched product (arms, d, d + 1) for all
    arms — one call instead of two per arm. Padding rows are zero and add exactly nothing."""
    d = X.shape[1]
    U = uniq.size
    # row i of the sorted rows goes to row (its arm's index)·longest + (its rank in the arm)
    dest = np.arange(order.size) + np.repeat(np.arange(0, U * longest, longest) - starts, counts)
    to = np.empty_like(dest)
    to[order] = dest  # where each row (unsorted) goes
    Z = np.zeros((U * longest, d + 1))
    Z[to, :d] = X
    Z[to, d] = y
    Z3 = Z.reshape(U, longest, d + 1)
    M = np.matmul(Z3[:, :, :d].transpose(0, 2, 1), Z3)  # (U, d, d + 1): [Σ x xᵀ | Σ y x]
    return G[uniq] + M[:, :, :d], u[uniq] + M[:, :, d]


def _id_rows(
    arm_ids: Sequence[Any] | AnyArray | None, B: int, K: int
) -> tuple[list[Any] | None, list[list[Any]] | None]:
    """(ids shared by every round, None) or (None, per-round rows of ids)."""
    if arm_ids is None:
        return list(range(K)), None
    if type(arm_ids) is list and (not arm_ids or type(arm_ids[0]) not in (list, np.ndarray)):
        return arm_ids, None  # (the common case: one list of ids; ArmSlots copies what it keeps)
    if isinstance(arm_ids, np.ndarray):
        if arm_ids.ndim == 1:
            return arm_ids.tolist(), None
        if arm_ids.shape != (B, K):
            raise ValueError(f"arm_ids has shape {arm_ids.shape}, the decision sets ({B}, {K})")
        rows = arm_ids.tolist()
    else:
        arm_ids = list(arm_ids)
        if not arm_ids or not isinstance(arm_ids[0], (list, np.ndarray)):
            return arm_ids, None
        rows = [list(r) for r in arm_ids]
        if len(rows) != B or any(len(r) > K for r in rows):
            raise ValueError(f"arm_ids must be K = {K} ids or B = {B} rows of ids")
        rows = [r + [None] * (K - len(r)) for r in rows]
    first = rows[0]
    if None not in first and all(r == first for r in rows):
        return first, None
    return None, rows
