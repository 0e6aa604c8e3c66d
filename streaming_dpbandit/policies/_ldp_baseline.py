"""Shared machinery of the LDP-UCB and LDP-GLOC comparison baselines (LDP-GLB spec §7).

Both come from Zheng et al. 2020 as implemented in the LDP-GLB authors' code, and run in
simulation only: their decisions need the server's (V + c_t I)⁻¹, which a device would have to
download (d² floats). Multi-parameter experiments use the stacked context x̃_a = e_a ⊗ X_t ∈
R^{dK} while υ_t and β_t keep the per-arm d.
"""

from __future__ import annotations

import abc
import math
from typing import Any, ClassVar, Self

import numpy as np
from scipy import linalg

from ..ldp.model import AUTHORS_CODE_LABEL
from ..privacy.ledger import ReleaseRecord
from ..privacy.noise import NoiseSource
from ..privacy.statement import PrivacyStatement
from ..utils.arrays import ArrayLike, FloatArray, IntArray, MaybeArray
from ._argmax import argmax_ties_by_coins
from .base import DecisionBatch, Policy

__all__ = ["LDPBaseline", "code_sigma", "upsilon"]


def code_sigma(epsilon: float, delta: float, factor: float = 6.0, offset: float = 2.5) -> float:
    """σ = factor·√(2 ln(offset/δ))/ε (the authors' constants: 6 and 2.5 for messages, 6 and
    3.75 for GLOC's σ_s, 3 and 2.5 for the E3 messages).

    >>> round(code_sigma(1.0, 0.01), 2), round(code_sigma(1.0, 0.1), 2)
    (19.94, 15.22)
    """
    return factor * math.sqrt(2.0 * math.log(offset / delta)) / epsilon


def upsilon(sigma: float, t: int, d: int, horizon: int, alpha: float) -> float:
    """υ_t = σ√t(4√d + 2 ln(2T/α))."""
    return sigma * math.sqrt(t) * (4.0 * math.sqrt(d) + 2.0 * math.log(2.0 * horizon / alpha))


