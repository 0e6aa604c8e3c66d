"""The LDP-GLB server model: absorbs privatised reports, publishes versioned snapshots.

Algorithm 1 (single-parameter) and Algorithm 2 (multi-parameter; spec §5, §6), server side:

* **single**: one LDP-SGD or LDP-OLS estimator; every report updates it.
* **multi, warm-up**: a report carries one block and its public arm; only that arm's estimator
  absorbs it. After ``warmup_rounds`` (= K·s₀) warm-up reports the server **freezes**
  θ̂^w_i = θ̂_{Ks₀,i} for every arm and switches to the main phase. The switch happens at exactly
  that report, whatever the batching; later warm-up reports still update the live estimates,
  never the frozen ones.
* **multi, main**: every report carries K blocks (the pulled arm's data, synthetic ψ(0, 0) for the
  others) and every arm absorbs its block. SGD steps use each arm's own count n_i
  (η = c0/(n_i + n0), A9); the OLS shift uses the global count t (A12).

Everything here is post-processing of reports that were privatised on the devices, so it costs
no privacy. :meth:`LDPServer.publish` solves OLS models (the refresh) and returns the next
:class:`~streaming_dpbandit.ldp.model.ModelSnapshot`; what a snapshot holds is a function of the
reports absorbed and their order only.

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ldp.model import ModelSnapshot, ModelSpec
from ..utils.arrays import ArrayLike, FloatArray, IntArray
from .ldp_ols import LDPOLS, ols_shift_constant
from .ldp_sgd import LDPSGD, project_l2

__all__ = ["LDPServer", "shift_constant"]


def shift_constant(spec: ModelSpec, horizon: int, alpha: float, phase: str = "main") -> float:
    """c̃ of a model (spec §4.2): Thm 3.1 single-parameter, Thm 4.1 multi-parameter, with τ the
    noise scale of the blocks; 2σ_code(…) for the authors' code."""
    tau = spec.tau(phase)
    if spec.ols_noise == "code":  # c_t = 2σ_code√(t+1)(4√d + 2 ln(2T/α)) (spec §11, E2)
        return ols_shift_constant(2.0 * tau, spec.d, horizon, alpha)
    return ols_shift_constant(
        tau, spec.d, horizon, alpha, None if spec.setting == "single" else spec.K
    )


