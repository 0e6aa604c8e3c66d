"""End-to-end privacy audits that can fail the accounting (DESIGN §7; issue 31 item 4).

Each audit drives a policy's real release path — ``decide``, ``learn`` (clipping, exact
accumulation), ``refit`` (sensitivity, accountant, noise) — on a worst-case neighbouring pair
(D, D′), then draws many more releases of the same mechanism on the same inputs, vectorised over
trials with the product's own samplers, and turns the outcomes into a lower bound on ε with
confidence 1 − α (α = 0.05): a distinguishing test with Clopper–Pearson bounds
(:func:`~..privacy.audit.audit`: the event is chosen on a pilot sample, its frequencies are
counted on fresh runs). The claim audited is the tightest the product states for the release:
the smaller of the policy's privacy statement and the ledger's accountant of record at the
audited δ.

Each audited mechanism is run with its real calibration (expected: no lower bound above the
claim) and with *mutants* (expected: caught, lower bound above the claim). A mutant is injected
into the real code path — policy parameters such as ``noise_scale_multiplier``, or a patched
accountant / calibration function — never re-implemented here.

Three mechanisms, each in the configuration where its accountant is tight on the pair (the
method, the pairs, the validity argument and the measured table are in
``docs/privacy/audits.md``, "End-to-end audits"):

``fliphat``
    One N-IHT fit (M = 1) with Peeling (s = 1), the product's contribution clip and PLD
    accountant, δ = 10⁻⁶. Under D the d coordinates of (2η/n)h are equal; under D′ the changed
    row lowers coordinate 0 by λ and raises the others by λ. The output (index j, value y) has
    privacy loss 3ρ (ρ = λ/ξ) on {j = 0, y ≥ v₀} — 2ρ for the selection, ρ for the value —
    which is exactly what the accountant charges, so a scale from a wrong accountant shows.
    Mutants: a selection charged ρ instead of 2ρ (1.5× less noise), selections charged nothing
    (3× less), halved noise.
``dp-linucb``
    DP-LinUCB's continual release with BLT: all T releases of the Gram prefix sums, row 1
    changed (reward +B̃ vs −B̃, attaining L̃²), scored by the exact Neyman–Pearson statistic of the
    Gaussian releases. Mutants: the sensitivity counted in one release instead of ‖C‖_{1→2}
    over all releases (under-counted composition), a sensitivity without the reward clip
    (L² instead of L² + B̃²), halved noise.
``private-lasso``
    PrivateLASSO-R in episodic mode: slot 1 enters every boundary's snapshot Gram release
    (support ``full``; the split gives the snapshots almost all of ρ), reward +C_r vs −C_r.
    Mutants: the snapshots calibrated as if a slot entered one of them (under-counted
    composition over the n_E boundaries), a sensitivity without the reward clip, halved noise.

Adding a mechanism or a mutant: write a ``setup(params) -> Trials`` that drives the policy built
with ``params`` through its release path and returns the claim and a vectorised sampler of scores,
then :func:`register` an :class:`AuditedMechanism` with its mutants (``HALVED_NOISE`` works for
every policy with ``noise_scale_multiplier``; a wrong calibration is a :class:`Mutant` with
``patches``). docs/privacy/audits.md walks through it.

Run ``dpbandit audit`` (``--quick`` for the CI profile, ``--json FILE`` for the report).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from unittest import mock

import numpy as np

from ..privacy.audit import AuditResult, audit

__all__ = [
    "ALPHA",
    "HALVED_NOISE",
    "MECHANISMS",
    "PROFILES",
    "REAL",
    "AuditedMechanism",
    "EndToEndResult",
    "Mutant",
    "Trials",
    "gaussian_power",
    "register",
    "run_audits",
    "run_one",
    "stated_claim",
]

#: Probability that a mechanism meeting its claim is flagged (confidence 1 − α = 95 %).
ALPHA = 0.05
#: Runs per dataset of the final estimate, per profile (the pilot adds a quarter).
PROFILES = ("quick", "full")

Sampler = Callable[[int, int, np.random.Generator], np.ndarray]


# -- mutants ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Mutant:
    """A variant of the release path: policy parameters and patched functions.

    Parameters
    ----------
    name
        Short name (``"real"`` for the product's own calibration).
    what
        One line saying what the variant changes.
    params
        Policy parameters of the variant (e.g. ``{"noise_scale_multiplier": 0.5}``).
    patches
        ``(target, replacement)`` pairs for :func:`unittest.mock.patch`: the dotted name where
        the release path looks the function up, and the wrong function.
    expect
        ``"pass"`` (no lower bound above the claim) or ``"caught"``.
    """

    name: str
    what: str
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    patches: tuple[tuple[str, Any], ...] = ()
    expect: str = "caught"

    @contextlib.contextmanager
    def active(self, caches: tuple[str, ...] = ()) -> Iterator[None]:
        """Apply the patches; clear ``caches`` (dotted names of functools caches of the
        calibration) on entry and again after the patches are undone."""
        with contextlib.ExitStack() as stack:
            stack.callback(_clear_caches, caches)  # runs last: after the patches are undone
            for target, new in self.patches:
                stack.enter_context(mock.patch(target, new))
            _clear_caches(caches)
            yield


def _resolve(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _clear_caches(caches: tuple[str, ...]) -> None:
    for name in caches:
        _resolve(name).cache_clear()


REAL = Mutant("real", "the product's calibration", expect="pass")
HALVED_NOISE = Mutant(
    "halved-noise",
    "every noise scale × ½ (noise_scale_multiplier=0.5)",
    {"noise_scale_multiplier": 0.5},
)


# -- what a mechanism's set-up returns -------------------------------------------------------------
@dataclasses.dataclass
class Trials:
    """The claim of a release and a vectorised sampler of its outcomes.

    ``sampler(which, k, rng)`` draws k releases on D (``which=0``) or D′ (``which=1``) and
    returns one score per release (any function of the release; the audit thresholds it).
    ``facts`` are reported with the result (noise scale, attained sensitivity, …).
    """

    epsilon: float
    delta: float
    sampler: Sampler
    facts: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class AuditedMechanism:
    """One end-to-end audit: a set-up, its mutants, its runs per profile.

    ``setup(params)`` is called inside each variant's patches with the variant's policy
    parameters; ``caches`` are the calibration caches that a patch must not see stale.
    """

    name: str
    title: str
    setup: Callable[[Mapping[str, Any]], Trials]
    mutants: tuple[Mutant, ...]
    runs: Mapping[str, int]
    seed: int
    caches: tuple[str, ...] = ()

    @property
    def variants(self) -> tuple[Mutant, ...]:
        return (REAL, *self.mutants)


MECHANISMS: dict[str, AuditedMechanism] = {}


def register(mechanism: AuditedMechanism) -> AuditedMechanism:
    """Add an audited mechanism to :data:`MECHANISMS` (names are unique)."""
    if mechanism.name in MECHANISMS:
        raise ValueError(f"an audit named {mechanism.name!r} is already registered")
    if {"quick", "full"} - set(mechanism.runs):
        raise ValueError("runs needs a count for the quick and the full profile")
    MECHANISMS[mechanism.name] = mechanism
    return mechanism


@dataclasses.dataclass
class EndToEndResult:
    """One variant of one mechanism, audited."""

    mechanism: str
    variant: str
    what: str
    expect: str
    result: AuditResult
    facts: dict[str, Any]
    seconds: float

    @property
    def caught(self) -> bool:
        """The lower bound exceeds the claim."""
        return not self.result.passed

    @property
    def ok(self) -> bool:
        """The outcome is the expected one (real: not caught; mutant: caught)."""
        return self.caught == (self.expect == "caught")

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "mechanism": self.mechanism,
            "variant": self.variant,
            "what": self.what,
            "expect": self.expect,
            "claimed_epsilon": r.claimed_epsilon,
            "claimed_delta": r.claimed_delta,
            "epsilon_lb": r.epsilon_lb,
            "confidence": 1.0 - r.alpha,
            "caught": self.caught,
            "ok": self.ok,
            "runs_per_side": r.n,
            "event": {"orientation": r.orientation, "threshold": r.threshold},
            "p_hat": r.p_hat,
            "q_hat": r.q_hat,
            "facts": self.facts,
            "seconds": self.seconds,
        }


def run_one(
    mechanism: AuditedMechanism, variant: Mutant, runs: int, alpha: float = ALPHA
) -> EndToEndResult:
    """Audit one variant: drive the release path under the variant, then run the trials."""
    t0 = time.perf_counter()
    with variant.active(mechanism.caches):
        trials = mechanism.setup(dict(variant.params))
        seed = mechanism.seed * 100 + [v.name for v in mechanism.variants].index(variant.name)
        res = audit(
            trials.sampler,
            trials.epsilon,
            trials.delta,
            runs,
            np.random.default_rng(seed),
            alpha=alpha,
            name=f"{mechanism.name} {variant.name}",
        )
    return EndToEndResult(
        mechanism=mechanism.name,
        variant=variant.name,
        what=variant.what,
        expect=variant.expect,
        result=res,
        facts=trials.facts,
        seconds=time.perf_counter() - t0,
    )


def run_audits(
    profile: str = "quick",
    mechanisms: list[str] | None = None,
    progress: bool = False,
    alpha: float = ALPHA,
) -> list[EndToEndResult]:
    """Run every variant of the named mechanisms (default: all) with the profile's runs."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}")
    names = list(MECHANISMS) if mechanisms is None else mechanisms
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        raise ValueError(f"unknown audit {unknown[0]!r}; choose from {', '.join(MECHANISMS)}")
    jobs = [(MECHANISMS[n], v) for n in names for v in MECHANISMS[n].variants]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), unit="audit", desc="end-to-end audits")
    out = []
    try:
        for mech, variant in jobs:
            if bar is not None:
                bar.set_postfix_str(f"{mech.name} {variant.name}")
            out.append(run_one(mech, variant, mech.runs[profile], alpha))
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    return out


