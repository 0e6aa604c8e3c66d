"""The literal PrivateLASSO of Shukla (2024), Algorithms 1–2 — **no valid privacy guarantee**.

PrivateLASSO spec §4. Simulation only: ``PrivateLASSOPaper(calibration="paper")`` raises unless
``allow_invalid_privacy=True``, every release is recorded with ``dp_valid=False`` and the label
:data:`~streaming_dpbandit.privacy.statement.PAPER_LABEL`, and the configuration layer refuses it
outside ``mode="simulation"``. It exists so that users can observe what the paper's constants do
(``docs/private-lasso.md`` has the worked example):

* the SVT noise ξ ≈ 5×10⁵/ε (no sensitivity factor, D1) swamps coefficients of order 1, so
  every queried coordinate passes with probability ≈ 1/2 (golden table, spec §4.3);
* the threshold noise is redrawn for every query, the comparison is signed and the non-private
  pre-filter S0 leaks (D2);
* the Wishart noise of the (d+1)-dimensional tree has mean k_W·s̃·I with k_W ≈ 4×10⁹ (D3), so θ̂
  points in a noise direction and the regret matches uniform play.

Literal resolutions (spec §4.1): ⌈log T⌉ = ⌈log2 T⌉, other logs natural; C_X = 1, φ² = 0.5,
λ0 = 1, s̃ = B_x² + C_r²; SVT in ascending index order; S1 = ∅ and c = 0 initially; θ̂_t uses
records 1..t−1; S_1 = ∅. The clipping of spec §2 is applied.

Spec: docs/specs/privatelasso.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any, Self

import numpy as np

from ..estimators.lasso import lasso_gram
from ..estimators.trs import trs
from ..privacy.contribution import LearnedRounds, RowRefused
from ..privacy.ledger import ReleaseRecord
from ..privacy.noise import NoiseSource, numpy_stream
from ..privacy.statement import PAPER_LABEL, PrivacyStatement
from ..privacy.tree_aggregator import TreeAggregator
from ..utils.arrays import ArrayLike, BoolArray, FloatArray, IntArray, MaybeArray
from .private_lasso import NEIGHBOURING, PRIVACY_UNIT, PrivateLASSO

__all__ = [
    "PaperConstants",
    "PrivateLASSOPaper",
    "paper_constants",
    "paper_svt",
    "sparse_estimation",
    "wishart",
]


@dataclasses.dataclass
class PaperConstants:
    """The public constants of Algorithm 1–2 at one (T, δ, d, s0, ε) (spec §4.2 ``init``)."""

    Lg: int
    delta1: float
    epsilon1: float
    sbar: float
    cap: float
    epsilon_prime: float
    xi: float
    gamma: float
    k_w: int
    s_tilde: float

    def threshold(self, lam: float) -> float:
        """The SVT threshold 4·λ_t·Γ·√s̄."""
        return 4.0 * lam * self.gamma * math.sqrt(self.sbar)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def paper_constants(
    horizon: int,
    delta: float,
    d: int,
    s0: int,
    epsilon: float,
    reward_bound: float = 1.0,
    c_x: float = 1.0,
    theta_bound: float = 1.0,
    phi2: float = 0.5,
    clip_l2: float = 1.0,
) -> PaperConstants:
    """Algorithm 1 line 2 and Algorithm 2 line 1, literally (spec §4.2).

    The §4.3 golden configuration (T = 2^16, δ = 1e−5, d = 1000, s0 = 5, ε = 1):

    >>> k = paper_constants(2**16, 1e-5, 1000, 5, 1.0)
    >>> f"{k.epsilon1:.4g} {k.xi:.4g} {k.gamma:.4g} {k.sbar:.4g} {k.cap:.4g}"
    '0.002086 4.992e+05 -0.3876 18.89 9.346'
    >>> f"{k.threshold(0.06621):.4f} {k.k_w:.2g}"
    '-0.4462 4.1e+09'
    """
    Lg = (int(horizon) - 1).bit_length()  # ⌈log2 T⌉
    delta1 = delta2 = delta / (2 * Lg)
    epsilon1 = epsilon / (2 * Lg * math.log(1.0 / delta2))
    sbar = 1.0 + 4.0 * reward_bound * c_x * math.sqrt(s0) / phi2
    cap = s0 + math.sqrt(sbar)
    eps_p = epsilon1 / math.sqrt(8.0 * sbar * math.log(1.0 / delta1))
    xi = math.sqrt(32.0 * math.log(1.0 / delta1)) / eps_p
    gamma = (
        (xi * math.log((1.0 - delta) / epsilon) - theta_bound)
        / math.sqrt(math.log(d) * math.log(horizon))
        - 1.0
    ) / math.sqrt(sbar)
    k_w = math.ceil(d * epsilon**-2 * math.log(8.0 * d / delta) * (2.0 / delta))
    return PaperConstants(
        Lg=Lg,
        delta1=delta1,
        epsilon1=epsilon1,
        sbar=sbar,
        cap=cap,
        epsilon_prime=eps_p,
        xi=xi,
        gamma=gamma,
        k_w=k_w,
        s_tilde=clip_l2**2 + reward_bound**2,
    )


def wishart(p: int, scale: float, dof: int, rng: np.random.Generator) -> FloatArray:
    """Wishart_p(scale·I, dof) by the Bartlett decomposition (never dof outer products; P14).

    >>> W = wishart(3, 2.0, 10**9, np.random.default_rng(0))
    >>> bool(abs(W[0, 0] / (2.0 * 10**9) - 1) < 1e-3), bool(np.allclose(W, W.T))
    (True, True)
    """
    A = np.tril(rng.standard_normal((p, p)), k=-1)
    A[np.diag_indices(p)] = np.sqrt(rng.chisquare(dof - np.arange(p)))
    W: FloatArray = scale * (A @ A.T)
    return W


def sparse_estimation(
    G: FloatArray,
    n: int,
    lam: float,
    k: PaperConstants,
    s0: int,
    rng: np.random.Generator,
    tol: float = 1e-4,
) -> dict[str, Any]:
    """Algorithm 2 on the (d+1)² Gram G = Σ wwᵀ (w = [x; r]) of n records, literally.

    Returns the selected S1 and simulation-only diagnostics (the non-private θ̂, S0, and the
    per-query pass record — all secret in a deployment).
    """
    d = G.shape[0] - 1
    if n < 1:
        return {
            "S": np.zeros(0, np.int64),
            "S0": np.zeros(0, np.int64),
            "theta": np.zeros(d),
            "queried": np.zeros(0, np.int64),
            "passed": np.zeros(0, bool),
        }
    # ‖Y − Zθ‖² + λ‖θ‖₁ = 2n·[(1/(2n))‖Y − Zθ‖² + (λ/(2n))‖θ‖₁]: scikit-learn alpha = λ/(2n)
    theta = lasso_gram(G[:d, :d], G[:d, d], float(G[d, d]), n, lam / (2.0 * n), tol=tol)
    S0 = np.nonzero(np.abs(theta) > 4.0 * lam)[0]
    S1, queried, passed = paper_svt(theta, S0, k.threshold(lam), k.xi, k.cap, rng)
    return {"S": S1, "S0": S0, "theta": theta, "queried": queried, "passed": passed}


def paper_svt(
    theta: FloatArray,
    S0: ArrayLike,
    threshold: float,
    xi: float,
    cap: float,
    rng: np.random.Generator,
) -> tuple[IntArray, IntArray, BoolArray]:
    """Alg. 2 lines 4–14 as written: (S1, queried coordinates, their ⊤/⊥).

    The threshold noise is redrawn for every query, the comparison is signed and the loop
    returns once c ≥ s0 + √s̄ (spec D2).

    >>> S1, q, ok = paper_svt(np.array([5.0, -5.0, 5.0]), np.array([0, 1, 2]), 0.0, 1e-3, 9.3,
    ...                       np.random.default_rng(0))
    >>> S1.tolist(), q.tolist(), ok.tolist()
    ([0, 2], [0, 1, 2], [True, False, True])
    """
    S1: list[int] = []
    queried: list[int] = []
    passed: list[bool] = []
    for i in np.asarray(S0, dtype=np.int64).tolist():
        lam_tilde = threshold + rng.laplace(0.0, xi)  # redrawn at every query, as written
        ok = bool(theta[i] + rng.laplace(0.0, 2.0 * xi) > lam_tilde)  # signed, as written
        queried.append(i)
        passed.append(ok)
        if ok:
            S1.append(i)
        if len(S1) >= cap:
            break
    return (
        np.array(S1, dtype=np.int64),
        np.array(queried, dtype=np.int64),
        np.array(passed, dtype=bool),
    )


class PrivateLASSOPaper(PrivateLASSO):
    """Algorithms 1–2 of the paper with its own constants (simulation only, not DP).

    The class of ``calibration="paper"`` (the configuration and
    :func:`~streaming_dpbandit.policies.policy_class` pick it), which it requires, with
    ``allow_invalid_privacy=True``; takes the
    same parameters (``d``, ``s0``, ``horizon``, ``epsilon``, ``delta``, ``clip_coord``,
    ``clip_l2``, ``reward_bound``, ``theta_bound``, ``lambda0`` (default 1), ``phi2``, ``c_x``,
    ``allow_large``, ``bandit_id``, ``seed``); the others are ignored.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.policies import PrivateLASSOPaper
    >>> PrivateLASSOPaper(d=20, s0=2, horizon=64, calibration="paper", clip_l2=4.5,
    ...                   reward_bound=2.0)
    Traceback (most recent call last):
    ...
    ValueError: calibration='paper' has no valid privacy guarantee; ...
    >>> pol = PrivateLASSOPaper(d=20, s0=2, horizon=64, calibration="paper", clip_l2=4.5,
    ...                         reward_bound=2.0, allow_invalid_privacy=True, seed=0)
    >>> type(pol).__name__, pol.privacy.calibration
    ('PrivateLASSOPaper', 'paper')
    >>> rng = np.random.default_rng(0)
    >>> while pol.t < 64:
    ...     if pol.refit_due():
    ...         _ = pol.refit()
    ...     X = rng.uniform(-1, 1, size=(1, 3, 20))
    ...     dec = pol.decide(X)
    ...     pol.learn(X[0, dec.arms], X[0, dec.arms, 0], dec.rounds)
    >>> pol.model_version, pol.explain()["dp_valid"]
    (63, False)

    """

    name = "private-lasso"
    literal_paper = True

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        """The certified parameters of :class:`PrivateLASSO`, with the paper's calibration."""
        for params in super()._unit_test_params():
            yield {**params, "calibration": "paper", "allow_invalid_privacy": True}

    #: the paper's tree over all T slots (built with the state; never None here)
    _tree: TreeAggregator

    # -- constants ---------------------------------------------------------------------------
    @property
    def constants(self) -> PaperConstants:
        return paper_constants(
            self.horizon,
            self.delta,
            self.d,
            self.s0,
            self.epsilon,
            reward_bound=self._cr,
            c_x=self.c_x,
            theta_bound=self.theta_bound,
            phi2=self.phi2,
            clip_l2=self._bx,
        )

    @property
    def lambda_0(self) -> float:
        return float(self.lambda0) if self.lambda0 is not None else 1.0

    def lambda_t(self, t: int) -> float:
        """λ_t = λ0·√(2·ln t·ln d/t) (Alg. 1 line 7)."""
        return self.lambda_0 * math.sqrt(2.0 * math.log(t) * math.log(self.d) / t)

    def _validate(self) -> None:
        if self.clip_l2 is None or self.reward_bound is None:
            raise ValueError("clip_l2 (B_x) and reward_bound (C_r) are required public bounds")
        if not (self.epsilon > 0 and 0 < self.delta < 1 and 1 <= self.s0 <= self.d):
            raise ValueError("need epsilon > 0, 0 < delta < 1 and 1 <= s0 <= d")
        if self.horizon < 2:
            raise ValueError("need horizon >= 2")

    # -- state -------------------------------------------------------------------------------
    def _state(self) -> Self:
        if not hasattr(self, "_noise"):
            self._validate()
            if self.noise_backend == "secure":  # never ignore the setting silently
                raise ValueError(
                    "calibration='paper' (the literal algorithm, simulation only) draws from the "
                    "fast noise backend only; use noise_backend=fast"
                )
            self._t = 0
            self._version = 0
            self._model_for = 1  # slot whose θ̂ is current (θ̂_1 = 0, S_1 = ∅)
            self._S = np.zeros(0, dtype=np.int64)
            self._theta = np.zeros(0)
            self._G = np.zeros((self.d + 1, self.d + 1))  # exact history Gram (secret)
            self._n = 0
            self._noise = NoiseSource(self.seed)
            self._coin_key()
            self._tree = self._make_tree()
            self._diagnostics: list[dict[str, Any]] = []
            self._counters = {
                "clipped_coords": 0,
                "clipped_norms": 0,
                "clipped_rewards": 0,
                "rows_learned": 0,
                "boundaries": 0,
            }
        return self

    def _make_tree(self) -> TreeAggregator:
        k = self.constants
        p = self.d + 1
        noise, bid = self._noise, self.bandit_id

        # issue-once by structure: called once per leaf index j; the leaf count is persisted
        def node_noise(j: int) -> FloatArray:
            return wishart(
                p,
                k.s_tilde,
                k.k_w,
                numpy_stream(noise.generator(bid, "private-lasso-paper", "tree", j, track=False)),
            )

        return TreeAggregator((p, p), node_noise)

    @property
    def diagnostics(self) -> list[dict[str, Any]]:
        """Simulation-only boundary diagnostics (|S0|, queried, passed); secret in a deployment."""
        return list(self._state()._diagnostics)

    def refit_due(self) -> bool:
        self._state()
        return self._model_for != self._t + 1

    def max_decide_batch(self) -> int:
        return 0 if self.refit_due() else 1

    def _decided_episodes(self, rounds: IntArray) -> IntArray:
        return np.zeros(rounds.size, dtype=np.int64)  # the paper's one run: episode 0

    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        X, y, rnd = self._learn_rows(contexts, rewards, rounds)
        order = np.argsort(rnd, kind="stable")
        first = self._tree.count + 1
        if not np.array_equal(rnd[order], np.arange(first, first + rnd.size)):
            # a slot learned before, or twice in this call: refused, nothing learned
            bad = LearnedRounds.from_state_dict(
                {"lo": np.array([1]), "hi": np.array([first - 1])} if first > 1 else None
            ).refused(rnd)
            if bad is not None:
                raise RowRefused(
                    "private-lasso (paper): a slot was already learned; nothing of this call "
                    "was learned",
                    "duplicate_round",
                    bad,
                )
            raise ValueError("the paper variant needs every reward, in slot order")
        for i in order.tolist():
            Xc, yc = self._clip_records(X[i : i + 1], y[i : i + 1])
            w = np.append(Xc[0], yc[0])
            leaf = np.outer(w, w)
            self._G += leaf
            self._n += 1
            self._tree.insert(leaf)
            self._counters["rows_learned"] += 1

    def refit(self) -> list[ReleaseRecord]:
        """Compute θ̂_{t+1} (and S_{t+1} when t+1 ∈ L) from records 1..t."""
        self._state()
        if not self.refit_due():
            return []
        t = self._t + 1
        if self._tree.count != t - 1:
            raise RuntimeError(f"θ̂_{t} needs the rewards of slots 1..{t - 1}")
        records = [self._tree_record()] if self._version == 0 else []
        if t & (t - 1) == 0:  # t ∈ L = {1, 2, 4, …}
            records.append(self._sparse_estimation(t))
        if self._S.size:
            Gt = self._tree.prefix()
            S = self._S
            self._theta = trs(Gt[np.ix_(S, S)], Gt[S, self.d], self.theta_bound)
        self._model_for = t
        self._version += 1
        return records

    def _tree_record(self) -> ReleaseRecord:
        """The paper's tree (TBAP) over all T slots, with the half of (ε, δ) it claims."""
        k = self.constants
        eps, dl = self.epsilon / 2.0, self.delta / 2.0
        return ReleaseRecord(
            release_id=f"{self.bandit_id}/private-lasso-paper/tree",
            bandit_id=self.bandit_id,
            mechanism="paper-wishart-tree",
            calibration="paper",
            formula="paper",
            dp_valid=False,
            epsilon=eps,
            delta=dl,
            accounting=[{"type": "eps_delta", "epsilon": eps, "delta": dl}],
            event_range=(1, int(self.horizon)),
            model_version=1,
            params={"k_w": k.k_w, "s_tilde": k.s_tilde, "dimension": self.d + 1},
            note=PAPER_LABEL,
            privacy_model="joint",
            privacy_unit=PRIVACY_UNIT,
            neighbouring=NEIGHBOURING,
        )

    def _sparse_estimation(self, t: int) -> ReleaseRecord:
        k = self.constants
        lam = self.lambda_t(t)
        rng = numpy_stream(self._noise.generator(self.bandit_id, "private-lasso-paper", "svt", t))
        est = sparse_estimation(self._G, self._n, lam, k, self.s0, rng)
        self._S = np.sort(est["S"])
        self._theta = np.zeros(self._S.size)
        self._counters["boundaries"] += 1
        self._diagnostics.append(
            {
                "t": t,
                "lambda_t": lam,
                "threshold": k.threshold(lam),
                "S0_size": int(est["S0"].size),
                "queried": int(est["queried"].size),
                "passed": int(est["passed"].sum()),
                "support": self._S.tolist(),
            }
        )
        return ReleaseRecord(
            release_id=f"{self.bandit_id}/private-lasso-paper/boundary={t}",
            bandit_id=self.bandit_id,
            mechanism="paper-sparse-estimation",
            calibration="paper",
            formula="paper",
            dp_valid=False,
            epsilon=k.epsilon1,
            delta=k.delta1,
            accounting=[{"type": "eps_delta", "epsilon": k.epsilon1, "delta": k.delta1}],
            event_range=(1, t - 1) if t > 1 else None,
            rows_used=self._n,
            model_version=self._version + 1,
            params={
                "t": t,
                "lambda_t": lam,
                "threshold": k.threshold(lam),
                "xi": k.xi,
                "cap": k.cap,
                **{f"paper_{key}": v for key, v in k.to_dict().items()},
            },
            release={"support": self._S.tolist()},
            note=PAPER_LABEL,
            privacy_model="joint",
            privacy_unit=PRIVACY_UNIT,
            neighbouring=NEIGHBOURING,
        )

    @property
    def privacy(self) -> PrivacyStatement:
        return self._joint_statement(
            calibration="paper",
            scope=(
                "claimed by the paper; NOT valid: the SVT noise has no sensitivity factor, the "
                "pre-filter S0 is not private and the tree's Wishart degrees of freedom are "
                "garbled (PrivateLASSO spec §1, D1–D3)."
            ),
        )

    def explain(self, horizon: int | None = None) -> dict[str, Any]:
        self._validate()
        k = self.constants
        T = int(horizon or self.horizon)
        return {
            "policy": self.name,
            "private": True,
            "calibration": "paper",
            "formula": "paper",
            "dp_valid": False,
            "valid": False,
            "claimed": [self.epsilon, self.delta],
            "label": PAPER_LABEL,
            "params": self.public_params(),
            "constants": k.to_dict(),
            "boundaries": [
                {
                    "t": 1 << j,
                    "lambda_t": self.lambda_t(1 << j) if j else 0.0,
                    "threshold": k.threshold(self.lambda_t(1 << j)) if j else 0.0,
                }
                for j in range(T.bit_length())
                if (1 << j) <= T
            ],
            "privacy_statement": self.privacy.text(),
        }

    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            **self._state_header(),
            "version": self._version,
            "model_for": self._model_for,
            "S": self._S,
            "theta": self._theta,
            "G": self._G,
            "n": self._n,
            "tree": self._tree.state_dict(),
            "noise": self._noise.state_dict(),
            "tie_key": self._tie_key,
            "counters": dict(self._counters),
            "diagnostics": list(self._diagnostics),
        }

    def load_state_dict(self, state: dict[str, Any]) -> PrivateLASSOPaper:
        self._state()
        self._t = int(state["t"])
        self._version = int(state["version"])
        self._model_for = int(state["model_for"])
        self._S = np.asarray(state["S"], dtype=np.int64)
        self._theta = np.asarray(state["theta"], dtype=np.float64)
        self._G = np.asarray(state["G"], dtype=np.float64)
        self._n = int(state["n"])
        self._noise = NoiseSource(self.seed).load_state_dict(state["noise"])
        self._tree = self._make_tree().load_state_dict(state["tree"])
        self._tie_key = int(state["tie_key"])
        self._counters = dict(state["counters"])
        self._diagnostics = list(state.get("diagnostics", []))
        return self
