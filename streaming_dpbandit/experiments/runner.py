"""Monte-Carlo simulation of policies on an environment, with common random numbers.

Within one repetition every policy sees the same contexts and reward noise (common random
numbers) while drawing its own, independent DP noise; repetitions use independent streams and
run in parallel processes. Within a repetition each policy decides a whole stretch of rounds at
once — everything up to its next model update — so the per-round cost is a few numpy
operations on top of drawing the contexts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..envs.base import Environment
from ..policies import policy_class
from ..policies.base import Policy
from ..privacy.accountant import Accountant
from ..privacy.ledger import ReleaseRecord
from ..privacy.user_level import user_level_of_records
from ..utils.arrays import sorted_distinct

if TYPE_CHECKING:
    from ..config.base import PolicyConfigBase
    from ..config.user_level import UserLevelConfig

__all__ = ["RunSpec", "SimulationResult", "make_grid", "run_repetition", "simulate"]

CHUNK = 2048
#: Context draws per chunk are capped at this many floats (n·K·d), so that large-d environments
#: (e.g. d = 10⁴ with K = 10) stream in small chunks instead of multi-GB arrays.
CHUNK_FLOATS = 1 << 22


def chunk_rows(env: Environment) -> int:
    """Rounds per chunk: CHUNK, or fewer when n·K·d would exceed CHUNK_FLOATS."""
    per_round = int(getattr(env, "K", 1)) * int(getattr(env, "d", 1))
    return max(1, min(CHUNK, CHUNK_FLOATS // max(1, per_round)))


@dataclasses.dataclass
class RunSpec:
    """One policy configuration to simulate.

    Attributes
    ----------
    key
        Unique label (e.g. ``"fliphat ε=1"``).
    policy
        Registry name.
    params
        Constructor parameters (without ``seed``; seeds are derived per repetition).
    horizon
        Rounds to run (≤ the simulation's horizon).
    epsilon, delta
        The privacy budget the run was configured with (``None`` for non-private policies).
    group
        Free label grouping runs (e.g. ``"T1"`` or ``"curve"`` in a reproduction).
    config
        The validated configuration (``streaming_dpbandit.config``), when the run was given
        one: each repetition builds its policy from it (``params`` then only describe it).
    user_level
        A :class:`~streaming_dpbandit.config.UserLevelConfig`: the policy (from ``config``) is
        built at the group calibration behind the per-user bound, and learns with the user ids
        of a returning-users environment (``experiments/user_level.ReturningUsers``).
    """

    key: str
    policy: str
    params: dict
    horizon: int
    epsilon: float | None = None
    delta: float | None = None
    group: str = ""
    config: PolicyConfigBase | None = None
    user_level: UserLevelConfig | None = None

    def __post_init__(self) -> None:
        self.params = reproduction_params(self.policy, self.params, self.config is not None)


#: The noise backend of the papers' reproductions and the project's studies (``reproduce``:
#: runs built from parameters, not from a validated configuration): the fast numpy samplers
#: their published and documented figures were drawn with, labelled in every table and JSON
#: (``noise`` column, ``privacy.noise_backend``, ``params.noise_backend``). ``simulate``,
#: ``replay``, ``explain`` and ``serve`` build configurations: the secure backend wherever the
#: policy has one (issue 31 §5; docs/privacy/secure-noise.md).
REPRODUCTION_NOISE_BACKEND = "fast"


def reproduction_params(policy: str, params: dict, configured: bool) -> dict:
    """``params`` with the reproductions' noise backend made explicit (a run built from a
    configuration, or one that names a backend, is left as it is)."""
    if configured or "noise_backend" in params:
        return params
    from ..policies import REGISTRY

    cls = REGISTRY.get(policy)
    if cls is None or "noise_backend" not in cls._init_param_names():
        return params
    return {**params, "noise_backend": REPRODUCTION_NOISE_BACKEND}


def make_grid(horizon: int, points: int = 400) -> np.ndarray:
    """Rounds at which cumulative regret is recorded: a regular grid plus every 2^k − 1."""
    step = max(1, horizon // points)
    pow2 = [(1 << k) - 1 for k in range(1, horizon.bit_length() + 1) if (1 << k) - 1 <= horizon]
    points_ = np.r_[np.arange(step, horizon + 1, step), pow2, horizon].astype(np.int64)
    return sorted_distinct(points_)


def _seed(base_seed: int, rep: int, *labels: str | int) -> np.random.SeedSequence:
    extra = [
        lbl
        if isinstance(lbl, int)
        else int.from_bytes(hashlib.blake2b(lbl.encode(), digest_size=4).digest(), "little")
        for lbl in labels
    ]
    return np.random.SeedSequence([base_seed, rep, *extra])


def build_policy(spec: RunSpec, seed: int | None) -> Policy:
    if spec.user_level is not None and spec.config is not None:
        built: Policy = spec.user_level.build(spec.config, seed=seed)
        return built
    if spec.config is not None:
        return spec.config.build(seed=seed)
    cls = policy_class(spec.policy, spec.params)
    return cls(**spec.params, seed=seed)


def run_repetition(
    env: Environment,
    specs: list[RunSpec],
    rep: int,
    base_seed: int = 0,
    grid: np.ndarray | None = None,
    progress: Callable[[int], object] | None = None,
    keep_records: bool = True,
) -> dict:
    """Run every spec on one common stream; return cumulative-regret curves and releases.

    ``keep_records=False`` drops the release records from the output (``simulate`` keeps only
    repetition 0's, so the others need not be serialised).
    """
    horizon = max(s.horizon for s in specs)
    grid = make_grid(horizon) if grid is None else grid
    ctx_rng = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "contexts")))
    noise_rng = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "reward-noise")))
    # a returning-users environment (experiments/user_level.ReturningUsers): user ids per row
    profiles = None
    if getattr(env, "returning_users", False):
        prof_rng = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "user-profiles")))
        profiles = env.profiles(prof_rng)  # type: ignore[attr-defined]
    users = None
    policies = []
    for spec in specs:
        pseed = int(_seed(base_seed, rep, "policy", spec.key).generate_state(1, np.uint32)[0])
        policies.append(build_policy(spec, pseed))
    # cumulative regret is kept only at the grid points (memory O(grid), not O(horizon))
    curves = {s.key: np.zeros(int(np.count_nonzero(grid <= s.horizon))) for s in specs}
    totals = dict.fromkeys(curves, 0.0)
    records: dict[str, list[ReleaseRecord]] = {s.key: [] for s in specs}
    chunk_regret = np.zeros(CHUNK)
    t0 = 0
    chunk = chunk_rows(env)
    while t0 < horizon:
        n = min(chunk, horizon - t0)
        if profiles is None:
            X = env.contexts(ctx_rng, n)
        else:
            users, X = env.draw(ctx_rng, profiles, n)  # type: ignore[attr-defined]
        mu = env.mean_rewards(X)
        eps = env.reward_noise(noise_rng, n)
        best = mu.max(axis=1)
        for spec, pol in zip(specs, policies):
            end = min(n, spec.horizon - t0)
            pos = 0
            while pos < end:
                if pol.refit_due():
                    records[spec.key].extend(pol.refit())
                m = min(pol.max_decide_batch(), end - pos)
                dec = pol.decide(X[pos : pos + m])
                rows = np.arange(pos, pos + m)
                a = dec.arms
                chosen_mu = mu[rows, a]
                chunk_regret[pos : pos + m] = best[pos : pos + m] - chosen_mu
                y = env.rewards(chosen_mu, eps[rows, a])
                if users is not None and spec.user_level is not None:
                    pol.learn(X[rows, a], y, dec.rounds, user_ids=users[rows])  # type: ignore[call-arg]
                else:
                    pol.learn(X[rows, a], y, dec.rounds)
                pos += m
            if end > 0:
                cum = np.cumsum(chunk_regret[:end]) + totals[spec.key]
                g = grid[(grid > t0) & (grid <= t0 + end)]
                first = int(np.count_nonzero(grid <= t0))
                curves[spec.key][first : first + g.size] = cum[g - t0 - 1]
                totals[spec.key] = float(cum[-1])
        t0 += n
        if progress is not None:
            progress(n)
    out = {}
    for spec, pol in zip(specs, policies):
        out[spec.key] = {
            "curve": curves[spec.key],
            "final": totals[spec.key],
            "records": [r.to_dict() for r in records[spec.key]] if keep_records else [],
            "counters": getattr(pol, "counters", {}),
        }
    return out


# -- parallel driver -------------------------------------------------------------------------
_PROGRESS: Any = None  # a multiprocessing.Value shared with the workers


def _init_worker(counter):
    global _PROGRESS
    _PROGRESS = counter


def _worker(args):
    env, specs, rep, base_seed, grid = args

    def tick(n):
        with _PROGRESS.get_lock():
            _PROGRESS.value += n

    return rep, run_repetition(env, specs, rep, base_seed, grid, tick, keep_records=rep == 0)


@dataclasses.dataclass
class SimulationResult:
    """Per-repetition curves of every run, plus what the runs released."""

    env: dict
    specs: list[RunSpec]
    grid: np.ndarray
    curves: dict[str, np.ndarray]  # key -> (reps, grid points of that run)
    finals: dict[str, np.ndarray]  # key -> (reps,)
    records: dict[str, list[ReleaseRecord]]  # key -> releases of repetition 0
    counters: dict[str, dict]
    seeds: int
    base_seed: int
    elapsed_s: float
    #: key -> per-repetition releases and counters (all repetitions; ``records`` is repetition 0)
    records_by_rep: dict[str, list[list[ReleaseRecord]]] | None = None
    counters_by_rep: dict[str, list[dict]] | None = None

    def records_of(self, key: str) -> list[list[ReleaseRecord]]:
        """Every repetition's releases of run ``key`` (a result made by :func:`simulate`)."""
        if self.records_by_rep is None:
            raise ValueError("this result holds only repetition 0's releases (records)")
        return self.records_by_rep[key]

    def grid_of(self, key: str) -> np.ndarray:
        spec = next(s for s in self.specs if s.key == key)
        return self.grid[self.grid <= spec.horizon]

    def mean_se(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        c = self.curves[key]
        se = c.std(axis=0, ddof=1) / np.sqrt(c.shape[0]) if c.shape[0] > 1 else np.zeros(c.shape[1])
        return c.mean(axis=0), se

    def value_at(self, key: str, t: int) -> np.ndarray:
        """Per-repetition cumulative regret at round t (t must be on the grid)."""
        g = self.grid_of(key)
        i = int(np.searchsorted(g, t))
        if i >= g.size or g[i] != t:
            raise KeyError(f"round {t} is not on the recorded grid")
        return self.curves[key][:, i]

    def privacy(self, spec: RunSpec, pld: bool = True) -> dict:
        """Privacy spent by a run; ``pld=False`` leaves out ``epsilon_at_delta_pld`` (the PLD
        accountant: dp-accounting takes about a second to import, with scipy.stats)."""
        recs = self.records[spec.key]
        if spec.epsilon is None:
            return {"private": False, "calibration": "non-private"}
        acc = Accountant(recs)
        bandit = recs[0].bandit_id if recs else "default"
        sp = acc.spend(bandit, delta=spec.delta if pld else None)
        ul = user_level_of_records(recs, bandit) if spec.user_level is not None else None
        if ul is not None:  # the guarantee of record is per user (docs/privacy/user-level.md)
            sp = ul.spend
        made = self.counters.get(spec.key, {}).get("releases")
        out = {
            "private": True,
            # the accountant of record: the tightest valid guarantee, named (what tables show)
            "of_record": sp.of_record(),
            "epsilon": sp.basic_epsilon,
            "delta": sp.basic_delta,
            "epsilon_at_delta_pld": sp.epsilon_at_delta,
            "pure_epsilon": sp.pure_epsilon,
            # releases made (repetition 0); a policy that counts them (DP-LinUCB, whose refreshes
            # are post-processing of its epoch records) reports its count, else the ledger's
            "releases": int(made) if made is not None else sp.releases,
            "ledger_records": sp.releases,
            "calibration": ",".join(sp.calibrations) or spec.params.get("calibration", "certified"),
            "dp_valid": sp.dp_valid,
            # the noise backend each release drew from (docs/privacy/secure-noise.md)
            "noise_backend": ",".join(sorted({r.noise_backend for r in recs})) or "-",
        }
        if ul is not None:
            out["user_level"] = ul.to_dict()
        if not pld:
            del out["epsilon_at_delta_pld"]
        if sp.rho is not None and spec.delta and sp.pure_epsilon is None:  # pure ε: exact already
            from ..privacy.zcdp import epsilon_from_rho

            out["rho"] = sp.rho
            out["epsilon_zcdp"] = epsilon_from_rho(sp.rho, spec.delta)
        labels = sorted({r.note for r in recs if r.note})
        if labels:
            out["label"] = "; ".join(labels)
        elif "paper" in sp.calibrations:
            from ..privacy.statement import PAPER_LABEL

            out["label"] = PAPER_LABEL
        return out

    def summary(self, pld: bool = True) -> list[dict]:
        rows = []
        for spec in self.specs:
            f = self.finals[spec.key]
            se = float(f.std(ddof=1) / np.sqrt(f.size)) if f.size > 1 else 0.0
            mean, cse = self.mean_se(spec.key)
            rows.append(
                {
                    "key": spec.key,
                    "policy": spec.policy,
                    "group": spec.group,
                    "epsilon": spec.epsilon,
                    "delta": spec.delta,
                    "params": spec.params,
                    "horizon": spec.horizon,
                    "final_regret": {
                        "mean": float(f.mean()),
                        "se": se,
                        "n": int(f.size),
                        "per_run": f.tolist(),
                    },
                    "curve": {
                        "t": self.grid_of(spec.key).tolist(),
                        "mean": mean.tolist(),
                        "se": cse.tolist(),
                        "per_run": self.curves[spec.key].tolist(),
                    },
                    "privacy": self.privacy(spec, pld),
                    "counters": self.counters.get(spec.key, {}),
                }
            )
        return rows

    def to_json(self) -> dict:
        return {
            "env": self.env,
            "seeds": self.seeds,
            "base_seed": self.base_seed,
            "elapsed_s": self.elapsed_s,
            "runs": self.summary(),
        }


def simulate(
    env: Environment,
    specs: list[RunSpec],
    seeds: int,
    base_seed: int = 0,
    jobs: int = 1,
    progress: bool = True,
) -> SimulationResult:
    """Run ``seeds`` repetitions of every spec; ``jobs`` > 1 runs repetitions in parallel."""
    if not specs:
        raise ValueError("nothing to simulate")
    if len({s.key for s in specs}) != len(specs):
        raise ValueError("run keys must be unique")
    horizon = max(s.horizon for s in specs)
    grid = make_grid(horizon)
    start = time.perf_counter()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=seeds * horizon,
            unit="round",
            unit_scale=True,
            file=sys.stderr,
            desc="simulating",
            leave=False,
            dynamic_ncols=True,
        )
    results: dict[int, dict] = {}
    jobs = max(1, min(jobs, seeds))
    if jobs == 1:
        for rep in range(seeds):
            results[rep] = run_repetition(
                env,
                specs,
                rep,
                base_seed,
                grid,
                bar.update if bar is not None else None,
                keep_records=rep == 0,
            )
    else:  # the parallel driver's modules are imported only when it runs (start-up, issue 24)
        import concurrent.futures as cf
        import multiprocessing as mp
        import threading

        ctx = mp.get_context("fork")
        counter = ctx.Value("q", 0)
        stop = threading.Event()

        def poll():
            seen = 0
            while not stop.wait(0.25):
                v = counter.value
                if bar is not None and v > seen:
                    bar.update(v - seen)
                    seen = v
            if bar is not None and counter.value > seen:
                bar.update(counter.value - seen)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        try:
            with cf.ProcessPoolExecutor(
                jobs, mp_context=ctx, initializer=_init_worker, initargs=(counter,)
            ) as ex:
                futs = [
                    ex.submit(_worker, (env, specs, rep, base_seed, grid)) for rep in range(seeds)
                ]
                for fut in cf.as_completed(futs):
                    rep, res = fut.result()
                    results[rep] = res
        finally:
            stop.set()
            th.join()
    if bar is not None:
        bar.close()
    return assemble_result(env.describe(), specs, grid, results, seeds, base_seed, start, True)


def assemble_result(
    env: dict,
    specs: list[RunSpec],
    grid: np.ndarray,
    results: dict[int, dict],
    seeds: int,
    base_seed: int,
    start: float,
    by_rep: bool = False,
) -> SimulationResult:
    """The result of ``seeds`` repetitions (``results[r][key]``: repetition r's
    ``curve``, ``final``, ``records`` and ``counters``): the curves and finals of every
    repetition, the records and counters of the first (``by_rep``: of every one too)."""
    curves = {s.key: np.vstack([results[r][s.key]["curve"] for r in range(seeds)]) for s in specs}
    finals = {s.key: np.array([results[r][s.key]["final"] for r in range(seeds)]) for s in specs}
    records = {
        s.key: [ReleaseRecord.from_dict(d) for d in results[0][s.key]["records"]] for s in specs
    }
    counters = {s.key: results[0][s.key]["counters"] for s in specs}
    records_by_rep = counters_by_rep = None
    if by_rep:
        records_by_rep = {
            s.key: [
                [ReleaseRecord.from_dict(d) for d in results[r][s.key]["records"]]
                for r in range(seeds)
            ]
            for s in specs
        }
        counters_by_rep = {
            s.key: [results[r][s.key]["counters"] for r in range(seeds)] for s in specs
        }
    return SimulationResult(
        env=env,
        specs=specs,
        grid=grid,
        curves=curves,
        finals=finals,
        records=records,
        counters=counters,
        seeds=seeds,
        base_seed=base_seed,
        elapsed_s=time.perf_counter() - start,
        records_by_rep=records_by_rep,
        counters_by_rep=counters_by_rep,
    )