class LDPServer:
    """Server state of one LDP-GLB model.

    Parameters
    ----------
    spec
        The public model configuration.
    c0, n0, weight_decay, batch_size
        LDP-SGD step η = c0/(n + n0), decay (authors' code only) and mini-batch size.
    alpha, horizon
        α and T (``T_max``) of the OLS shift c̃ (spec §4.2, P10).
    ols_shift
        False: no shift, θ̂ = V⁻¹U (the authors' single-parameter code).
    theta0
        Initial estimate: (d,) single-param, (K, d) multi-param (default 0).
    bandit_id, model_id
        Identify the published snapshots.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.ldp import ModelSpec
    >>> spec = ModelSpec(variant="sgd", setting="multi", d=2, K=2, epsilon=1.0, warmup_rounds=2)
    >>> srv = LDPServer(spec, c0=1.0, n0=0.0)
    >>> srv.snapshot().phase, srv.snapshot().model_version
    ('warmup', 0)
    >>> switched = srv.absorb(np.array([[-0.5, 0.0], [0.0, -0.5], [9.0, 9.0]]), "warmup",
    ...                       arms=np.array([0, 1, 0]))
    >>> switched, srv.publish().phase, srv.theta_warmup.tolist()   # frozen after 2 reports
    (True, 'main', [[0.5, 0.0], [0.0, 0.5]])

    """

    def __init__(
        self,
        spec: ModelSpec,
        c0: float = 5.0,
        n0: float = 1.0,
        weight_decay: float = 0.0,
        batch_size: int = 1,
        alpha: float = 0.1,
        horizon: int = 1_000_000,
        ols_shift: bool = True,
        theta0: ArrayLike | None = None,
        bandit_id: str = "default",
        model_id: str = "default",
    ):
        self.spec = spec
        self.c0 = c0
        self.n0 = n0
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.alpha = alpha
        self.horizon = horizon
        self.ols_shift = ols_shift
        self.theta0 = theta0
        self.bandit_id = bandit_id
        self.model_id = model_id
        self._build()

    # -- construction --------------------------------------------------------------------------
    def _theta0(self) -> FloatArray:
        s = self.spec
        shape = (s.d,) if s.setting == "single" else (s.K, s.d)
        if self.theta0 is None:
            return np.zeros(shape)
        out = np.array(self.theta0, dtype=np.float64).reshape(shape)
        for row in np.atleast_2d(out):
            project_l2(row, s.S if self._project() else None)
        return out

    def _project(self) -> bool:
        return self.spec.profile == "paper"

    def _make(self, kind: str, theta0: FloatArray, phase: str) -> LDPSGD | LDPOLS:
        s = self.spec
        S = s.S if self._project() else None
        if kind == "sgd":
            return LDPSGD(s.d, self.c0, self.n0, S, self.weight_decay, self.batch_size, theta0)
        c = shift_constant(s, self.horizon, self.alpha, phase) if self.ols_shift else 0.0
        return LDPOLS(s.d, c, S)

    def _build(self) -> None:
        s = self.spec
        t0 = self._theta0()
        self.version = 0
        self.reports = 0
        self.warm_count = 0
        self.theta_warmup: FloatArray | None = None
        if s.setting == "single":
            self._arms = [self._make(s.variant, t0, "main")]
            self._warm = None
        else:
            self._arms = [self._make(s.variant, t0[i], "main") for i in range(s.K)]
            self._warm = (
                [self._make("ols", t0[i], "warmup") for i in range(s.K)]
                if s.block_variant("warmup") != s.variant
                else None
            )
        self.phase = "warmup" if "warmup" in s.phases() else "main"
        self._published = t0.copy()
        self._published_reports = 0
        self._published_phase = self.phase

    # -- absorbing -----------------------------------------------------------------------------
    def accepts(self, model_version: int, max_staleness: int) -> str | None:
        """None if a report computed against ``model_version`` is usable, else the reason."""
        if model_version > self.version or model_version < 0:
            return "unknown_model_version"
        if self.version - model_version > max_staleness:
            return "stale_report"
        return None

    def _learn(self, est: LDPSGD | LDPOLS, P: FloatArray) -> None:
        if isinstance(est, LDPSGD):
            est.learn_many(P)
        else:
            p = self.spec.p
            est.learn_many(P[:, :p], P[:, p:])

    def _solve(self, est: LDPSGD | LDPOLS, t: int) -> FloatArray:
        if isinstance(est, LDPSGD):
            return est.theta.copy()
        if est.count == 0 and est.c_tilde == 0:
            return np.zeros(self.spec.d)
        return est.solve(t + 1 if self.spec.ols_noise == "code" else t)

    def absorb(self, payloads: ArrayLike, phase: str, arms: ArrayLike | None = None) -> bool:
        """Absorb reports in order; returns True when the warm-up ended among them.

        ``payloads`` is (n, ``spec.payload_size(phase)``); ``arms`` (n,) for warm-up reports.
        """
        s = self.spec
        P = np.atleast_2d(np.asarray(payloads, dtype=np.float64))
        n = P.shape[0]
        if n == 0:
            return False
        if P.shape[1] != s.payload_size(phase):
            raise ValueError(f"{phase} payloads have {s.payload_size(phase)} floats")
        if s.setting == "single":
            self._learn(self._arms[0], P)
            self.reports += n
            return False
        if phase == "main":
            if self.phase != "main":
                raise ValueError("a main-phase report before the end of the warm-up")
            bs = s.block_size("main") if not s.joint("main") else s.d
            for i, est in enumerate(self._arms):
                self._learn(est, P[:, i * bs : (i + 1) * bs])
            self.reports += n
            return False
        arm_idx = np.asarray(arms, dtype=np.int64).reshape(n)
        if np.any((arm_idx < 0) | (arm_idx >= s.K)):
            raise ValueError("arm out of range")
        switched = False
        if self.phase == "warmup":
            k = min(n, s.warmup_rounds - self.warm_count)
            self._learn_warm(P[:k], arm_idx[:k])
            if self.warm_count >= s.warmup_rounds:
                self._freeze()
                switched = True
            P, arm_idx = P[k:], arm_idx[k:]
        if P.shape[0]:
            self._learn_warm(P, arm_idx)  # late warm-up reports: live estimates only
        return switched

    def _learn_warm(self, P: FloatArray, arms: IntArray) -> None:
        ests = self._warm if self._warm is not None else self._arms
        for a in np.unique(arms):
            self._learn(ests[a], P[arms == a])  # order within an arm is kept
        self.warm_count += P.shape[0]
        self.reports += P.shape[0]

    def _freeze(self) -> None:
        if self._warm is not None:  # the code's SGD model starts from the warm-up OLS fit
            theta = np.array([self._solve(w, self.reports) for w in self._warm])
            for est, th in zip(self._arms, theta):
                # a separate warm-up model exists only for OLS warm-up before SGD blocks
                assert isinstance(est, LDPSGD)
                est.theta = th.copy()
        else:
            theta = np.array([self._solve(e, self.reports) for e in self._arms])
        self.theta_warmup = theta
        self.phase = "main"

    # -- publishing ----------------------------------------------------------------------------
    def current_theta(self) -> FloatArray:
        """Solve every arm now (the OLS refresh)."""
        s = self.spec
        if s.setting == "single":
            est = self._arms[0]
            if isinstance(est, LDPOLS) and est.count == 0:
                return self._theta0()  # before the first report, θ̂ = θ̂₀ (spec §4.2)
            return self._solve(est, self.reports)
        if self.phase == "warmup" and self._warm is not None:
            ests = self._warm
        else:
            ests = self._arms
        out = []
        for i, est in enumerate(ests):
            if isinstance(est, LDPOLS) and est.count == 0:
                out.append(self._theta0()[i])
            else:
                out.append(self._solve(est, self.reports))
        return np.array(out)

    def publish(self) -> ModelSnapshot:
        """The next version: refresh the estimates and return their snapshot."""
        self._published = self.current_theta()
        self._published_reports = self.reports
        self._published_phase = self.phase
        self.version += 1
        return self.snapshot()

    def snapshot(self) -> ModelSnapshot:
        """The current published version (version 0: the initial θ̂₀) — as it was published,
        whatever was absorbed since."""
        phase = self._published_phase
        return ModelSnapshot(
            bandit_id=self.bandit_id,
            model_id=self.model_id,
            model_version=self.version,
            spec=self.spec,
            theta=self._published,
            phase=phase,
            theta_warmup=self.theta_warmup if phase == "main" else None,
            reports=self._published_reports,
        )

    @property
    def theta(self) -> FloatArray:
        """The published θ̂ ((d,) or (K, d))."""
        return self._published

    @property
    def pd_fallbacks(self) -> int:
        ests = list(self._arms) + list(self._warm or [])
        return sum(getattr(e, "pd_fallbacks", 0) for e in ests)

    # -- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "reports": self.reports,
            "warm_count": self.warm_count,
            "phase": self.phase,
            "theta_warmup": self.theta_warmup,
            "published": self._published.copy(),
            "published_reports": self._published_reports,
            "published_phase": self._published_phase,
            "arms": [e.state_dict() for e in self._arms],
            "warm": None if self._warm is None else [e.state_dict() for e in self._warm],
        }

    def load_state_dict(self, state: dict[str, Any]) -> LDPServer:
        self.version = int(state["version"])
        self.reports = int(state["reports"])
        self.warm_count = int(state["warm_count"])
        self.phase = str(state["phase"])
        tw = state["theta_warmup"]
        self.theta_warmup = None if tw is None else np.array(tw, dtype=np.float64)
        self._published = np.array(state["published"], dtype=np.float64)
        self._published_reports = int(state["published_reports"])
        self._published_phase = str(state["published_phase"])
        for est, st in zip(self._arms, state["arms"]):
            est.load_state_dict(st)
        if self._warm is not None:
            for est, st in zip(self._warm, state["warm"]):
                est.load_state_dict(st)
        return self
