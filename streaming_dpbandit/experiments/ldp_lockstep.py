"""Lock-step simulation of LDP-GLB's E1: all seeds, ε values and profiles of a method at once.

The reference path (:func:`~.runner.run_repetition`) steps one policy object per (seed, method,
ε) round by round. At d = 2 nearly all of its ~90 µs per round and method is Python overhead,
so the spec's E1 (T = 10⁶, 20 seeds, both profiles) costs about a CPU-day. Here the replicas
of a method — every (seed, ε, profile) of the run — are the rows of a few arrays, and one round
costs one set of numpy calls for all of them.

**Same algorithms, constants and streams.** Each replica is built from the product's policy
object that the reference path would build (same class, parameters and seed) and reads from
it everything it needs: the calibrated constants (the ℓ2-ball radius and flip probability,
the OLS noise stds and shift, σ_code, υ_t, β_t), the initial estimates and the tie-breaking
coins. Contexts, θ* and rewards come from the same environment calls on the same streams as
in the reference path (common random numbers across methods).

**The one difference is how report noise is drawn.** The reference path draws it per report
from one generator, mixing uniforms and normals. Here each replica has two streams, one for
uniforms and one for normals (:class:`ReplicaNoise`), drawn a chunk at a time.
``tests/experiments/test_ldp_lockstep.py`` hands the same :class:`ReplicaNoise` to the product
policies of the reference path and checks that both paths choose the same arm in every round and
end with the same regret and estimates (to rounding).

Scope: the single-parameter linear setting of E1 (``ldp-glb`` SGD/OLS in either profile,
``ldp-ucb``, ``ldp-gloc``; per-round model refresh); :func:`supports` says whether a cell
qualifies. Simulation only: nothing here touches a real report.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..envs.base import Environment
from ..ldp.preprocess import normalise_contexts
from ..ldp.randomizers import l2_mechanism
from ..policies._ldp_baseline import upsilon
from ..policies.ldp_gloc import MU_MIN
from ..policies.ldp_ucb import ucb_beta
from ..privacy.noise import NoiseSource
from ..utils.hashing import splitmix64, uniform_coins
from . import _ldp_kernels
from .runner import RunSpec, SimulationResult, _seed, build_policy, chunk_rows

__all__ = ["ReplicaNoise", "run_lockstep", "supports"]

_QSCALE = 65536.0  # the LDP-OLS accumulator grid 2⁻¹⁶ (estimators/ldp_ols.py)


class ReplicaNoise:
    """Report noise of one simulated replica: uniforms and normals from two separate streams.

    A stand-in for the ``numpy.random.Generator`` the policies draw their report noise from
    (``random``, ``standard_normal``, ``normal``). With separate streams, drawing a chunk of
    rounds at once gives the same numbers as drawing round by round.

    Parameters
    ----------
    seed
        The policy's seed (the reference path's per-repetition policy seed).
    name
        The policy's name (stream label).

    Examples
    --------
    >>> a, b = ReplicaNoise(7, "ldp-ucb"), ReplicaNoise(7, "ldp-ucb")
    >>> block = a.standard_normal((3, 2))
    >>> one_by_one = np.vstack([b.standard_normal((1, 2)) for _ in range(3)])
    >>> bool((block == one_by_one).all())
    True
    """

    def __init__(self, seed: int, name: str):
        fam = NoiseSource(seed).family(name, "lockstep")
        self._uniform = fam.generator("uniform")
        self._normal = fam.generator("normal")
        self._zero = fam.generator("zero-input")

    def random(self, size=None) -> np.ndarray:
        return self._uniform.random(size)

    def standard_normal(self, size=None) -> np.ndarray:
        return self._normal.standard_normal(size)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size=None) -> np.ndarray:
        return loc + scale * self._normal.standard_normal(size)

    def zero_input_directions(self, n: int, d: int) -> np.ndarray:
        """Normals for the ℓ2-ball's zero-input case (a probability-zero event in E1)."""
        return self._zero.standard_normal((n, d))


def supports(env, specs: list[RunSpec]) -> bool:
    """Whether the lock-step path can run this cell (E1's single-parameter linear setting, d = 2).

    >>> from streaming_dpbandit.envs.ldp_glb import LDPSingleParamEnv
    >>> from streaming_dpbandit.experiments.runner import RunSpec
    >>> spec = RunSpec("LDP-UCB ε=1", "ldp-ucb", {"d": 2, "n_arms": 10}, 100)
    >>> supports(LDPSingleParamEnv(2, 10), [spec]), supports(LDPSingleParamEnv(3, 10), [spec])
    (True, False)
    """
    if getattr(env, "name", "") != "ldp-glb-single" or env.reward_model != "linear":
        return False
    if env.d != 2:  # the 2 × 2 algebra below
        return False
    for s in specs:
        p = s.params
        if p.get("d") != 2 or p.get("n_arms", env.K) != env.K:
            return False
        if p.get("setting", "single") != "single" or p.get("refresh_every", 1) != 1:
            return False
        if p.get("context_scale", 1.0) != 1.0:
            return False
        if p.get("link", "linear") != "linear":
            return False
        if s.policy == "ldp-glb":
            if p.get("variant", "sgd") not in ("sgd", "ols") or p.get("batch_size", 1) != 1:
                return False
        elif s.policy == "ldp-gloc":
            if p.get("profile", "spec") != "spec":
                return False
        elif s.policy != "ldp-ucb":
            return False
    return True