def gaussian_power(
    ratio: float, epsilon: float, delta: float, n: int, alpha: float = ALPHA
) -> float:
    """Expected ε lower bound when a claim (ε, δ) of a Gaussian mechanism is audited by the best
    threshold test with n runs per side, and the mechanism has ``ratio`` × the claimed μ.

    The claim is μ-GDP with δ_μ(ε) = δ (exact: the certified calibrations); the mechanism is
    (ratio·μ)-GDP and the score its exact privacy-loss statistic, N(ratio·μ, 1) under D and
    N(0, 1) under D′. For each threshold the counts are their expectations; the result is the
    best Clopper–Pearson bound over thresholds (docs/privacy/audits.md, "Power").

    At δ = 10⁻⁶ a 1.5× under-noised mechanism is not caught with 10⁵ runs; at δ = 10⁻² it is:

    >>> round(gaussian_power(1.5, 1.0, 1e-6, 100_000), 2)
    0.85
    >>> round(gaussian_power(1.5, 1.0, 1e-2, 100_000), 2)
    1.6
    """
    from scipy import stats

    from ..privacy.audit import clopper_pearson_many
    from ..privacy.gaussian import analytic_gaussian_sigma

    mu = ratio / analytic_gaussian_sigma(epsilon, delta, 1.0)
    z = np.linspace(-4.0, 10.0, 1401)
    k_p = np.floor(stats.norm.sf(z - mu) * n).astype(np.int64)
    k_q = np.floor(stats.norm.sf(z) * n).astype(np.int64)
    p_lo, q_hi = clopper_pearson_many(k_p, k_q, n, n, alpha / 2)
    ok = p_lo > delta
    if not ok.any():
        return 0.0
    return float(max(0.0, np.log((p_lo[ok] - delta) / q_hi[ok]).max()))


