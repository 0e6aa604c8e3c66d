"""Joint-DP LinUCB with tree aggregation (Shariff & Sheffet, NeurIPS 2018).

DP-LinUCB spec §6 (Algorithm 1 with the tree): the learner uses its history only through a DP
continual release R_t of M_t = Σ_{s<t} a_s a_sᵀ, a_s = [x_s; y_s] (:class:`ContinualGramRelease`),
regularised as

    V_t = R_t[:d, :d] + shift·I,   ũ_t = R_t[:d, d],   θ̃_t = V_t⁻¹ũ_t,
    β_t = σ√(2 ln(2/α) + ln det V_t − d ln ρ_min) + S√ρ_max + γ            (Prop. 4),

and decides argmax_i ⟨θ̃_t, x_i⟩ + β_t‖x_i‖_{V_t⁻¹} (candidates clipped to ‖x‖ ≤ L). Slicing,
shifting, solving and the argmax are post-processing of the release, so with (R_t)_t
(ε, δ)-DP with respect to one row, the policy is (ε, δ)-jointly DP (spec §1, Claim 7).

Noise: ``noise="gaussian"`` (shifted by +2Υ) or ``"wishart"`` (``shift=True``: −c, the paper's
shifted Wishart; ``shift=False``: unshifted). Calibrations (see
:mod:`streaming_dpbandit.privacy.gram_calibration` and docs/privacy/dp-linucb-calibration.md):
``certified`` (default), and the labelled options ``paper`` (valid but conservative), ``zcdp``
(spec §3.2) and ``authors_code_2018`` (reproduction of §12.2). The continual release
(``tree_impl``): ``"blt"``, the buffered linear Toeplitz factorisation (O(b·d²) memory,
docs/privacy/dp-linucb-blt.md), ``"sqrt_toeplitz"``, the square-root factorisation (spec §11),
both Gaussian-only with a fixed horizon, or ``"binary"``, the padded binary tree. The default
``"auto"`` is BLT wherever it applies (Gaussian noise, calibration ``certified`` or ``zcdp``,
fixed horizon) — lower regret and noise than the tree at the same (ε, δ), docs/dp-linucb.md —
and the binary tree otherwise (Wishart noise, the ``paper`` and ``authors_code_2018``
calibrations, doubling epochs). A snapshot records the mechanism in force, and a run restored
from it keeps that mechanism (a snapshot of the old default, the tree, restores as the tree).

Batching: the release is refreshed every ``batch_size`` decisions (the spec's ``release_every``;
1 by default), from every row inserted by then; the rounds in between are decided with the frozen
release. This is post-processing and costs no privacy.

Ledger: the first refit of each tree epoch returns the epoch record (the whole epoch's privacy
cost, every constant of spec §9); every refit returns a release record with zero cost (a
post-processing of that epoch's node releases) naming the node-noise streams it used and a digest
of the release, so a re-drawn release can never be recorded twice.

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterator
from typing import Any, Literal, Self

import numpy as np

from ..estimators.ucb_model import UCBModel, _ones
from ..privacy.contribution import LearnedRounds
from ..privacy.gram_calibration import CALIBRATIONS, GramCalibration
from ..privacy.gram_release import ContinualGramRelease
from ..privacy.ledger import ReleaseRecord
from ..privacy.noise import NoiseSource
from ..privacy.rows import overflowing_norms, prepare_rows
from ..privacy.statement import PrivacyStatement, per_unit_caveat
from ..privacy.symmetric import packing
from ..utils.arrays import ArrayLike, FloatArray, IntArray, MaybeArray
from ..utils.hashing import MultisetDigest
from .base import DecisionBatch, Policy
from .linucb import decide_arms
from .registry import register
from .types import AtLeastOne, NoiseBackend, OpenUnit, Positive, PositiveInt

__all__ = ["DPLinUCB"]

# relative slack on ‖x‖² before a candidate counts as over L: the float64 rounding error of a
# computed squared norm is at most (d + 1)·2⁻⁵³ relative, below 2⁻⁴⁰ for every d ≤ 8,000
_CANDIDATE_SLACK = 1.0 + 2.0**-40


@functools.lru_cache(maxsize=32)
def _block_index(d: int) -> tuple[IntArray, IntArray]:
    """Packed positions of V (the top-left d × d block, full, row-major) and of u = S[:d, d]."""
    full = packing(d + 1).full_index.reshape(d + 1, d + 1)
    V_idx, u_idx = np.ascontiguousarray(full[:d, :d]).reshape(-1), full[:d, d].copy()
    V_idx.flags.writeable = False
    u_idx.flags.writeable = False
    return V_idx, u_idx


PRIVACY_UNIT = (
    "one round: the chosen action x_t and reward y_t of the user served at round t "
    "(their decision set D_t is used only for their own decision)"
)
NEIGHBOURING = (
    "replace one round's (D_t, y_t) (event level); everything shown to later users is DP "
    "with respect to it, even if they all collude"
)


def _calibration_fields(cal: GramCalibration) -> dict[str, Any]:
    """A release record's fields that state its calibration."""
    return {
        "calibration": cal.calibration,
        "formula": cal.formula,
        "dp_valid": cal.dp_valid,
        "epsilon": cal.epsilon,
        "delta": cal.delta,
        "rho": cal.rho_spent,
        "accounting": [dict(c) for c in cal.accounting],
    }


