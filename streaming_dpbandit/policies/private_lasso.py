"""PrivateLASSO-R: the repaired PrivateLASSO (Shukla 2024), PrivateLASSO spec §2, §3 and §5.

The paper's architecture is kept — private support selection at doubling boundaries, private least
squares restricted to the support, greedy argmax, joint DP through the billboard lemma — with every
mechanism recalibrated (spec §3, derivations in ``docs/privacy/private-lasso.md``):

M1  elastic net with a certified ℓ2 sensitivity Δ (:mod:`..estimators.elastic_net`);
M2  SVT "Sparse" on |θ̃_i| over all d coordinates in a fresh data-independent order, σ = Δ√(2c/ρ_b),
    threshold τ = 4λ_N√s̄_pub + a with the margin a = 2σ ln(d/(c − s0)) (:mod:`..privacy.svt`);
M3  Gaussian Gram release on the support, ρ = L̃⁴/(2σ²), L̃² = b_x²c + C_r² (:mod:`..privacy.gram`);
M4  binary-mechanism tree of support Grams (episodic mode, :mod:`..privacy.tree_aggregator`);
M5  PSD shift ν and the trust-region solve (post-processing, :mod:`..estimators.trs`).

Modes. ``forgetful`` (default): boundary ℓ reads only the disjoint block (2^{ℓ−1}, 2^ℓ] (the first
block is [1, 2^l_min]); a slot pays ρ_sel + ρ_ls = ρ once and blocks compose in parallel; the
block's records are erased after the release. ``episodic``: boundary ℓ reads all of [1, 2^ℓ],
releases a noisy snapshot Gram and starts a tree over (2^ℓ, 2^{ℓ+1}] that refreshes θ̂ every
``refresh_every`` sealed leaves; a slot pays ≤ ρ_sel + ρ_snap + ρ_tree = ρ.

``calibration="paper"`` is the literal, *invalid* algorithm, a class of its own
(:class:`~.private_lasso_paper.PrivateLASSOPaper`, simulation only) that the configuration and
:func:`~streaming_dpbandit.policies.policy_class` pick for it.

Spec: docs/specs/privatelasso.md.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Self

import numpy as np

from ..estimators.elastic_net import CertifiedElasticNet
from ..estimators.rowstore import RowStore, quantize_toward_zero
from ..estimators.trs import trs
from ..privacy.contribution import LearnedRounds
from ..privacy.gram import (
    gram_bound,
    gram_rho,
    gram_sigma,
    record_bound,
    secure_sym_gauss_release,
    sym_gauss,
)
from ..privacy.ledger import ReleaseRecord
from ..privacy.noise import NoiseGenerator, NoiseSource, numpy_stream, secure_stream
from ..privacy.statement import PrivacyStatement
from ..privacy.svt import (
    SECURE_SVT_MARGIN,
    SparseVector,
    svt_epsilon0,
    svt_margin,
    svt_rho,
    svt_sigma,
)
from ..privacy.tree_aggregator import TreeAggregator
from ..privacy.zcdp import epsilon_from_rho, rho_from_epsilon_delta, rho_pure, rho_sum
from ..utils.arrays import AnyArray, ArrayLike, BoolArray, FloatArray, IntArray, MaybeArray
from .base import UNBOUNDED, DecisionBatch, Policy, argmax_random_ties
from .registry import register
from .types import AtLeastOne, Ge, Gt, NoiseBackend, NonNegative, OpenUnit, Positive, PositiveInt

__all__ = ["PrivateLASSO", "clip_rows", "random_argmax"]

FORMULA = "privatelasso-r-v1"
MODES = ("forgetful", "episodic")
SUPPORTS = ("svt", "oracle", "full")
PRIVACY_UNIT = "one slot: the K contexts and the reward (or its absence) of one decision"
NEIGHBOURING = (
    "replace the entire data of one slot (all K contexts and the reward, or its absence); "
    "slot indices, episodes and blocks are identical across neighbours"
)
DEFAULT_SPLIT = {
    "forgetful": {"sel": 0.75, "ls": 0.25},
    "episodic": {"sel": 0.5, "snap": 0.25, "tree": 0.25},
}
TIE_RTOL = 1e-12
PAPER_MAX_D = 1024  # the paper variant costs O(d³) per slot (spec §4.2)


def clip_rows(X: FloatArray, clip_coord: float, clip_l2: float) -> tuple[FloatArray, int, int]:
    """clip(x) of spec §2, row-wise on the last axis: coordinates to ±b_x, then ‖x‖₂ to B_x.

    Returns (clipped copy, clipped coordinates, rescaled rows).

    >>> X, nc, nr = clip_rows(np.array([[3.0, 4.0], [0.1, 0.2]]), 2.0, 2.0)
    >>> np.round(X, 4).tolist(), nc, nr
    ([[1.4142, 1.4142], [0.1, 0.2]], 2, 1)
    """
    Xc: FloatArray = np.clip(X, -clip_coord, clip_coord)
    n_coord = int(np.count_nonzero(Xc != X))
    sq = np.einsum("...i,...i->...", Xc, Xc)
    big = sq > clip_l2 * clip_l2
    n_rows = int(np.count_nonzero(big))
    if n_rows:
        factor = np.where(big, clip_l2 / np.sqrt(np.where(big, sq, 1.0)), 1.0)
        Xc *= factor[..., None]
    return Xc, n_coord, n_rows


def random_argmax(scores: FloatArray, coins: FloatArray) -> tuple[IntArray, FloatArray]:
    """Uniform pick among arms within 1e−12·max(1, |max|) of the row maximum (spec §2).

    >>> random_argmax(np.array([[1.0, 1.0 + 1e-15, 0.0]]), np.array([0.9]))
    (array([1]), array([0.5]))
    """
    best = scores.max(axis=1, keepdims=True)
    tol = TIE_RTOL * np.maximum(1.0, np.abs(best))
    with np.errstate(invalid="ignore"):
        near = scores >= best - tol
    adjusted = np.where(near, best, scores)
    return argmax_random_ties(adjusted, coins)


@register
class PrivateLASSO(Policy):
    """PrivateLASSO-R: private sparse linear contextual bandit (ρ-zCDP ⇒ (ε, δ)-JDP).

    Parameters
    ----------
    d
        Dimension of the contexts.
    s0
        Public sparsity of θ.
    horizon
        T_max, the number of slots: fixes the boundary schedule and every noise scale.
    epsilon, delta
        Target (ε, δ); calibration uses ρ = (√(ln(1/δ) + ε) − √(ln(1/δ)))².
    mode
        ``"forgetful"`` (default) or ``"episodic"``.
    clip_coord, clip_l2
        b_x and B_x of clip(x) (B_x = b_x·√nnz_max for sparse features; required).
    reward_bound, theta_bound
        C_r (required) and C_θ.
    support_cap
        c, the SVT cap (default 2·s0; s0 < c < d).
    l_min
        First boundary exponent (default max(8, ⌈log2(10·s0·ln d)⌉)); slots 1..2^l_min are burn-in.
    lambda0, sbar_pub
        λ0 of λ_N = λ0√(2 ln N ln d / N) (default 0.1; 1 for the paper variant) and s̄_pub
        (τ0 = 4λ_N√s̄_pub).
    ridge, solver_slack
        μ and γ of the elastic net.
    rho_split
        Fractions of ρ: ``{"sel", "ls"}`` (forgetful) or ``{"sel", "snap", "tree"}`` (episodic).
    shift_beta, shift_mult
        β and the multiplier of the PSD shift ν (utility only).
    refresh_every
        Episodic mode: recompute θ̂ every this many sealed leaves.
    support
        ``"svt"`` (the algorithm), ``"oracle"`` (S = ``oracle_support`` at every boundary, least
        squares only; simulation only, spec T7) or ``"full"`` (S = [d], no selection: private
        full-dimensional least squares, the dense reference of the dimension experiments).
    oracle_support
        The support used by ``support="oracle"``.
    calibration
        ``"certified"`` (default; spec's ``"repaired"`` is accepted as a synonym) or ``"paper"``
        (the literal algorithm: only :class:`~.private_lasso_paper.PrivateLASSOPaper` takes it).
    allow_invalid_privacy, allow_large, phi2, c_x
        Paper variant only (simulation gate, d ≤ 1024 gate, and its unvalued constants).
    self_check
        Run the solver's a-posteriori residual check and halt when it fails (spec M1, optional).
    bandit_id
        Name in ledger records and noise-stream labels.
    seed
        Seeds the noise key and the tie-break coins (tests and simulation only).
    noise_scale_multiplier
        Multiplies every noise scale. Must stay 1; exists for the privacy audits only.
    noise_backend
        ``"auto"`` (default: ``"secure"``; ``"fast"`` for the paper's literal algorithm),
        ``"fast"`` (numpy floating-point samplers) or ``"secure"``: every Gram release (block
        Gram, snapshot, tree nodes) exact discrete Gaussian on a grid dividing the rows' unit,
        SVT noise discrete Laplace; the ledger's components are then Rényi-only (ρ, no
        continuous PLD). docs/privacy/secure-noise.md.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.envs import MarginEnv
    >>> env = MarginEnv(d=200)
    >>> pol = PrivateLASSO(d=200, s0=5, horizon=2**14, epsilon=256.0, delta=1e-8,
    ...                    **env.public_bounds(), seed=1)
    >>> rng = np.random.default_rng(1)
    >>> records = []
    >>> while pol.t < 2**14:
    ...     if pol.refit_due():
    ...         records += pol.refit()          # persist these before deciding again
    ...     n = min(pol.max_decide_batch(), 2**14 - pol.t)
    ...     X = env.contexts(rng, n)
    ...     dec = pol.decide(X)
    ...     x = X[np.arange(n), dec.arms]
    ...     pol.learn(x, env.mean_rewards(X)[np.arange(n), dec.arms], dec.rounds)
    >>> [r.params["boundary"] for r in records], [r.params["N"] for r in records]
    ([9, 10, 11, 12, 13], [512, 512, 1024, 2048, 4096])
    >>> records[-1].release["support"] == env.support.tolist()
    True
    >>> round(records[-1].rho, 4) == round(pol.rho, 4), pol.counters["clipped_coords"]
    (True, 0)

    """

    name = "private-lasso"
    privacy_unit = PRIVACY_UNIT
    neighbouring = NEIGHBOURING

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        """Small valid constructor parameters (contexts of 3 arms, d=4) for the generic
        checks in ``streaming_dpbandit.checks`` and the tests (the paper's calibration:
        :class:`~.private_lasso_paper.PrivateLASSOPaper`'s)."""
        yield {
            "d": 4,
            "s0": 2,
            "horizon": 512,
            "support_cap": 3,
            "clip_l2": 4.0,
            "reward_bound": 4.0,
        }

    private = True
    #: public bounds without defaults: a configuration states them
    required_in_config = frozenset({"clip_l2", "reward_bound"})

    @classmethod
    def variants(cls) -> dict[tuple[str, object], type]:
        """``calibration="paper"`` builds the paper's literal algorithm (simulation only)."""
        from .private_lasso_paper import PrivateLASSOPaper

        return {("calibration", "paper"): PrivateLASSOPaper}

    def secure_by_default(self) -> bool:
        """The paper's literal calibration has no secure construction."""
        return self.calibration != "paper"

    def simulation_only(self) -> str | None:
        if self.support == "oracle":
            reason = "support=oracle uses the true support and is refused outside mode=simulation"
        elif self.allow_invalid_privacy:
            reason = "allow_invalid_privacy is refused outside mode=simulation"
        else:
            reason = None
        return super().simulation_only() or reason

    #: True for the paper's literal algorithm (:class:`~.private_lasso_paper.PrivateLASSOPaper`,
    #: the class of ``calibration="paper"``).
    literal_paper = False

    # copy kept (~ fliphat.py __init__): River idiom, each constructor stores its own parameters
    def __init__(
        self,
        d: Annotated[int, Gt(1)],
        s0: PositiveInt,
        horizon: Annotated[int, Ge(2)],
        epsilon: Positive = 1.0,
        delta: OpenUnit = 1e-8,
        mode: Literal["forgetful", "episodic"] = "forgetful",
        clip_coord: Positive = 1.0,
        clip_l2: Positive | None = None,
        reward_bound: Positive | None = None,
        theta_bound: Positive = 1.0,
        support_cap: PositiveInt | None = None,
        l_min: AtLeastOne | None = None,
        lambda0: Positive | None = None,
        sbar_pub: Positive = 1.0,
        ridge: Positive = 1.0,
        solver_slack: Positive = 0.05,
        rho_split: dict[str, float] | None = None,
        shift_beta: OpenUnit = 0.05,
        shift_mult: NonNegative = 1.0,
        refresh_every: AtLeastOne = 1,
        support: Literal["svt", "oracle", "full"] = "svt",
        oracle_support: list[int] | None = None,
        calibration: Literal["certified", "repaired", "paper"] = "certified",
        allow_invalid_privacy: bool = False,
        allow_large: bool = False,
        phi2: Positive = 0.5,
        c_x: Positive = 1.0,
        self_check: bool = False,
        bandit_id: str = "default",
        seed: int | None = None,
        noise_scale_multiplier: float = 1.0,
        noise_backend: NoiseBackend = "auto",
    ):
        self.d = d
        self.s0 = s0
        self.horizon = horizon
        self.epsilon = epsilon
        self.delta = delta
        self.mode = mode
        self.clip_coord = clip_coord
        self.clip_l2 = clip_l2
        self.reward_bound = reward_bound
        self.theta_bound = theta_bound
        self.support_cap = support_cap
        self.l_min = l_min
        self.lambda0 = lambda0
        self.sbar_pub = sbar_pub
        self.ridge = ridge
        self.solver_slack = solver_slack
        self.rho_split = rho_split
        self.shift_beta = shift_beta
        self.shift_mult = shift_mult
        self.refresh_every = refresh_every
        self.support = support
        self.oracle_support = oracle_support
        self.calibration = calibration
        self.allow_invalid_privacy = allow_invalid_privacy
        self.allow_large = allow_large
        self.phi2 = phi2
        self.c_x = c_x
        self.self_check = self_check
        self.bandit_id = bandit_id
        self.seed = seed
        self.noise_backend = noise_backend
        self.noise_scale_multiplier = noise_scale_multiplier
        if (calibration == "paper") != self.literal_paper:
            raise ValueError(
                "calibration='paper' is the paper's literal algorithm, class PrivateLASSOPaper "
                "(policies.policy_class('private-lasso', params) picks it)"
                if calibration == "paper"
                else f"PrivateLASSOPaper is calibration='paper', not {calibration!r}"
            )
        if calibration == "paper":  # the literal variant: gated at construction (spec §4)
            if not allow_invalid_privacy:
                raise ValueError(
                    "calibration='paper' has no valid privacy guarantee; it is for simulation "
                    "only and needs allow_invalid_privacy=True"
                )
            if d > PAPER_MAX_D and not allow_large:
                raise ValueError(
                    f"the paper variant costs O(d³) per slot: d ≤ {PAPER_MAX_D} unless allow_large"
                )

    # -- public constants (spec §5.1 "Derived") ------------------------------------------------
    @property
    def cap(self) -> int:
        """c, the SVT cap (the support size bound); d for ``support="full"``."""
        if self.support == "full":
            return self.d
        return int(self.support_cap) if self.support_cap is not None else 2 * self.s0

    @property
    def lmin(self) -> int:
        if self.l_min is not None:
            return int(self.l_min)
        return max(8, math.ceil(math.log2(10.0 * self.s0 * math.log(self.d))))

    @property
    def lmax(self) -> int:
        """l_max = ⌈log2 T_max⌉ − 1."""
        return (int(self.horizon) - 1).bit_length() - 1

    @property
    def n_episodes(self) -> int:
        """n_E = l_max − l_min + 1 boundaries."""
        return self.lmax - self.lmin + 1

    @property
    def rho(self) -> float:
        return rho_from_epsilon_delta(self.epsilon, self.delta)

    @property
    def split(self) -> dict[str, float]:
        split = dict(self.rho_split or DEFAULT_SPLIT[self.mode])
        if self.support != "svt":
            # oracle: LS mechanism only at the svt split (isolates selection); full: all of ρ to LS
            if self.support == "full":
                split = {k: v for k, v in split.items() if k != "sel"}
                total = sum(split.values())
                split = {k: v / total for k, v in split.items()}
            else:
                split = {**split, "sel": 0.0}
        return split

    @property
    def lambda_0(self) -> float:
        return float(self.lambda0) if self.lambda0 is not None else 0.1

    @property
    def _bx(self) -> float:
        """B_x (``clip_l2``): a required public bound (checked by validation)."""
        if self.clip_l2 is None:
            raise ValueError("clip_l2 (B_x) and reward_bound (C_r) are required public bounds")
        return self.clip_l2

    @property
    def _cr(self) -> float:
        """C_r (``reward_bound``): a required public bound (checked by validation)."""
        if self.reward_bound is None:
            raise ValueError("clip_l2 (B_x) and reward_bound (C_r) are required public bounds")
        return self.reward_bound

    @property
    def gram_l2sq(self) -> float:
        """L̃² = b_x²c + C_r² (``full``: min(b_x²d, B_x²) + C_r², both enforced by clip)."""
        if self.support == "full":
            return record_bound(min(self.clip_coord**2 * self.d, self._bx**2), self._cr)
        return gram_bound(self.clip_coord, self.cap, self._cr)

    def elastic_net(self) -> CertifiedElasticNet:
        return CertifiedElasticNet(
            ridge=self.ridge,
            theta_bound=self.theta_bound,
            clip_l2=self._bx,
            reward_bound=self._cr,
            slack=self.solver_slack,
        )

    def lambda_n(self, N: int) -> float:
        """λ_N = λ0·√(2 ln N · ln d / N)."""
        return self.lambda_0 * math.sqrt(2.0 * math.log(N) * math.log(self.d) / N)

    def block(self, ell: int) -> tuple[int, int]:
        """Slots read by boundary ℓ (inclusive): forgetful blocks or episodic histories."""
        if self.mode == "episodic" or ell == self.lmin:
            return 1, 1 << ell
        return (1 << (ell - 1)) + 1, 1 << ell

    @property
    def _svt_margin(self) -> float:
        """The secure backend's rounding term of one SVT run, in units of σ (0 on ``fast``)."""
        return SECURE_SVT_MARGIN if self.noise_backend_in_force == "secure" else 0.0

    def boundary_constants(self, ell: int) -> dict[str, Any]:
        """Every public constant of boundary ℓ (spec §5.2–§5.4)."""
        lo, hi = self.block(ell)
        N = hi - lo + 1
        en = self.elastic_net()
        lam = self.lambda_n(N)
        mult = self.noise_scale_multiplier
        rho, split, nE = self.rho, self.split, self.n_episodes
        out = {
            "boundary": ell,
            "slot": 1 << ell,
            "slots": [lo, hi],
            "N": N,
            "lambda_N": lam,
            "sensitivity0": en.sensitivity0(N),
            "sensitivity": en.sensitivity(N),
            "iterations": en.iterations(N),
            "cap": self.cap,
        }
        if self.support == "svt":
            rho_b = rho * split["sel"] / (nE if self.mode == "episodic" else 1)
            sigma = svt_sigma(en.sensitivity(N), self.cap, rho_b, self._svt_margin)
            a = svt_margin(sigma, self.d, self.cap, self.s0)
            out.update(
                rho_svt=rho_b,
                svt_sigma=sigma * mult,
                svt_sigma_nominal=sigma,
                svt_rounding_margin=self._svt_margin,
                margin=a,
                tau0=4.0 * lam * math.sqrt(self.sbar_pub),
                tau=4.0 * lam * math.sqrt(self.sbar_pub) + a,
            )
        l2sq = self.gram_l2sq
        if self.mode == "forgetful":
            rho_ls = rho * split["ls"]
            out.update(rho_ls=rho_ls, gram_sigma=gram_sigma(l2sq, rho_ls) * mult)
        else:
            rho_snap = rho * split["snap"] / nE
            m = ell + 1
            out.update(
                rho_snap=rho_snap,
                snap_sigma=gram_sigma(l2sq, rho_snap) * mult,
                tree_depth=m,
                rho_tree=rho * split["tree"],
                node_sigma=gram_sigma(l2sq, rho * split["tree"] / m) * mult,
                tree_slots=[hi + 1, min(2 * hi, int(self.horizon))],
            )
        return out

    def shift(self, sigma_tot: float, p: int) -> float:
        """ν = shift_mult·σ_tot·(4√p + 2 ln(2R/β)), R = n_E (forgetful) or T_max (episodic)."""
        R = self.n_episodes if self.mode == "forgetful" else int(self.horizon)
        return (
            self.shift_mult
            * sigma_tot
            * (4.0 * math.sqrt(p) + 2.0 * math.log(2.0 * R / self.shift_beta))
        )

    # -- validation -----------------------------------------------------------------------------
    def _validate(self) -> None:
        if self.calibration not in ("certified", "repaired"):
            raise ValueError("calibration must be 'certified' (alias 'repaired') or 'paper'")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if self.support not in SUPPORTS:
            raise ValueError(f"support must be one of {SUPPORTS}")
        if self.clip_l2 is None or self.reward_bound is None:
            raise ValueError("clip_l2 (B_x) and reward_bound (C_r) are required public bounds")
        if not (self.epsilon > 0 and 0 < self.delta < 1):
            raise ValueError("need epsilon > 0 and 0 < delta < 1")
        if not (self.clip_coord > 0 and self.clip_l2 > 0 and self.reward_bound > 0):
            raise ValueError("clip_coord, clip_l2 and reward_bound must be positive")
        if not (1 <= self.s0 < self.d):
            raise ValueError("need 1 <= s0 < d")
        if self.support == "svt" and not (self.s0 < self.cap < self.d):
            raise ValueError("need s0 < support_cap < d")
        if self.n_episodes < 1:
            raise ValueError(
                f"horizon {self.horizon} leaves no boundary after the burn-in 2^{self.lmin}"
            )
        split = self.rho_split or DEFAULT_SPLIT[self.mode]
        need = set(DEFAULT_SPLIT[self.mode])
        if set(split) != need or abs(sum(split.values()) - 1.0) > 1e-12:
            raise ValueError(f"rho_split needs keys {sorted(need)} summing to 1")
        if any(v <= 0 for v in split.values()):
            raise ValueError("every rho_split fraction must be positive")
        if self.support == "oracle":
            sup = np.asarray(self.oracle_support or [], dtype=np.int64)
            if sup.size == 0 or sup.min() < 0 or sup.max() >= self.d:
                raise ValueError("support='oracle' needs oracle_support indices in [0, d)")
        if self.refresh_every < 1:
            raise ValueError("refresh_every must be >= 1")

    def _warn_weak(self) -> None:
        """Warnings for a valid but weak configuration (at the first round, not in validation)."""
        if self.delta > 1.0 / (10.0 * self.horizon):
            warnings.warn(f"delta={self.delta:g} > 1/(10·T_max): a weak guarantee", stacklevel=3)
        if self.support == "svt" and self._bx >= self.clip_coord * math.sqrt(self.d) / 2:
            warnings.warn(
                "dense features (B_x ≥ b_x√d/2): the selection sensitivity grows like d/N and "
                "support recovery needs very large N (spec P3)",
                stacklevel=3,
            )

    # -- state -----------------------------------------------------------------------------------
    def _state(self) -> Self:
        if not hasattr(self, "_noise"):
            self._validate()
            self._warn_weak()
            self._t = 0
            self._version = 0
            self._next_l = self.lmin
            self._S = np.zeros(0, dtype=np.int64)
            self._theta = np.zeros(0)
            self._stores: dict[int, RowStore] = {}
            self._hist: RowStore | None = None
            self._tree: TreeAggregator | None = None
            self._tree_l = -1
            self._G_hist: FloatArray | None = None
            self._sigma_snap = 0.0
            self._node_sigma = 0.0
            # slot → its quantized leaf (support columns, values, reward), None: absent
            self._pending: dict[int, tuple[IntArray, FloatArray, float] | None] = {}
            #: slots already learned (each slot's record enters its statistics once)
            self._learned = LearnedRounds()
            self._sealed = 0
            self._last_refresh = 0
            self._noise = NoiseSource(self.seed, backend=self.noise_backend_in_force)
            self._coin_key()
            self._counters = {
                "clipped_coords": 0,
                "clipped_norms": 0,
                "clipped_rewards": 0,
                "rows_learned": 0,
                "late_rows": 0,
                "unused_rows": 0,
                "duplicate_rows": 0,
                "absent_slots": 0,
                "boundaries": 0,
            }
        return self

    @property
    def counters(self) -> dict[str, Any]:
        return dict(self._state()._counters)

    @property
    def coefficients(self) -> tuple[IntArray, FloatArray]:
        """The public model: support S (sorted) and θ̂^priv on S."""
        self._state()
        return self._S.copy(), self._theta.copy()

    # -- schedule --------------------------------------------------------------------------------
    def _next_refresh_slot(self) -> int | None:
        """Episodic: the last slot decided with the current θ̂ before the next refresh."""
        if self.mode != "episodic" or self._tree is None:
            return None
        j = self._last_refresh + self.refresh_every
        if j >= (1 << self._tree_l):  # the tree's last leaf: the next boundary takes over
            return None
        return (1 << self._tree_l) + j

    def refit_due(self) -> bool:
        self._state()
        if self._next_l <= self.lmax and self._t >= (1 << self._next_l):
            return True
        slot = self._next_refresh_slot()
        return (
            slot is not None
            and self._t >= slot
            and self._sealed >= self._last_refresh + self.refresh_every
        )

    def max_decide_batch(self) -> int:
        self._state()
        if self.refit_due():
            return 0
        limit = UNBOUNDED
        if self._next_l <= self.lmax:
            limit = (1 << self._next_l) - self._t
        slot = self._next_refresh_slot()
        if slot is not None and slot > self._t:
            limit = min(limit, slot - self._t)
        return limit

    # -- deciding (billboard: public θ̂ and the slot's own contexts only) ------------------------
    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X, rounds = self._decide_batch(X)
        B, K, _ = X.shape
        S = self._S
        if S.size:
            Xc, _, _ = clip_rows(X, self.clip_coord, self._bx)
            scores = Xc[:, :, S] @ self._theta
        else:
            scores = np.zeros((B, K))
        if mask is not None:
            scores = np.where(np.asarray(mask, dtype=bool), scores, -np.inf)
        arms, prop = random_argmax(scores, self._coins(rounds, event_ids))
        self._t += B
        return DecisionBatch(arms, prop, rounds, self._decided_episodes(rounds), self._version)

    def _decided_episodes(self, rounds: IntArray) -> IntArray:
        """The episode a decision reports for each of ``rounds`` (its block)."""
        return self._episode_of(rounds)

    def contribution_windows(self, rounds: ArrayLike) -> IntArray:
        """Forgetful: a slot enters exactly its block's release (boundary ℓ reads only
        (2^{ℓ−1}, 2^ℓ]): the block index. Episodic: every boundary reads all of [1, 2^ℓ], so
        one window for the run (the base class's default)."""
        if self.mode == "forgetful":
            return self._episode_of(rounds)
        return super().contribution_windows(rounds)

    def open_windows_from(self) -> int:
        """Forgetful: blocks below the next boundary are released (their late rows are
        dropped). Episodic: the one window stays open."""
        if self.mode == "forgetful":
            return int(self._state()._next_l)
        return super().open_windows_from()

    def _episode_of(self, rounds: ArrayLike) -> IntArray:
        """Block index ℓ of each slot (l_min for the burn-in block)."""
        r = np.asarray(rounds, dtype=np.int64)
        ell = np.frexp((r - 1).astype(np.float64))[1].astype(np.int64)  # ⌈log2 r⌉ for r ≥ 2
        out: IntArray = np.maximum(ell, self.lmin)
        return out

    # -- learning ----------------------------------------------------------------------------------
    def _clip_records(
        self, contexts: FloatArray, rewards: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        Xc, nc, nr = clip_rows(contexts, self.clip_coord, self._bx)
        yc: FloatArray = np.clip(rewards, -self._cr, self._cr)
        self._counters["clipped_coords"] += nc
        self._counters["clipped_norms"] += nr
        self._counters["clipped_rewards"] += int(np.count_nonzero(yc != rewards))
        return Xc, yc

    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        """Attach clipped records to their slots (duplicates and late records are dropped)."""
        X, y, rnd = self._learn_rows(contexts, rewards, rounds, "slot")
        if rnd.size == 0:
            return
        if not (np.isfinite(X).all() and np.isfinite(y).all()):
            raise ValueError("contexts and rewards must be finite")
        # one record per slot (the sensitivities assume it): a slot learned before, or twice in
        # this call, is refused (RowRefused) and nothing of the call is learned
        self._learned.claim(rnd[self._learnable(rnd)], "private-lasso")
        Xc, yc = self._clip_records(X, y)
        if self.mode == "forgetful":
            self._learn_forgetful(rnd, Xc, yc)
        else:
            self._learn_episodic(rnd, Xc, yc)

    def _learnable(self, rounds: IntArray) -> BoolArray:
        """Rows that enter a statistic (neither late nor beyond every read block)."""
        if self.mode == "forgetful":
            ell = self._episode_of(rounds)
            out: BoolArray = (ell <= self.lmax) & (ell >= self._next_l)
            return out
        fired = self._next_l - 1
        in_hist = rounds <= (1 << self.lmax)
        late = in_hist & (fired >= self.lmin) & (rounds <= (1 << fired))
        frontier = (1 << self._tree_l) + self._sealed if self._tree is not None else 0
        leaf = (rounds > (1 << self.lmin)) & (rounds <= self.horizon) & (rounds > frontier)
        keep: BoolArray = (in_hist & ~late) | leaf
        return keep

    def _learn_forgetful(self, rounds: IntArray, Xc: FloatArray, yc: FloatArray) -> None:
        ell = self._episode_of(rounds)
        for e in np.unique(ell).tolist():
            sel = ell == e
            n = int(sel.sum())
            if e > self.lmax:  # (2^l_max, T_max] is never read: do not keep it
                self._counters["unused_rows"] += n
                continue
            if e < self._next_l:  # its block was already released
                self._counters["late_rows"] += n
                continue
            store = self._stores.get(e)
            if store is None:
                store = self._stores[e] = RowStore(self.d, self.block(e))
            dup = store.add(rounds[sel], Xc[sel], yc[sel])
            self._counters["duplicate_rows"] += dup
            self._counters["rows_learned"] += n - dup

    def _learn_episodic(self, rounds: IntArray, Xc: FloatArray, yc: FloatArray) -> None:
        if self._hist is None:
            self._hist = RowStore(self.d, (1, 1 << self.lmax))
        fired = self._next_l - 1  # last boundary released (< l_min: none yet)
        in_hist = rounds <= (1 << self.lmax)
        late = in_hist & (fired >= self.lmin) & (rounds <= (1 << fired))
        self._counters["late_rows"] += int(late.sum())
        keep = in_hist & ~late
        dup = self._hist.add(rounds[keep], Xc[keep], yc[keep]) if keep.any() else 0
        self._counters["duplicate_rows"] += dup
        # tree leaves: slots after the burn-in, sealed in slot order
        leaf = (rounds > (1 << self.lmin)) & (rounds <= self.horizon)
        frontier = (1 << self._tree_l) + self._sealed if self._tree is not None else 0
        new = new_outside = 0
        for i in np.nonzero(leaf)[0].tolist():
            s = int(rounds[i])
            if s <= frontier or s in self._pending:
                continue
            xq = quantize_toward_zero(Xc[i])
            nz = np.nonzero(xq)[0]
            self._pending[s] = (nz, xq[nz], float(quantize_toward_zero(yc[i])))
            new += 1
            new_outside += int(not in_hist[i])
        self._counters["rows_learned"] += int(keep.sum()) - dup + new_outside
        self._counters["unused_rows"] += int((~in_hist & ~leaf).sum())
        if new:
            self._seal()

    def expire(self, rounds: ArrayLike) -> None:
        """Mark slots whose reward will never arrive as absent (a zero record; spec §2)."""
        self._state()
        rnd = np.asarray(rounds, dtype=np.int64).reshape(-1)
        self._counters["absent_slots"] += int(rnd.size)
        if self.mode == "episodic":
            for s in rnd.tolist():
                if s > (1 << self.lmin) and s not in self._pending:
                    self._pending[s] = None
            self._seal()

    def _seal(self) -> None:
        """Insert pending leaves of the current tree in slot order (each waits for the earlier)."""
        if self._tree is None:
            return
        base = 1 << self._tree_l
        last = min(2 * base, int(self.horizon))
        S = self._S
        p1 = S.size + 1
        while base + self._sealed < last:
            s = base + self._sealed + 1
            if s not in self._pending:
                break
            rec = self._pending.pop(s)
            leaf = np.zeros((p1, p1), dtype=object)
            if rec is not None:
                nz, vals, r = rec
                v = np.zeros(p1)
                pos = np.searchsorted(S, nz)
                ok = (pos < S.size) & (S[np.minimum(pos, S.size - 1)] == nz)
                v[pos[ok]] = vals[ok]
                v[-1] = r
                vi = np.array([round(x * 65536.0) for x in v], dtype=object)
                leaf = np.outer(vi, vi)
            self._tree.insert(leaf)
            self._sealed += 1

    # -- releases ------------------------------------------------------------------------------
    def refit(self) -> list[ReleaseRecord]:
        """Fire the due boundary (support selection + least squares) or the due tree refresh."""
        self._state()
        if not self.refit_due():
            return []
        if self._next_l <= self.lmax and self._t >= (1 << self._next_l):
            return self._boundary(self._next_l)
        self._refresh()
        return []

    def _select(
        self, ell: int, Z: FloatArray, y: FloatArray, k: dict[str, Any]
    ) -> tuple[IntArray, int, bool]:
        """M1 + M2: the private support (sorted), the SVT halt index and whether the cap was hit."""
        if self.support == "full":
            return np.arange(self.d, dtype=np.int64), self.d, False
        if self.support == "oracle":
            return np.unique(np.asarray(self.oracle_support, dtype=np.int64)), 0, False
        en = self.elastic_net()
        fit = en.fit(Z, y, N=k["N"], lam=k["lambda_N"], check=self.self_check)
        if self.self_check and fit.residual_bound is not None:
            if fit.residual_bound > self.solver_slack * k["sensitivity0"]:
                raise RuntimeError(
                    "elastic-net self-check failed: the certificate does not hold; the model "
                    "halts (operational incident) instead of publishing"
                )
        rng = self._noise.generator(self.bandit_id, "private-lasso", "svt", ell)
        order = rng.permutation(self.d)  # fresh, data-independent query order
        svt = SparseVector(tau=k["tau"], sigma=k["svt_sigma"], cap=self.cap)
        res = svt.run(np.abs(fit.theta), rng, order=order)
        del fit  # θ̃ is secret: never stored, logged or returned
        return np.sort(res.selected), res.halted_at, res.cap_hit

    def _solve(self, G: FloatArray, sigma_tot: float) -> tuple[FloatArray, float]:
        """M5: θ̂ = TRS(G̃[:p,:p] + νI, G̃[:p,p], C_θ) (post-processing)."""
        p = G.shape[0] - 1
        nu = self.shift(sigma_tot, p)
        A = G[:p, :p] + nu * np.eye(p)
        return trs(A, G[:p, p], self.theta_bound), nu

    def _boundary(self, ell: int) -> list[ReleaseRecord]:
        k = self.boundary_constants(ell)
        lo, hi = k["slots"]
        if self.mode == "forgetful":
            store = self._stores.pop(ell, None) or RowStore(self.d, (lo, hi))
        else:
            store = self._hist or RowStore(self.d, (1, 1 << self.lmax))
            self._hist = store
        slots, Z, y = store.matrix()
        if self.mode == "episodic" and slots.size and slots.max() > hi:
            keep = slots <= hi
            Z, y = Z[keep], y[keep]
        rows = int(y.size)
        S, h, cap_hit = self._select(ell, Z, y, k)
        components: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        if self.support == "svt":
            margin = k["svt_rounding_margin"]
            rho_svt = svt_rho(k["sensitivity"], k["svt_sigma_nominal"], self.cap, margin)
            # what the SVT is: c AboveThreshold runs of pure ε0 = 2Δ/σ (ρ = c·ε0²/2 = rho_svt),
            # on the secure backend 2(Δ/σ + margin) (its grid's rounding, within the budget)
            eps0 = svt_epsilon0(k["sensitivity"], k["svt_sigma_nominal"], margin)
            components.append(
                {"type": "pure", "epsilon": eps0, "count": self.cap, "mechanism": "svt"}
            )
            events.append({"mechanism": "svt", "rho": rho_svt, "slots": [lo, hi]})
        theta = np.zeros(S.size)
        nu = None
        extra: dict[str, Any] = {}
        if S.size:
            V = store.support_gram(S) if self.mode == "forgetful" else _support_gram(store, S, hi)
            Vf = RowStore.units_to_float(V)
            if self.mode == "forgetful":
                sigma = k["gram_sigma"]
                g = self._noise.generator(self.bandit_id, "private-lasso", "gram", ell)
                G = self._gram_release(V, Vf, sigma, g)
                rho_g = gram_rho(self.gram_l2sq, sigma / self.noise_scale_multiplier)
                components.append(self._zcdp(rho_g, "gram_gauss"))
                events.append({"mechanism": "gram_gauss", "rho": rho_g, "slots": [lo, hi]})
                theta, nu = self._solve(G, sigma)
                extra = {"gram_sigma": sigma}
            else:
                sigma = k["snap_sigma"]
                g = self._noise.generator(self.bandit_id, "private-lasso", "snapshot", ell)
                self._G_hist = self._gram_release(V, Vf, sigma, g)
                self._sigma_snap = sigma
                self._node_sigma = k["node_sigma"]
                rho_s = gram_rho(self.gram_l2sq, sigma / self.noise_scale_multiplier)
                components.append(self._zcdp(rho_s, "gram_gauss"))
                events.append({"mechanism": "gram_gauss", "rho": rho_s, "slots": [lo, hi]})
                theta, nu = self._solve(self._G_hist, sigma)
                extra = {"snap_sigma": sigma, "node_sigma": k["node_sigma"]}
        if self.mode == "forgetful":
            store.destroy()  # forgetting: the block's raw records are gone before use
        self._S, self._theta = S, theta
        self._version += 1
        self._next_l = ell + 1
        self._learned.forget_below((1 << ell) + 1)  # slots up to 2^ℓ are late from now on
        self._counters["boundaries"] += 1
        records = [self._record(ell, k, S, theta, h, cap_hit, nu, components, events, rows, extra)]
        if self.mode == "episodic":
            records += self._start_tree(ell, k, S)
        return records

    def _start_tree(self, ell: int, k: dict[str, Any], S: IntArray) -> list[ReleaseRecord]:
        """Episodic: register the tree of (2^ℓ, 2^{ℓ+1}] (its whole cost) before any release."""
        self._tree = None
        self._sealed = 0
        self._last_refresh = 0
        self._tree_l = ell
        first, last = k["tree_slots"]
        # leaves of slots before this tree can never be used again
        for s in [s for s in self._pending if s < first]:
            del self._pending[s]
        if S.size == 0 or first > last:
            self._G_hist = None
            return []
        p1 = S.size + 1
        sigma = k["node_sigma"]
        self._tree = self._new_tree(ell, p1, sigma)
        m = k["tree_depth"]
        rho_node = gram_rho(self.gram_l2sq, sigma / self.noise_scale_multiplier)
        rho_tree = rho_sum([rho_node] * m)
        self._seal()
        return [
            ReleaseRecord(
                release_id=f"{self.bandit_id}/private-lasso/tree/boundary={ell}",
                bandit_id=self.bandit_id,
                mechanism="tree_node",
                calibration="certified",
                formula=FORMULA,
                dp_valid=self._dp_valid(),
                epsilon=epsilon_from_rho(rho_tree, self.delta),
                delta=float(self.delta),
                rho=rho_tree,
                accounting=[{**self._zcdp(rho_node, "tree_node"), "count": m}],
                data_slice=f"tree:{ell}",
                composition="parallel",
                event_range=(first, last),
                model_version=self._version,
                params={
                    "boundary": ell,
                    "mode": self.mode,
                    "node_sigma": sigma,
                    "tree_depth": m,
                    "leaves": last - first + 1,
                    "support": S.tolist(),
                    "refresh_every": self.refresh_every,
                    "noise_stream": self._noise.stream_id(
                        self.bandit_id, "private-lasso", "tree", ell
                    ),
                },
                note="registered before any node is released; every node noise is derived once",
                privacy_model="joint",
                noise_backend=self.noise_backend_in_force,
                privacy_unit=PRIVACY_UNIT,
                neighbouring=NEIGHBOURING,
            )
        ]

    # -- noise (fast or secure backend) ----------------------------------------------------------
    def _gram_release(
        self, V: AnyArray, Vf: FloatArray, sigma: float, g: NoiseGenerator
    ) -> FloatArray:
        """V + SymGauss(σ): float noise (fast) or exact discrete Gaussian on a grid (secure)."""
        if self.noise_backend_in_force == "secure":
            return secure_sym_gauss_release(V, sigma, secure_stream(g))
        out: FloatArray = Vf + sym_gauss(Vf.shape[0], sigma, numpy_stream(g))
        return out

    def _zcdp(self, rho: float, mechanism: str) -> dict[str, Any]:
        """A ρ-zCDP ledger component of a Gaussian release (Gram, tree node): marked
        ``gaussian`` on the fast backend (its PLD is the Gaussian's with Δ/σ = √(2ρ)), Rényi-only
        on the secure backend (discrete Gaussian: no continuous PLD)."""
        c = {"type": "zcdp", "rho": rho, "mechanism": mechanism}
        if self.noise_backend_in_force == "secure":
            c["renyi_only"] = True
        else:
            c["gaussian"] = True
        return c

    def _new_tree(self, ell: int, p1: int, sigma: float) -> TreeAggregator:
        """The episodic tree of boundary ``ell``; node j draws from stream (…, "tree", ell, j).

        Issue-once by structure: the tree closes node j exactly once per leaf index j, and its
        leaf count is persisted (an issued-label set would grow by one label per leaf).
        """
        noise, bid = self._noise, self.bandit_id

        def stream(j: int) -> NoiseGenerator:
            return noise.generator(bid, "private-lasso", "tree", ell, j, track=False)

        if self.noise_backend_in_force == "secure":
            return TreeAggregator(
                (p1, p1),
                node_noise=None,
                unit=2.0**-32,
                node_release=lambda j, exact: secure_sym_gauss_release(
                    exact, sigma, secure_stream(stream(j))
                ),
            )
        return TreeAggregator(
            (p1, p1), lambda j: sym_gauss(p1, sigma, numpy_stream(stream(j))), unit=2.0**-32
        )

    def _refresh(self) -> None:
        """Episodic: θ̂ from G_hist + prefix(j) (post-processing of registered releases)."""
        j = self._last_refresh + self.refresh_every
        if self._tree is None or self._tree.count < j or self._G_hist is None:
            return  # (a tree exists only after the snapshot G_hist it adds to)
        G = self._G_hist + self._tree.prefix()
        pc = bin(self._tree.count).count("1")
        sigma_tot = math.sqrt(self._sigma_snap**2 + pc * self._node_sigma**2)
        self._theta, _ = self._solve(G, sigma_tot)
        self._last_refresh = j
        self._version += 1

    def _dp_valid(self) -> bool:
        return self.noise_scale_multiplier == 1.0 and self.support != "oracle"

    def _record(
        self,
        ell: int,
        k: dict[str, Any],
        S: IntArray,
        theta: FloatArray,
        h: int,
        cap_hit: bool,
        nu: float | None,
        components: list[dict[str, Any]],
        events: list[dict[str, Any]],
        rows: int,
        extra: dict[str, Any],
    ) -> ReleaseRecord:
        rho_b = rho_sum(
            c["rho"] if c["type"] == "zcdp" else c["count"] * rho_pure(c["epsilon"])
            for c in components
        )
        lo, hi = k["slots"]
        params = {
            "boundary": ell,
            "mode": self.mode,
            "support_mode": self.support,
            "slot": 1 << ell,
            "N": k["N"],
            "lambda_N": k["lambda_N"],
            "sensitivity": k["sensitivity"],
            "iterations": k["iterations"],
            "cap": self.cap,
            "svt_halt_index": h,
            "cap_hit": cap_hit,
            "shift": nu,
            "ledger_events": events,
            "rows_used": rows,
            **extra,
        }
        for key in ("rho_svt", "svt_sigma", "margin", "tau"):
            if key in k:
                params[key] = k[key]
        return ReleaseRecord(
            release_id=f"{self.bandit_id}/private-lasso/boundary={ell}",
            bandit_id=self.bandit_id,
            mechanism="+".join(e["mechanism"] for e in events) or "none",
            calibration="certified",
            formula=FORMULA,
            dp_valid=self._dp_valid(),
            epsilon=epsilon_from_rho(rho_b, self.delta) if rho_b > 0 else 0.0,
            delta=float(self.delta) if rho_b > 0 else 0.0,
            rho=rho_b,
            accounting=components or [{"type": "zero"}],
            data_slice=f"block:{ell}" if self.mode == "forgetful" else "history",
            composition="parallel" if self.mode == "forgetful" else "sequential",
            event_range=(lo, hi),
            rows_used=rows,
            model_version=self._version,
            params=params,
            release={"support": S.tolist(), "theta": theta.tolist()},
            note="support='oracle': simulation only" if self.support == "oracle" else None,
            privacy_model="joint",
            noise_backend=self.noise_backend_in_force,
            privacy_unit=PRIVACY_UNIT,
            neighbouring=NEIGHBOURING,
        )

    # -- privacy and explanation -------------------------------------------------------------------
    @property
    def privacy(self) -> PrivacyStatement:
        return self._joint_statement(
            rho=self.rho,
            calibration="certified",
            scope=(
                f"the whole run up to T_max = {self.horizon} slots ({self.mode} mode): every slot "
                "pays at most ρ in total (zCDP), hence (ε, δ)-DP of the public sequence of "
                "supports "
                "and models and (ε, δ)-JDP of the arms (billboard lemma)."
            ),
            caveats=(
                "A user with k slots is protected by group privacy only: k²ρ zCDP for k slots in "
                "one release's data, and the releases their slots reach compose sequentially "
                "(Σ k_b²ρ ≤ k²ρ over blocks b; forgetful blocks compose in parallel only across "
                "different users); bound the slots per user per block with user-level privacy "
                "(docs/privacy/user-level.md).",
                "A user's own decision is a function of their context: show it only to that user.",
            ),
            noise_backend=self.noise_backend_in_force,
        )

    def explain(self, horizon: int | None = None) -> dict[str, Any]:
        self._validate()
        self._warn_weak()  # explain is where a configuration is checked before it runs
        en = self.elastic_net()
        out = {
            "policy": self.name,
            "private": True,
            "model": "joint DP (billboard)",
            "calibration": "certified",
            "formula": FORMULA,
            "dp_valid": self.support != "oracle",
            "params": self.public_params(),
            "rho": self.rho,
            "rho_split": self.split,
            "l_min": self.lmin,
            "l_max": self.lmax,
            "n_episodes": self.n_episodes,
            "cap": self.cap,
            "lipschitz": en.lipschitz,
            "smoothness": en.smoothness,
            "gram_l2sq": self.gram_l2sq,
            "boundaries": [
                self.boundary_constants(ell)
                for ell in range(self.lmin, self.lmax + 1)
                if horizon is None or (1 << ell) <= horizon
            ],
            "privacy_statement": self.privacy.text(),
        }
        return out

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            **self._state_header(),
            "version": self._version,
            "next_l": self._next_l,
            "S": self._S,
            "theta": self._theta,
            "stores": {str(k): s.state_dict() for k, s in self._stores.items()},
            "hist": None if self._hist is None else self._hist.state_dict(),
            "tree": None if self._tree is None else self._tree.state_dict(),
            "tree_l": self._tree_l,
            "G_hist": self._G_hist,
            "sigma_snap": self._sigma_snap,
            "node_sigma": self._node_sigma,
            "pending": [
                [s, None if r is None else [r[0], r[1], r[2]]]
                for s, r in sorted(self._pending.items())
            ],
            "sealed": self._sealed,
            "last_refresh": self._last_refresh,
            "noise": self._noise.state_dict(),
            "tie_key": self._tie_key,
            "learned_rounds": self._learned.state_dict(),
            "counters": dict(self._counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> PrivateLASSO:
        self._check_resumed_backend(state)
        self._state()
        self._t = int(state["t"])
        self._version = int(state["version"])
        self._next_l = int(state["next_l"])
        self._S = np.asarray(state["S"], dtype=np.int64)
        self._theta = np.asarray(state["theta"], dtype=np.float64)
        self._stores = {int(k): RowStore.from_state_dict(v) for k, v in state["stores"].items()}
        self._hist = None if state["hist"] is None else RowStore.from_state_dict(state["hist"])
        self._noise = NoiseSource(self.seed, backend=self.noise_backend_in_force).load_state_dict(
            state["noise"]
        )
        self._tree_l = int(state["tree_l"])
        self._sealed = int(state["sealed"])
        self._last_refresh = int(state["last_refresh"])
        self._sigma_snap = float(state["sigma_snap"])
        self._node_sigma = float(state["node_sigma"])
        self._G_hist = (
            None if state["G_hist"] is None else np.asarray(state["G_hist"], dtype=np.float64)
        )
        self._tree = None
        if state["tree"] is not None:
            self._tree = self._new_tree(self._tree_l, self._S.size + 1, self._node_sigma)
            self._tree.load_state_dict(state["tree"])
        self._pending = {
            int(s): None
            if r is None
            else (np.asarray(r[0], dtype=np.int64), np.asarray(r[1], dtype=np.float64), float(r[2]))
            for s, r in state["pending"]
        }
        self._tie_key = int(state["tie_key"])
        self._learned = LearnedRounds.from_state_dict(state.get("learned_rounds"))
        self._counters = dict(state["counters"])
        return self


def _support_gram(store: RowStore, S: IntArray, last_slot: int) -> AnyArray:
    """Exact support Gram of the records of ``store`` with slot ≤ ``last_slot``."""
    slots, _, _ = store.matrix()
    if slots.size == 0 or slots.max() <= last_slot:
        return store.support_gram(S)
    sub = RowStore(store.d)
    _, Z, y = store.matrix()
    keep = slots <= last_slot
    sub.add(slots[keep], Z[keep].toarray(), y[keep])
    return sub.support_gram(S)
