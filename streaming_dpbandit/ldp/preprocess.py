"""Client-side bounding of the private inputs (LDP-GLB spec §3.2, §4.1, P2).

Everything here runs on the user's device before anything is privatised: contexts are divided by
the public constant s and projected into the unit ball (C_B = 1), rewards are clipped into the
link's range, SGD gradients are clipped to ‖g‖ ≤ R. Bounds therefore hold by construction, not
by assumption, which is what the calibrations of §3 need. These maps depend only on the user's
own data and public constants (threat-model limit (4) of spec §1).

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray
from .links import Link

__all__ = ["clip_gradients", "clip_rewards", "normalise_contexts"]


def normalise_contexts(X: ArrayLike, scale: float = 1.0) -> FloatArray:
    """x ← x/s, then x ← x·min(1, 1/‖x‖) along the last axis (a new float64 array).

    >>> normalise_contexts([[3.0, 4.0], [0.3, 0.4]]).tolist()
    [[0.6, 0.8], [0.3, 0.4]]
    """
    X = np.array(X, dtype=np.float64)
    if scale != 1.0:
        X /= scale
    norms = np.sqrt(np.einsum("...i,...i->...", X, X))
    if not np.isfinite(norms.sum()):
        if not np.isfinite(X).all():
            raise ValueError("contexts contain NaN or infinite values")
        norms = np.linalg.norm(X, axis=-1)  # huge but finite entries: no overflow
    big = norms > 1.0
    if big.any():
        X[big] /= norms[big][..., None]
    return X


def clip_rewards(r: ArrayLike, link: Link, c_r: float) -> FloatArray:
    """Clip rewards into the link's range (linear [−c_r, c_r], logistic [0, 1], Poisson [0, c_r]).

    >>> from .links import get_link
    >>> clip_rewards([2.0, -3.0], get_link("linear"), 1.0).tolist()
    [1.0, -1.0]
    """
    r = np.asarray(r, dtype=np.float64)
    if not np.isfinite(r).all():
        raise ValueError("rewards contain NaN or infinite values")
    lo, hi = link.reward_range(c_r)
    clipped: FloatArray = np.clip(r, lo, hi)
    return clipped


def clip_gradients(G: ArrayLike, R: float) -> FloatArray:
    """g ← g·min(1, R/‖g‖) row-wise (a new array).

    >>> clip_gradients([[3.0, 4.0], [0.0, 0.0]], 2.0).tolist()
    [[1.2, 1.6], [0.0, 0.0]]
    """
    G = np.array(G, dtype=np.float64)
    norms = np.sqrt(np.einsum("...i,...i->...", G, G))
    big = norms > R
    if big.any():
        G[big] *= (R / norms[big])[..., None]
    return G