# -- helpers shared by the set-ups -----------------------------------------------------------------
@contextlib.contextmanager
def _spy(owner: Any, name: str, snapshot: Callable[..., Any] | None = None) -> Iterator[list]:
    """Record every call of ``owner.name`` (args, result; ``snapshot(*args)`` taken before the
    call) while still running the real function."""
    calls: list = []
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = None if snapshot is None else snapshot(*args, **kwargs)
        out = original(*args, **kwargs)
        calls.append((args, kwargs, before, out))
        return out

    with mock.patch.object(owner, name, wrapper):
        yield calls


def stated_claim(policy: Any, records: list, delta: float) -> tuple[float, dict[str, Any]]:
    """The tightest ε the product states for these releases at δ: the smaller of the policy's
    privacy statement and the ledger's accountant of record."""
    from ..privacy.accountant import Accountant

    statement = policy.privacy
    rec = Accountant(records).spend(policy.bandit_id, delta).of_record()
    eps = float(statement.epsilon) if statement.delta <= delta else math.inf
    if rec["delta"] <= delta:
        eps = min(eps, float(rec["epsilon"]))
    return eps, {
        "statement_epsilon": float(statement.epsilon),
        "statement_delta": float(statement.delta),
        "ledger_epsilon": float(rec["epsilon"]),
        "ledger_accountant": rec["accountant"],
    }


def _chunks(k: int, size: int = 50_000) -> Iterator[tuple[int, int]]:
    for lo in range(0, k, size):
        yield lo, min(k, lo + size)


# -- FLIPHAT: N-IHT + Peeling ----------------------------------------------------------------------
#: The audited FLIPHAT: one fit of 16 rows, s = 1, the product's defaults otherwise (contribution
#: clip G, PLD accountant, M = 1, δ = 10⁻⁶); fast noise backend (numpy samplers), labelled.
FLIPHAT_CONFIG: dict[str, Any] = {
    "d": 8,
    "s": 1,
    "epsilon": 2.0,
    "delta": 1e-6,
    "first_episode_len": 16,
    "noise_backend": "fast",
    "bandit_id": "audit",
}