@register
class DPLinUCB(Policy):
    """Jointly differentially private LinUCB (tree or factorisation aggregation).

    Parameters
    ----------
    d
        Action feature dimension.
    epsilon, delta
        Per-event (ε, δ)-JDP target of the whole run (spec §2).
    n_cap
        Tree capacity: the horizon n of the paper (rows); ``fixed`` mode freezes when full.
    noise
        ``"gaussian"`` or ``"wishart"``.
    shift
        Wishart only: shift by −c (``True``, the paper's better variant) or not.
    calibration
        ``"certified"`` (default), ``"paper"``, ``"zcdp"`` or ``"authors_code_2018"``.
    wishart_gamma
        ``"printed"`` (default) or ``"tight"`` form of γ for the shifted Wishart (spec §4).
    alpha
        Failure probability of the confidence sets (default 1/(2·n_cap), spec §2).
    L, B_tilde
        Action-norm clip and reward clip (L̃² = L² + B̃²); fixed a priori, never estimated.
    S
        Bound on ‖θ*‖.
    sigma
        Sub-Gaussian constant of the reward noise (default ``B_tilde``).
    horizon_mode, n0
        ``"fixed"`` (default) or ``"doubling"`` epochs of capacity n0·2^e (spec §7).
    tree_impl, n_steps
        ``"auto"`` (default: ``"blt"`` where it applies — Gaussian noise, certified or
        zCDP calibration, fixed horizon, fast noise backend — else ``"binary"``),
        ``"binary"`` (the padded tree), ``"sqrt_toeplitz"`` or ``"blt"`` (horizon ``n_steps``
        releases, default ⌈n_cap / batch_size⌉ + 1).
    batch_size
        Decisions per release refresh (``release_every``).
    ties
        ``"lowest"`` index (default, spec §6) or ``"coins"`` (event-id hash).
    track_bounds
        Simulation and tests only: after every release, compare H_t, h_t with ρ_min, ρ_max, γ
        (spec §9). Reads the raw noise; refused outside simulation.
    release_records
        Return a (zero-cost) ledger record for every release (default). ``False`` returns only
        the epoch records, which carry the whole privacy cost — for long simulations whose
        ledger is never written; refused outside simulation.
    bandit_id
        Name used in ledger records and noise-stream labels.
    seed
        Seeds the noise key and the tie-break coins (tests and simulations only).
    noise_scale_multiplier
        Audit only; must stay 1.
    noise_backend
        ``"auto"`` (default: ``"secure"`` where it applies — Gaussian noise, calibration
        certified or zcdp, the binary tree (``tree_impl`` auto or binary) — else ``"fast"``),
        ``"fast"`` (numpy floating-point samplers) or ``"secure"`` (exact discrete Gaussian
        node noise on a public grid, certified by its Rényi bound;
        docs/privacy/secure-noise.md). ``tree_impl="auto"`` is BLT on the fast backend only.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.envs import ShariffSheffetEnv
    >>> env = ShariffSheffetEnv(d=3, gap=0.1)
    >>> pol = DPLinUCB(d=3, epsilon=1.0, delta=0.1, n_cap=4096, batch_size=64, seed=0,
    ...                noise_backend="fast")  # BLT (the default, secure backend: the binary tree)
    >>> rng = np.random.default_rng(0)
    >>> records = []
    >>> while pol.t < 1024:
    ...     if pol.refit_due():
    ...         records += pol.refit()             # persist these before deciding
    ...     X = env.contexts(rng, pol.max_decide_batch())
    ...     dec = pol.decide(X)
    ...     mu = env.mean_rewards(X)[np.arange(len(dec)), dec.arms]
    ...     y = env.rewards(mu, env.reward_noise(rng, len(dec))[:, 0])
    ...     pol.learn(X[np.arange(len(dec)), dec.arms], y, dec.rounds)
    >>> records[0].mechanism, records[0].calibration, records[0].dp_valid
    ('blt/GAUSS', 'certified', True)
    >>> len(records), pol.counters["rows_inserted"], pol.counters["cholesky_repairs"]
    (17, 1024, 0)
    >>> pol.resolved_tree_impl(), pol.explain()["constants"]["per_node"]["steps"]
    ('blt', 65)
    >>> DPLinUCB(d=3, noise="wishart").resolved_tree_impl()   # BLT is Gaussian-only
    'binary'
    >>> DPLinUCB(d=3).resolved_tree_impl(), DPLinUCB(d=3).noise_backend_in_force  # the default
    ('binary', 'secure')

    """

    name = "dp-linucb"
    privacy_unit = PRIVACY_UNIT
    neighbouring = NEIGHBOURING

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "n_cap": 4096, "batch_size": 8}

    private = True

    def secure_by_default(self) -> bool:
        """``noise_backend="auto"`` (the default everywhere) is secure for the Gaussian binary
        tree (certified or zCDP); the exact factorisations cost O(steps) per step and Wishart
        has no secure construction (docs/privacy/secure-noise.md)."""
        return (
            self.noise == "gaussian"
            and self.calibration in ("certified", "zcdp")
            and self.tree_impl in ("auto", "binary")
        )

    def simulation_only(self) -> str | None:  # the paper calibration is valid (conservative)
        if self.calibration == "zcdp":
            return (
                "dp-linucb calibration=zcdp is simulation-only: pending DP-specialist review "
                "(DP-LinUCB spec §3.2)"
            )
        if self.calibration == "authors_code_2018":
            return (
                "dp-linucb calibration=authors_code_2018 is simulation-only: a reproduction "
                "profile of the authors' code (DP-LinUCB spec §3.4)"
            )
        if self.track_bounds:
            return "track_bounds reads the raw noise and is simulation-only (DP-LinUCB spec §9)"
        if not self.release_records:
            return (
                "release_records=false is simulation-only: the ledger must record every release "
                "before it is used"
            )
        return None

    def __init__(
        self,
        d: PositiveInt,
        epsilon: Positive = 1.0,
        delta: OpenUnit = 1e-6,
        n_cap: AtLeastOne = 1 << 20,
        noise: Literal["gaussian", "wishart"] = "gaussian",
        shift: bool = True,
        calibration: Literal["certified", "paper", "zcdp", "authors_code_2018"] = "certified",
        wishart_gamma: Literal["printed", "tight"] = "printed",
        alpha: OpenUnit | None = None,
        L: Positive = 1.0,
        B_tilde: Positive = 1.0,
        S: Positive = 1.0,
        sigma: Positive | None = None,
        horizon_mode: Literal["fixed", "doubling"] = "fixed",
        n0: AtLeastOne = 1024,
        tree_impl: Literal["auto", "binary", "sqrt_toeplitz", "blt"] = "auto",
        n_steps: AtLeastOne | None = None,
        batch_size: AtLeastOne = 1,
        ties: str = "lowest",
        track_bounds: bool = False,
        release_records: bool = True,
        bandit_id: str = "default",
        seed: int | None = None,
        noise_scale_multiplier: float = 1.0,
        noise_backend: NoiseBackend = "auto",
    ):
        self.d = d
        self.epsilon = epsilon
        self.delta = delta
        self.n_cap = n_cap
        self.noise = noise
        self.shift = shift
        self.calibration = calibration
        self.wishart_gamma = wishart_gamma
        self.alpha = alpha
        self.L = L
        self.B_tilde = B_tilde
        self.S = S
        self.sigma = sigma
        self.horizon_mode = horizon_mode
        self.n0 = n0
        self.tree_impl = tree_impl
        self.noise_backend = noise_backend
        self.n_steps = n_steps
        self.batch_size = batch_size
        self.ties = ties
        self.track_bounds = track_bounds
        self.release_records = release_records
        self.bandit_id = bandit_id
        self.seed = seed
        self.noise_scale_multiplier = noise_scale_multiplier

    # -- construction -----------------------------------------------------------------------------
    @property
    def reward_sigma(self) -> float:
        return float(self.B_tilde if self.sigma is None else self.sigma)

    def resolved_tree_impl(self) -> str:
        """The continual-release mechanism in force: ``tree_impl``, or for ``"auto"`` BLT
        where it applies and the binary tree otherwise; after :meth:`load_state_dict`, the
        snapshot's mechanism (a run never switches mechanism)."""
        restored: str | None = getattr(self, "_restored_impl", None)
        if restored is not None:
            return restored
        if self.tree_impl != "auto":
            return self.tree_impl
        # BLT on the secure backend re-encodes every stored step exactly (O(steps) per
        # step, docs/privacy/secure-noise.md): there the tree is the affordable choice
        blt_applies = (
            self.noise == "gaussian"
            and self.calibration in ("certified", "zcdp")
            and self.horizon_mode == "fixed"
            and self.noise_backend_in_force == "fast"
        )
        return "blt" if blt_applies else "binary"

    def _steps(self) -> int | None:
        if self.resolved_tree_impl() not in ("sqrt_toeplitz", "blt"):
            return None
        # one release before the first row, then one per refresh with new rows
        return self.n_steps or 1 - (-self.n_cap // self.batch_size)

    def _aggregator(self, source: NoiseSource | None) -> ContinualGramRelease:
        return ContinualGramRelease(
            d=self.d,
            epsilon=self.epsilon,
            delta=self.delta,
            n_cap=self.n_cap if self.horizon_mode == "fixed" else None,
            noise=self.noise,
            shift=self.shift,
            calibration=self.calibration,
            L=self.L,
            B_tilde=self.B_tilde,
            alpha=self.alpha,
            wishart_gamma=self.wishart_gamma,
            tree_impl=self.resolved_tree_impl(),
            n_steps=self._steps(),
            horizon_mode=self.horizon_mode,
            n0=self.n0 if self.horizon_mode == "doubling" else None,
            noise_source=source or NoiseSource(backend=self.noise_backend_in_force),
            label=(self.bandit_id, "dp-linucb"),
            noise_scale_multiplier=self.noise_scale_multiplier,
        )

    def _validate(self) -> None:
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}")
        if self.batch_size < 1 or self.d < 1:
            raise ValueError("need d >= 1 and batch_size >= 1")
        if self.ties not in ("lowest", "coins"):
            raise ValueError("ties must be 'lowest' or 'coins'")
        if not (self.L > 0 and self.B_tilde > 0 and self.S > 0 and self.reward_sigma > 0):
            raise ValueError("L, B_tilde, S and sigma must be positive")
        if self.horizon_mode == "doubling" and self.n0 & (self.n0 - 1):
            raise ValueError("n0 must be a power of two in doubling mode")
        self._aggregator(None).calibration(0)  # raises on any invalid combination

    def _state(self) -> Self:
        if not hasattr(self, "_agg"):
            self._validate()
            self._noise_src = NoiseSource(self.seed, backend=self.noise_backend_in_force)
            self._agg = self._aggregator(self._noise_src)
            self._t = 0
            self._since = 0
            self._version = 0
            self._released_at: tuple[int, int] | None = None  # (epoch, s) of the release in force
            self._release: FloatArray | None = None  # packed release in force (DP)
            self._recorded_epochs: set[int] = set()
            self._first_round: dict[int, int] = {}
            self._last_round: dict[int, int] = {}
            self._ids = MultisetDigest()
            #: rounds already learned: one row per round is what the tree's noise is for
            self._learned = LearnedRounds()
            self._counters = {
                "rows_inserted": 0,
                "rows_dropped": 0,
                "clipped_actions": 0,
                "clipped_rewards": 0,
                "clipped_candidates": 0,
                "releases": 0,
                "decisions": 0,
                "cholesky_repairs": 0,
            }
            self._bounds: dict[str, float] = {
                "releases_checked": 0,
                "non_pd_H": 0,
                "min_lambda_min_over_rho_min": math.inf,
                "max_lambda_max_over_rho_max": 0.0,
                "max_h_norm_over_gamma": 0.0,
            }
            self._coin_key()
        return self

    # -- public views ------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._state()._agg.epoch

    @property
    def counters(self) -> dict[str, Any]:
        self._state()
        out: dict[str, Any] = dict(self._counters)
        draws = self._agg.draws()
        out["noise_draws_node"] = draws["node"]
        out["noise_draws_pad"] = draws["pad"]
        if self.track_bounds:
            out.update({f"sim_{k}": v for k, v in self._bounds.items()})
        return out

    def calibration_constants(self, epoch: int | None = None) -> GramCalibration:
        """The public constants of a tree epoch (default: the current one)."""
        return self._state()._agg.calibration(epoch)

    @property
    def coefficients(self) -> FloatArray:
        """θ̃ of the release in force (a DP output)."""
        self._state()
        if self._release is None:
            raise RuntimeError("no release yet: call refit()")
        return self._model.theta.copy()

    @property
    def width(self) -> float:
        return self._state()._beta

    # -- schedule ----------------------------------------------------------------------------------
    def refit_due(self) -> bool:
        self._state()
        return self._release is None or self._since >= self.batch_size

    def max_decide_batch(self) -> int:
        self._state()
        if self._release is None:
            return 0
        return max(0, self.batch_size - self._since)

    # -- the private release -----------------------------------------------------------------------
    def refit(self) -> list[ReleaseRecord]:
        """Refresh the release from the rows inserted so far; return its ledger records."""
        self._state()
        if not self.refit_due():
            return []
        agg = self._agg
        key = (agg.epoch, agg.s)
        if self._release is not None and key == self._released_at:
            self._since = 0  # no new row: the release (and model) in force stays valid
            return []
        records = []
        cal = agg.calibration()
        if agg.epoch not in self._recorded_epochs:
            records.append(self._epoch_record(cal))
            self._recorded_epochs.add(agg.epoch)
        before = agg.draw_counts()
        R = agg.release()
        after = agg.draw_counts()
        self._install(R, cal)
        self._released_at = key
        self._since = 0
        self._version += 1
        self._counters["releases"] += 1
        if self.track_bounds:
            self._check_bounds(cal)
        if self.release_records:
            records.append(self._release_record(cal, R, before, after))
        return records

    def _install(self, R: FloatArray, cal: GramCalibration) -> None:
        d = self.d
        V_idx, u_idx = _block_index(d)
        V = R[V_idx]  # a new, exactly symmetric array (both triangles from one packed entry)
        V[:: d + 1] += cal.shift  # the diagonal of the row-major d × d block
        model = UCBModel.fit(V.reshape(d, d), R[u_idx], floor=cal.rho_min, symmetric=True)
        if model.repaired:
            self._counters["cholesky_repairs"] += 1
        self._model = model
        self._beta = cal.beta(model.logdet, self.reward_sigma, self.S)
        self._release = R

    def _check_bounds(self, cal: GramCalibration) -> None:
        """Spec §9 simulation-only ratios (reads the raw noise: never in production)."""
        pk = packing(self.d + 1)
        N = pk.unpack(self._agg.noise_sum())
        d = self.d
        H = N[:d, :d] + cal.shift * np.eye(d)
        h = N[:d, d]
        w = np.linalg.eigvalsh(H)
        b = self._bounds
        b["releases_checked"] += 1
        b["min_lambda_min_over_rho_min"] = min(b["min_lambda_min_over_rho_min"], w[0] / cal.rho_min)
        b["max_lambda_max_over_rho_max"] = max(
            b["max_lambda_max_over_rho_max"], w[-1] / cal.rho_max
        )
        if w[0] <= 0:
            b["non_pd_H"] += 1
        else:
            hn = math.sqrt(float(h @ np.linalg.solve(H, h)))
            b["max_h_norm_over_gamma"] = max(b["max_h_norm_over_gamma"], hn / cal.gamma)

    def _record_common(self) -> dict[str, Any]:
        return {
            "bandit_id": self.bandit_id,
            "noise_backend": self.noise_backend_in_force,
            "privacy_model": "joint",
            "privacy_unit": PRIVACY_UNIT,
            "neighbouring": NEIGHBOURING,
        }

    def _epoch_record(self, cal: GramCalibration) -> ReleaseRecord:
        e = cal.epoch
        params = cal.to_dict()
        params.update(
            {
                "horizon_mode": self.horizon_mode,
                "epoch_reason": "start" if e == 0 else f"doubling: epoch {e - 1} full",
                "release_every": self.batch_size,
                "S": self.S,
                "sigma": self.reward_sigma,
                "noise_stream": self._noise_src.stream_id(self.bandit_id, "dp-linucb", e),
            }
        )
        for k in ("accounting", "epsilon", "delta", "calibration", "formula", "dp_valid", "label"):
            params.pop(k, None)
        return ReleaseRecord(
            release_id=f"{self.bandit_id}/dp-linucb/{cal.tree_impl}/epoch={e}",
            mechanism=f"{cal.tree_impl.replace('binary', 'binary-tree')}/{cal.mechanism}",
            **_calibration_fields(cal),
            data_slice=f"tree-epoch:{e}",
            composition="parallel",
            params=params,
            note=cal.label,
            **self._record_common(),
        )

    def _release_record(
        self,
        cal: GramCalibration,
        R: FloatArray,
        before: tuple[int, int],
        after: tuple[int, int],
    ) -> ReleaseRecord:
        assert self._released_at is not None  # refit installed the release just before
        e, s = self._released_at
        const = self._release_record_constants(cal, e)
        first, last = self._first_round.get(e), self._last_round.get(e)
        params = {
            **const["params"],
            "rows_in_tree": s,
            "node_noise_draws": after[0] - before[0],
            "pad_draws": after[1] - before[1],
            # numpy's stubs declare ndarray's buffer protocol for Python >= 3.12 only
            "release_digest": hashlib.sha256(np.ascontiguousarray(R)).hexdigest()[:32],  # type: ignore[arg-type]
            "beta": self._beta,
            "consumed_ids_digest": self._ids.hexdigest(),
        }
        return ReleaseRecord(
            release_id=f"{const['release_prefix']}{s}",
            # the first and last rounds of an epoch are recorded together
            event_range=None if first is None or last is None else (first, last),
            rows_used=s,
            model_version=self._version,
            params=params,
            accounting=[{"type": "zero"}],
            **const["fields"],
        )

    def _release_record_constants(self, cal: GramCalibration, e: int) -> dict[str, Any]:
        """The fields every release record of epoch e shares (built once per epoch)."""
        cached: tuple[tuple[int, int], dict[str, Any]] | None = getattr(
            self, "_record_consts", None
        )
        if cached is not None and cached[0] == (e, id(cal)):
            return cached[1]
        const = {
            "release_prefix": f"{self.bandit_id}/dp-linucb/release/epoch={e}/s=",
            "params": {
                "epoch": e,
                "noise_stream_prefix": self._noise_src.stream_id(self.bandit_id, "dp-linucb", e),
            },
            "fields": dict(
                mechanism="gram-release (post-processing of the epoch's node releases)",
                calibration=cal.calibration,
                formula=cal.formula,
                dp_valid=cal.dp_valid,
                epsilon=0.0,
                delta=0.0,
                data_slice=f"tree-epoch:{e}",
                composition="parallel",
                note=cal.label,
                **self._record_common(),
            ),
        }
        self._record_consts = ((e, id(cal)), const)
        return const

    # -- deciding ----------------------------------------------------------------------------------
    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X, rounds = self._decide_batch(X)
        B, K, d = X.shape
        flat = X.reshape(B * K, d)
        scores = self._model.scores(flat, self._beta)
        # spec §6: candidates are clipped to ‖x‖ ≤ L; UCB is positively homogeneous in x
        sq = np.multiply(flat, flat) @ _ones(d)
        # A norm above L by less than the rounding error of computing it is not clipped:
        # unit-normalised features land an ulp over L half the time, and scaling them would be
        # a no-op costing a pass over the batch (and would inflate the clip count).
        lim = self.L * self.L * _CANDIDATE_SLACK
        if not sq.max() <= lim:  # NaN, an overflow or a norm over L (max propagates NaN)
            if not math.isfinite(np.add.reduce(sq)):
                if not np.isfinite(flat).all():
                    raise ValueError("contexts must be finite")
                # finite x whose ‖x‖² overflows: score the clipped x itself (raw score is inf)
                rows, norms = overflowing_norms(flat, sq)
                scores[rows] = self._model.scores(
                    flat[rows] * (self.L / norms)[:, None], self._beta
                )
                self._counters["clipped_candidates"] += rows.size
                sq[rows] = 0.0
            over = sq > lim
            n_over = int(np.count_nonzero(over))
            if n_over:
                self._counters["clipped_candidates"] += n_over
                scores[over] *= self.L / np.sqrt(sq[over])  # UCB is positively homogeneous
        t0 = self._t
        arms, prop = decide_arms(self, scores.reshape(B, K), mask, rounds, event_ids)
        self._t = t0 + B
        self._since += B
        self._counters["decisions"] += B
        e = self._agg.epoch
        return DecisionBatch(arms, prop, rounds, np.full(B, e, dtype=np.int64), self._version)

    # -- learning ----------------------------------------------------------------------------------
    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        """Insert the chosen actions and rewards (clipped: ‖x‖ ≤ L, |y| ≤ B̃) into the tree."""
        X, y, rounds = self._learn_rows(contexts, rewards, rounds, "round")
        if y.size == 0:
            return
        r_lo, r_hi = int(rounds.min()), int(rounds.max())
        rows, n_x, n_y = prepare_rows(X, y, self.L, self.B_tilde)
        # a round learned before (or twice in this call) is refused, nothing of the call learned
        self._learned.claim(rounds, "dp-linucb")
        c = self._counters
        c["clipped_actions"] += n_x
        c["clipped_rewards"] += n_y
        agg = self._agg
        e0 = agg.epoch
        n = agg.insert_many(rows)
        c["rows_inserted"] += n
        c["rows_dropped"] += y.size - n
        if n:
            if ids is not None:
                self._ids.add(np.asarray(ids)[:n])
            if n == y.size:
                lo, hi = r_lo, r_hi
            else:
                lo, hi = int(rounds[:n].min()), int(rounds[:n].max())
            for e in range(e0, agg.epoch + 1):
                self._first_round[e] = min(self._first_round.get(e, lo), lo)
                self._last_round[e] = max(self._last_round.get(e, hi), hi)

    # -- privacy and explanation -------------------------------------------------------------------
    @property
    def privacy(self) -> PrivacyStatement:
        cal = self._aggregator(None).calibration(0)
        scope = (
            f"the whole run up to n_cap = {self.n_cap:,} rows (afterwards the release is frozen)"
            if self.horizon_mode == "fixed"
            else "the whole unbounded run: each row enters exactly one doubling epoch's tree; "
            "epochs use disjoint rows and compose in parallel"
        )
        caveats = [
            per_unit_caveat("doubling epochs" if self.horizon_mode == "doubling" else "trees"),
            "A user's own decision uses their decision set and is not protected: reply to that "
            "user only; never publish decisions on a shared topic.",
        ]
        if self.calibration == "zcdp":
            caveats.append(f"zCDP (Bun–Steinke 2016), ρ* = {cal.rho_spent:.6g}.")
        return self._joint_statement(
            calibration=self.calibration,
            rho=cal.rho_spent,
            scope=scope,
            caveats=tuple(caveats),
            label=cal.label,
            noise_backend=self.noise_backend_in_force,
        )

    def explain(self, horizon: int | None = None) -> dict[str, Any]:
        """Every public constant (spec §9), the accountant's check, and the alternatives."""
        from ..privacy.accountant import Accountant

        self._validate()
        agg = self._aggregator(None)
        cal = agg.calibration(0)
        epochs = [cal.to_dict()]
        if self.horizon_mode == "doubling":
            e, start = 1, self.n0
            while horizon is not None and start < horizon and e < 40:
                epochs.append(agg.calibration(e).to_dict())
                start += self.n0 << e
                e += 1
        rec = self._epoch_record_for_explain(cal)
        spend = Accountant([rec]).spend(self.bandit_id, delta=self.delta)
        alternatives: dict[str, dict[str, Any]] = {}
        for name in CALIBRATIONS:
            try:
                other = self._with(calibration=name)._aggregator(None).calibration(0)
            except ValueError as err:
                alternatives[name] = {"unavailable": str(err)}
                continue
            alternatives[name] = {
                "noise": other.noise_law,
                "rho_min": other.rho_min,
                "rho_max": other.rho_max,
                "gamma": other.gamma,
                "dp_valid": other.dp_valid,
                "label": other.label,
            }
        out: dict[str, Any] = {
            "policy": self.name,
            "private": True,
            "model": "joint DP",
            "mechanism": cal.mechanism,
            "tree_impl": cal.tree_impl,
            "calibration": cal.calibration,
            "formula": cal.formula,
            "dp_valid": cal.dp_valid,
            "params": self.public_params(),
            "constants": epochs[0],
            "epochs": epochs if len(epochs) > 1 else None,
            "accountant": {
                "epsilon_at_delta_pld": spend.epsilon_at_delta,
                "delta": self.delta,
                "rho_zcdp": spend.rho,
                "basic_epsilon": spend.basic_epsilon,
            },
            "calibrations_compared": alternatives,
            "privacy_statement": self.privacy.text(),
        }
        if cal.label:
            out["label"] = cal.label
        return out

    def _with(self, **changes: Any) -> DPLinUCB:
        params = self._get_params()
        params.update(changes)
        return type(self)(**params)

    def _epoch_record_for_explain(self, cal: GramCalibration) -> ReleaseRecord:
        return ReleaseRecord(
            release_id="explain",
            bandit_id=self.bandit_id,
            mechanism=cal.mechanism,
            **_calibration_fields(cal),
        )

    # -- persistence -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Complete state: exact sums, node noise, noise key (SENSITIVE: owner-only storage)."""
        self._state()
        return {
            "policy": self.name,
            "params": self._get_params(),
            "tree_impl": self.resolved_tree_impl(),
            "t": self._t,
            "since": self._since,
            "version": self._version,
            "released_at": None if self._released_at is None else list(self._released_at),
            "release": self._release,
            "aggregator": self._agg.state_dict(),
            "noise": self._noise_src.state_dict(),
            "recorded_epochs": sorted(self._recorded_epochs),
            "first_round": {str(k): v for k, v in self._first_round.items()},
            "last_round": {str(k): v for k, v in self._last_round.items()},
            "ids": self._ids.state_dict(),
            "learned_rounds": self._learned.state_dict(),
            "counters": dict(self._counters),
            "bounds": dict(self._bounds),
            "tie_key": self._tie_key,
        }

    def load_state_dict(self, state: dict[str, Any]) -> DPLinUCB:
        self._check_resumed_backend(state)
        # snapshots before the "auto" default record the mechanism only in their parameters
        impl = state.get("tree_impl") or state["params"].get("tree_impl", "binary")
        if self.tree_impl not in ("auto", impl):
            raise ValueError(
                f"the snapshot's continual release is tree_impl={impl!r}, this policy is "
                f"configured with tree_impl={self.tree_impl!r}"
            )
        self._state()
        self._restored_impl = impl
        source = NoiseSource(self.seed, backend=self.noise_backend_in_force)
        self._noise_src = source.load_state_dict(state["noise"])
        self._agg = self._aggregator(self._noise_src).load_state_dict(state["aggregator"])
        self._t = int(state["t"])
        self._since = int(state["since"])
        self._version = int(state["version"])
        ra = state["released_at"]
        self._released_at = None if ra is None else (int(ra[0]), int(ra[1]))
        self._recorded_epochs = {int(e) for e in state["recorded_epochs"]}
        self._first_round = {int(k): int(v) for k, v in state["first_round"].items()}
        self._last_round = {int(k): int(v) for k, v in state["last_round"].items()}
        self._ids = MultisetDigest().load_state_dict(state["ids"])
        self._learned = LearnedRounds.from_state_dict(state.get("learned_rounds"))
        self._counters = dict(state["counters"])
        self._bounds = {k: float(v) if "over" in k else int(v) for k, v in state["bounds"].items()}
        self._tie_key = int(state["tie_key"])
        if state["release"] is None:
            self._release = None
        else:
            repairs = self._counters["cholesky_repairs"]
            assert self._released_at is not None  # a snapshot with a release names its epoch
            epoch = self._released_at[0]
            self._install(
                np.asarray(state["release"], dtype=np.float64), self._agg.calibration(epoch)
            )
            self._counters["cholesky_repairs"] = repairs
        return self
