"""Synchronous simulation of matroid (slate) bandits with common random numbers.

Each round draws the environment's full reward vector; the policy serves a slate, sees the
served items' rewards and learns them before the next decision — the thesis's protocol
(DP-matroid spec §7.2, "synchronous mode"). Within a repetition every policy sees the same
reward vectors (common random numbers); each draws its own DP noise and its own tie-breaking
and sampling randomness. Repetitions run in parallel processes.

Recorded per run, at the grid rounds s: the pseudo-regret R_s = Σ_{t≤s} (f(A*) − Σ_{e∈A^t} w̄(e))
and the expected per-round return (1/s) Σ_{t≤s} Σ_{e∈A^t} w̄(e) (true means, never realised
rewards; spec §2); plus whether the run covered every non-loop item within its first L decisions
and how many distinct slates it served (a run that locks onto its first slate serves one).

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import multiprocessing as mp
import time
from typing import Any

import numpy as np

from ..envs.matroid_env import MatroidEnvironment
from ..policies import REGISTRY
from .runner import reproduction_params

__all__ = [
    "MatroidResult",
    "MatroidRunSpec",
    "log_grid",
    "run_matroid_repetition",
    "simulate_slates",
]

CHUNK = 4096


@dataclasses.dataclass
class MatroidRunSpec:
    """One slate-policy configuration (``policy`` in ``REGISTRY``; ``params`` without
    matroid and seed, which the runner supplies)."""

    key: str
    policy: str
    params: dict
    horizon: int
    epsilon: float | None = None
    group: str = ""

    def __post_init__(self) -> None:  # reproductions keep the fast backend, labelled
        self.params = reproduction_params(self.policy, self.params, False)


def log_grid(horizon: int, per_decade: int = 40, extra=(100, 1000, 5000, 10_000)) -> np.ndarray:
    """Rounds at which curves are recorded: log-spaced, plus the spec's reporting rounds and
    every power of ten (S3 reads R_n / ln n at each decade up to 10⁶).

    >>> g = log_grid(10**6)
    >>> all(10**k in g for k in range(7)), int(g[-1])
    (True, 1000000)
    """
    pts = np.unique(np.round(np.logspace(0, np.log10(horizon), per_decade * 7)).astype(np.int64))
    decades = [10**k for k in range(len(str(int(horizon))))]
    extra = [x for x in (*extra, *decades) if x <= horizon]
    return np.unique(np.r_[pts, extra, horizon]).astype(np.int64)


def _seed(base: int, rep: int, *labels) -> np.random.SeedSequence:
    ints = [
        x
        if isinstance(x, int)
        else int.from_bytes(hashlib.blake2b(x.encode(), digest_size=4).digest(), "little")
        for x in labels
    ]
    return np.random.SeedSequence([base, rep, *ints])


def run_matroid_repetition(
    env: MatroidEnvironment,
    specs: list[MatroidRunSpec],
    rep: int,
    base_seed: int,
    grid: np.ndarray,
    batched: bool = True,
) -> dict:
    """One repetition of every spec on a common stream of reward vectors.

    ``batched`` (default): a private policy (DPUCB-MAT, DPTS-MAT) decides a whole stretch of
    rounds at once. Its statistics change only at a release, and a release follows only a
    completed batch, so the runner previews up to ``LOOKAHEAD`` slates, keeps the prefix
    before the first completed batch (``quiet_rounds``), decides and learns it in one call
    each and refits only when a batch completed. The slates, releases and curves are those of
    the round-by-round protocol (``batched=False``;
    ``tests/experiments/test_matroid_runner_batched.py``).
    A private policy's ``update_every`` is irrelevant here (a refit without a completed batch
    changes nothing), so the batched path builds it with ``update_every`` = the horizon.
    Non-private baselines (OMM, CTS) move their statistics every round and stay round by round.
    """
    horizon = max(s.horizon for s in specs)
    env_rng = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "environment")))
    opt = env.optimal_return()
    means = env.means
    L = env.n_items
    non_loops = set(env.matroid.candidates.tolist())
    pols: list = []
    state: list[dict[str, Any]] = []
    for spec in specs:
        pseed = int(_seed(base_seed, rep, "policy", spec.key).generate_state(1, np.uint32)[0])
        cls = REGISTRY[spec.policy]
        params = dict(spec.params)
        fast = batched and hasattr(cls, "quiet_rounds")
        if fast:
            params["update_every"] = max(1, spec.horizon)
        pols.append(cls(env.matroid, **params, seed=pseed))
        g = grid[grid <= spec.horizon]
        state.append(
            {
                "grid": g,
                "regret": np.zeros(g.size),
                "ret": np.zeros(g.size),
                "cum_ret": 0.0,
                "gi": 0,
                "covered": set(),
                "first_L": set(),
                "slates": set(),
                "last": None,
                "fast": fast,
                "look": 16,
            }
        )
    t0 = 0
    while t0 < horizon:
        n = min(CHUNK, horizon - t0)
        W = env.draw(env_rng, n)
        for spec, pol, st in zip(specs, pols, state):
            end = min(n, spec.horizon - t0)
            if st["fast"]:
                _stretches(pol, st, W, t0, end, means, opt, L)
                continue
            g, gi = st["grid"], st["gi"]
            cum = st["cum_ret"]
            for i in range(end):
                if pol.refit_due():
                    pol.refit()
                dec = pol.decide_slates(1)
                s = dec.slates
                pol.learn(s, W[i : i + 1, s[0]], dec.rounds)
                row = s[0]
                cum += float(means[row].sum())
                t = t0 + i + 1
                if t <= L:
                    st["covered"].update(row.tolist())
                    st["first_L"].add(tuple(sorted(row.tolist())))
                if len(st["slates"]) < 2:
                    st["slates"].add(tuple(sorted(row.tolist())))
                while gi < g.size and g[gi] == t:
                    st["regret"][gi] = t * opt - cum
                    st["ret"][gi] = cum / t
                    gi += 1
                st["last"] = row
            st["gi"], st["cum_ret"] = gi, cum
        t0 += n
    out = {}
    for spec, pol, st in zip(specs, pols, state):
        out[spec.key] = {
            "regret": st["regret"],
            "ret": st["ret"],
            "covered_first_L": st["covered"] >= non_loops,
            "distinct_first_L": len(st["first_L"]),
            "stuck": len(st["slates"]) < 2,
            "final_slate": st["last"].tolist(),
            "counters": pol.counters,
        }
    return out


#: most slates previewed at once by the batched path (it adapts between 16 and this)
LOOKAHEAD = 2048


def _stretches(pol, st, W, t0, end, means, opt, L) -> None:
    """Rounds t0+1 … t0+end of a private policy, a quiet stretch per decide/learn call."""
    pos = 0
    while pos < end:
        if pol.refit_due():
            pol.refit()
        look = min(st["look"], end - pos)
        k = pol.quiet_rounds(pol.preview_slates(look).slates)
        # the next preview: twice a stretch that ran to its end, else a little past this one
        st["look"] = min(LOOKAHEAD, 2 * look if k == look else max(16, 2 * k))
        dec = pol.decide_slates(k)
        slates = dec.slates
        rows = np.arange(pos, pos + k)
        pol.learn(slates, W[rows[:, None], slates], dec.rounds)
        _record(st, slates, t0 + pos, means, opt, L)
        pos += k


def _record(st, slates, t_before, means, opt, L) -> None:
    """The curves and coverage of rounds t_before+1 … t_before+len(slates) (sequential sums,
    as the round-by-round loop adds them)."""
    k = slates.shape[0]
    cums = np.cumsum(np.r_[st["cum_ret"], means[slates].sum(axis=1)])[1:]
    t = np.arange(t_before + 1, t_before + k + 1)
    g, gi = st["grid"], st["gi"]
    stop = int(np.searchsorted(g, t[-1], side="right"))
    if stop > gi:
        at = g[gi:stop] - t_before - 1
        st["regret"][gi:stop] = g[gi:stop] * opt - cums[at]
        st["ret"][gi:stop] = cums[at] / g[gi:stop]
    st["gi"] = max(gi, stop)
    for i in range(min(k, max(0, L - t_before))):
        st["covered"].update(slates[i].tolist())
        st["first_L"].add(tuple(sorted(slates[i].tolist())))
    if len(st["slates"]) < 2:
        first = tuple(sorted(slates[0].tolist()))
        st["slates"].add(first)
        if len(st["slates"]) < 2:
            s = np.sort(slates, axis=1)
            other = np.flatnonzero((s != s[0]).any(axis=1))
            if other.size:
                st["slates"].add(tuple(s[other[0]].tolist()))
    st["cum_ret"] = float(cums[-1])
    st["last"] = slates[-1]


def _se(a: np.ndarray) -> list[float]:
    n = a.shape[0]
    return (a.std(axis=0, ddof=1) / np.sqrt(n)).tolist() if n > 1 else [0.0] * a.shape[1]


def _worker(args):
    env, specs, rep, base_seed, grid = args
    return rep, run_matroid_repetition(env, specs, rep, base_seed, grid)


@dataclasses.dataclass
class MatroidResult:
    """Per-repetition curves of every run."""

    env: dict
    specs: list[MatroidRunSpec]
    grid: np.ndarray
    regret: dict[str, np.ndarray]  # key -> (reps, grid points of that run)
    ret: dict[str, np.ndarray]
    runs: dict[str, list[dict]]  # key -> per repetition: coverage, stuck, final slate, counters
    seeds: int
    elapsed_s: float

    def spec(self, key: str) -> MatroidRunSpec:
        return next(s for s in self.specs if s.key == key)

    def at(self, key: str, what: str, t: int) -> np.ndarray:
        """Per-repetition value of ``regret`` or ``ret`` at round t (on the grid)."""
        g = self.grid[self.grid <= self.spec(key).horizon]
        i = int(np.searchsorted(g, t))
        if i >= g.size or g[i] != t:
            raise KeyError(f"round {t} is not on the grid")
        return getattr(self, what)[key][:, i]

    def final(self, key: str, what: str = "regret") -> np.ndarray:
        return getattr(self, what)[key][:, -1]

    def to_json(self) -> dict:
        out = []
        for s in self.specs:
            g = self.grid[self.grid <= s.horizon]
            r, m = self.regret[s.key], self.ret[s.key]
            out.append(
                {
                    "key": s.key,
                    "policy": s.policy,
                    "group": s.group,
                    "epsilon": s.epsilon,
                    "params": s.params,
                    "horizon": s.horizon,
                    "t": g.tolist(),
                    "regret_mean": r.mean(axis=0).tolist(),
                    "regret_se": _se(r),
                    "return_mean": m.mean(axis=0).tolist(),
                    "return_se": _se(m),
                    "runs": [
                        {k: v for k, v in x.items() if k != "counters"} for x in self.runs[s.key]
                    ],
                }
            )
        return {"env": self.env, "seeds": self.seeds, "elapsed_s": self.elapsed_s, "runs": out}


def simulate_slates(
    env: MatroidEnvironment,
    specs: list[MatroidRunSpec],
    seeds: int,
    base_seed: int = 0,
    jobs: int = 1,
    grid: np.ndarray | None = None,
    progress: bool = False,
) -> MatroidResult:
    """Run ``seeds`` repetitions of every spec (common random numbers within a repetition)."""
    if len({s.key for s in specs}) != len(specs):
        raise ValueError("run keys must be unique")
    horizon = max(s.horizon for s in specs)
    grid = log_grid(horizon) if grid is None else np.asarray(grid, dtype=np.int64)
    start = time.perf_counter()
    results: dict[int, dict] = {}
    jobs = max(1, min(jobs, seeds))
    bar = None
    if progress:
        import sys

        from tqdm import tqdm

        bar = tqdm(total=seeds, unit="rep", file=sys.stderr, leave=False, desc="simulating")
    if jobs == 1:
        for rep in range(seeds):
            results[rep] = run_matroid_repetition(env, specs, rep, base_seed, grid)
            if bar is not None:
                bar.update(1)
    else:
        ctx = mp.get_context("fork")
        with cf.ProcessPoolExecutor(jobs, mp_context=ctx) as ex:
            futs = [ex.submit(_worker, (env, specs, r, base_seed, grid)) for r in range(seeds)]
            for fut in cf.as_completed(futs):
                rep, res = fut.result()
                results[rep] = res
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    keys = [s.key for s in specs]
    return MatroidResult(
        env=env.describe(),
        specs=specs,
        grid=grid,
        regret={k: np.vstack([results[r][k]["regret"] for r in range(seeds)]) for k in keys},
        ret={k: np.vstack([results[r][k]["ret"] for r in range(seeds)]) for k in keys},
        runs={
            k: [
                {x: results[r][k][x] for x in results[r][k] if x not in ("regret", "ret")}
                for r in range(seeds)
            ]
            for k in keys
        },
        seeds=seeds,
        elapsed_s=time.perf_counter() - start,
    )
