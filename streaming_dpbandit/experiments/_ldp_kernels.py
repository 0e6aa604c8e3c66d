"""Compiled chunk kernels of the lock-step E1 engine (:mod:`.ldp_lockstep`), when numba is here.

Each kernel runs one method group's replicas through a whole chunk of rounds — score the arms,
choose one (exact ties broken by the policies' hashed coins), the regret, the reward, the
report's noise and the server's update — with the same floating-point operations, in the same
order, as the engine's numpy path, so the results are bit-identical
(``tests/experiments/test_ldp_lockstep.py`` compares both paths). What the numpy path does by
a slow branch (the ℓ2-ball's zero input, a 2 × 2 Gram matrix that is not positive definite, an
OLS fallback, a NaN score) the kernels do not: they return a non-zero code and the engine
re-runs that chunk on the numpy path from a snapshot of the state.

numba is optional (the ``dev`` and ``reproduce`` extras install it): without it
:data:`AVAILABLE` is false and the engine uses its numpy path. ``DPBANDIT_NO_NUMBA=1`` forces
that path. Compiled code is cached next to this file (``__pycache__``) when that directory is
writable, else not at all.
"""

from __future__ import annotations

import importlib
import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "AVAILABLE",
    "BAIL",
    "compile_pure",
    "gloc_chunk",
    "ols_chunk",
    "sgd_chunk",
    "table_kernel",
    "ucb_chunk",
]

#: The return code of a kernel that met a case it leaves to the numpy path.
BAIL = 1

numba: Any
try:
    if os.environ.get("DPBANDIT_NO_NUMBA", "") not in ("", "0"):
        raise ImportError("DPBANDIT_NO_NUMBA is set")
    numba = importlib.import_module("numba")
except ImportError:
    numba = None

#: Whether the compiled kernels are available (numba installed and not disabled).
AVAILABLE = numba is not None


def _cache_ok() -> bool:
    """Cache compiled code only where numba would put it: this package's ``__pycache__``."""
    here = os.path.dirname(os.path.abspath(__file__))
    cache = os.path.join(here, "__pycache__")
    return os.access(cache if os.path.isdir(cache) else here, os.W_OK)


def _jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    if numba is None:
        return fn
    return numba.njit(cache=_cache_ok(), nogil=True)(fn)


def compile_pure(fn: Callable[..., Any], **compiled: Any) -> Any:
    """numba-compile a pure scalar function of the package from its own code object (one
    source of truth), with the global names in ``compiled`` bound to compiled functions.

    The product's constants (``ucb_beta``, ``upsilon``) use +, −, ×, ÷, ``math.sqrt`` and
    ``math.log`` only, which compiled code evaluates as CPython does (IEEE double, the same
    libm); the tests compare the tables of both.
    """
    if numba is None:
        raise ImportError("numba is not installed")
    glob = {**fn.__globals__, **compiled}
    clone = types.FunctionType(fn.__code__, glob, fn.__name__, fn.__defaults__, fn.__closure__)
    return numba.njit(clone)


def table_kernel(pair: Any) -> Any:
    """A compiled ``table(key, t, n)``: the (n, 2) array of ``pair(key, u)`` for u = t, …,
    t + n − 1, ``pair`` being compiled (:func:`compile_pure`)."""
    if numba is None:
        raise ImportError("numba is not installed")

    @numba.njit
    def table(key, t, n):
        out = np.empty((n, 2))
        for j in range(n):
            a, b = pair(key, t + j)
            out[j, 0] = a
            out[j, 1] = b
        return out

    return table


# uint64 constants of utils.hashing (SplitMix64)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S11, _S27, _S30, _S31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)


@_jit
def _splitmix(x):
    z = x + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@_jit
