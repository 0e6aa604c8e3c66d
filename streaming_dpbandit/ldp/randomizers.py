"""Build report payloads from bounded private inputs (LDP-GLB spec §4.1, §4.2, §5, §6).

One vectorised function serves the client SDK (one report) and the simulations (many): given the
model spec, the phase, the public θ̂ the decision used, and per report the chosen arm, the
pre-processed context x (‖x‖ ≤ 1) and the clipped reward r, it returns the privatised payloads.

* SGD block: g = (μ(xᵀθ̂_a) − r)·x at the **same** θ̂ used for the decision, clipped to ‖g‖ ≤ R,
  then Ψ_{ε_b, R}.
* OLS block: (ut(xxᵀ + W), r·x + ξ), layout [packed matrix (d(d+1)/2), vector (d)].
* Multi-parameter main phase: K blocks in arm order; the pulled arm's block privatises its data,
  every other block is the synthetic ψ(0, 0) of the same form (Ψ(0) for SGD, pure noise for
  OLS), so the server cannot tell which arm was pulled. ``joint``: one Ψ over e_a ⊗ g ∈ R^{dK}.
* Multi-parameter warm-up: one block for the public schedule's arm.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray
from .gaussian import GaussianOLSMechanism
from .l2_ball import L2BallMechanism
from .links import get_link
from .model import ModelSpec
from .preprocess import clip_gradients

if TYPE_CHECKING:
    from ..privacy.noise import NoiseGenerator

#: The mechanism of a (block kind, phase): the ℓ2 ball (``sgd``) or the Gaussian (``ols``).
Mechanism: TypeAlias = L2BallMechanism | GaussianOLSMechanism

__all__ = ["build_payloads", "gradients", "l2_mechanism", "ols_mechanism"]


def l2_mechanism(spec: ModelSpec, phase: str) -> L2BallMechanism:
    """The ℓ2-ball mechanism of one phase's blocks."""
    eps_b, _ = spec.block_privacy(phase)
    R = cast(float, spec.R)  # ModelSpec.__post_init__ replaces None by 2·c_r
    return L2BallMechanism(eps_b, R, spec.ball_dimension(phase), radius=spec.radius(phase))


def ols_mechanism(spec: ModelSpec, phase: str) -> GaussianOLSMechanism:
    """The Gaussian mechanism of one phase's OLS blocks."""
    m_std, v_std = spec.ols_stds(phase)
    return GaussianOLSMechanism(spec.d, m_std, v_std)


def gradients(spec: ModelSpec, X: FloatArray, r: FloatArray, theta: FloatArray) -> FloatArray:
    """Clipped SGD gradients (μ(xᵀθ̂) − r)·x, one per row; ``theta`` is (d,) or (n, d)."""
    s = X @ theta if theta.ndim == 1 else np.einsum("ij,ij->i", X, theta)
    if spec.score_clip is not None:
        s = np.clip(s, -spec.score_clip, spec.score_clip)
    G = (get_link(spec.link).mean(s) - r)[:, None] * X
    return clip_gradients(G, cast(float, spec.R))  # None is replaced in __post_init__


def build_payloads(
    spec: ModelSpec,
    phase: str,
    theta: FloatArray,
    arms: ArrayLike | None,
    X: ArrayLike,
    r: ArrayLike,
    rng: NoiseGenerator,
    mechanisms: MutableMapping[tuple[str, str], Any] | None = None,
) -> FloatArray:
    """Privatised payloads (n, ``spec.payload_size(phase)``).

    Parameters
    ----------
    spec, phase
        The model and the phase the decisions were made in.
    theta
        The published θ̂ the decisions used: (d,) single-param, (K, d) multi-param.
    arms
        Chosen arms (n,) (multi-param; ignored in single-param).
    X, r
        Pre-processed contexts of the chosen arms (n, d) and clipped rewards (n,).
    mechanisms
        Optional cache ``{(kind, phase): mechanism}`` (saves re-deriving constants per call).

    Examples
    --------
    >>> import numpy as np
    >>> spec = ModelSpec(variant="sgd", setting="multi", d=2, K=3, epsilon=1.0)
    >>> P = build_payloads(spec, "main", np.zeros((3, 2)), np.array([1]),
    ...                    np.array([[0.6, 0.8]]), np.array([1.0]), np.random.default_rng(0))
    >>> P.shape, np.round(np.linalg.norm(P.reshape(3, 2), axis=1) / spec.radius(), 12).tolist()
    ((1, 6), [1.0, 1.0, 1.0])
    """
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    r = np.atleast_1d(np.asarray(r, dtype=np.float64))
    n, d = X.shape
    if d != spec.d or r.shape != (n,):
        raise ValueError(f"expected X of shape (n, {spec.d}) and r of shape (n,)")
    kind = spec.block_variant(phase)
    cache = mechanisms if mechanisms is not None else {}
    key = (kind, phase)
    mech = cache.get(key)
    if mech is None:
        mech = cache[key] = (l2_mechanism if kind == "sgd" else ols_mechanism)(spec, phase)
    # the cache holds the mechanism of the block kind: the ℓ2 ball for sgd, else the Gaussian
    l2 = cast(L2BallMechanism, mech)
    ols = cast(GaussianOLSMechanism, mech)
    if spec.setting == "single":
        if kind == "sgd":
            return l2.privatize(gradients(spec, X, r, theta), rng)
        M, u = ols.privatize(X, r, rng)
        return np.concatenate([M, u], axis=1)
    arms = np.asarray(arms, dtype=np.int64).reshape(n)
    if np.any((arms < 0) | (arms >= spec.K)):
        raise ValueError("arm out of range")
    theta = np.asarray(theta, dtype=np.float64).reshape(spec.K, spec.d)
    if phase == "warmup":  # one block, the public schedule's arm
        if kind == "sgd":
            return l2.privatize(gradients(spec, X, r, theta[arms]), rng)
        M, u = ols.privatize(X, r, rng)
        return np.concatenate([M, u], axis=1)
    K = spec.K
    rows = np.arange(n)
    if kind == "sgd":
        g = gradients(spec, X, r, theta[arms])
        if spec.joint(phase):  # e_a ⊗ g through one Ψ in dimension dK
            G = np.zeros((n, K, d))
            G[rows, arms] = g
            return l2.privatize(G.reshape(n, K * d), rng)
        G = np.zeros((n, K, d))  # ψ(0, 0) = Ψ(0) for every other arm
        G[rows, arms] = g
        return l2.privatize(G.reshape(n * K, d), rng).reshape(n, K * d)
    Xb = np.zeros((n, K, d))
    rb = np.zeros((n, K))
    Xb[rows, arms] = X
    rb[rows, arms] = r
    M, u = ols.privatize(Xb.reshape(n * K, d), rb.reshape(n * K), rng)
    return np.concatenate([M, u], axis=1).reshape(n, K * (spec.p + d))
