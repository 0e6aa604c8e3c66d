"""Clipping: the step that turns assumed bounds into enforced bounds (DESIGN §2).

Every function rejects non-finite input (NaN or infinity cannot be clipped into a bound; the
stream layer dead-letters such events before they get here) and returns how many values it
changed, so the caller can count clipped inputs as a metric without ever logging values.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["clip_coordinates", "clip_norm", "clip_scalar"]


def _check_finite(x: npt.NDArray[np.float64], what: str) -> None:
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what} contains NaN or infinite values; refusing to clip")


def clip_coordinates(x: npt.ArrayLike, bound: float) -> tuple[npt.NDArray[np.float64], int]:
    """Clip every coordinate into ``[-bound, bound]``.

    Returns the clipped array (float64, a new array) and the number of coordinates changed.

    >>> clip_coordinates([0.5, -3.0, 2.0], 1.0)
    (array([ 0.5, -1. ,  1. ]), 2)
    """
    if not bound > 0:
        raise ValueError("bound must be positive")
    arr = np.asarray(x, dtype=np.float64)
    _check_finite(arr, "input")
    out = np.clip(arr, -bound, bound)
    return out, int(np.count_nonzero(out != arr))


def clip_scalar(y: npt.ArrayLike, bound: float) -> tuple[npt.NDArray[np.float64], int]:
    """Clip scalars (e.g. rewards) into ``[-bound, bound]``: ``min(R, max(-R, z))``.

    This is the spec's form (FLIPHAT §2), safe at ``z = 0`` unlike ``z·min(1, R/|z|)``.

    >>> clip_scalar([0.0, 5.0, -0.2], 1.0)
    (array([ 0. ,  1. , -0.2]), 1)
    """
    return clip_coordinates(y, bound)


def clip_norm(
    x: npt.ArrayLike, bound: float, ord: float = 2
) -> tuple[npt.NDArray[np.float64], int]:
    """Scale each row (last axis) down so that its ``ord``-norm is at most ``bound``.

    >>> out, n = clip_norm([[3.0, 4.0], [0.3, 0.4]], 1.0)
    >>> out.round(3).tolist(), n
    ([[0.6, 0.8], [0.3, 0.4]], 1)
    """
    if not bound > 0:
        raise ValueError("bound must be positive")
    arr = np.asarray(x, dtype=np.float64)
    _check_finite(arr, "input")
    norms = np.linalg.norm(arr, ord=ord, axis=-1, keepdims=True)
    factor = np.ones_like(norms)
    big = norms > bound
    factor[big] = bound / norms[big]
    changed = int(np.count_nonzero(factor < 1.0))
    return arr * factor, changed
