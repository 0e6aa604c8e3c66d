"""LDP-UCB (Zheng et al. 2020), the comparison baseline of the LDP-GLB experiments (spec §7).

* Message: the OLS message (xxᵀ + W, r·x + ξ) with σ_code = 6√(2 ln(2.5/δ))/ε on every entry.
* Server: V (V₀ = v0·I: 1 in E1, 0 in E2) and U; with t the report count + 1,
  υ_t = σ_code√t(4√d + 2 ln(2T/α)), c_t = 2υ_t, A_t = V + c_t I, θ̂ = A_t⁻¹U and
  β_t = 2σ_code√(d ln T) + (√(3υ_t) + σ_code√(d t/υ_t))·d ln T.
* Decision: argmax_a x_aᵀθ̂ + β_t√(x_aᵀA_t⁻¹x_a), with the eigenvalue floor c_t/2 when A_t is
  not positive definite.

Simulation only (see :mod:`._ldp_baseline`).

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Self

import numpy as np

from ..ldp.gaussian import GaussianOLSMechanism
from ..utils.arrays import FloatArray
from ._ldp_baseline import LDPBaseline, code_sigma, upsilon
from .registry import register
from .types import AtLeastOne, Ge, NonNegative, OpenUnit, Positive, PositiveInt

__all__ = ["LDPUCB", "ucb_beta"]


def ucb_beta(sigma: float, t: int, d: int, horizon: int, alpha: float) -> tuple[float, float]:
    """(υ_t, β_t) of LDP-UCB."""
    ups = upsilon(sigma, t, d, horizon, alpha)
    lnT = math.log(horizon)
    beta = (
        2 * sigma * math.sqrt(d * lnT)
        + (math.sqrt(3 * ups) + sigma * math.sqrt(d * t / ups)) * d * lnT
    )
    return ups, beta


@register
class LDPUCB(LDPBaseline):
    """LDP-UCB baseline.

    Parameters
    ----------
    d
        Per-arm dimension.
    n_arms
        K (multi-param: the stacked model has dimension dK).
    setting
        ``"single"`` (E1) or ``"multi"`` (E2, stacked contexts).
    epsilon, delta, alpha, horizon
        Privacy level and the constants of υ_t, β_t (T = ``horizon``).
    v0
        V₀ = v0·I (E1: 1, E2: 0).
    sigma_factor
        σ_code = sigma_factor·√(2 ln(2.5/δ))/ε.
    refresh_every
        Rounds per model refresh (1: per round).
    bandit_id
        Name used in ledger records and noise-stream labels.

    Examples
    --------
    >>> import numpy as np
    >>> pol = LDPUCB(d=2, n_arms=3, epsilon=1.0, delta=0.01, horizon=1000, seed=0)
    >>> dec = pol.decide(np.random.default_rng(0).normal(size=(1, 3, 2)))
    >>> pol.learn(np.ones((1, 2)), np.ones(1), dec.rounds); _ = pol.refit()
    >>> pol.model_version, pol.privacy.model
    (1, 'local')
    """

    name = "ldp-ucb"

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "n_arms": 3, "horizon": 1000}

    # copy kept (~ ldp_gloc.py __init__): River idiom, each constructor stores its own parameters
    def __init__(
        self,
        d: PositiveInt,
        n_arms: PositiveInt = 2,
        setting: Literal["single", "multi"] = "single",
        epsilon: Positive = 1.0,
        delta: OpenUnit = 0.01,
        alpha: OpenUnit = 0.1,
        horizon: Annotated[int, Ge(2)] = 1_000_000,
        v0: NonNegative = 1.0,
        sigma_factor: Positive = 6.0,
        refresh_every: AtLeastOne = 1,
        bandit_id: str = "default",
        seed: int | None = None,
    ):
        self.d = d
        self.n_arms = n_arms
        self.setting = setting
        self.epsilon = epsilon
        self.delta = delta
        self.alpha = alpha
        self.horizon = horizon
        self.v0 = v0
        self.sigma_factor = sigma_factor
        self.refresh_every = refresh_every
        self.bandit_id = bandit_id
        self.seed = seed

    def _state(self) -> Self:
        if not hasattr(self, "_V"):
            self._base_state()
            _d, D = self._dims()
            self._sigma = code_sigma(self.epsilon, self.delta, self.sigma_factor)
            self._mech = GaussianOLSMechanism(D, self._sigma, self._sigma)
            self._rows, self._cols = np.triu_indices(D)
            self._V = self.v0 * np.eye(D)
            self._U = np.zeros(D)
            self._reports = 0
            self._refresh()
        return self

    def _refresh(self) -> None:
        d, D = self._dims()
        t = self._reports + 1
        ups, beta = ucb_beta(self._sigma, t, d, self.horizon, self.alpha)
        c = 2.0 * ups
        A = self._V + c * np.eye(D)
        self._Ainv = self._inverse(A, c / 2.0)
        self._theta = self._Ainv @ self._U
        self._beta = beta

    def _learn_reports(self, Xs: FloatArray, y: FloatArray) -> None:
        M, u = self._mech.privatize(Xs, y, self._noise)
        D = Xs.shape[1]
        Msum = M.sum(axis=0)
        S = np.zeros((D, D))
        S[self._rows, self._cols] = Msum
        S[self._cols, self._rows] = Msum
        self._V += S
        self._U += u.sum(axis=0)
        self._reports += y.size

    #: the state's arrays: key → attribute
    _state_arrays = (("V", "_V"), ("U", "_U"))
