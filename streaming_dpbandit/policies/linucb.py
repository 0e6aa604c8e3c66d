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
far (one Cholesky, O(d³/3)). b = 1 is classic LinUCB (the model moves after every round); b > 1
is *batched* LinUCB: decisions inside a batch do not see each other's rewards, which adds at most
O(b·d·log T)-type regret from the delay (measured in docs/dp-linucb.md) and makes the decision
path one matrix product per batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Protocol, Self

import numpy as np

from ..estimators.ucb_model import UCBModel, oful_beta
from ..privacy.ledger import ReleaseRecord
from ..utils.arrays import ArrayLike, FloatArray, IntArray
from ._argmax import argmax_ties_by_coins, take_ids
from .base import DecisionBatch, Policy

__all__ = ["LinUCB"]


class LinUCB(Policy):
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

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        """Small valid constructor parameters (contexts of 3 arms, d=4) for the generic
        checks in ``streaming_dpbandit.checks`` and the tests."""
        yield {"d": 4, "batch_size": 4}

    def __init__(
        self,
        d: int,
        reg: float = 1.0,
        beta: float | None = None,
        alpha: float = 0.01,
        sigma: float = 1.0,
        S: float = 1.0,
        batch_size: int = 1,
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
            self._G = self.reg * np.eye(self.d)
            self._u = np.zeros(self.d)
            self._rows = 0
            self._coin_key()
            self._refresh()
        return self

    def _refresh(self) -> None:
        self._mG, self._mu = self._G.copy(), self._u.copy()  # the statistics of the frozen model
        self._model = UCBModel.fit(self._mG, self._mu, floor=None)
        self._width_from_model()

    def _width_from_model(self) -> None:
        if self.beta is None:
            self._width = oful_beta(
                self._model.logdet, self.d, self.reg, self.alpha, self.sigma, self.S
            )
        else:
            self._width = float(self.beta)

    @property
    def model_version(self) -> int:
        return self._state()._version

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
    def refit_due(self) -> bool:
        return self._state()._since >= self.batch_size

    def max_decide_batch(self) -> int:
        return self.batch_size - self._state()._since

    def refit(self) -> list[ReleaseRecord]:
        """Refresh the frozen model from every row learned so far (no private release)."""
        self._state()
        if self._since < self.batch_size:
            return []
        self._refresh()
        self._since = 0
        self._version += 1
        return []

    # -- deciding ------------------------------------------------------------------------------
    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        self._state()
        X = self._check_batch(X, self.d)
        B, K, d = X.shape
        t0 = self._t
        scores = self._model.scores(X.reshape(B * K, d), self._width).reshape(B, K)
        rounds = np.arange(t0 + 1, t0 + B + 1, dtype=np.int64)
        arms, prop = decide_arms(self, scores, mask, rounds, event_ids)
        self._t = t0 + B
        self._since += B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), self._version)

    # -- learning ------------------------------------------------------------------------------
    def learn(
        self,
        contexts: ArrayLike,
        rewards: ArrayLike,
        rounds: ArrayLike,
        ids: ArrayLike | None = None,
    ) -> None:
        self._state()
        X = np.asarray(contexts, dtype=np.float64)
        y = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if X.shape != (y.size, self.d):
            raise ValueError("learn expects contexts (B, d) and rewards (B,)")
        if y.size == 0:
            return
        if np.max(rounds) > self._t:
            raise ValueError("learn() got a round that was never decided")
        self._G += X.T @ X
        self._u += X.T @ y
        self._rows += y.size

    # -- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            "policy": self.name,
            "params": self._get_params(),
            "t": self._t,
            "since": self._since,
            "version": self._version,
            "G": self._G.copy(),
            "u": self._u.copy(),
            "rows": self._rows,
            "model_G": self._mG,
            "model_u": self._mu,
            "tie_key": self._tie_key,
        }

    def load_state_dict(self, state: dict[str, Any]) -> LinUCB:
        self._state()
        self._t = int(state["t"])
        self._since = int(state["since"])
        self._version = int(state["version"])
        self._G = np.asarray(state["G"], dtype=np.float64).copy()
        self._u = np.asarray(state["u"], dtype=np.float64).copy()
        self._rows = int(state["rows"])
        self._tie_key = int(state["tie_key"])
        self._mG = np.asarray(state["model_G"], dtype=np.float64).copy()
        self._mu = np.asarray(state["model_u"], dtype=np.float64).copy()
        self._model = UCBModel.fit(self._mG, self._mu, floor=None)
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
        return arms, np.ones(scores.shape[0])
    return argmax_ties_by_coins(
        scores, lambda rows: pol._coins(rounds[rows], take_ids(event_ids, rows))
    )
