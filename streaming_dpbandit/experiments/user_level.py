"""Regret against the user-level contribution bound k (issue 22 §2; ``docs/user-level-privacy.md``).

Contexts come from users who return: user popularity is Zipf (seeded), and a returning user
sees their own profile (the action set drawn for them once) with probability ``repeat``, else
a fresh draw of the frontier environment. Every private policy is wrapped in
:class:`~streaming_dpbandit.policies.user_level.UserLevel` with k = ``max_contributions_per_user``
and configured so that **one release costs the target ε for k rows of one user** (group
calibration, ``docs/privacy/user-level.md``): FLIPHAT (one (ε, δ) fit per episode) at
(ε/k, δ/(k·e^{(k−1)ε/k})), DP-LinUCB (Gaussian tree) at the ε' whose k-fold sensitivity costs ε
(:func:`~streaming_dpbandit.privacy.user_level.calibrate_for_group`). ``k=None`` is today's
event-level run at ε (no bounding; a user with r events is protected at about r·ε only).

Usage (from Python; ``dpbandit simulate --max-contributions-per-user K`` runs one k on any
environment)::

    from streaming_dpbandit.experiments.user_level import run_user_level, user_level_table
    rows = run_user_level("dense-d5", horizon=20_000, seeds=10, jobs=2)
    print(user_level_table(rows))
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
import multiprocessing as mp

import numpy as np

from ..envs.base import Environment
from ..policies import policy_class
from ..policies.user_level import UserLevel, group_params
from ..privacy.ledger import ReleaseRecord
from ..privacy.user_level import user_level_spend
from .frontier import DELTA, _env, _linear_specs
from .report import format_table
from .runner import _seed, chunk_rows, reproduction_params

__all__ = [
    "ReturningUsers",
    "group_params",
    "run_user_level",
    "user_level_table",
    "zipf_popularity",
]

KS = (1, 2, 5, 10, None)


def zipf_popularity(n_users: int, exponent: float = 1.1) -> np.ndarray:
    """P(user i) ∝ (i + 1)^(−exponent), i = 0 … n_users − 1.

    >>> zipf_popularity(3, 1.0).round(3).tolist()
    [0.545, 0.273, 0.182]
    """
    w = (np.arange(n_users) + 1.0) ** (-exponent)
    return w / w.sum()


@dataclasses.dataclass
class ReturningUsers:
    """Users who return to a base environment, with Zipf-distributed popularity.

    Parameters
    ----------
    env
        The base environment (contexts, mean rewards, reward noise).
    n_users
        Number of distinct users.
    zipf_exponent
        P(user i) ∝ (i + 1)^(−a), i = 0 … n_users − 1.
    repeat
        Probability that a visit shows the user's own profile (drawn once per user) instead of
        a fresh draw.

    Examples
    --------
    >>> from streaming_dpbandit.envs import ShariffSheffetEnv
    >>> ru = ReturningUsers(ShariffSheffetEnv(d=5), n_users=50, zipf_exponent=1.1)
    >>> rng = np.random.default_rng(0)
    >>> prof = ru.profiles(rng)
    >>> users, X = ru.draw(rng, prof, 1000)
    >>> X.shape, int(np.bincount(users).argmax())          # user 0 is the most popular
    ((1000, 25, 5), 0)
    """

    env: Environment
    n_users: int = 2000
    zipf_exponent: float = 1.1
    repeat: float = 0.5

    #: ``experiments/runner.run_repetition`` draws contexts with user ids from it
    returning_users = True

    def __getattr__(self, name: str):
        """Everything else is the base environment's (d, K, mean_rewards, rewards, ...)."""
        if name == "env" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def describe(self) -> dict:
        return {
            **self.env.describe(),
            "returning_users": {
                "n_users": self.n_users,
                "zipf_exponent": self.zipf_exponent,
                "repeat": self.repeat,
            },
        }

    def popularity(self) -> np.ndarray:
        return zipf_popularity(self.n_users, self.zipf_exponent)

    def profiles(self, rng: np.random.Generator) -> np.ndarray:
        """Each user's own action set, (n_users, K, d)."""
        return self.env.contexts(rng, self.n_users)

    def draw(self, rng: np.random.Generator, profiles: np.ndarray, n: int):
        """n visits: (user ids (n,), contexts (n, K, d))."""
        users = rng.choice(self.n_users, size=n, p=self.popularity())
        X = self.env.contexts(rng, n)
        own = rng.random(n) < self.repeat
        X[own] = profiles[users[own]]
        return users.astype(np.int64), X