class LDPBaseline(Policy):
    """Common state: stacked dimension, noise stream, per-round model refresh, statement."""

    private = True

    def simulation_only(self) -> str | None:
        return f"{self.name} is a comparison baseline for simulations only (LDP-GLB spec §7)"

    # the parameters every baseline stores (its constructor's)
    d: int
    n_arms: int
    setting: str
    epsilon: float
    delta: float
    refresh_every: int
    bandit_id: str
    seed: int | None

    @abc.abstractmethod
    def _state(self) -> Self:
        """Build the state on first use; returns the policy."""

    @abc.abstractmethod
    def _refresh(self) -> None:
        """Recompute the model in force from the reports so far (θ and its width β)."""

    @abc.abstractmethod
    def _learn_reports(self, Xs: FloatArray, y: FloatArray) -> None:
        """Privatise and add the reports: the chosen stacked contexts ``Xs`` and rewards."""

    #: the state's arrays beside the common state: key → attribute
    _state_arrays: ClassVar[tuple[tuple[str, str], ...]] = ()
    _theta: FloatArray
    _beta: float
    _Ainv: FloatArray
    _reports: int

    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X, rounds = self._decide_batch(X)
        B = X.shape[0]
        Xs = self._stack(X)
        width = np.sqrt(np.maximum(np.einsum("bkd,de,bke->bk", Xs, self._Ainv, Xs), 0.0))
        scores = Xs @ self._theta + self._beta * width
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        arms, prop = argmax_ties_by_coins(scores, lambda rows: self._coins(rounds[rows], None))
        self._remember(rounds, arms)
        self._t += B
        self._since += B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), self._version)

    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        self._state()
        X = np.atleast_2d(np.asarray(contexts, dtype=np.float64))
        y = np.asarray(rewards, dtype=np.float64).reshape(-1)
        rounds = np.asarray(rounds, dtype=np.int64).reshape(-1)
        self._learn_reports(self._chosen_stacked(X, rounds), y)

    @property
    def coefficients(self) -> FloatArray:
        return self._state()._theta.copy()

    def state_dict(self) -> dict[str, Any]:
        self._state()
        arrays = {key: getattr(self, attr).copy() for key, attr in self._state_arrays}
        return {
            "policy": self.name,
            "params": self.public_params(),
            **self._common_state(),
            **arrays,
            "reports": self._reports,
        }

    def load_state_dict(self, state: dict[str, Any]) -> Self:
        self._state()
        self._load_common(state)
        for key, attr in self._state_arrays:
            setattr(self, attr, np.array(state[key], dtype=np.float64))
        self._reports = int(state["reports"])
        self._refresh()
        return self

    def _dims(self) -> tuple[int, int]:
        """(per-arm d, model dimension: d single-param, dK stacked multi-param)."""
        if self.setting == "single":
            return self.d, self.d
        return self.d, self.d * self.n_arms

    def _stack(self, X: FloatArray) -> FloatArray:
        """(B, K, d) → (B, K, D): stacked x̃_a = e_a ⊗ x_a in multi-param."""
        if self.setting == "single":
            return X
        B, K, d = X.shape
        out = np.zeros((B, K, K * d))
        for a in range(K):
            out[:, a, a * d : (a + 1) * d] = X[:, a]
        return out

    def _base_state(self) -> None:
        if self.setting not in ("single", "multi"):
            raise ValueError("setting must be 'single' or 'multi'")
        if self.refresh_every < 1:
            raise ValueError("refresh_every must be >= 1")
        self._t = 0
        self._since = 0
        self._version = 0
        self._noise = NoiseSource(self.seed).generator(self.name, "clients")
        self._coin_key()
        self._recorded = False
        self._pending: dict[int, int] = {}  # round → chosen arm (multi-param stacking)

    def refit_due(self) -> bool:
        self._state()
        return self._since >= self.refresh_every

    def max_decide_batch(self) -> int:
        self._state()
        return max(0, self.refresh_every - self._since)

    def refit(self) -> list[ReleaseRecord]:
        self._state()
        if not self.refit_due():
            return []
        self._refresh()
        self._since = 0
        self._version += 1
        if self._recorded:
            return []
        self._recorded = True
        return [
            ReleaseRecord(
                release_id=f"{self.bandit_id}/{self.name}/per-report",
                bandit_id=self.bandit_id,
                mechanism=f"{self.name}/gaussian (authors' constants)",
                calibration="authors_code",
                formula="authors-code",
                dp_valid=False,
                epsilon=self.epsilon,
                delta=self.delta,
                accounting=[{"type": "eps_delta", "epsilon": self.epsilon, "delta": self.delta}],
                data_slice="reports",
                composition="parallel",
                note=AUTHORS_CODE_LABEL,
                privacy_model="local",
            )
        ]

    @property
    def privacy(self) -> PrivacyStatement:
        return PrivacyStatement(
            model="local",
            unit="one report (one round's contexts, reward and arm)",
            neighbouring="any two inputs of one report",
            epsilon=self.epsilon,
            delta=self.delta,
            calibration="authors_code",
            scope="a comparison baseline in simulation only (decisions need the server's "
            "inverse Gram matrix); its constants are the authors' code's, not re-derived.",
            label=AUTHORS_CODE_LABEL,
        )

    @staticmethod
    def _inverse(A: FloatArray, floor: float) -> FloatArray:
        """A⁻¹ by Cholesky; if A is not positive definite, eigenvalues floored at ``floor``."""
        try:
            c = linalg.cho_factor(A, check_finite=False)
            inv: FloatArray = linalg.cho_solve(c, np.eye(A.shape[0]), check_finite=False)
            return inv
        except linalg.LinAlgError:
            lam, Q = np.linalg.eigh(0.5 * (A + A.T))
            lam = np.maximum(lam, max(floor, 1e-12))
            floored: FloatArray = (Q / lam) @ Q.T
            return floored

    def _remember(self, rounds: IntArray, arms: IntArray) -> None:
        if self.setting == "multi":
            for r, a in zip(rounds.tolist(), arms.tolist()):
                self._pending[r] = a

    def _chosen_stacked(self, contexts: FloatArray, rounds: IntArray) -> FloatArray:
        """Stacked feature of the chosen arm of each round, from the learned (B, d) contexts."""
        if self.setting == "single":
            return contexts
        d, D = self._dims()
        out = np.zeros((contexts.shape[0], D))
        for i, r in enumerate(rounds.tolist()):
            a = self._pending.pop(r)
            out[i, a * d : (a + 1) * d] = contexts[i]
        return out

    def _get_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._init_param_names()}

    def _common_state(self) -> dict[str, Any]:
        return {
            "t": self._t,
            "since": self._since,
            "version": self._version,
            "noise": self._noise.bit_generator.state,
            "tie_key": self._coin_key(),
            "recorded": self._recorded,
            "pending": {str(k): v for k, v in self._pending.items()},
        }

    def _load_common(self, state: dict[str, Any]) -> None:
        self._t = int(state["t"])
        self._since = int(state["since"])
        self._version = int(state["version"])
        self._noise.bit_generator.state = state["noise"]
        self._tie_key = int(state["tie_key"])
        self._recorded = bool(state["recorded"])
        self._pending = {int(k): int(v) for k, v in state["pending"].items()}