# -- small exact helpers on stacks of 2 × 2 symmetric matrices (d = 2 in E1) -----------------------
def _sym_inverse(a, b, c, floor):
    """Inverses of [[a, b], [b, c]] (arrays); not positive definite → eigenvalues floored.

    Computed as the product's ``cho_solve(cho_factor(A), I)`` does (A = UᵀU, then two
    triangular solves with the pivots' reciprocals), so the entries agree with it to rounding:
    bit for bit except the (0, 0) entry (where LAPACK fuses a multiply-add), and for diagonal
    A (θ̂ = 0 at the start) everywhere. Like the product's, the result need not be exactly
    symmetric. Returns (p, q, r, s) with inverse [[p, q], [r, s]] and the floored rows.
    """
    if (a > 0.0).all():
        u11 = np.sqrt(a)
        i11 = 1.0 / u11
        u12 = b * i11
        piv = c - u12 * u12
        if (piv > 0.0).all():  # positive definite: the Cholesky path
            i22 = 1.0 / np.sqrt(piv)
            s = i22 * i22
            r = (-(u12 * i11) * i22) * i22
            q = (-u12 * s) * i11
            p = (i11 - u12 * r) * i11
            return p, q, r, s, np.zeros(a.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        u11 = np.sqrt(a)
        i11 = 1.0 / u11
        u12 = b * i11
        piv = c - u12 * u12
        i22 = 1.0 / np.sqrt(piv)
        s = i22 * i22
        r = (-(u12 * i11) * i22) * i22
        q = (-u12 * s) * i11
        p = (i11 - u12 * r) * i11
    bad = ~((a > 0.0) & (piv > 0.0))
    if bad.any():
        A = np.empty((int(bad.sum()), 2, 2))
        A[:, 0, 0], A[:, 0, 1], A[:, 1, 0], A[:, 1, 1] = a[bad], b[bad], b[bad], c[bad]
        lam, Q = np.linalg.eigh(A)
        lam = np.maximum(lam, np.maximum(floor[bad], 1e-12)[:, None])
        inv = (Q / lam[:, None, :]) @ np.swapaxes(Q, 1, 2)
        p[bad], q[bad], r[bad], s[bad] = inv[:, 0, 0], inv[:, 0, 1], inv[:, 1, 0], inv[:, 1, 1]
    return p, q, r, s, bad


def _outer_packed(x, out) -> None:
    """Rows' xxᵀ packed as (0,0), (0,1), (1,1) into the first three columns of ``out``."""
    x0, x1 = x[:, 0], x[:, 1]
    np.multiply(x0, x0, out=out[:, 0])
    np.multiply(x0, x1, out=out[:, 1])
    np.multiply(x1, x1, out=out[:, 2])


def _project(theta, S) -> None:
    """Π_S row-wise in place (θ·1 = θ where ‖θ‖ ≤ S), as ``estimators.ldp_sgd.project_l2``."""
    nrm = np.sqrt(np.einsum("rd,rd->r", theta, theta))
    over = nrm > S
    if over.any():
        theta *= np.where(over, S / nrm, 1.0)[:, None]


def _apply(inv, U, out) -> None:
    """Rows of [[p, q], [r, s]] @ U, into ``out``."""
    p, q, r, s = inv
    u0, u1 = U[:, 0], U[:, 1]
    np.add(p * u0, q * u1, out=out[:, 0])
    np.add(r * u0, s * u1, out=out[:, 1])


def _argmax_ties(scores, t, keys):
    """Row-wise argmax; exact ties broken by the policies' hashed coins of round t, as the
    product's ``argmax_ties_by_coins`` does."""
    ties = scores == scores.max(axis=1, keepdims=True)
    out = ties.argmax(axis=1)
    if np.count_nonzero(ties) == scores.shape[0]:
        return out
    for r in np.flatnonzero(ties.sum(axis=1) > 1).tolist():
        cand = np.flatnonzero(ties[r])
        coin = float(uniform_coins(keys[r], np.array([t], dtype=np.int64))[0])
        out[r] = cand[min(int(coin * cand.size), cand.size - 1)]
    return out


# -- the method groups ---------------------------------------------------------------------------
class _Group:
    """R replicas of one policy class (a block of rows of the run's replica arrays).

    Chunk arrays are round-major: ``draw`` leaves (n, R, k) noise, ``learn`` reads row j.
    """

    def __init__(self, policies, noises):
        for p in policies:
            p._state()
        self.policies = policies
        self.noises = noises
        self.R = len(policies)
        self.normalise = np.zeros(self.R, dtype=bool)

    def _noise_block(self, n: int, k: int) -> np.ndarray:
        return np.stack([z.standard_normal((n, k)) for z in self.noises], axis=1)

    def _distinct(self, key) -> tuple[list, np.ndarray]:
        """Distinct constant sets among the replicas (one per ε here) and each row's index."""
        keys: list = []
        idx = np.empty(self.R, dtype=np.int64)
        for i, p in enumerate(self.policies):
            k = key(p)
            if k not in keys:
                keys.append(k)
            idx[i] = keys.index(k)
        return keys, idx

    def counters(self, i: int) -> dict:
        return {}

    #: The attributes that a chunk of rounds changes (saved before a compiled chunk).
    _STATE: tuple[str, ...] = ()

    def snapshot(self) -> list:
        return [np.copy(getattr(self, a)) for a in self._STATE]

    def restore(self, saved: list) -> None:
        for a, v in zip(self._STATE, saved):
            cur = getattr(self, a)
            if isinstance(cur, np.ndarray):
                cur[...] = v  # in place: the index groups' scoring state is a view
            else:
                setattr(self, a, v.item())

    def kernel(self, common: tuple, n: int) -> int:
        """Run the drawn chunk of n rounds with the compiled kernel (:mod:`._ldp_kernels`);
        ``common`` = (XC, src, MS, ES, noisy, best, seeds, t0, kmix, regret) of this group's
        rows. Non-zero: a case the kernel leaves to the numpy path (the state is then partly
        updated: restore a snapshot)."""
        raise NotImplementedError

    # what every method's group implements
    def draw(self, n: int, d: int) -> None:
        raise NotImplementedError

    def learn(self, x, r, j: int) -> None:
        raise NotImplementedError

    def refresh(self) -> None:
        raise NotImplementedError

    def scores(self, X, out) -> None:
        raise NotImplementedError

    def rewards(self, r):
        return r


class _LDPGLBGroup(_Group):
    """LDP-SGD and LDP-OLS (policy ``ldp-glb``), single-parameter, either profile."""

    def __init__(self, policies, noises):
        super().__init__(policies, noises)
        specs = [p._spec for p in policies]
        self.normalise = np.array([s.normalise for s in specs])
        self.clip = np.array([s.clip_reward for s in specs])
        self.c_r = np.array([s.c_r if s.clip_reward else np.inf for s in specs])
        self.theta = np.vstack([p._server.theta for p in policies]).astype(np.float64)
        self.clipped = np.zeros(self.R, dtype=np.int64)

    def scores(self, X, out) -> None:
        np.einsum("rkd,rd->rk", X, self.theta, out=out)

    def rewards(self, r):
        if not self.clip.any():
            return r
        out = np.minimum(np.maximum(r, -self.c_r), self.c_r)
        changed = out != r
        if changed.any():
            self.clipped += changed
        return out

    def counters(self, i: int) -> dict:
        return {"clipped_rewards": int(self.clipped[i])}


class _SGDGroup(_LDPGLBGroup):
    def __init__(self, policies, noises):
        super().__init__(policies, noises)
        specs = [p._spec for p in policies]
        mechs = [l2_mechanism(s, "main") for s in specs]
        sgds = [p._server._arms[0] for p in policies]
        self.R_clip = np.array([s.R for s in specs])
        self.two_R = 2.0 * self.R_clip
        self.radius = np.array([m.radius for m in mechs])
        self.two_radius = 2.0 * self.radius
        self.flip = np.array([m.flip_probability for m in mechs])
        sc = np.array([np.inf if s.score_clip is None else s.score_clip for s in specs])
        self.score_clip = sc if np.isfinite(sc).any() else None
        self.c0 = np.array([g.c0 for g in sgds])
        self.n0 = np.array([g.n0 for g in sgds])
        self.lam = np.array([g.weight_decay for g in sgds])[:, None]
        self.S = np.array([np.inf if g.S is None else g.S for g in sgds])
        self.n = 0

    _STATE = ("theta", "clipped", "n")

    def kernel(self, common: tuple, n: int) -> int:
        sc = self.score_clip
        code = _ldp_kernels.sgd_chunk(
            *common,
            self.theta,
            self.c_r,
            self.clipped,
            np.zeros(self.R) if sc is None else sc,
            sc is not None,
            self.R_clip,
            self.two_R,
            self.radius,
            self.two_radius,
            self.flip,
            self.c0,
            self.n0,
            np.ascontiguousarray(self.lam[:, 0]),
            bool(self.lam.any()),
            self.S,
            self.n,
            self.U,
            self.Z,
        )
        if code == 0:
            self.n += n
        return int(code)

    def draw(self, n: int, d: int) -> None:
        self.U = np.stack([z.random((n, 2)) for z in self.noises], axis=1)  # (n, R, 2) coins
        self.Z = self._noise_block(n, d)  # (n, R, d) directions

    def learn(self, x, r, j: int) -> None:
        theta = self.theta
        s = np.einsum("rd,rd->r", x, theta)
        if self.score_clip is not None:
            s = np.minimum(np.maximum(s, -self.score_clip), self.score_clip)
        G = (s - r)[:, None] * x
        norms = np.sqrt(np.einsum("rd,rd->r", G, G))
        big = norms > self.R_clip
        if big.any():  # clip_gradients (g·1 = g elsewhere), then Ψ re-measures the norms
            G *= np.where(big, self.R_clip / norms, 1.0)[:, None]
            norms = np.sqrt(np.einsum("rd,rd->r", G, G))
        # the ℓ2-ball mechanism Ψ_{ε,R} (ldp/l2_ball.py), row-wise with per-row constants
        if norms.all():
            u = G / norms[:, None]
        else:  # Ψ(0): a uniform direction (probability zero in E1)
            zero = norms == 0.0
            u = G / np.where(zero, 1.0, norms)[:, None]
            for i in np.flatnonzero(zero).tolist():
                w = self.noises[i].zero_input_directions(1, x.shape[1])[0]
                u[i] = w / np.linalg.norm(w)
        c = self.U[j]
        u *= np.where(c[:, 0] < 0.5 + norms / self.two_R, 1.0, -1.0)[:, None]
        z = self.Z[j]
        zn = np.sqrt(np.einsum("rd,rd->r", z, z))
        dots = np.einsum("rd,rd->r", z, u) / zn
        wrong = (dots > 0.0) != (c[:, 1] >= self.flip)
        z = z * (self.radius / zn)[:, None]
        z -= np.where(wrong, self.two_radius * dots, 0.0)[:, None] * u  # reflect (z − 0 = z)
        # the server: projected SGD step (estimators/ldp_sgd.py)
        self.n += 1
        eta = (self.c0 / (self.n + self.n0))[:, None]
        if self.lam.any():
            theta -= eta * (z + self.lam * theta)
        else:
            theta -= eta * z
        _project(theta, self.S)

    def refresh(self) -> None:  # the published θ̂ is the current iterate
        pass


class _OLSGroup(_LDPGLBGroup):
    def __init__(self, policies, noises):
        super().__init__(policies, noises)
        specs = [p._spec for p in policies]
        stds = [s.ols_stds("main") for s in specs]
        ols = [p._server._arms[0] for p in policies]
        self.std = np.array([[m, m, m, v, v] for m, v in stds])  # matrix (3), vector (2)
        self.c_tilde = np.array([o.c_tilde for o in ols])
        self.shifted = self.c_tilde > 0
        self.S = np.array([np.inf if o.S is None else o.S for o in ols])
        # the server solves at t = reports + 1 with the authors' noise (ldp_server._solve)
        self.t_offset = np.array([1.0 if s.ols_noise == "code" else 0.0 for s in specs])
        self.Q = np.zeros((self.R, 5), dtype=np.int64)  # V packed (0,0), (0,1), (1,1); U
        self.P = np.empty((self.R, 5))
        self.count = 0
        self.fallbacks = np.zeros(self.R, dtype=np.int64)

    _STATE = ("theta", "clipped", "Q", "count", "fallbacks")

    def kernel(self, common: tuple, n: int) -> int:
        code = _ldp_kernels.ols_chunk(
            *common,
            self.theta,
            self.c_r,
            self.clipped,
            self.Q,
            self.std,
            self.N,
            self.c_tilde,
            self.shifted,
            self.t_offset,
            self.S,
            self.count,
        )
        if code == 0:
            self.count += n
        return int(code)

    def draw(self, n: int, d: int) -> None:
        self.N = self._noise_block(n, 5)

    def learn(self, x, r, j: int) -> None:
        P = self.P
        _outer_packed(x, P)
        np.multiply(x, r[:, None], out=P[:, 3:])
        P += self.std * self.N[j]
        P *= _QSCALE
        self.Q += np.rint(P).astype(np.int64)
        self.count += 1

    def refresh(self) -> None:
        F = self.Q / _QSCALE
        a, b, c, U = F[:, 0], F[:, 1], F[:, 2], F[:, 3:]
        shift = self.c_tilde * np.sqrt(self.count + self.t_offset)  # 0 where unshifted
        a = a + shift
        c = c + shift
        det = a * c - b * b
        theta = np.empty((self.R, 2))
        if det.all():
            np.divide(c * U[:, 0] - b * U[:, 1], det, out=theta[:, 0])
            np.divide(a * U[:, 1] - b * U[:, 0], det, out=theta[:, 1])
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                theta[:, 0] = (c * U[:, 0] - b * U[:, 1]) / det
                theta[:, 1] = (a * U[:, 1] - b * U[:, 0]) / det
        pd = (a > 0.0) & (det > 0.0)
        bad = (self.shifted & ~pd) | (det == 0.0) if not pd.all() else None
        if bad is not None and bad.any():
            for i in np.flatnonzero(bad).tolist():
                A = np.array([[a[i], b[i]], [b[i], c[i]]])
                self.fallbacks[i] += 1
                if self.shifted[i]:
                    lam, Q = np.linalg.eigh(A)
                    theta[i] = Q @ ((Q.T @ U[i]) / np.maximum(lam, shift[i] / 2.0))
                else:
                    theta[i] = np.linalg.lstsq(A, U[i], rcond=None)[0]
        _project(theta, self.S)
        self.theta = theta

    def counters(self, i: int) -> dict:
        return {**super().counters(i), "ols_pd_fallbacks": int(self.fallbacks[i])}


class _IndexGroup(_Group):
    """LDP-UCB and LDP-GLOC: a centre θ plus β_t times the (V + c_t I)⁻¹ width.

    The index groups of a run keep their scoring state (the inverse's four entries, the centre
    and β) in views of shared arrays (:class:`_IndexScores`), which score all their rows in
    one pass.
    """

    def __init__(self, policies, noises):
        super().__init__(policies, noises)
        self.d = policies[0].d
        self.reports = 0
        v0 = np.array([p.v0 for p in policies])
        self.V = np.zeros((self.R, 3))  # packed (0,0), (0,1), (1,1)
        self.V[:, 0] = v0
        self.V[:, 2] = v0
        self.P = np.empty((self.R, 3))
        self._tab_start = 1
        self._tab = np.empty((0, 2, self.R))
        self._table: Any = None  # the compiled tabulation of _pair (compile_constants)

    def _ran(self, code: int, n: int) -> int:
        """A kernel's return code; on success (0) its ``n`` rounds of reports are counted."""
        if code == 0:
            self.reports += n
        return int(code)

    def compile_constants(self) -> None:
        """Tabulate (c_t, β_t) with the product's functions compiled (:mod:`._ldp_kernels`)."""
        self._table = _compiled_table(type(self))

    _keys: list  # the distinct constant sets (set by each method's constructor)
    _idx: np.ndarray  # each row's index into _keys

    @staticmethod
    def _pair(key, t) -> tuple[float, float]:
        """(c_t, β_t) of one constant set at round t (per method)."""
        raise NotImplementedError

    def _init_centre(self) -> None:
        raise NotImplementedError

    def attach(self, inv, centre, beta) -> None:
        """Use views of the shared scoring arrays; then compute the first model."""
        self.inv, self.centre, self.beta = inv, centre, beta
        self._init_centre()
        self.refresh()

    def _constants(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(c_t, β_t) per row, from the product's functions, tabulated 4,096 rounds at a time."""
        i = t - self._tab_start
        if not 0 <= i < self._tab.shape[0]:
            self._tab_start, i = t, 0
            if self._table is not None:
                per_key = np.array([self._table(k, t, 4096) for k in self._keys])
            else:
                per_key = np.array(
                    [[self._pair(k, u) for u in range(t, t + 4096)] for k in self._keys]
                )
            self._tab = np.ascontiguousarray(per_key[self._idx].transpose(1, 2, 0))  # (n, 2, R)
        return self._tab[i, 0], self._tab[i, 1]

    def _constants_block(self, t: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(c_u, β_u) for u = t, …, t + n − 1 as (n, R) arrays: what n calls of
        :meth:`_constants` return, copied from its table."""
        out = np.empty((2, n, self.R))
        j = 0
        while j < n:
            self._constants(t + j)  # tabulates from t + j when the table does not cover it
            i = t + j - self._tab_start
            m = min(n - j, self._tab.shape[0] - i)
            out[:, j : j + m] = self._tab[i : i + m].transpose(1, 0, 2)
            j += m
        return out[0], out[1]

    def _gram(self, x, noise, sigma) -> None:
        P = self.P
        _outer_packed(x, P)
        P += sigma * noise
        self.V += P

    def _invert(self, c) -> tuple:
        V = self.V
        inv = _sym_inverse(V[:, 0] + c, V[:, 1], V[:, 2] + c, c / 2.0)[:4]
        for k in range(4):
            self.inv[k, :, 0] = inv[k]
        return inv


class _IndexScores:
    """Scores of every index row (LDP-UCB, LDP-GLOC) in one pass."""

    def __init__(self, R: int):
        self.inv = np.zeros((4, R, 1))
        self.centre = np.zeros((R, 2))
        self.beta = np.zeros(R)

    def views(self, sl: slice) -> tuple:
        return self.inv[:, sl], self.centre[sl], self.beta[sl]

    def scores(self, X, out) -> None:
        # x_aᵀA⁻¹x_a summed in the product's order (its einsum), so that near-ties at θ̂ = 0
        # (unit contexts, A⁻¹ ∝ I) resolve alike
        X0, X1 = X[..., 0], X[..., 1]
        p, q, r, s = self.inv
        quad = X0 * p * X0 + X0 * q * X1 + X1 * r * X0 + X1 * s * X1
        np.einsum("rkd,rd->rk", X, self.centre, out=out)
        np.maximum(quad, 0.0, out=quad)
        np.sqrt(quad, out=quad)
        quad *= self.beta[:, None]
        out += quad


class _UCBGroup(_IndexGroup):
    def __init__(self, policies, noises):
        super().__init__(policies, noises)
        self.sigma = np.array([p._sigma for p in policies])[:, None]
        self._keys, self._idx = self._distinct(lambda p: (p._sigma, p.d, p.horizon, p.alpha))
        self.U = np.zeros((self.R, 2))

    _STATE = ("V", "U", "reports", "inv", "centre", "beta")

    def kernel(self, common: tuple, n: int) -> int:
        ct, bt = self._constants_block(self.reports + 2, n)  # refresh after round j's report
        code = _ldp_kernels.ucb_chunk(
            *common, self.inv[:, :, 0], self.centre, self.beta, self.V, self.U,
            np.ascontiguousarray(self.sigma[:, 0]), self.N, ct, bt,
        )  # fmt: skip
        return self._ran(code, n)

    @staticmethod
    def _pair(key, t):
        sigma, d, horizon, alpha = key
        ups, beta = ucb_beta(sigma, t, d, horizon, alpha)
        return 2.0 * ups, beta

    def _init_centre(self) -> None:
        pass

    def draw(self, n: int, d: int) -> None:
        self.N = self._noise_block(n, 5)

    def learn(self, x, r, j: int) -> None:
        N = self.N[j]
        self._gram(x, N[:, :3], self.sigma)
        self.U += x * r[:, None] + self.sigma * N[:, 3:]
        self.reports += 1

    def refresh(self) -> None:
        c, beta = self._constants(self.reports + 1)
        self.beta[:] = beta
        _apply(self._invert(c), self.U, self.centre)


class _GLOCGroup(_IndexGroup):
    def __init__(self, policies, noises):
        super().__init__(policies, noises)
        self.sigma = np.array([p._sigma for p in policies])[:, None]
        self.grad_sigma = np.array([p._grad_sigma for p in policies])[:, None]
        self.sqrt_T = np.array([math.sqrt(p.horizon) for p in policies])[:, None]
        self._keys, self._idx = self._distinct(
            lambda p: (p._sigma_s, p.d, p.horizon, p.alpha, MU_MIN[p.link])
        )
        self.u = np.zeros((self.R, 2))
        self.theta_h = np.vstack([p._theta_h for p in policies])

    _STATE = ("V", "u", "theta_h", "reports", "inv", "centre", "beta")

    def kernel(self, common: tuple, n: int) -> int:
        ct, bt = self._constants_block(self.reports + 2, n)
        code = _ldp_kernels.gloc_chunk(
            *common, self.inv[:, :, 0], self.centre, self.beta, self.V, self.u, self.theta_h,
            np.ascontiguousarray(self.sigma[:, 0]), np.ascontiguousarray(self.grad_sigma[:, 0]),
            np.ascontiguousarray(self.sqrt_T[:, 0]), self.N, ct, bt,
        )  # fmt: skip
        return self._ran(code, n)

    @staticmethod
    def _pair(key, t):
        ss, d, T, a, mu_min = key
        return 2.0 * upsilon(ss, t, d, T, a), math.sqrt((ss / mu_min) * math.sqrt(d * t))

    def _init_centre(self) -> None:
        self.centre[:] = np.vstack([p._theta for p in self.policies])

    def draw(self, n: int, d: int) -> None:
        self.N = self._noise_block(n, 7)  # matrix (3), vector (2), gradient (2)

    def learn(self, x, r, j: int) -> None:
        N = self.N[j]
        self._gram(x, N[:, :3], self.sigma)
        s = np.einsum("rd,rd->r", x, self.theta_h)
        self.u += s[:, None] * x + self.sigma * N[:, 3:5]
        grad = (np.minimum(np.maximum(s, -5.0), 5.0) - r)[:, None] * x
        grad += self.grad_sigma * N[:, 5:]
        self.theta_h -= grad / self.sqrt_T
        self.reports += 1

    def refresh(self) -> None:
        c, beta = self._constants(self.reports + 1)
        self.beta[:] = beta
        inv = self._invert(c)
        if self.reports > 0:
            _apply(inv, self.u, self.centre)


_TABLES: dict = {}


def _compiled_table(cls: type) -> Any:
    """The compiled ``table(key, t, n)`` of ``cls._pair`` (once per process): the product's
    ``upsilon`` and ``ucb_beta`` compiled from their own code."""
    if cls not in _TABLES:
        ups = _ldp_kernels.compile_pure(upsilon)
        glob = {"upsilon": ups, "ucb_beta": _ldp_kernels.compile_pure(ucb_beta, upsilon=ups)}
        pair = _ldp_kernels.compile_pure(cls._pair, **glob)  # type: ignore[attr-defined]
        _TABLES[cls] = _ldp_kernels.table_kernel(pair)
    return _TABLES[cls]


def _group_kind(spec: RunSpec) -> str:
    if spec.policy == "ldp-glb":
        return spec.params.get("variant", "sgd")
    return {"ldp-ucb": "ucb", "ldp-gloc": "gloc"}[spec.policy]


_GROUPS = {"sgd": _SGDGroup, "ols": _OLSGroup, "ucb": _UCBGroup, "gloc": _GLOCGroup}


def _constants_only(spec: RunSpec) -> RunSpec:
    """The spec of a policy object used for its constants only (never stepped): no ring of
    undelivered rounds to allocate."""
    if spec.policy != "ldp-glb":
        return spec
    return dataclasses.replace(spec, params={**spec.params, "pending_capacity": 1})


def _first_round_records(env, spec: RunSpec, pseed: int, X0: np.ndarray, mu0, eps0) -> list:
    """The reference path's release records of repetition 0 (its first refit's record)."""
    pol = build_policy(spec, pseed)
    dec = pol.decide(X0[None])
    a = dec.arms
    pol.learn(X0[a], env.rewards(mu0[a], eps0[a]), dec.rounds)
    return [r.to_dict() for r in pol.refit()] if pol.refit_due() else []


# -- the driver ------------------------------------------------------------------------------------
def _run_kernels(groups: list[_Group], slices: list[slice], common: tuple, n: int) -> bool:
    """Run a drawn chunk of n rounds of every group with the compiled kernels.

    ``common`` = (XC, src, MS, ES, noisy, best, seed_rows, t0, kmix, regret) of all rows. False
    (with every group's state as before) when a kernel met a case left to the numpy path.
    """
    saved = [g.snapshot() for g in groups]
    XC, src, MS, ES, noisy, best, seed_rows, t0, kmix, regret = common
    for g, sl in zip(groups, slices):
        rows = (XC, src[sl], MS, ES, noisy, best, seed_rows[sl], t0, kmix[sl], regret[:, sl])
        if g.kernel(rows, n) != 0:
            for h, v in zip(groups, saved):
                h.restore(v)
            return False
    return True


_COUNTER: Any = None  # a multiprocessing.Value shared with the workers


def _init_worker(counter) -> None:
    global _COUNTER
    _COUNTER = counter


def _tick(x: float) -> None:
    with _COUNTER.get_lock():
        _COUNTER.value += x


#: Method classes in row order (the index groups last and adjacent: one scoring pass).
_ORDER = ("sgd", "ols", "ucb", "gloc")


def _run_reps(args) -> dict:
    env_factory, cells, reps, base_seed, grid, horizon, progress, classes, kernels = args
    if progress == "shared":
        progress = _tick
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - optional
        pass
    envs = [env_factory(base_seed + rep) for rep in reps]
    S = len(reps)
    ctx_rngs = [np.random.Generator(np.random.PCG64(_seed(base_seed, r, "contexts"))) for r in reps]
    noise_rngs = [
        np.random.Generator(np.random.PCG64(_seed(base_seed, r, "reward-noise"))) for r in reps
    ]
    # replicas: every (cell, spec, repetition), grouped by method; rows of one set of arrays
    members: dict[str, list] = {}
    for cell, specs in cells.items():
        for spec in specs:
            for i, rep in enumerate(reps):
                seq = _seed(base_seed, rep, "policy", spec.key)
                pseed = int(seq.generate_state(1, np.uint32)[0])
                kind = _group_kind(spec)
                if kind in classes:
                    members.setdefault(kind, []).append((cell, spec, i, rep, pseed))
    groups: list[_Group] = []
    mems: list[list] = []
    slices: list[slice] = []
    row = 0
    for kind in _ORDER:
        if kind not in members:
            continue
        mem = members[kind]
        cls = _GROUPS[kind]
        pols = [build_policy(_constants_only(spec), pseed) for _c, spec, _i, _r, pseed in mem]
        noises = [ReplicaNoise(pseed, p.name) for p, m in zip(pols, mem) for pseed in [m[4]]]
        groups.append(cls(pols, noises))
        mems.append(mem)
        slices.append(slice(row, row + len(mem)))
        row += len(mem)
    R = row
    index = [(g, sl) for g, sl in zip(groups, slices) if isinstance(g, _IndexGroup)]
    plain = [(g, sl) for g, sl in zip(groups, slices) if not isinstance(g, _IndexGroup)]
    if index:
        if kernels:
            for ig, _sl in index:
                ig.compile_constants()
        idx_sl = slice(index[0][1].start, index[-1][1].stop)
        shared = _IndexScores(idx_sl.stop - idx_sl.start)
        for ig, sl in index:
            ig.attach(*shared.views(slice(sl.start - idx_sl.start, sl.stop - idx_sl.start)))
    seed_rows = np.array([m[2] for mem in mems for m in mem], dtype=np.int64)
    normalise = np.concatenate([g.normalise for g in groups])
    keys = [p._coin_key() for g in groups for p in g.policies]
    kmix = splitmix64(np.array([k & 0xFFFFFFFFFFFFFFFF for k in keys], dtype=np.uint64))
    ldp = [isinstance(g, _LDPGLBGroup) for g in groups]
    K, d = envs[0].K, envs[0].d
    chunk = chunk_rows(envs[0])
    cum = np.zeros(R)
    curves = np.zeros((R, int(np.count_nonzero(grid <= horizon))))
    base = np.arange(R) * K
    seed_flat = seed_rows * K
    src = seed_rows + S * normalise
    scores = np.empty((R, K))
    records: dict = {}
    t0 = 0
    while t0 < horizon:
        n = min(chunk, horizon - t0)
        XS = np.empty((n, S, K, d))
        MS = np.empty((n, S, K))
        ES = np.empty((n, S, K))
        for i, env in enumerate(envs):  # the reference path's environment calls, per seed
            Xi = env.contexts(ctx_rngs[i], n)
            XS[:, i] = Xi
            MS[:, i] = env.mean_rewards(Xi)
            ES[:, i] = env.reward_noise(noise_rngs[i], n)
        if t0 == 0 and 0 in reps:
            i0 = reps.index(0)
            for mem in mems:
                for cell, spec, _i, rep, pseed in mem:
                    if rep == 0:
                        records[(cell, spec.key)] = _first_round_records(
                            envs[i0], spec, pseed, XS[0, i0], MS[0, i0], ES[0, i0]
                        )
        # per seed, not per replica: a replica's contexts are row src[i] of [raw; normalised]
        XC = np.concatenate([XS, normalise_contexts(XS)], axis=1) if normalise.any() else XS
        E = ES if ES.any() else None
        best = MS.max(axis=2)
        for g in groups:
            g.draw(n, d)
        regret = np.empty((n, R))
        common = (XC, src, MS, ES, E is not None, best, seed_rows, t0, kmix, regret)
        compiled = kernels and _run_kernels(groups, slices, common, n)
        t = t0
        for j in range(0 if compiled else n):  # the numpy path
            t += 1
            Xj = XC[j].take(src, axis=0)  # (R, K, d)
            for g, sl in plain:
                g.scores(Xj[sl], scores[sl])
            if index:
                shared.scores(Xj[idx_sl], scores[idx_sl])
            arms = _argmax_ties(scores, t, keys)
            mu = MS[j].take(seed_flat + arms)
            regret[j] = best[j].take(seed_rows) - mu
            r = mu + E[j].take(seed_flat + arms) if E is not None else mu
            x = Xj.reshape(R * K, d).take(base + arms, axis=0)
            for g, sl, is_ldp in zip(groups, slices, ldp):
                g.learn(x[sl], g.rewards(r[sl]) if is_ldp else r[sl], j)
                g.refresh()
        c = np.cumsum(regret, axis=0) + cum
        sel = grid[(grid > t0) & (grid <= t0 + n)]
        first = int(np.count_nonzero(grid <= t0))
        curves[:, first : first + sel.size] = c[sel - t0 - 1].T
        cum = c[-1].copy()
        t0 += n
        if progress is not None:
            progress(S * n / horizon)
    out: dict = {}
    for g, mem, sl in zip(groups, mems, slices):
        for k, (cell, spec, _i, rep, _pseed) in enumerate(mem):
            counters = g.counters(k)
            if isinstance(g, _LDPGLBGroup):
                counters = {"reports": horizon, "expired_feedback": 0, **counters}
                counters.setdefault("ols_pd_fallbacks", 0)
            out[(cell, spec.key, rep)] = {
                "curve": curves[sl.start + k],
                "final": float(cum[sl.start + k]),
                "records": records.get((cell, spec.key), []),
                "counters": counters,
            }
    return out


def run_lockstep(
    env_factory: Callable[[int], Environment],
    cells: dict[str, list[RunSpec]],
    seeds: int,
    base_seed: int,
    grid: np.ndarray,
    jobs: int = 1,
    progress: Callable[[float], object] | None = None,
    kernels: bool | None = None,
) -> dict[str, SimulationResult]:
    """Run E1 cells (name → specs, one horizon) on ``seeds`` repetitions, in lock-step.

    Repetition r uses ``env_factory(base_seed + r)`` and the reference path's streams and
    policy seeds. ``jobs`` > 1 runs up to ``jobs`` processes: the compiled path splits the
    repetitions, the numpy path (whose cost is per round, not per replica) the methods, each
    process then simulating every repetition's environment; results do not depend on ``jobs``.
    ``kernels``: run the rounds with the compiled kernels of :mod:`._ldp_kernels` (default:
    when numba is installed) or on the numpy path (False); the results are bit-identical.
    """
    if kernels is None:
        kernels = _ldp_kernels.AVAILABLE
    elif kernels and not _ldp_kernels.AVAILABLE:
        raise ValueError("kernels=True needs numba (pip install 'streaming_dpbandit[reproduce]')")
    start = time.perf_counter()
    horizon = max(s.horizon for specs in cells.values() for s in specs)
    if any(s.horizon != horizon for specs in cells.values() for s in specs):
        raise ValueError("the lock-step path runs every spec to the same horizon")
    env0 = env_factory(base_seed)
    for specs in cells.values():
        if not supports(env0, specs):
            raise ValueError("the lock-step path supports E1's single-parameter linear cells only")
    kinds = [k for k in _ORDER if any(_group_kind(s) == k for v in cells.values() for s in v)]
    reps = list(range(seeds))
    if kernels:  # compiled, the cost is per replica and round: split the repetitions
        n_parts = min(max(1, jobs), seeds)
        parts = [(reps[i::n_parts], kinds) for i in range(n_parts)]
    else:  # the numpy loop's cost is per round, not per row: split by method, not by seed
        parts = [(reps, part) for part in _partition(kinds, max(1, jobs))]
    share = sum(len(r) for r, _k in parts) / seeds  # progress counted per part and repetition
    results: dict = {}
    if len(parts) == 1:
        results.update(
            _run_reps(
                (env_factory, cells, reps, base_seed, grid, horizon, progress, kinds, kernels)
            )
        )
    else:
        ctx = mp.get_context("fork")
        counter = ctx.Value("d", 0.0)
        with cf.ProcessPoolExecutor(
            len(parts), mp_context=ctx, initializer=_init_worker, initargs=(counter,)
        ) as ex:
            futs = [
                ex.submit(
                    _run_reps,
                    (env_factory, cells, r, base_seed, grid, horizon, "shared", part, kernels),
                )
                for r, part in parts
            ]
            seen = 0.0
            pending = set(futs)
            while pending:
                done, pending = cf.wait(pending, timeout=0.5)
                if progress is not None:
                    v = counter.value / share
                    progress(v - seen)
                    seen = v
                for f in done:
                    results.update(f.result())
    elapsed = time.perf_counter() - start
    out = {}
    for cell, specs in cells.items():

        def per_rep(key, field, cell=cell):
            return [results[(cell, key, r)][field] for r in range(seeds)]

        out[cell] = SimulationResult(
            env=env0.describe(),
            specs=specs,
            grid=grid,
            curves={s.key: np.vstack(per_rep(s.key, "curve")) for s in specs},
            finals={s.key: np.array(per_rep(s.key, "final")) for s in specs},
            records={s.key: _records(results[(cell, s.key, 0)]["records"]) for s in specs},
            counters={s.key: results[(cell, s.key, 0)]["counters"] for s in specs},
            seeds=seeds,
            base_seed=base_seed,
            elapsed_s=elapsed,
        )
    return out


#: Relative cost per round of each method's part of the loop (measured), for splitting jobs.
_COST = {"sgd": 1.0, "ols": 0.7, "ucb": 0.8, "gloc": 0.9}


def _partition(kinds: list[str], jobs: int) -> list[list[str]]:
    """Split the method kinds into at most ``jobs`` parts of similar cost (greedy)."""
    parts: list[list[str]] = [[] for _ in range(min(jobs, len(kinds)) or 1)]
    load = [0.0] * len(parts)
    for k in sorted(kinds, key=lambda k: -_COST[k]):
        i = load.index(min(load))
        parts[i].append(k)
        load[i] += _COST[k]
    return [sorted(p, key=_ORDER.index) for p in parts if p]


def _records(dicts: list[dict]) -> list:
    from ..privacy.ledger import ReleaseRecord

    return [ReleaseRecord.from_dict(x) for x in dicts]
