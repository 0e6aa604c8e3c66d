"""Greedy ridge / OLS baseline: LinUCB without the exploration width (β = 0)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .linucb import LinUCB
from .registry import register
from .types import AtLeastOne, NonNegative, PositiveInt

__all__ = ["GreedyRidge"]


@register
class GreedyRidge(LinUCB):
    """Pick argmax_i ⟨θ̂, x_i⟩ with θ̂ the ridge (reg > 0) or least-squares (reg = 0) fit.

    With ``reg = 0`` the Gram matrix is singular until d independent rows arrived; the model then
    uses the minimum-norm solution of a floored eigen-decomposition (θ̂ = 0 at the start), and
    exact ties are broken by the deterministic coins.

    Parameters
    ----------
    d
        Feature dimension.
    reg
        Ridge regulariser (0 = ordinary least squares).
    batch_size
        Rounds decided per model refresh.
    ties
        ``"coins"`` (default: uniform among exactly tied arms, e.g. while θ̂ = 0) or ``"lowest"``.
    seed
        Seeds the tie-break coins.

    Examples
    --------
    >>> import numpy as np
    >>> pol = GreedyRidge(d=2, reg=0.0, seed=0)
    >>> dec = pol.decide(np.array([[[1.0, 0.0], [0.0, 1.0]]]))   # θ̂ = 0: a coin decides
    >>> float(dec.propensities[0])
    0.5
    >>> pol.learn(np.array([[1.0, 0.0]]), np.array([2.0]), dec.rounds); _ = pol.refit()
    >>> pol.coefficients.round(6).tolist(), pol.width
    ([2.0, 0.0], 0.0)

    """

    name = "greedy"

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "batch_size": 2}

    def __init__(
        self,
        d: PositiveInt,
        reg: NonNegative = 1.0,
        batch_size: AtLeastOne = 1,
        ties: str = "coins",
        seed: int | None = None,
    ) -> None:
        super().__init__(d=d, reg=reg, beta=0.0, batch_size=batch_size, ties=ties, seed=seed)

    def _get_params(self) -> dict[str, Any]:
        return {
            "d": self.d,
            "reg": self.reg,
            "batch_size": self.batch_size,
            "ties": self.ties,
            "seed": self.seed,
        }
