"""Link functions μ of generalized linear bandits (LDP-GLB spec §4.1, Assumption 1).

Scores use xᵀθ̂ (μ is increasing, so the argmax is the same as for μ(xᵀθ̂)); μ enters the SGD
gradient g = (μ(xᵀθ̂) − r)·x and the environments' mean rewards.

| link | μ(s) | ζ = inf μ′ on [−1, 1] | reward range |
|---|---|---|---|
| linear | s | 1 | [−c_r, c_r] |
| logistic | 1/(1 + e^{−s}) (stable) | e^{−1}/(1 + e^{−1})² ≈ 0.1966 | [0, 1] |
| poisson | e^s | e^{−1} | [0, c_r] |

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import math

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray

__all__ = ["LINKS", "Link", "get_link"]


class Link:
    """One link function.

    Parameters
    ----------
    name
        ``"linear"``, ``"logistic"`` or ``"poisson"``.

    Examples
    --------
    >>> import numpy as np
    >>> get_link("logistic").mean(np.array([-800.0, 0.0, 800.0])).tolist()
    [0.0, 0.5, 1.0]
    >>> round(get_link("logistic").zeta, 4), round(get_link("poisson").zeta, 4)
    (0.1966, 0.3679)
    >>> get_link("poisson").reward_range(3.0)
    (0.0, 3.0)
    """

    def __init__(self, name: str):
        if name not in ("linear", "logistic", "poisson"):
            raise ValueError(f"link must be linear, logistic or poisson, got {name!r}")
        self.name = name

    def mean(self, s: ArrayLike) -> FloatArray:
        """μ(s), elementwise (float64)."""
        s = np.asarray(s, dtype=np.float64)
        if self.name == "linear":
            return s.copy()
        if self.name == "logistic":
            e = np.exp(-np.abs(s))
            mu: FloatArray = np.where(s >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
            return mu
        with np.errstate(over="ignore"):
            mu = np.exp(np.minimum(s, 700.0))
        return mu

    @property
    def zeta(self) -> float:
        """ζ = inf_{|s| ≤ 1} μ′(s) (Assumption 1 with C_B = 1)."""
        if self.name == "linear":
            return 1.0
        if self.name == "logistic":
            return math.exp(-1.0) / (1.0 + math.exp(-1.0)) ** 2
        return math.exp(-1.0)

    def reward_range(self, c_r: float) -> tuple[float, float]:
        """Interval rewards are clipped into (spec §2, A20)."""
        if self.name == "linear":
            return (-c_r, c_r)
        if self.name == "logistic":
            return (0.0, 1.0)
        return (0.0, c_r)

    def __repr__(self) -> str:
        return f"Link({self.name!r})"


LINKS = {name: Link(name) for name in ("linear", "logistic", "poisson")}


def get_link(name: str) -> Link:
    """The link called ``name``."""
    link = LINKS.get(name)
    if link is None:
        raise ValueError(f"link must be linear, logistic or poisson, got {name!r}")
    return link