def _argmax_coin(sc, t, kmix):
    """``_argmax_ties`` of one row: the first maximum, or among exact ties the one chosen by
    ``uniform_coins(key, [t])`` (``kmix`` = SplitMix64(key)); -1 for a NaN score."""
    K = sc.shape[0]
    m = sc[0]
    for k in range(K):
        if sc[k] != sc[k]:
            return -1
        if sc[k] > m:
            m = sc[k]
    first = -1
    count = 0
    for k in range(K):
        if sc[k] == m:
            if first < 0:
                first = k
            count += 1
    if count == 1:
        return first
    h = _splitmix(_splitmix(np.uint64(t)) ^ kmix)
    coin = float(h >> _S11) * (1.0 / 9007199254740992.0)
    pick = min(int(coin * count), count - 1)
    for k in range(K):
        if sc[k] == m:
            if pick == 0:
                return k
            pick -= 1
    return first  # not reached


@_jit
def _index_scores(X, inv, centre, beta, i, sc):
    """``_IndexScores.scores`` of row i: centre score plus β times the clipped width."""
    p, q, r, s = inv[0, i], inv[1, i], inv[2, i], inv[3, i]
    c0, c1, b = centre[i, 0], centre[i, 1], beta[i]
    for k in range(X.shape[0]):
        x0, x1 = X[k, 0], X[k, 1]
        quad = x0 * p * x0 + x0 * q * x1 + x1 * r * x0 + x1 * s * x1
        quad = np.sqrt(max(quad, 0.0)) * b
        sc[k] = (x0 * c0 + x1 * c1) + quad
    return 0


@_jit
def _invert_pd(a, b, c):
    """``_sym_inverse``'s Cholesky path for one row; ok = False where it is not positive
    definite (the numpy path floors the eigenvalues there)."""
    if not a > 0.0:
        return False, 0.0, 0.0, 0.0, 0.0
    u11 = np.sqrt(a)
    i11 = 1.0 / u11
    u12 = b * i11
    piv = c - u12 * u12
    if not piv > 0.0:
        return False, 0.0, 0.0, 0.0, 0.0
    i22 = 1.0 / np.sqrt(piv)
    s = i22 * i22
    r = (-(u12 * i11) * i22) * i22
    q = (-u12 * s) * i11
    p = (i11 - u12 * r) * i11
    return True, p, q, r, s


# copy kept: the per-round steps written out (shared helpers: 1.8-2.3x slower, d5282cf)
@_jit
def sgd_chunk(
    XC, src, MS, ES, noisy, best, seeds, t0, kmix, regret,
    theta, c_r, clipped, score_clip, has_score_clip, R_clip, two_R, radius, two_radius, flip,
    c0, n0, lam, has_lam, S, n_start, U, Z,
):  # fmt: skip
    """A chunk of LDP-SGD rounds (``_SGDGroup.learn``) for every row of the group."""
    n, K = XC.shape[0], XC.shape[2]
    sc = np.empty(K)
    for j in range(n):  # round-major: a round's contexts and noise stay in cache
        for i in range(theta.shape[0]):
            th0, th1 = theta[i, 0], theta[i, 1]
            X = XC[j, src[i]]
            for k in range(K):
                sc[k] = X[k, 0] * th0 + X[k, 1] * th1
            a = _argmax_coin(sc, t0 + j + 1, kmix[i])
            if a < 0:
                return BAIL
            mu = MS[j, seeds[i], a]
            regret[j, i] = best[j, seeds[i]] - mu
            r = mu + ES[j, seeds[i], a] if noisy else mu
            rc = min(max(r, -c_r[i]), c_r[i])
            if rc != r:
                clipped[i] += 1
            r = rc
            x0, x1 = X[a, 0], X[a, 1]
            s = x0 * th0 + x1 * th1
            if has_score_clip:
                s = min(max(s, -score_clip[i]), score_clip[i])
            g0, g1 = (s - r) * x0, (s - r) * x1
            nrm = np.sqrt(g0 * g0 + g1 * g1)
            if nrm > R_clip[i]:
                f = R_clip[i] / nrm
                g0, g1 = g0 * f, g1 * f
                nrm = np.sqrt(g0 * g0 + g1 * g1)
            if nrm == 0.0:  # Ψ(0): the numpy path draws a uniform direction
                return BAIL
            u0, u1 = g0 / nrm, g1 / nrm
            if not U[j, i, 0] < 0.5 + nrm / two_R[i]:
                u0, u1 = u0 * -1.0, u1 * -1.0
            z0, z1 = Z[j, i, 0], Z[j, i, 1]
            zn = np.sqrt(z0 * z0 + z1 * z1)
            dots = (z0 * u0 + z1 * u1) / zn
            w = two_radius[i] * dots if (dots > 0.0) != (U[j, i, 1] >= flip[i]) else 0.0
            f = radius[i] / zn
            z0, z1 = z0 * f - w * u0, z1 * f - w * u1
            eta = c0[i] / ((n_start + j + 1) + n0[i])
            if has_lam:
                th0, th1 = th0 - eta * (z0 + lam[i] * th0), th1 - eta * (z1 + lam[i] * th1)
            else:
                th0, th1 = th0 - eta * z0, th1 - eta * z1
            nrm = np.sqrt(th0 * th0 + th1 * th1)
            if nrm > S[i]:
                f = S[i] / nrm
                th0, th1 = th0 * f, th1 * f
            theta[i, 0], theta[i, 1] = th0, th1
    return 0


