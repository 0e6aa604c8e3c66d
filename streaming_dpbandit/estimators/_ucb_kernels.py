"""Compiled per-event kernels of the per-arm ridge models (:class:`~..policies.linucb_disjoint.
LinUCBDisjoint` deciding and learning one event per call), when numba is here.

One event costs a few thousand flops at d = 20: what it spends is the Python and numpy call
overhead of a dozen small array operations. Each kernel does one step's arithmetic in one call
on the policy's preallocated arrays — the UCB scores of a shared-context decision set and
their argmax, the square-root Sherman–Morrison step of one arm's model, one row's rank-1
update of its sums — with the same formulas as the numpy path (:func:`.ucb_model.factor_step`,
the GEMM scores). Only the summation order differs (loops, one GEMV instead of a GEMM), i.e.
rounding in the last bits (``tests/policies/test_linucb.py`` compares both paths).

numba is optional (the ``dev`` and ``reproduce`` extras install it): :func:`load` returns None
without it, or with ``DPBANDIT_NO_NUMBA=1``, and the policy keeps its numpy path. The kernels
are loaded (and numba imported) on first use, not when the package is imported; compiled code
is cached next to this file when its ``__pycache__`` is writable.
"""

from __future__ import annotations

import importlib
import math
import os
import types
from typing import Any

import numpy as np

__all__ = ["load"]

_loaded: types.SimpleNamespace | bool | None = False  # False: not tried yet


def load() -> types.SimpleNamespace | None:
    """The compiled kernels (``score_argmax``, ``factor_step``, ``add_row``), or None without
    numba (or with ``DPBANDIT_NO_NUMBA`` set); compiled once per process."""
    global _loaded
    if _loaded is False:
        _loaded = _compile()
    return _loaded if isinstance(_loaded, types.SimpleNamespace) else None


def _compile() -> types.SimpleNamespace | None:
    if os.environ.get("DPBANDIT_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        numba: Any = importlib.import_module("numba")
    except ImportError:
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    cache_dir = os.path.join(here, "__pycache__")
    cache = os.access(cache_dir if os.path.isdir(cache_dir) else here, os.W_OK)
    jit = numba.njit(cache=cache, nogil=True)
    return types.SimpleNamespace(
        score_argmax=jit(score_argmax), factor_step=jit(factor_step), add_row=jit(add_row)
    )


def score_argmax(x: Any, P: Any, wid: Any) -> int:
    """The arm (position) of the largest UCB score θ_kᵀx + β_k‖C_k⁻¹x‖ of K arms sharing the
    context ``x`` (d,), their models side by side in ``P`` = [C_1⁻ᵀ | θ_1 | … | C_K⁻ᵀ | θ_K]
    (d, K·(d + 1)) and their widths ``wid`` (K,): one GEMV (BLAS, as the numpy path's GEMM),
    then the scores in a loop; the first maximum (``ties="lowest"``); -1 when the scores' sum
    is not finite (the numpy path's check)."""
    K = wid.shape[0]
    d = x.shape[0]
    y = np.dot(x, P)
    best = -np.inf
    arm = 0
    total = 0.0
    for k in range(K):
        o = k * (d + 1)
        sq = 0.0
        for j in range(o, o + d):
            sq += y[j] * y[j]
        sc = math.sqrt(sq) * wid[k] + y[o + d]
        total += sc
        if sc > best:
            best = sc
            arm = k
    if not math.isfinite(total):
        return -1
    return arm


def factor_step(pt: Any, a: int, x: Any, y: float) -> float:
    """:func:`.ucb_model.factor_step` on ``pt[a]`` in place: the model [M | θ] of V, u moved to
    V + xxᵀ, u + y·x; returns log(1 + xᵀV⁻¹x)."""
    d = x.shape[0]
    P = pt[a]
    w = np.zeros(d + 1)  # xᵀP = [Mᵀx, xᵀθ]
    for i in range(d):
        xi = x[i]
        for j in range(d + 1):
            w[j] += xi * P[i, j]
    s = 0.0
    for j in range(d):
        s += w[j] * w[j]
    q = math.sqrt(1.0 + s)
    c = -1.0 / (q * (1.0 + q))
    b = np.empty(d + 1)
    for j in range(d):
        b[j] = w[j] * c
    b[d] = (y - w[d]) / (1.0 + s)
    for i in range(d):  # P += (Mz) bᵀ, Mz computed row by row before the row changes
        mz = 0.0
        for j in range(d):
            mz += P[i, j] * w[j]
        for j in range(d + 1):
            P[i, j] += mz * b[j]
    return math.log1p(s)


def add_row(G: Any, u: Any, a: int, x: Any, y: float) -> bool:
    """G[a] += xxᵀ and u[a] += y·x, when x and y are finite (their sum is); else nothing
    changes and False."""
    d = x.shape[0]
    tot = y
    for i in range(d):
        tot += x[i]
    if not math.isfinite(tot):
        return False
    Ga = G[a]
    for i in range(d):
        xi = x[i]
        for j in range(d):
            Ga[i, j] += xi * x[j]
        u[a, i] += y * xi
    return True