def fliphat_pair(
    d: int, n: int, x_max: float, R: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (×10 beyond the clips) of D and D′ and their rewards: after the contribution clip G,
    n − 3 rows add G·𝟏, two rows add G on coordinates 1…d−1, and the changed row adds
    (G, −G, …, −G) in D and (−G, G, …, G) in D′, so h_D = (n − 2)·G·𝟏 and h_D′ moves
    coordinate 0 by −2G and the others by +2G: (2η/n)·h moves by exactly λ = 4ηG/n."""
    big = 10.0 * x_max
    X = np.full((n, d), big)
    X[n - 3 : n - 1, 0] = 0.0
    X0, X1 = X.copy(), X.copy()
    X0[n - 1] = -big
    X0[n - 1, 0] = big
    X1[n - 1] = -X0[n - 1]
    return X0, X1, np.full(n, 10.0 * R)


def _peeling_facts(lam: float, shift: np.ndarray, xi: float, rho: float, acc: dict) -> dict:
    """The facts of a Peeling audit (s = 1): sensitivity (stated and attained), scale, ratio
    ρ = λ/ξ, the ledger's PLD ε and the event's loss 3ρ."""
    return {
        "sensitivity": lam,
        "attained_sensitivity": float(np.abs(shift).max()),
        "scale": xi,
        "ratio": rho,
        "ledger_pld_epsilon": acc.get("pld_epsilon"),
        "loss_on_event": 3 * rho,
    }


#: FLIPHAT's first mutant: a Peeling selection charged ρ instead of 2ρ
_SELECTION_CHARGED_RHO = Mutant(
    "selection-charged-rho",
    "accountant charges each Peeling selection ρ instead of 2ρ (1.5× less noise)",
    patches=(
        (
            "streaming_dpbandit.privacy.peeling_accounting.selection_epsilon",
            lambda ratio: ratio,
        ),
    ),
)


def _fliphat_setup(params: Mapping[str, Any]) -> Trials:
    from ..policies.fliphat import FLIPHAT

    cfg = {**FLIPHAT_CONFIG, **params}
    d, n = cfg["d"], cfg["first_episode_len"]
    runs = []
    for which in (0, 1):
        pol = FLIPHAT(**cfg, seed=which)
        X0, X1, y = fliphat_pair(d, n, pol.x_bound, pol.reward_clip_for(n))
        records, (peel, v) = _fliphat_drive(pol, X0 if which == 0 else X1, y)
        runs.append((pol, peel, v, records))
    (pol, peel, v0, records), (_, peel1, v1, _) = runs
    xi = peel.scale
    assert peel1.scale == xi  # the noise scale is a function of public parameters only
    params0 = records[0].params or {}
    lam = params0["sensitivities"][0]
    shift = v1 - v0
    # the pair attains λ on every coordinate, coordinate 0 down and the others up
    assert np.allclose(shift, np.r_[-lam, np.full(d - 1, lam)], rtol=1e-3), (shift, lam)
    assert np.allclose(v0, v0[0]) and v0.min() > lam  # equal and positive under D
    rho = lam / xi
    # the selection's loss ln P_D(j)/P_D′(j) at its limit for large d: 2ρ on j = 0 (1/d against
    # e^−2ρ/d), ln((d − 1)/(d − e^−2ρ)) < 0 on the others
    sel = np.full(d, math.log((d - 1) / (d - math.exp(-2 * rho))))
    sel[0] = 2 * rho

    def sampler(which: int, k: int, rng: np.random.Generator) -> np.ndarray:
        v = v0 if which == 0 else v1
        out = np.empty(k)
        for lo, hi in _chunks(k):
            idx, vals = peel.release_many(np.broadcast_to(v, (hi - lo, d)), rng)
            j, y = idx[:, 0], vals[:, 0]
            out[lo:hi] = sel[j] + (np.abs(y - v1[j]) - np.abs(y - v0[j])) / xi
        return out

    eps, claim = stated_claim(pol, records, cfg["delta"])
    acc = params0["accountant"]
    facts = {
        **claim,
        "noise_backend": cfg["noise_backend"],
        **_peeling_facts(lam, shift, xi, rho, acc),
    }
    return Trials(eps, cfg["delta"], sampler, facts)


register(
    AuditedMechanism(
        name="fliphat",
        title="FLIPHAT: one N-IHT fit with Peeling (selection and value), PLD accountant",
        setup=_fliphat_setup,
        mutants=(
            _SELECTION_CHARGED_RHO,
            Mutant(
                "selection-charged-nothing",
                "accountant charges the Peeling selections nothing (3× less noise)",
                patches=(
                    (
                        "streaming_dpbandit.privacy.peeling_accounting.selection_epsilon",
                        lambda ratio: 0.0,
                    ),
                ),
            ),
            HALVED_NOISE,
        ),
        runs={"quick": 40_000, "full": 400_000},
        seed=31,
        caches=(
            "streaming_dpbandit.privacy.peeling_accounting.peeling_pld_epsilon",
            "streaming_dpbandit.privacy.peeling_accounting.peeling_pld_ratio",
        ),
    )
)


# -- FLIPHAT (issue 35): a warm-started fit, and the first fit with its private clip scale ---------
_FLIPHAT_MUTANTS = (
    _SELECTION_CHARGED_RHO,
    HALVED_NOISE,
)
_FLIPHAT_CACHES = (
    "streaming_dpbandit.privacy.peeling_accounting.peeling_pld_epsilon",
    "streaming_dpbandit.privacy.peeling_accounting.peeling_pld_ratio",
    "streaming_dpbandit.policies.fliphat.auto_first_episode_len",
)


def _peeling_trials(
    pol: Any,
    runs: list[tuple[Any, np.ndarray, list]],
    audited: int,
    expected_shift: np.ndarray,
    contenders: np.ndarray,
    delta: float,
    extra_facts: dict[str, Any],
) -> Trials:
    """Trials of a captured Peeling call (s = 1) on D and D′, as in the ``fliphat`` audit: the
    selection's loss at its large-d limit over the ``contenders`` (the coordinates equal under
    D), plus the value's exact Laplace loss; the event's loss is 3ρ on {j = audited, y ≥ v₀}."""
    (peel, v0, records), (peel1, v1, _) = runs
    xi = peel.scale
    assert peel1.scale == xi  # the noise scale is a function of public parameters only
    params0 = records[-1].params or {}
    lam = params0["sensitivities"][0]
    shift = v1 - v0
    assert np.allclose(shift, lam * expected_shift, rtol=1e-3, atol=1e-12), (shift, lam)
    assert np.allclose(v0[contenders], v0[audited]) and v0[audited] > lam
    rho = lam / xi
    d = v0.size
    k = int(contenders.sum())
    sel = np.zeros(d)
    sel[contenders] = math.log((k - 1) / (k - math.exp(-2 * rho)))
    sel[audited] = 2 * rho

    def sampler(which: int, k_: int, rng: np.random.Generator) -> np.ndarray:
        v = v0 if which == 0 else v1
        out = np.empty(k_)
        for lo, hi in _chunks(k_):
            idx, vals = peel.release_many(np.broadcast_to(v, (hi - lo, d)), rng)
            j, y = idx[:, 0], vals[:, 0]
            out[lo:hi] = sel[j] + (np.abs(y - v1[j]) - np.abs(y - v0[j])) / xi
        return out

    eps, claim = stated_claim(pol, records, delta)
    acc = params0["accountant"]
    facts = {
        **claim,
        "noise_backend": "fast",
        **_peeling_facts(lam, shift, xi, rho, acc),
        "contributions": params0.get("contributions"),
        **extra_facts,
    }
    return Trials(eps, delta, sampler, facts)


def _fliphat_drive(pol: Any, X: np.ndarray, y: np.ndarray) -> tuple[list, Any]:
    """Decide, learn and refit one episode of rows (one candidate per round); returns the
    records and the spied Peeling call of the refit."""
    from ..privacy.peeling import Peeling

    dec = pol.decide(X[:, None, :])
    pol.learn(X, y, dec.rounds)
    assert pol.refit_due()
    with _spy(Peeling, "release_many") as calls:
        records = pol.refit()
    assert len(calls) == 1 and len(records) == 1
    (peel, V, _rng), _, _, (idx, vals) = calls[0]
    rel = records[0].release or {}
    # the spied Peeling output is the released model (ℓ1 projection: identity here)
    assert rel["indices"] == idx[0].tolist() and np.allclose(rel["values"], vals[0])
    return records, (peel, np.asarray(V[0]))


def _fliphat_warm_setup(params: Mapping[str, Any]) -> Trials:
    """The second fit, warm-started from the first fit's release θ⁰ = c·e_j*: both datasets
    share episode 0 (hence θ⁰); in episode 1 the changed row's residual contributions move from
    +G to −G (coordinate a down, the others up), and column j* is negated in every row so that
    θ⁰'s coordinate is pulled out of the contest. (2η/n)·h moves by exactly λ on every
    coordinate."""
    from ..policies.fliphat import FLIPHAT

    cfg = {**FLIPHAT_CONFIG, **params}
    d, n0 = cfg["d"], cfg["first_episode_len"]
    runs = []
    for which in (0, 1):
        pol = FLIPHAT(**cfg, seed=7)  # one seed: the same first fit (θ⁰) on both sides
        big = 10.0 * pol.x_bound
        # episode 0: coordinate d − 1 carries the signal, the others cancel out
        X = np.full((n0, d), big)
        X[1::2, : d - 1] = -big
        first, _ = _fliphat_drive(pol, X, np.full(n0, 10.0 * pol.reward_clip_for(n0)))
        (jstar,) = (first[0].release or {})["indices"]
        n = pol.schedule.length(1)
        a = 0 if jstar != 0 else 1
        X0, X1, y = fliphat_pair(d, n, pol.x_bound, pol.reward_clip_for(n))
        Xw = X0 if which == 0 else X1
        Xw[:, [0, a]] = Xw[:, [a, 0]]  # the audited coordinate a plays the pair's coordinate 0
        Xw[:, jstar] *= -1.0
        assert pol._theta0_for(1)[0].tolist() == [jstar]
        records, (peel, v) = _fliphat_drive(pol, Xw, y)
        assert (records[0].params or {})["start_model"] == first[0].release_id
        runs.append((peel, v, first + records))
    expected = np.ones(d)
    expected[[a, jstar]] = -1.0
    contenders = np.ones(d, dtype=bool)
    contenders[jstar] = False
    return _peeling_trials(
        pol, runs, a, expected, contenders, cfg["delta"], {"theta0_index": jstar}
    )


def _fliphat_private_clip_setup(params: Mapping[str, Any]) -> Trials:
    """The first fit with ``grad_clip="private"``: the clip scale q (report-noisy-max for the
    median |ỹ|, pure ε′) and Peeling composed. The pair is the ``fliphat`` pair, whose rewards
    are the same on both sides (≈ 0.01), so q has the same law under D and D′ (one seed: the same
    q) and the release's loss is Peeling's at the composed ratio ρ′ < ρ. 1,024 rows, so that
    the median is found (n·ε′ ≈ 100) and (2η/n)·q·h stays inside the ℓ1 ball."""
    from ..policies.fliphat import FLIPHAT

    cfg = {**FLIPHAT_CONFIG, "grad_clip": "private", "first_episode_len": 1024, **params}
    d, n = cfg["d"], cfg["first_episode_len"]
    runs = []
    for which in (0, 1):
        pol = FLIPHAT(**cfg, seed=9)
        X0, X1, _ = fliphat_pair(d, n, pol.x_bound, pol.reward_clip_for(n))
        # sign contributions: any positive reward gives the pair's ±1; small, spread ones keep
        # q (≈ the median |ỹ| ≈ 0.01), hence (2η/n)·q·h, inside the ℓ1 ball (Π_C the identity)
        y = np.geomspace(0.005, 0.02, n)
        records, (peel, v) = _fliphat_drive(pol, X0 if which == 0 else X1, y)
        runs.append((peel, v, records))
    sr = (records[0].params or {})["scale_release"]
    expected = np.ones(d)
    expected[0] = -1.0
    return _peeling_trials(
        pol,
        runs,
        0,
        expected,
        np.ones(d, dtype=bool),
        cfg["delta"],
        {"scale_epsilon": sr["epsilon"], "scale_value": sr["value"]},
    )


register(
    AuditedMechanism(
        name="fliphat-warm",
        title="FLIPHAT: a warm-started fit (θ⁰ = the first fit's release; residual contributions)",
        setup=_fliphat_warm_setup,
        mutants=_FLIPHAT_MUTANTS,
        runs={"quick": 40_000, "full": 400_000},
        seed=35,
        caches=_FLIPHAT_CACHES,
    )
)
register(
    AuditedMechanism(
        name="fliphat-private-clip",
        title="FLIPHAT: the first fit with its private clip scale (report-noisy-max, composed)",
        setup=_fliphat_private_clip_setup,
        mutants=_FLIPHAT_MUTANTS,
        runs={"quick": 40_000, "full": 400_000},
        seed=36,
        caches=_FLIPHAT_CACHES,
    )
)


# -- DP-LinUCB: the BLT continual release ----------------------------------------------------------
#: The audited DP-LinUCB: BLT over T = 48 releases (one before the first row, one per row),
#: d = 1 (rows a = [x; y], ‖x‖ ≤ L = 1, |y| ≤ B̃ = 1), certified calibration; fast backend.
DP_LINUCB_CONFIG: dict[str, Any] = {
    "d": 1,
    "epsilon": 2.0,
    "delta": 1e-2,
    "n_cap": 47,
    "tree_impl": "blt",
    "batch_size": 1,
    "noise_backend": "fast",
    "bandit_id": "audit",
}


def _dp_linucb_setup(params: Mapping[str, Any]) -> Trials:
    from ..policies.dp_linucb import DPLinUCB
    from ..privacy.blt import (
        BLTAggregator,
        blt_coefficients,
        blt_inverse,
        blt_noise_step,
        blt_sensitivity,
    )
    from ..privacy.matrix_noise import SymmetricGaussianNoise
    from ..privacy.symmetric import packing

    cfg = {**DP_LINUCB_CONFIG, **params}
    d = cfg["d"]
    runs = []
    for which in (0, 1):
        pol = DPLinUCB(**cfg, seed=which)
        n = pol.n_cap
        X = np.zeros((n, d))
        X[0, 0] = 10.0 * pol.L  # row 1: x = L·e₀ and y = ±B̃ (×10 beyond the clips)
        y = np.zeros(n)
        y[0] = (10.0 if which == 0 else -10.0) * pol.B_tilde
        records, means, releases = [], [], []
        agg = pol._state()._agg.aggregator  # one epoch (fixed horizon): one aggregator
        assert isinstance(agg, BLTAggregator)
        for t in range(n + 1):
            records += pol.refit()
            assert pol._release is not None
            means.append(agg.exact_sum())  # the rows' prefix sum of this release
            releases.append(pol._release.copy())
            if t < n:
                dec = pol.decide(X[t][None, None, :])
                pol.learn(X[t : t + 1], y[t : t + 1], dec.rounds)
        assert agg.steps == agg.n_steps == n + 1 and agg.full
        runs.append((pol, agg, np.array(means), np.array(releases), records))
    (pol, agg, m0, R0, records), (_, agg1, m1, _, _) = runs
    T, P = m0.shape
    th_hat, w_hat = blt_inverse(agg.theta, agg.omega)
    th_col = th_hat[:, None]
    sampler_ = agg.sampler
    assert isinstance(sampler_, SymmetricGaussianNoise)
    assert sampler_.sigma == agg1.sampler.sigma  # σ is a function of public parameters only
    # the releases are the production recursion's: replay this run's noise through the step
    N, S = np.zeros(P), np.zeros((th_hat.size, P))
    for t, z in enumerate(agg.replay_noise()):
        blt_noise_step(N, S, z, th_col, w_hat)
        assert np.allclose(m0[t] + N, R0[t], rtol=1e-12, atol=1e-12)
    # the pair: row 1 enters at step 2 (release index 1) and nowhere else
    diff = m0 - m1
    assert np.allclose(diff[0], 0.0) and np.allclose(diff[1:], diff[1])
    t0, delta_x = 1, diff[1]
    unit = np.where(packing(d + 1).is_diag, math.sqrt(2.0), 1.0)  # per-coordinate std / σ
    attained = float(np.linalg.norm(delta_x / unit))  # ‖Δ‖ in the rescaled coordinates
    bound = pol.L**2 + pol.B_tilde**2  # L̃² of the configured clips (not the calibration's)
    assert bound * (1 - 1e-3) <= attained <= bound * (1 + 1e-12), (attained, bound)
    # Neyman–Pearson score: C·ΔR = C·x + z, z i.i.d.; the row moves (C·x)_t by c_{t−t0}·Δ.
    # The score Σ_t c_{t−t0}⟨(CΔR)_t, Δ/unit²⟩ is linear in the releases: Σ_t β_t⟨R_t, u⟩.
    c = blt_coefficients(agg.theta, agg.omega, T)
    Cm = np.array([[c[i - j] if i >= j else 0.0 for j in range(T)] for i in range(T)])
    g = np.zeros(T)
    g[t0:] = c[: T - t0]
    h = Cm.T @ g
    beta = h - np.r_[h[1:], 0.0]
    u = delta_x / unit**2

    def sampler(which: int, k: int, rng: np.random.Generator) -> np.ndarray:
        m = (m0 if which == 0 else m1) @ u
        out = np.empty(k)
        for lo, hi in _chunks(k, 20_000):
            kk = hi - lo
            N, S = np.zeros(kk * P), np.zeros((th_hat.size, kk * P))
            score = np.zeros(kk)
            for t in range(T):
                blt_noise_step(N, S, sampler_.sample_many(rng, kk).reshape(-1), th_col, w_hat)
                score += beta[t] * (N.reshape(kk, P) @ u + m[t])
            out[lo:hi] = score
        return out

    cal = pol.calibration_constants()
    eps, claim = stated_claim(pol, records, cfg["delta"])
    norm_all = blt_sensitivity(agg.theta, agg.omega)
    norm_seen = blt_sensitivity(agg.theta, agg.omega, T - t0)
    facts = {
        **claim,
        "noise_backend": cfg["noise_backend"],
        "steps": T,
        "sigma": sampler_.sigma * sampler_.scale_multiplier,
        "declared_sensitivity": cal.per_node["sensitivity"],
        "sensitivity": bound * norm_all,
        "attained_sensitivity": attained * norm_seen,
        "mu": attained * norm_seen / (sampler_.sigma * sampler_.scale_multiplier),
    }
    return Trials(eps, cfg["delta"], sampler, facts)


register(
    AuditedMechanism(
        name="dp-linucb",
        title="DP-LinUCB: the BLT continual release of the Gram prefix sums (every release)",
        setup=_dp_linucb_setup,
        mutants=(
            Mutant(
                "one-release-sensitivity",
                "calibration counts a row in one release (L̃²) instead of all, L̃²·‖C‖_{1→2}: "
                "an under-counted composition",
                patches=(
                    (
                        "streaming_dpbandit.privacy.gram_calibration.blt_sensitivity",
                        lambda theta, omega, n=None: 1.0,
                    ),
                ),
            ),
            Mutant(
                "no-reward-clip-sensitivity",
                "sensitivity ignores the reward clip: L² instead of L̃² = L² + B̃²",
                patches=(
                    (
                        "streaming_dpbandit.privacy.gram_calibration.record_bound",
                        lambda feature_sq, reward_bound: feature_sq,
                    ),
                ),
            ),
            HALVED_NOISE,
        ),
        runs={"quick": 100_000, "full": 1_000_000},
        seed=32,
        caches=("streaming_dpbandit.privacy.gram_calibration.calibrate_gram_release",),
    )
)


# -- PrivateLASSO-R: the episodic snapshot releases ------------------------------------------------
#: The audited PrivateLASSO-R: episodic mode, boundaries ℓ = 2…5 (n_E = 4) of a 64-slot horizon,
#: support ``full`` (d = 2: every boundary releases the 3 × 3 Gram of all slots so far), the split
#: giving the snapshots 98 % of ρ; b_x = B_x = C_r = 1 (L̃² = 2); fast backend.
PRIVATE_LASSO_CONFIG: dict[str, Any] = {
    "d": 2,
    "s0": 1,
    "horizon": 64,
    "epsilon": 2.0,
    "delta": 1e-3,
    "mode": "episodic",
    "support": "full",
    "clip_coord": 1.0,
    "clip_l2": 1.0,
    "reward_bound": 1.0,
    "l_min": 2,
    "rho_split": {"sel": 0.01, "snap": 0.98, "tree": 0.01},
    "noise_backend": "fast",
    "bandit_id": "audit",
}


def _private_lasso_setup(params: Mapping[str, Any]) -> Trials:
    from ..policies.private_lasso import PrivateLASSO
    from ..privacy.gram import sym_gauss, u_vector
    from ..privacy.noise import numpy_stream

    cfg = {**PRIVATE_LASSO_CONFIG, **params}
    d = cfg["d"]
    runs = []
    for which in (0, 1):
        pol = PrivateLASSO(**cfg, seed=which)
        x = np.zeros((1, d))
        x[0, 0] = 10.0 * cfg["clip_coord"]  # clipped to b_x·e₀ (‖x‖ = B_x)
        r = np.array([(10.0 if which == 0 else -10.0) * cfg["reward_bound"]])  # to ±C_r
        records: list = []
        learned = False
        with _spy(PrivateLASSO, "_gram_release", lambda *a: copy.deepcopy(a[4])) as calls:
            while True:
                if pol.refit_due():
                    records += pol.refit()
                    continue
                if pol.t >= 1 << pol.lmax:  # the last boundary has fired
                    break
                dec = pol.decide(np.zeros((pol.max_decide_batch(), 1, d)))
                if not learned:  # slot 1 is the only record: it enters every snapshot
                    pol.learn(x, r, dec.rounds[:1])
                    learned = True
        snaps = []
        for (_self, _V, Vf, sigma, _g), _, g_before, G in calls:
            # the release is Vf + sym_gauss(σ) from the boundary's own stream
            assert np.array_equal(G, Vf + sym_gauss(Vf.shape[0], sigma, numpy_stream(g_before)))
            snaps.append((Vf, sigma))
        assert len(snaps) == pol.lmax - pol.lmin + 1  # one snapshot per boundary
        runs.append((pol, snaps, records))
    (pol, snaps0, records), (_, snaps1, _) = runs
    sigmas = [s for _, s in snaps0]
    assert sigmas == [s for _, s in snaps1]  # σ: public parameters only
    U0 = np.array([u_vector(V) for V, _ in snaps0])
    U1 = np.array([u_vector(V) for V, _ in snaps1])
    du = U0 - U1
    assert np.allclose(du, du[0])  # slot 1 changes every snapshot the same way
    attained = float(np.linalg.norm(du[0]))
    # the true L̃² of the configured clips (not the calibration's, which a mutant may change)
    bound = min(cfg["clip_coord"] ** 2 * d, cfg["clip_l2"] ** 2) + cfg["reward_bound"] ** 2
    assert bound * (1 - 1e-3) <= attained <= bound * (1 + 1e-12), (attained, bound)
    p = snaps0[0][0].shape[0]

    def sampler(which: int, k: int, rng: np.random.Generator) -> np.ndarray:
        snaps = snaps0 if which == 0 else snaps1
        out = np.zeros(k)
        for lo, hi in _chunks(k):
            for (Vf, sigma), u1, dl in zip(snaps, U1, du):
                G = Vf + sym_gauss(p, sigma, rng, size=hi - lo)  # the release's own sampler
                out[lo:hi] += (u_vector(G) - u1) @ dl / sigma**2  # exact privacy-loss statistic
        return out

    eps, claim = stated_claim(pol, records, cfg["delta"])
    facts = {
        **claim,
        "noise_backend": cfg["noise_backend"],
        "snapshots": len(snaps0),
        "snapshot_sigma": sigmas[0],
        "sensitivity": bound,
        "attained_sensitivity": attained,
        "mu": attained * math.sqrt(sum(1.0 / s**2 for s in sigmas)),
    }
    return Trials(eps, cfg["delta"], sampler, facts)


register(
    AuditedMechanism(
        name="private-lasso",
        title="PrivateLASSO-R (episodic): every boundary's snapshot Gram release of a slot",
        setup=_private_lasso_setup,
        mutants=(
            Mutant(
                "one-boundary-composition",
                "snapshots calibrated as if a slot entered one boundary's release, not n_E: "
                "an under-counted composition",
                patches=(
                    (
                        "streaming_dpbandit.policies.private_lasso.PrivateLASSO.n_episodes",
                        property(lambda self: 1),
                    ),
                ),
            ),
            Mutant(
                "no-reward-clip-sensitivity",
                "sensitivity ignores the reward clip: min(b_x²d, B_x²) instead of + C_r²",
                patches=(
                    (
                        "streaming_dpbandit.policies.private_lasso.record_bound",
                        lambda feature_sq, reward_bound: feature_sq,
                    ),
                ),
            ),
            HALVED_NOISE,
        ),
        runs={"quick": 100_000, "full": 1_000_000},
        seed=33,
    )
)