# copy kept: the per-round steps written out (shared helpers: 1.8-2.3x slower, d5282cf)
@_jit
def ols_chunk(
    XC, src, MS, ES, noisy, best, seeds, t0, kmix, regret,
    theta, c_r, clipped, Q, std, N, c_tilde, shifted, t_offset, S, count_start,
):  # fmt: skip
    """A chunk of LDP-OLS rounds (``_OLSGroup.learn`` and ``refresh``) for every row."""
    n, K = XC.shape[0], XC.shape[2]
    sc = np.empty(K)
    P = np.empty(5)
    for j in range(n):  # round-major: a round's contexts and noise stay in cache
        for i in range(theta.shape[0]):
            th0, th1 = theta[i, 0], theta[i, 1]
            X = XC[j, src[i]]
            for k in range(K):
                sc[k] = X[k, 0] * th0 + X[k, 1] * th1
            a = _argmax_coin(sc, t0 + j + 1, kmix[i])
            if a < 0:
                return BAIL
            mu = MS[j, seeds[i], a]
            regret[j, i] = best[j, seeds[i]] - mu
            r = mu + ES[j, seeds[i], a] if noisy else mu
            rc = min(max(r, -c_r[i]), c_r[i])
            if rc != r:
                clipped[i] += 1
            r = rc
            x0, x1 = X[a, 0], X[a, 1]
            P[0], P[1], P[2], P[3], P[4] = x0 * x0, x0 * x1, x1 * x1, x0 * r, x1 * r
            for k in range(5):
                Q[i, k] += np.int64(np.rint((P[k] + std[i, k] * N[j, i, k]) * 65536.0))
            # refresh: the server's solve at t = count (+ 1 with the authors' noise)
            shift = c_tilde[i] * np.sqrt((count_start + j + 1) + t_offset[i])
            a_ = Q[i, 0] / 65536.0 + shift
            b_ = Q[i, 1] / 65536.0
            c_ = Q[i, 2] / 65536.0 + shift
            v0, v1 = Q[i, 3] / 65536.0, Q[i, 4] / 65536.0
            det = a_ * c_ - b_ * b_
            pd = a_ > 0.0 and det > 0.0
            if (shifted[i] and not pd) or det == 0.0:  # the numpy path's fallbacks
                return BAIL
            th0 = (c_ * v0 - b_ * v1) / det
            th1 = (a_ * v1 - b_ * v0) / det
            nrm = np.sqrt(th0 * th0 + th1 * th1)
            if nrm > S[i]:
                f = S[i] / nrm
                th0, th1 = th0 * f, th1 * f
            theta[i, 0], theta[i, 1] = th0, th1
    return 0


