"""LDP-GLB (Han, Liang, Wang & Zhang 2021): LDP-SGD and LDP-OLS, in simulation.

This policy runs both sides of the local model in one process, for ``dpbandit simulate`` and the
reproductions: the *client* part decides with the published snapshot and privatises each round's
report with the SDK (:mod:`streaming_dpbandit.ldp`), the *server* part
(:class:`~streaming_dpbandit.estimators.ldp_server.LDPServer`) absorbs the reports and publishes
a new snapshot every ``refresh_every`` rounds (1: the paper's per-round update). The service runs
the same two pieces on two sides of Kafka (``stream/local.py``): devices with the SDK, and the
server model fed by the feedback topic.

The guarantee is local and per report: each round's report is ε-LDP (SGD) or (ε, δ)-LDP (OLS)
with respect to that round's whole input (all K contexts, the reward, the arm). Decisions are a
deterministic function of (state, event id): ties are broken by hashed coins, like every policy
of the package; the report noise comes from the policy's own noise stream.

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal, Self

import numpy as np

from ..estimators.ldp_server import LDPServer, shift_constant
from ..ldp.client import eliminate
from ..ldp.links import get_link
from ..ldp.model import AUTHORS_CODE_LABEL, ModelSpec
from ..ldp.preprocess import clip_rewards, normalise_contexts
from ..ldp.randomizers import build_payloads
from ..ldp.user_level import report_components
from ..privacy.contribution import LearnedRounds
from ..privacy.ledger import ReleaseRecord
from ..privacy.noise import NoiseGenerator, NoiseSource
from ..privacy.statement import PrivacyStatement
from ..utils.arrays import ArrayLike, FloatArray, IntArray, MaybeArray
from ._argmax import argmax_ties_by_coins
from .base import DecisionBatch, Policy
from .registry import register

# copy kept (~ fliphat.py): an import list of the same seven parameter types, not code
from .types import (
    AtLeastOne,
    NoiseBackend,
    NonNegative,
    NonNegativeInt,
    OpenUnit,
    Positive,
    PositiveInt,
)

__all__ = ["LDPGLB", "PRIVACY_UNIT", "local_privacy_statement", "local_release_record"]

PRIVACY_UNIT = (
    "one report: one user's whole round — all K candidate contexts, the reward, the chosen arm "
    "and everything derived from them"
)
NEIGHBOURING = "any two inputs of one report (local model: every pair of possible inputs)"


def local_privacy_statement(spec: ModelSpec) -> PrivacyStatement:
    """The statement of an LDP-GLB model (local model, per report)."""
    eps, delta = spec.report_guarantee()
    mech = (
        "the ℓ2-ball mechanism (pure ε-LDP)"
        if spec.variant == "sgd" and spec.warmup_variant == "same"
        else "the Gaussian mechanism on (xxᵀ, r·x)"
    )
    caveats = [
        "A user who sends n reports spends n·ε (basic composition); the client SDK's budget "
        "caps what one device sends.",
        "Arm and reward privacy hold only if the choice happens on the device and the server "
        "never renders the chosen item or observes the conversion.",
        "Reports are sent at a fixed delay after the decision (a timed-out reward is r = 0), so "
        "their timing does not depend on the reward.",
    ]
    if spec.setting == "multi":
        caveats.append(
            "Multi-parameter warm-up reports carry their arm in the clear; it follows a public, "
            "context-independent schedule."
        )
    return PrivacyStatement(
        model="local",
        unit=PRIVACY_UNIT,
        neighbouring=NEIGHBOURING,
        epsilon=eps,
        delta=delta,
        calibration="certified" if spec.profile == "paper" else "authors_code",
        scope=f"each report is privatised on the user's device with {mech} before it is sent; "
        "the server, its logs, metrics, ledger and snapshots only ever hold privatised reports "
        "and their post-processing (the published models).",
        caveats=tuple(caveats),
        label=None if spec.profile == "paper" else AUTHORS_CODE_LABEL,
    )


def local_release_record(
    spec: ModelSpec,
    release_id: str,
    bandit_id: str,
    first: int,
    last: int,
    model_version: int | None = None,
    params: dict[str, Any] | None = None,
    noise_backend: str = "fast",
) -> ReleaseRecord:
    """A ledger record for the reports [first, last] (1-based, inclusive) a model version used.

    ``noise_backend`` is the devices' (the simulated ones' in :class:`LDPGLB`).

    Each report is a separate user's local release; records of disjoint report ranges compose
    in parallel, so the ledger's spend is the per-report guarantee.
    """
    eps, delta = spec.report_guarantee()
    if spec.variant == "sgd" and spec.warmup_variant == "same":
        accounting = [{"type": "pure", "epsilon": eps, "count": 1}]
        mechanism = "ldp/l2-ball" + ("/joint" if spec.multi_sgd_mechanism == "joint" else "")
    else:
        accounting = [{"type": "eps_delta", "epsilon": eps, "delta": delta}]
        mechanism = "ldp/gaussian(xx^T, r x)"
    eps_b, delta_b = spec.block_privacy("main")
    extra: dict[str, Any] = {}
    if spec.profile == "paper" and (
        (spec.variant == "sgd" and spec.warmup_variant == "same") or spec.gaussian != "discrete"
    ):  # one report's exact accounting, for the user-level composition of a user's reports
        extra["report_accounting"] = report_components(spec, 1)
    return ReleaseRecord(
        release_id=release_id,
        bandit_id=bandit_id,
        mechanism=mechanism,
        calibration="certified" if spec.profile == "paper" else "authors_code",
        formula="ldp-glb-" + ("certified-v1" if spec.profile == "paper" else "authors-code"),
        dp_valid=spec.profile == "paper",
        epsilon=eps,
        delta=delta,
        accounting=accounting,
        data_slice=f"reports:{first}-{last}",
        composition="parallel",
        event_range=(first, last),
        rows_used=last - first + 1,
        model_version=model_version,
        params={
            "variant": spec.variant,
            "setting": spec.setting,
            "link": spec.link,
            "d": spec.d,
            "K": spec.K,
            "block_epsilon": eps_b,
            "block_delta": delta_b,
            "per_report": True,
            **extra,
            **(params or {}),
        },
        note=None if spec.profile == "paper" else AUTHORS_CODE_LABEL,
        privacy_model="local",
        privacy_unit=PRIVACY_UNIT,
        neighbouring=NEIGHBOURING,
        noise_backend=noise_backend,
    )


@register
class LDPGLB(Policy):
    """LDP-SGD / LDP-OLS, single- or multi-parameter (client and server in one process).

    Parameters
    ----------
    d
        Segment (single) or context (multi) dimension.
    n_arms
        K (required for multi-param; informational for single-param).
    variant, setting, link, epsilon, delta, gaussian, context_scale, c_r, R, S,
    multi_sgd_mechanism, warmup_rounds, warmup_arm, h, profile
        As in :class:`~streaming_dpbandit.ldp.model.ModelSpec` (spec §2).
    c0, n0, weight_decay, batch_size
        LDP-SGD step η = c0/(n + n0) (n counts the current report), decay and mini-batch.
    alpha, horizon
        α and T_max of the OLS shift c̃.
    ols_shift
        False: θ̂ = V⁻¹U without shift (the authors' single-parameter code).
    refresh_every
        Rounds per published snapshot (1: per round, the paper).
    theta0, theta_prior
        Initial estimate: ``"zero"``, ``"random"`` (a unit vector per arm, fixed by the seed,
        as the authors' code), or ``"prior"`` (``theta_prior``, a public prior).
    normalise, clip_reward, score_clip, ols_noise, code_sigma_factor, ball_dim,
    warmup_variant
        ``authors_code`` reproduction switches (see ModelSpec).
    pending_capacity
        Rounds whose decision info is kept for delayed learning.
    bandit_id
        Name used in ledger records and noise-stream labels.
    seed
        Seeds the report noise, the tie-break coins and a random θ̂₀.
    noise_backend
        The simulated devices' noise: ``"auto"`` (default: ``"fast"``, as the client SDK's
        default — the devices draw, and a device pins its own backend), ``"fast"`` (numpy) or
        ``"secure"`` (as ``LDPClient(noise_backend="secure")``: each batch of reports from its
        own keyed secure stream; OLS needs ``gaussian="discrete"``).
        docs/privacy/secure-noise.md.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> theta = np.array([0.6, 0.8])
    >>> pol = LDPGLB(d=2, n_arms=5, variant="sgd", epsilon=1.0, c0=2.0, seed=0)
    >>> while pol.t < 3000:
    ...     if pol.refit_due():
    ...         _ = pol.refit()
    ...     X = rng.normal(size=(1, 5, 2))
    ...     X /= np.linalg.norm(X, axis=2, keepdims=True)
    ...     dec = pol.decide(X)
    ...     x = X[0, dec.arms]
    ...     pol.learn(x, x @ theta, dec.rounds)
    >>> bool(pol.coefficients @ theta > 0.4)  # aligned with θ* (seeds give 0.49–0.99 at ε = 1)
    True
    >>> pol.privacy.model, pol.privacy.epsilon
    ('local', 1.0)

    """

    name = "ldp-glb"
    #: a configuration gives a prior as one flat list (reshaped per arm)
    config_types: ClassVar[Mapping[str, Any]] = {"theta_prior": list[float] | None}

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "n_arms": 3, "epsilon": 4.0}

    private = True

    def secure_by_default(self) -> bool:
        """Never by default: the noise is drawn on the devices (the client SDK's
        ``LDPClient(noise_backend="secure")``), which the server cannot see; ``serve``'s
        in-process simulated devices stay on the fast backend."""
        return False

    def simulation_only(self) -> str | None:
        if self.profile == "authors_code":
            return (
                "ldp-glb profile=authors_code reproduces the authors' experiments and is refused "
                "outside mode=simulation (LDP-GLB spec §0, §15.8)"
            )
        return None

    # copy kept (~ LDPServer, which it configures): River idiom, a constructor stores its params
    def __init__(
        self,
        d: PositiveInt,
        n_arms: PositiveInt = 2,
        variant: Literal["sgd", "ols"] = "sgd",
        setting: Literal["single", "multi"] = "single",
        link: Literal["linear", "logistic", "poisson"] = "linear",
        epsilon: Positive = 1.0,
        delta: OpenUnit = 0.01,
        gaussian: Literal["classical", "analytic", "discrete"] = "classical",
        context_scale: Positive = 1.0,
        c_r: Positive = 1.0,
        R: Positive | None = None,
        S: Positive = 1.0,
        c0: Positive = 5.0,
        n0: NonNegative = 1.0,
        weight_decay: NonNegative = 0.0,
        batch_size: AtLeastOne = 1,
        alpha: OpenUnit = 0.1,
        horizon: AtLeastOne = 1_000_000,
        ols_shift: bool = True,
        refresh_every: AtLeastOne = 1,
        warmup_rounds: NonNegativeInt = 0,
        warmup_arm: Literal["ticket", "uniform"] = "ticket",
        h: Positive | None = None,
        multi_sgd_mechanism: Literal["per_arm", "joint"] = "per_arm",
        theta0: Literal["zero", "random", "prior"] = "zero",
        theta_prior: list[float] | list[list[float]] | None = None,
        profile: Literal["paper", "authors_code"] = "paper",
        normalise: bool = True,
        clip_reward: bool = True,
        score_clip: Positive | None = None,
        ols_noise: Literal["certified", "code"] = "certified",
        code_sigma_factor: Positive = 6.0,
        ball_dim: AtLeastOne | None = None,
        warmup_variant: Literal["same", "ols"] = "same",
        pending_capacity: AtLeastOne = 1 << 16,
        bandit_id: str = "default",
        seed: int | None = None,
        noise_backend: NoiseBackend = "auto",
    ):
        self.d = d
        self.n_arms = n_arms
        self.variant = variant
        self.setting = setting
        self.link = link
        self.epsilon = epsilon
        self.delta = delta
        self.gaussian = gaussian
        self.context_scale = context_scale
        self.c_r = c_r
        self.R = R
        self.S = S
        self.c0 = c0
        self.n0 = n0
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.alpha = alpha
        self.horizon = horizon
        self.ols_shift = ols_shift
        self.refresh_every = refresh_every
        self.warmup_rounds = warmup_rounds
        self.warmup_arm = warmup_arm
        self.h = h
        self.multi_sgd_mechanism = multi_sgd_mechanism
        self.theta0 = theta0
        self.theta_prior = theta_prior
        self.profile = profile
        self.normalise = normalise
        self.clip_reward = clip_reward
        self.score_clip = score_clip
        self.ols_noise = ols_noise
        self.code_sigma_factor = code_sigma_factor
        self.ball_dim = ball_dim
        self.warmup_variant = warmup_variant
        self.pending_capacity = pending_capacity
        self.bandit_id = bandit_id
        self.seed = seed
        self.noise_backend = noise_backend

    # -- construction --------------------------------------------------------------------------
    def _validate(self) -> None:
        if self.theta0 == "prior":
            n = self.d if self.setting == "single" else self.d * self.n_arms
            if self.theta_prior is None or len(self.theta_prior) != n:
                raise ValueError(f"theta0=prior needs theta_prior with {n} numbers")
        if not self.ols_shift and self.profile != "authors_code":
            raise ValueError("ols_shift=false is a reproduction switch of profile=authors_code")
        self.model_spec()  # every rule of the model spec (ε ≤ 1 per Gaussian if classical, ...)

    def model_spec(self) -> ModelSpec:
        """The public model configuration (what clients receive in every snapshot)."""
        return ModelSpec(
            variant=self.variant,
            setting=self.setting,
            d=self.d,
            K=self.n_arms,
            epsilon=self.epsilon,
            delta=self.delta if (self.variant == "ols" or self.warmup_variant == "ols") else 0.0,
            link=self.link,
            gaussian=self.gaussian,
            context_scale=self.context_scale,
            c_r=self.c_r,
            R=self.R,
            S=self.S,
            multi_sgd_mechanism=self.multi_sgd_mechanism,
            warmup_rounds=self.warmup_rounds if self.setting == "multi" else 0,
            warmup_arm=self.warmup_arm,
            h=self.h,
            profile=self.profile,
            normalise=self.normalise,
            clip_reward=self.clip_reward,
            score_clip=self.score_clip,
            ols_noise=self.ols_noise,
            code_sigma_factor=self.code_sigma_factor,
            ball_dim=self.ball_dim,
            warmup_variant=self.warmup_variant,
        )

    def initial_theta(self, spec: ModelSpec) -> FloatArray | None:
        shape = (spec.d,) if spec.setting == "single" else (spec.K, spec.d)
        if self.theta0 == "zero":
            return None
        if self.theta0 == "prior":
            if self.theta_prior is None:
                raise ValueError("theta0='prior' needs theta_prior")
            return np.array(self.theta_prior, dtype=np.float64).reshape(shape)
        if self.theta0 == "random":
            rng = np.random.default_rng([0 if self.seed is None else int(self.seed), 0x7E7A])
            g = rng.standard_normal(shape)
            theta: FloatArray = g / np.linalg.norm(g, axis=-1, keepdims=True)
            return theta
        raise ValueError("theta0 must be 'zero', 'random' or 'prior'")

    def _state(self) -> Self:
        if not hasattr(self, "_server"):
            if self.profile not in ("paper", "authors_code"):
                raise ValueError("profile must be 'paper' or 'authors_code'")
            if self.refresh_every < 1 or self.pending_capacity < 1:
                raise ValueError("refresh_every and pending_capacity must be >= 1")
            spec = self.model_spec()
            self._spec = spec
            self._server = LDPServer(
                spec,
                c0=self.c0,
                n0=self.n0,
                weight_decay=self.weight_decay,
                batch_size=self.batch_size,
                alpha=self.alpha,
                horizon=self.horizon,
                ols_shift=self.ols_shift,
                theta0=self.initial_theta(spec),
                bandit_id=self.bandit_id,
                model_id=f"{self.bandit_id}-sim",
            )
            self._t = 0
            self._since = 0
            self._switch_due = False
            self._recorded = False
            self._mechs: dict[tuple[str, str], Any] = {}
            cap = self.pending_capacity
            self._ring_arm = np.full(cap, -1, dtype=np.int64)
            self._ring_version = np.full(cap, -1, dtype=np.int64)
            self._ring_round = np.full(cap, -1, dtype=np.int64)
            self._snaps = {0: self._server.snapshot()}
            self._refs: dict[int, int] = {}
            #: rounds reported (or forgotten): each round's device reports once
            self._learned = LearnedRounds()
            if self.noise_backend not in ("auto", "fast", "secure"):
                raise ValueError("noise_backend must be 'auto', 'fast' or 'secure'")
            secure = self.noise_backend_in_force == "secure"
            refusal = self._spec.secure_refusal() if secure else None
            if refusal:
                raise ValueError(refusal)
            self._noise = NoiseSource(self.seed).generator("ldp-glb", "clients")
            self._secure_noise = NoiseSource(self.seed, backend="secure")
            self._secure_batches = 0
            self._coin_key()
            self._counters = {"reports": 0, "expired_feedback": 0, "clipped_rewards": 0}
        return self

    # -- schedule -------------------------------------------------------------------------------
    def refit_due(self) -> bool:
        self._state()
        return self._since >= self.refresh_every or (self._switch_due and self._since > 0)

    def max_decide_batch(self) -> int:
        self._state()
        return max(0, self.refresh_every - self._since)

    def refit(self) -> list[ReleaseRecord]:
        """Publish the next snapshot (the server's refresh); the first call also returns the
        ledger record of the per-report local guarantee."""
        self._state()
        if not self.refit_due():
            return []
        snap = self._server.publish()
        self._snaps[snap.model_version] = snap
        self._prune()
        self._since = 0
        self._switch_due = False
        if self._recorded:
            return []
        self._recorded = True
        return [
            local_release_record(
                self._spec,
                f"{self.bandit_id}/ldp-glb/per-report",
                self.bandit_id,
                1,
                max(1, self._t),
                params={"simulation": True},
                noise_backend=self.noise_backend_in_force,
            )
        ]

    def _prune(self) -> None:
        """Forget snapshots that no undelivered round refers to (except the current one)."""
        cur = self._server.version
        for v in [v for v, n in self._refs.items() if n <= 0 and v != cur]:
            del self._refs[v]
            self._snaps.pop(v, None)

    @property
    def model_version(self) -> int:
        return self._state()._server.version

    @property
    def coefficients(self) -> FloatArray:
        """The published θ̂ ((d,) single-param, (K, d) multi-param)."""
        return self._state()._server.theta.copy()

    @property
    def counters(self) -> dict[str, Any]:
        st = self._state()
        return {**st._counters, "ols_pd_fallbacks": st._server.pd_fallbacks}

    # -- the client side ------------------------------------------------------------------------
    def _client_contexts(self, X: FloatArray) -> FloatArray:
        spec = self._spec
        return normalise_contexts(X, spec.context_scale) if spec.normalise else X

    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X, rounds = self._decide_batch(X)
        B, K, _ = X.shape
        spec = self._spec
        snap = self._snaps[self._server.version]
        if spec.setting == "multi" and K != spec.K:
            raise ValueError(f"this policy has n_arms = {spec.K}")
        if spec.setting == "multi" and snap.phase == "warmup":
            if spec.warmup_arm == "ticket":
                arms = (rounds - 1) % spec.K
            else:
                coins = self._coins(rounds, event_ids)
                arms = np.minimum((coins * spec.K).astype(np.int64), spec.K - 1)
            prop = np.full(B, 1.0 / spec.K)
        else:
            Xn = self._client_contexts(X)
            if spec.setting == "single":
                scores = Xn @ snap.theta
                allowed = None
            else:
                scores = np.einsum("bkd,kd->bk", Xn, snap.theta)
                # the main phase of the multi-arm setting has the frozen warm-up model
                assert snap.theta_warmup is not None
                allowed = eliminate(Xn, snap.theta_warmup, spec.h)
            if mask is not None:
                m = np.asarray(mask, dtype=bool)
                allowed = m if allowed is None else (allowed & m)
            if allowed is not None:
                scores = np.where(allowed, scores, -np.inf)
            ids = None if event_ids is None else np.asarray(event_ids)

            def coins_for(
                rows: IntArray,
            ) -> FloatArray:  # hashed only where a tie needs breaking (θ̂ = 0 at start)
                return self._coins(rounds[rows], None if ids is None else ids[rows])

            arms, prop = argmax_ties_by_coins(scores, coins_for)
        if getattr(self, "_frozen_eval", False):  # decide_frozen: nothing is pending
            return DecisionBatch(
                arms, prop, rounds, np.zeros(B, dtype=np.int64), snap.model_version
            )
        slots = rounds % self.pending_capacity
        lost = self._ring_round[slots] >= 0  # undelivered rounds pushed out of the ring
        if lost.any():
            for v in self._ring_version[slots][lost].tolist():
                self._refs[v] = self._refs.get(v, 0) - 1
        self._ring_arm[slots] = arms
        self._ring_version[slots] = snap.model_version
        self._ring_round[slots] = rounds
        self._refs[snap.model_version] = self._refs.get(snap.model_version, 0) + B
        self._t += B
        self._since += B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), snap.model_version)

    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        """Each round's client builds its report; the server absorbs them in round order."""
        self._state()
        spec = self._spec
        X = np.atleast_2d(np.asarray(contexts, dtype=np.float64))
        y = np.asarray(rewards, dtype=np.float64).reshape(-1)
        rounds = np.asarray(rounds, dtype=np.int64).reshape(-1)
        if X.shape != (y.size, self.d) or rounds.size != y.size:
            raise ValueError("learn expects contexts (B, d), rewards (B,) and rounds (B,)")
        if y.size == 0:
            return
        if rounds.max() > self._t:
            raise ValueError("learn() got a round that was never decided")
        # one report per round (each is ε-LDP on its own; a second fresh report of the same
        # round would cost its user ε again): a round reported before, or twice in this call,
        # is refused and nothing of the call is reported. Rounds out of the ring are never
        # reported, so they need no record.
        self._learned.forget_below(self._t - self.pending_capacity + 1)
        self._learned.claim(rounds, "ldp-glb")
        slots = rounds % self.pending_capacity
        known = self._ring_round[slots] == rounds
        if not known.all():
            self._counters["expired_feedback"] += int((~known).sum())
            X, y, rounds, slots = X[known], y[known], rounds[known], slots[known]
        arms = self._ring_arm[slots]
        versions = self._ring_version[slots]
        Xn = self._client_contexts(X)
        if spec.clip_reward:
            r = clip_rewards(y, get_link(spec.link), spec.c_r)
            self._counters["clipped_rewards"] += int(np.count_nonzero(r != y))
        else:
            r = y
        self._ring_round[slots] = -1  # each round reports once
        for v in versions.tolist():
            self._refs[v] -= 1
        start = 0
        n = y.size
        while start < n:  # runs of rounds decided with the same snapshot, in round order
            v = versions[start]
            end = start + 1
            while end < n and versions[end] == v:
                end += 1
            snap = self._snaps[int(v)]
            sl = slice(start, end)
            P = build_payloads(
                spec,
                snap.phase,
                snap.theta,
                arms[sl],
                Xn[sl],
                r[sl],
                self._client_rng(),
                self._mechs,
            )
            if self._server.absorb(P, snap.phase, arms[sl] if snap.phase == "warmup" else None):
                self._switch_due = True
            start = end
        self._counters["reports"] += n

    def forget_rounds(self, rounds: ArrayLike) -> None:
        """Rounds that will never report (user level: their device's bound was reached): free
        their decision info and the snapshots only they referred to. Nothing is learned."""
        self._state()
        rounds = np.asarray(rounds, dtype=np.int64).reshape(-1)
        rounds = np.unique(rounds)
        self._learned.add_new(rounds)  # never reported
        slots = rounds % self.pending_capacity
        known = self._ring_round[slots] == rounds
        for v in self._ring_version[slots][known].tolist():
            self._refs[v] -= 1
        self._ring_round[slots[known]] = -1

    def _client_rng(self) -> NoiseGenerator:
        """The simulated devices' noise: the fast stream, or a fresh secure stream per batch
        (labelled by a persisted batch counter: a restored policy continues, never repeats)."""
        if self.noise_backend_in_force != "secure":
            return self._noise
        k = self._secure_batches
        self._secure_batches = k + 1
        return self._secure_noise.generator("ldp-glb", "clients", k, track=False)

    # -- description ----------------------------------------------------------------------------
    @property
    def privacy(self) -> PrivacyStatement:
        return local_privacy_statement(self._state()._spec)

    def explain(self, horizon: int | None = None) -> dict[str, Any]:
        spec = self._state()._spec
        out = {
            "policy": self.name,
            "private": True,
            "privacy_model": "local",
            "params": self.public_params(),
            "report_guarantee": dict(zip(("epsilon", "delta"), spec.report_guarantee())),
            "constants": spec.constants(),
            "payload_floats": {ph: spec.payload_size(ph) for ph in spec.phases()},
            "statement": self.privacy.text(),
        }
        if spec.variant == "ols" and self.ols_shift:
            out["ols_shift_constant"] = shift_constant(spec, self.horizon, self.alpha)
        return out

    def _get_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._init_param_names()}

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            "policy": self.name,
            "params": self.public_params(),
            "t": self._t,
            "since": self._since,
            "switch_due": self._switch_due,
            "recorded": self._recorded,
            "server": self._server.state_dict(),
            "ring": [self._ring_arm.copy(), self._ring_version.copy(), self._ring_round.copy()],
            "snapshots": {str(v): s.to_dict() for v, s in self._snaps.items()},
            "refs": {str(v): n for v, n in self._refs.items()},
            "noise": self._noise.bit_generator.state,
            "secure_batches": self._secure_batches,
            "learned_rounds": self._learned.state_dict(),
            "tie_key": self._coin_key(),
            "counters": dict(self._counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> LDPGLB:
        from ..ldp.model import ModelSnapshot

        self._state()
        self._t = int(state["t"])
        self._since = int(state["since"])
        self._switch_due = bool(state["switch_due"])
        self._recorded = bool(state["recorded"])
        self._server.load_state_dict(state["server"])
        self._ring_arm, self._ring_version, self._ring_round = (
            np.array(a, dtype=np.int64) for a in state["ring"]
        )
        self._snaps = {int(v): ModelSnapshot.from_dict(s) for v, s in state["snapshots"].items()}
        self._refs = {int(v): int(n) for v, n in state["refs"].items()}
        self._noise.bit_generator.state = state["noise"]
        self._secure_batches = int(state.get("secure_batches", 0))
        self._learned = LearnedRounds.from_state_dict(state.get("learned_rounds"))
        self._tie_key = int(state["tie_key"])
        self._counters = dict(state["counters"])
        return self
