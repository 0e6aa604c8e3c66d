"""LinUCB with one shared parameter over per-arm features (non-private baseline).

Each round offers K candidate feature vectors x_1…x_K ∈ R^d (the decision set D_t of the
DP-LinUCB spec §1) and the reward is linear in the chosen one, E[y] = ⟨θ*, x⟩. The model is ridge
regression V = reg·I + Σ x xᵀ, u = Σ x y, θ̂ = V⁻¹u, and the policy picks

    argmax_i ⟨θ̂, x_i⟩ + β·‖x_i‖_{V⁻¹}.

``beta`` is either a fixed width (the "α" of Li, Chu, Langford & Schapire 2010) or, by default,
the OFUL / Prop. 4 width β = σ√(2 ln(2/α) + ln det V − d ln reg) + S√reg (the spec's
``NONPRIVATE`` baseline with reg = 1, §4 table and §12.4).

Batching. ``batch_size`` = b is how many rounds are decided with one frozen model: after b
decisions a model refresh is due (``refit_due()``), which refactors V from every row learned so
far (one Cholesky, O(d³/3)) — or, when only a few rows (at most d/8) arrived since the last
refresh, as with b = 1, updates the factor by one O(d²) square-root Sherman–Morrison step per row
(``UCBModel.add_rows``); every ``REFACTOR_EVERY``-th refresh refactors from the sums, which
bounds the rounding the updates accumulate.

b = 1 is classic LinUCB (the model moves after every round); b > 1
is *batched* LinUCB: decisions inside a batch do not see each other's rewards, which adds at most
O(b·d·log T)-type regret from the delay (measured in docs/dp-linucb.md) and makes the decision
path one matrix product per batch.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterator
from typing import Any, Protocol, Self

import numpy as np

from ..estimators.ucb_model import UCBModel, oful_beta
from ..privacy.ledger import ReleaseRecord
from ..utils.arrays import ArrayLike, FloatArray, IntArray, MaybeArray
from ._argmax import argmax_ties_by_coins, take_ids
from .base import DecisionBatch, Policy
from .registry import register
from .types import AtLeastOne, NonNegative, OpenUnit, Positive, PositiveInt

__all__ = ["REFACTOR_EVERY", "LinUCB"]

#: Every this many model refreshes, the factor is recomputed from the sums (V, u) instead of
#: updated row by row (a deterministic schedule: the same in a restarted run).
REFACTOR_EVERY = 256
#: Learned rows are added to the Gram sum in blocks of this many, by their order (so that the
#: sum does not depend on how the rows were grouped into ``learn`` calls); one GEMM per block
#: instead of one outer product per row.
FOLD = 256


class BatchSchedule(Policy):
    """A model refreshed every ``batch_size`` decided rounds (LinUCB's and disjoint LinUCB's
    schedule: ``_since`` counts the rounds decided since the last refresh)."""

    batch_size: int
    _since: int

    @abc.abstractmethod
    def _state(self) -> Self: ...

    def refit_due(self) -> bool:
        return self._state()._since >= self.batch_size

    def max_decide_batch(self) -> int:
        return self.batch_size - self._state()._since


@register
class LinUCB(BatchSchedule):
    """LinUCB, shared parameter over per-arm features, batched and vectorised.

    Parameters
    ----------
    d
        Feature dimension.
    reg
        Ridge regulariser (V₀ = reg·I); must be > 0 for the theoretical width.
    beta
        Fixed exploration width; ``None`` (default) uses the OFUL / Prop. 4 width below.
    alpha
        Failure probability of the theoretical width (ignored when ``beta`` is set).
    sigma
        Sub-Gaussian constant of the reward noise (theoretical width).
    S
        Bound on ‖θ*‖ (theoretical width).
    batch_size
        Rounds decided per model refresh (1 = classic per-round LinUCB).
    ties
        Exact ties: ``"lowest"`` index (default, as DP-LinUCB spec §6; propensity 1) or
        ``"coins"`` (uniform among the tied arms by a hash of the event id).
    seed
        Seeds the tie-break coins (``None``: OS entropy).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> theta = np.array([1.0, 0.0, 0.0])
    >>> pol = LinUCB(d=3, batch_size=8, seed=1)
    >>> while pol.t < 400:
    ...     if pol.refit_due():
    ...         _ = pol.refit()                      # non-private: no ledger records
    ...     X = rng.normal(size=(pol.max_decide_batch(), 5, 3))
    ...     dec = pol.decide(X)
    ...     x = X[np.arange(len(dec)), dec.arms]
    ...     pol.learn(x, x @ theta + 0.1 * rng.normal(size=len(dec)), dec.rounds)
    >>> np.round(pol.coefficients, 1).tolist()
    [1.0, -0.0, 0.0]

    """

    name = "linucb"

    _model: UCBModel

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "batch_size": 4}

    def __init__(
        self,
        d: PositiveInt,
        reg: Positive = 1.0,
        beta: NonNegative | None = None,
        alpha: OpenUnit = 0.01,
        sigma: Positive = 1.0,
        S: Positive = 1.0,
        batch_size: AtLeastOne = 1,
        ties: str = "lowest",
        seed: int | None = None,
    ):
        self.d = d
        self.reg = reg
        self.beta = beta
        self.alpha = alpha
        self.sigma = sigma
        self.S = S
        self.batch_size = batch_size
        self.ties = ties
        self.seed = seed

    # -- state ---------------------------------------------------------------------------------
    def _validate(self) -> None:
        if self.d < 1 or self.batch_size < 1:
            raise ValueError("need d >= 1 and batch_size >= 1")
        if self.reg < 0 or (self.beta is None and self.reg <= 0):
            raise ValueError("reg must be > 0 (>= 0 with a fixed beta)")
        if self.beta is None and not 0 < self.alpha < 1:
            raise ValueError("alpha must be in (0, 1)")
        if self.ties not in ("lowest", "coins"):
            raise ValueError("ties must be 'lowest' or 'coins'")

    def _state(self) -> Self:
        if not hasattr(self, "_G"):
            self._validate()
            self._t = 0
            self._since = 0
            self._version = 0
            self._G = self.reg * np.eye(self.d)  # reg·I + the rows folded (blocks of FOLD)
            self._unfolded: list[FloatArray] = []  # the rows after them, in order
            self._folded = 0  # rows in self._G
            self._u = np.zeros(self.d)
            self._rows = 0
            self._pend: list[tuple[FloatArray, FloatArray]] | None = None
            self._coin_key()
            self._refresh()
        return self

    def _gram(self) -> FloatArray:
        """V = reg·I + Σ xxᵀ over every row learned."""
        if not self._unfolded:
            return self._G.copy()
        R = np.concatenate(self._unfolded)
        out: FloatArray = self._G + R.T @ R
        return out

    def _refresh(self) -> None:
        """The model of every row learned: updated by the rows since the last refresh when they
        are few (O(d²) each), else refactored from the sums."""
        rows = self._pend
        self._mu = self._u.copy()  # u of the frozen model
        # (a floored model — reg = 0 before d independent rows — is no inverse to update)
        if rows is not None and (self._version + 1) % REFACTOR_EVERY and not self._model.repaired:
            for X, y in rows:
                self._model.add_rows(X, y)
            self._mG: FloatArray | None = None  # (not kept: the model is updated row by row)
        else:
            self._mG = self._gram()
            self._model = UCBModel.fit(self._mG, self._mu, floor=None)
        self._pend = []
        self._npend = 0
        self._width_from_model()

    def _width_from_model(self) -> None:
        if self.beta is None:
            self._width = oful_beta(
                self._model.logdet, self.d, self.reg, self.alpha, self.sigma, self.S
            )
        else:
            self._width = float(self.beta)

    @property
    def coefficients(self) -> FloatArray:
        """θ̂ of the model in force."""
        return self._state()._model.theta.copy()

    @property
    def width(self) -> float:
        """The exploration width β of the model in force."""
        return self._state()._width

    @property
    def counters(self) -> dict[str, Any]:
        return {"rows_learned": self._state()._rows, "cholesky_repairs": 0}

    # -- schedule ------------------------------------------------------------------------------
    def refit(self) -> list[ReleaseRecord]:
        """Refresh the frozen model from every row learned so far (no private release)."""
        self._state()
        if self._since < self.batch_size:
            return []
        self._refresh()
        self._since = 0
        return self._refitted()

    # -- deciding ------------------------------------------------------------------------------
    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X, rounds = self._decide_batch(X)
        B, K, d = X.shape
        t0 = self._t
        scores = self._model.scores(X.reshape(B * K, d), self._width).reshape(B, K)
        arms, prop = decide_arms(self, scores, mask, rounds, event_ids)
        self._t = t0 + B
        self._since += B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), self._version)

    # -- learning ------------------------------------------------------------------------------
    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        X, y = self._learn_xy(contexts, rewards)
        n = y.size
        if n == 0:
            return
        if np.asarray(rounds).max() > self._t:
            raise ValueError("learn() got a round that was never decided")
        self._u += y @ X
        self._rows += n
        X = X.copy()  # (the caller may reuse its array)
        unfolded = self._unfolded
        unfolded.append(X)
        keep = self._rows % FOLD  # the rows after the last multiple of FOLD stay unfolded
        # the unfolded rows start at a multiple of FOLD: after the last one folded
        total = self._rows - self._folded
        if total - keep >= FOLD:
            R = np.concatenate(unfolded)
            for lo in range(0, total - keep, FOLD):
                B = R[lo : lo + FOLD]
                self._G += B.T @ B
            self._unfolded = [R[total - keep :]] if keep else []
            self._folded = self._rows - keep
        pend = self._pend
        if pend is not None:  # the rows for the next refresh's update, while they are few
            self._npend += n
            if self._npend > max(1, self.d // 8):
                self._pend = None
            else:
                pend.append((X, y.copy()))

    # -- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            **self._state_header(),
            "since": self._since,
            "version": self._version,
            "G": self._gram(),
            "G_folded": self._G.copy(),  # (G = G_folded + the unfolded rows' Σ xxᵀ)
            "unfolded_rows": np.concatenate(self._unfolded) if self._unfolded else None,
            "u": self._u.copy(),
            "rows": self._rows,
            "model_G": self._mG,  # (None when the model was updated row by row: see "model")
            "model_u": self._mu,
            "model": self._model.state(),  # (updated row by row: not a function of model_G)
            "pending_rows": None if self._pend is None else [X.copy() for X, _ in self._pend],
            "pending_rewards": None if self._pend is None else [y.copy() for _, y in self._pend],
            "tie_key": self._tie_key,
        }

    def load_state_dict(self, state: dict[str, Any]) -> LinUCB:
        self._state()
        self._t = int(state["t"])
        self._since = int(state["since"])
        self._version = int(state["version"])
        folded = state.get("G_folded")  # (absent from a state written before the blocks)
        self._G = np.asarray(state["G"] if folded is None else folded, dtype=np.float64).copy()
        rest = state.get("unfolded_rows")
        self._unfolded = [] if rest is None else [np.asarray(rest, dtype=np.float64).copy()]
        self._u = np.asarray(state["u"], dtype=np.float64).copy()
        self._rows = int(state["rows"])
        self._folded = self._rows - sum(len(r) for r in self._unfolded)
        self._tie_key = int(state["tie_key"])
        mG = state["model_G"]
        self._mG = None if mG is None else np.asarray(mG, dtype=np.float64).copy()
        self._mu = np.asarray(state["model_u"], dtype=np.float64).copy()
        model = state.get("model")
        if model is None:  # a state written before row-by-row updates: refactored
            assert self._mG is not None  # (such a state always has the model's Gram sum)
            self._model = UCBModel.fit(self._mG, self._mu, floor=None)
            self._pend = None
        else:
            self._model = UCBModel(
                theta=np.asarray(model["theta"], dtype=np.float64).copy(),
                cinv_t=np.array(model["cinv_t"], dtype=np.float64, order="C"),
                logdet=float(model["logdet"]),
            )
            pend, ys = state.get("pending_rows"), state.get("pending_rewards")
            if pend is None or ys is None:  # (a state before rewards were kept: refactored)
                self._pend, self._npend = None, 0
            else:
                self._pend = [
                    (np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64))
                    for X, y in zip(pend, ys)
                ]
                self._npend = sum(len(X) for X, _ in self._pend)
        self._width_from_model()
        return self


class _TieRule(Protocol):
    """A policy with a tie rule: ``ties`` (``"lowest"`` or ``"coins"``) and its coins."""

    ties: str

    def _coins(self, rounds: ArrayLike, event_ids: ArrayLike | None) -> FloatArray: ...


def decide_arms(
    pol: _TieRule,
    scores: FloatArray,
    mask: ArrayLike | None,
    rounds: IntArray,
    event_ids: ArrayLike | None,
) -> tuple[IntArray, FloatArray]:
    """Masking, the finiteness check and the argmax with the policy's tie rule."""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    elif not math.isfinite(np.add.reduce(scores, axis=None)):
        raise ValueError("contexts must be finite")
    if pol.ties == "lowest":
        arms: IntArray = scores.argmax(axis=1)
        prop = np.empty(scores.shape[0])  # (np.ones costs three times as much per call)
        prop.fill(1.0)
        return arms, prop
    return argmax_ties_by_coins(
        scores, lambda rows: pol._coins(rounds[rows], take_ids(event_ids, rows))
    )