# copy kept: the per-round steps written out (shared helpers: 1.8-2.3x slower, d5282cf)
@_jit
def ucb_chunk(
    XC, src, MS, ES, noisy, best, seeds, t0, kmix, regret,
    inv, centre, beta, V, Uv, sigma, N, CT, BT,
):  # fmt: skip
    """A chunk of LDP-UCB rounds (``_UCBGroup.learn`` and ``refresh``); CT, BT: (c_t, β_t)
    of each round's refresh."""
    n, K = XC.shape[0], XC.shape[2]
    sc = np.empty(K)
    for j in range(n):
        for i in range(V.shape[0]):
            sg = sigma[i]
            X = XC[j, src[i]]
            _index_scores(X, inv, centre, beta, i, sc)
            a = _argmax_coin(sc, t0 + j + 1, kmix[i])
            if a < 0:
                return BAIL
            mu = MS[j, seeds[i], a]
            regret[j, i] = best[j, seeds[i]] - mu
            r = mu + ES[j, seeds[i], a] if noisy else mu
            x0, x1 = X[a, 0], X[a, 1]
            V[i, 0] += x0 * x0 + sg * N[j, i, 0]
            V[i, 1] += x0 * x1 + sg * N[j, i, 1]
            V[i, 2] += x1 * x1 + sg * N[j, i, 2]
            Uv[i, 0] += x0 * r + sg * N[j, i, 3]
            Uv[i, 1] += x1 * r + sg * N[j, i, 4]
            c = CT[j, i]
            ok, p, q, rr, s = _invert_pd(V[i, 0] + c, V[i, 1], V[i, 2] + c)
            if not ok:
                return BAIL
            inv[0, i], inv[1, i], inv[2, i], inv[3, i] = p, q, rr, s
            beta[i] = BT[j, i]
            centre[i, 0] = p * Uv[i, 0] + q * Uv[i, 1]
            centre[i, 1] = rr * Uv[i, 0] + s * Uv[i, 1]
    return 0


# copy kept: the per-round steps written out (shared helpers: 1.8-2.3x slower, d5282cf)
@_jit
def gloc_chunk(
    XC, src, MS, ES, noisy, best, seeds, t0, kmix, regret,
    inv, centre, beta, V, u, theta_h, sigma, grad_sigma, sqrt_T, N, CT, BT,
):  # fmt: skip
    """A chunk of LDP-GLOC rounds (``_GLOCGroup.learn`` and ``refresh``)."""
    n, K = XC.shape[0], XC.shape[2]
    sc = np.empty(K)
    for j in range(n):
        for i in range(V.shape[0]):
            sg, gs = sigma[i], grad_sigma[i]
            X = XC[j, src[i]]
            _index_scores(X, inv, centre, beta, i, sc)
            a = _argmax_coin(sc, t0 + j + 1, kmix[i])
            if a < 0:
                return BAIL
            mu = MS[j, seeds[i], a]
            regret[j, i] = best[j, seeds[i]] - mu
            r = mu + ES[j, seeds[i], a] if noisy else mu
            x0, x1 = X[a, 0], X[a, 1]
            V[i, 0] += x0 * x0 + sg * N[j, i, 0]
            V[i, 1] += x0 * x1 + sg * N[j, i, 1]
            V[i, 2] += x1 * x1 + sg * N[j, i, 2]
            s = x0 * theta_h[i, 0] + x1 * theta_h[i, 1]
            u[i, 0] += s * x0 + sg * N[j, i, 3]
            u[i, 1] += s * x1 + sg * N[j, i, 4]
            e = min(max(s, -5.0), 5.0) - r
            theta_h[i, 0] -= (e * x0 + gs * N[j, i, 5]) / sqrt_T[i]
            theta_h[i, 1] -= (e * x1 + gs * N[j, i, 6]) / sqrt_T[i]
            c = CT[j, i]
            ok, p, q, rr, s2 = _invert_pd(V[i, 0] + c, V[i, 1], V[i, 2] + c)
            if not ok:
                return BAIL
            inv[0, i], inv[1, i], inv[2, i], inv[3, i] = p, q, rr, s2
            beta[i] = BT[j, i]
            centre[i, 0] = p * u[i, 0] + q * u[i, 1]
            centre[i, 1] = rr * u[i, 0] + s2 * u[i, 1]
    return 0