def _k_label(k) -> str:
    return "event" if k is None else f"k={k}"


def _extra_params(setting: str, env, epsilon: float, horizon: int) -> dict[str, dict]:
    """Policies the frontier's linear specs do not cover: PrivateLASSO-R on the sparse setting
    (the public sparsity s0 = 10 and bounds as FLIPHAT's and DP-LinUCB's: ‖x‖₂ ≤ √d + 3,
    coordinates clipped at 3, ‖θ‖₂ ≤ b_max, rewards at 2·b_max) and LDP-GLB (LDP-SGD as E1:
    d = 2, K = 10, per-round refresh) on ``ldp-single``."""
    out: dict[str, dict] = {}
    if setting == "sparse":
        out["private-lasso"] = {
            "d": env.d,
            "s0": 10,
            "horizon": int(horizon),
            "epsilon": float(epsilon),
            "delta": DELTA,
            "clip_coord": 3.0,
            "clip_l2": math.sqrt(env.d) + 3.0,
            "reward_bound": 2.0 * env.b_max,
            "theta_bound": float(env.b_max),
        }
    if setting == "ldp-single":
        out["ldp-glb"] = {
            "d": env.d,
            "n_arms": env.K,
            "variant": "sgd",
            "epsilon": float(epsilon),
            "c0": 5.0,
            "n0": 1.0,
            "horizon": int(horizon),
            "delta": DELTA,  # unused by the pure ℓ2 ball; the table's δ column
        }
    return out


def _specs(setting: str, env, epsilon: float, horizon: int, ks, policies) -> list[dict]:
    linear = [] if setting == "ldp-single" else _linear_specs(setting, env, (epsilon,), horizon)
    base = {s.policy: s.params for s in linear if s.policy in policies}
    base.update(
        {
            p: reproduction_params(p, v, False)  # the studies keep the fast backend, labelled
            for p, v in _extra_params(setting, env, epsilon, horizon).items()
            if p in policies
        }
    )
    out = []
    for pol in policies:
        for k in ks:
            out.append(
                {
                    "key": f"{pol} {_k_label(k)}",
                    "policy": pol,
                    "k": k,
                    "params": group_params(pol, base[pol], k, epsilon, DELTA),
                }
            )
    return out


def _one_rep(args) -> dict:
    ru, specs, rep, base_seed, horizon, max_releases, window = args
    env = ru.env
    prof_rng = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "user-profiles")))
    ctx_rng = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "user-contexts")))
    noise_rng = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "reward-noise")))
    profiles = ru.profiles(prof_rng)
    pols = []
    for s in specs:
        pseed = int(_seed(base_seed, rep, "policy", s["key"]).generate_state(1, np.uint32)[0])
        inner = policy_class(s["policy"], s["params"])(**s["params"], seed=pseed)
        if s["k"] is None:
            pols.append(inner)
        else:
            pols.append(
                UserLevel(inner, s["k"], max_releases, seed=pseed ^ 0x5EED, window_rounds=window)
            )
    regret = dict.fromkeys((s["key"] for s in specs), 0.0)
    records: dict[str, list[ReleaseRecord]] = {s["key"]: [] for s in specs}
    t0, chunk = 0, chunk_rows(env)
    while t0 < horizon:
        n = min(chunk, horizon - t0)
        users, X = ru.draw(ctx_rng, profiles, n)
        mu = env.mean_rewards(X)
        eps = env.reward_noise(noise_rng, n)
        best = mu.max(axis=1)
        for s, pol in zip(specs, pols):
            pos = 0
            while pos < n:
                if pol.refit_due():
                    records[s["key"]].extend(pol.refit())
                m = min(pol.max_decide_batch(), n - pos)
                dec = pol.decide(X[pos : pos + m])
                rows = np.arange(pos, pos + m)
                chosen = mu[rows, dec.arms]
                regret[s["key"]] += float(np.sum(best[rows] - chosen))
                y = env.rewards(chosen, eps[rows, dec.arms])
                if s["k"] is None:
                    pol.learn(X[rows, dec.arms], y, dec.rounds)
                else:
                    pol.learn(X[rows, dec.arms], y, dec.rounds, user_ids=users[rows])
                pos += m
        t0 += n
    out = {}
    for s, pol in zip(specs, pols):
        c = pol.user_counters() if s["k"] is not None else {}
        out[s["key"]] = {
            "regret": regret[s["key"]],
            "admitted": c.get("admitted"),
            "bounded": c.get("bounded"),
            "records": [r.to_dict() for r in records[s["key"]]] if rep == 0 else [],
        }
    return out


