"""The radius r_{ε,d} of the ℓ2-ball mechanism (LDP-GLB spec §3.1, corrected).

For Z uniform on a radius-r hemisphere around a unit vector u, E[Z] = r·c_d·u with
c_d = Γ(d/2)/(√π Γ((d+1)/2)). The hemisphere coin contributes (e^ε − 1)/(e^ε + 1) and the sign
coin E[2b − 1] = ‖g‖/R, so E[Z] = r·c_d·(e^ε − 1)/(e^ε + 1)·g/R, which equals g exactly for

    r_{ε,d}(R) = R · (e^ε + 1)/(e^ε − 1) · √π · Γ((d+1)/2) / Γ(d/2).

The paper prints R·(√π e^ε + 1)/2 · dΓ((d+1)/2)/Γ(d/2 + 1) (no (e^ε − 1) denominator); with it
E[Z] = (r_printed/r_{ε,d})·g ≠ g. :func:`printed_radius` keeps that formula for the negative test
and the documentation only; nothing in the product uses it. Gamma ratios go through ``lgamma``
(Γ overflows at d ≈ 340).

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import math

__all__ = ["ball_radius", "printed_radius", "sphere_mean_abs_cosine"]


def sphere_mean_abs_cosine(d: int) -> float:
    """c_d = E|zᵀu| for z uniform on the unit sphere of R^d: Γ(d/2)/(√π Γ((d+1)/2)).

    >>> round(sphere_mean_abs_cosine(2), 6) == round(2 / math.pi, 6)
    True
    """
    if d < 1:
        raise ValueError("d must be >= 1")
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def ball_radius(epsilon: float, d: int, R: float = 1.0) -> float:
    """Corrected radius r_{ε,d}(R) of the ℓ2-ball mechanism (spec §3.1).

    Parameters
    ----------
    epsilon
        Privacy level of one application of the mechanism (> 0).
    d
        Dimension of the privatised vector.
    R
        Radius of the input ball.

    Examples
    --------
    Golden values of spec §3.1 (R = 1):

    >>> [round(ball_radius(eps, 2), 3) for eps in (0.25, 0.5, 1.0, 2.0)]
    [12.632, 6.414, 3.399, 2.063]
    >>> round(ball_radius(1.0, 20), 3), round(ball_radius(0.5, 60), 3)
    (11.978, 39.473)
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a positive finite number")
    if not R > 0:
        raise ValueError("R must be positive")
    coth = 1.0 / math.tanh(epsilon / 2.0)  # (e^ε + 1)/(e^ε − 1), stable for small ε
    return R * coth / sphere_mean_abs_cosine(d)


def printed_radius(epsilon: float, d: int, R: float = 1.0) -> float:
    """The paper's printed radius (Lemma 2.2), which gives a **biased** mechanism.

    For documentation and the negative unbiasedness test only.

    >>> round(printed_radius(1.0, 2) / ball_radius(1.0, 2), 2)
    1.52
    """
    log_ratio = math.log(d) + math.lgamma((d + 1) / 2) - math.lgamma(d / 2 + 1)
    return R * (math.sqrt(math.pi) * math.exp(epsilon) + 1.0) / 2.0 * math.exp(log_ratio)