def run_user_level(
    setting: str = "dense-d5",
    horizon: int = 20_000,
    seeds: int = 10,
    ks=KS,
    policies=("fliphat", "dp-linucb"),
    epsilon: float = 1.0,
    max_releases: int | None = None,
    window_rounds: int | None = None,
    n_users: int = 2000,
    zipf_exponent: float = 1.1,
    repeat: float = 0.5,
    jobs: int = 1,
    base_seed: int = 0,
) -> list[dict]:
    """Final regret (mean ± s.e. over ``seeds``) of every (policy, k), with the admitted share
    and the whole-run user-level guarantee of repetition 0's ledger."""
    if setting == "ldp-single":  # the LDP-GLB E1 environment (d = 2, K = 10)
        from ..envs import LDPSingleParamEnv

        env: Environment = LDPSingleParamEnv(d=2, K=10)
    else:
        env = _env(setting)
    ru = ReturningUsers(env, n_users, zipf_exponent, repeat)
    specs = _specs(setting, env, epsilon, horizon, ks, policies)
    args = [
        (ru, specs, rep, base_seed, horizon, max_releases, window_rounds) for rep in range(seeds)
    ]
    if jobs > 1:
        with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork")) as ex:
            reps = list(ex.map(_one_rep, args))
    else:
        reps = [_one_rep(a) for a in args]
    rows = []
    for s in specs:
        v = np.array([r[s["key"]]["regret"] for r in reps])
        row = {
            "setting": setting,
            "policy": s["policy"],
            "k": s["k"],
            "T": horizon,
            "seeds": seeds,
            "regret": float(v.mean()),
            "se": float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0,
            "per_run": v.tolist(),
            "inner_epsilon": s["params"]["epsilon"],
            "inner_delta": s["params"]["delta"],
            "max_releases_per_user": max_releases,
            **({} if window_rounds is None else {"window_rounds": window_rounds}),
            "n_users": n_users,
            "zipf_exponent": zipf_exponent,
        }
        r0 = reps[0][s["key"]]
        if s["k"] is not None:
            row["admitted_share"] = r0["admitted"] / (r0["admitted"] + r0["bounded"])
            recs = [ReleaseRecord.from_dict(d) for d in r0["records"]]
            if recs:
                bandit = recs[0].bandit_id
                reach = user_level_spend(recs, bandit, s["k"], max_releases).releases_per_user
                # target δ: one δ per release the user reaches (each release is (ε, δ) for them)
                ul = user_level_spend(recs, bandit, s["k"], max_releases, max(1, reach) * DELTA)
                row["user_level"] = ul.statement()
        rows.append(row)
    return rows


def user_level_table(rows: list[dict]) -> str:
    """Regret ± s.e. per policy (rows) and k (columns)."""
    ks = []
    for r in rows:
        if r["k"] not in ks:
            ks.append(r["k"])
    pols = list(dict.fromkeys(r["policy"] for r in rows))
    cell = {(r["policy"], r["k"]): r for r in rows}
    header = ["policy", "T"] + [_k_label(k) for k in ks]
    body = []
    for p in pols:
        T = next(r["T"] for r in rows if r["policy"] == p)
        line = [p, f"{T:,}"]
        for k in ks:
            got = cell.get((p, k))
            line.append("-" if got is None else f"{got['regret']:,.0f} ± {got['se']:,.0f}")
        body.append(line)
    return format_table(header, body)
