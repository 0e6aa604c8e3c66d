"""LinUCB / DP-LinUCB benchmarks (issues 4 and 24). Prints one JSON document.

1. ``throughput``: decisions + updates per second, side by side in one run, under one protocol
   for every implementation (``PROTOCOL`` below, copied into the JSON):

   * the same events: a pool of ``warmup + events`` rounds per d (K = 10 arms); every
     implementation warms up on the first ``warmup`` rounds with its own decide/learn loop
     (MABWiser's first call is ``fit`` with round-robin arms: it cannot predict before a fit)
     and is timed on the next ``events`` rounds;
   * the same repeats: ``repeats`` rounds, the implementations interleaved in each and their
     order reversed every other round (the machine drifts; no one always runs first or after
     the same neighbour); every repeat builds a fresh instance;
   * set-up outside the timed region for all: construction, the warm-up, and input formatting
     (River's dict contexts, VW's text lines, our arm-id list) happen before the clock starts;
   * timer: CPU time of the process (``time.process_time``; BLAS pinned to one thread, so it is
     the work done, robust to the other jobs on this shared 2-core machine) and wall time;
     medians and best of the repeats are reported, ratios of medians are the headline;
   * batches: the batched implementations (ours, MABWiser, plain numpy) decide and learn in
     batches of ``batch`` rounds; River and Vowpal Wabbit decide one event per call (their
     APIs have no batch decision), and ours also run per event (``batch_size=1``: a decision
     and a model update per event) beside them.

   Two like-for-like tables:

   * **per-arm models on a shared context** (``per_arm``): our ``LinUCBDisjoint`` (keyed by arm
     id: the K ids are passed with every batch), River's ``LinUCBDisjoint``, MABWiser's
     ``LinUCB`` and a plain numpy per-arm LinUCB (V_a⁻¹ recomputed per batch, the practical
     ceiling); rewards μ = ⟨θ_a, x⟩ + noise;
   * **one shared θ over per-arm features** (``shared_theta``): our ``LinUCB``, Vowpal Wabbit's
     ``--cb_explore_adf`` (Python API) and two plain numpy LinUCBs (V⁻¹ recomputed per batch;
     rank-1 Sherman–Morrison updates); rewards μ = ⟨θ, x_a⟩ + noise.

   ``private`` reports DP-LinUCB (Gaussian and Wishart, certified, ε = 1, δ = 1e-6,
   n_cap = 2^24) against our LinUCB, batches of 256 and 1024.
2. ``memory``: bytes of the tree state for (d = 5, m = 27) and (d = 100, m = 31) vs the spec's
   (m + 2)·(d+1)(d+2)/2 doubles, plus the sqrt-Toeplitz state after T steps; and the disjoint
   policy's state with a stream of new arms (flat at ``max_arms``).
3. ``batching``: what batching does to regret — LinUCB and DP-LinUCB on the paper's environment
   for several batch sizes, common random numbers.
4. ``noise``: per-entry noise standard deviation of the tree and the factorisation at equal
   (ε, δ), for several horizons (closed forms).

5. ``floor`` (also inside ``throughput``'s per-arm table): the scoring work alone — every
   arm's θ_aᵀx + α·sqrt(xᵀA_a⁻¹x) for each batch of 256 shared contexts, float64 numpy, no
   argmax, learning or refit — beside MABWiser and our disjoint LinUCB on the same events under
   the same protocol: floor ÷ MABWiser bounds the ratio any per-arm LinUCB doing at least that
   work can reach against MABWiser.
6. ``versions`` (``--old-tree DIR``, alone): our disjoint LinUCB of this tree against another
   checkout, fresh processes alternated (``bench_service.alternated``), same harness, with a
   hash of every decision of both.

7. ``per_event`` (alone, ``--only per_event``): decide + learn one event per call, ours against
   Vowpal Wabbit and River, the throughput protocol (the issue-36 targets: ≥ 3× VW, ≥ 10× River).

Usage: python bench/bench_linucb.py [--quick] [--only throughput,floor,memory,...] [--profile]
       python bench/bench_linucb.py --old-tree DIR [--versions-rounds N] [--quick]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import platform
import statistics
import sys
import time
import tracemalloc

import numpy as np

from streaming_dpbandit.envs import ShariffSheffetEnv
from streaming_dpbandit.experiments.runner import RunSpec, simulate
from streaming_dpbandit.policies import DPLinUCB, LinUCB, LinUCBDisjoint
from streaming_dpbandit.privacy.factorization import sqrt_toeplitz_norm
from streaming_dpbandit.privacy.gram_calibration import calibrate_gram_release

K = 10
BATCH = 256
PROTOCOL = {
    "arms": K,
    "batch": BATCH,
    "warmup": 512,
    "events": 8192,
    "repeats": 5,
    "timer": "time.process_time (CPU of this process; BLAS one thread) and wall",
    "setup_in_timed_region": False,
    "order": "interleaved per repeat, the order reversed every other repeat, fresh instance per "
    "repeat",
    "per_event_apis": ["river", "vw"],
}


class Stream:
    """``warmup + events`` rounds: a shared context with per-arm θ_a (per-arm models) and
    per-arm unit features with one θ (shared-θ models); every implementation sees them all."""

    def __init__(self, d: int, n: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n, K, d))
        X /= np.linalg.norm(X, axis=2, keepdims=True)
        theta = rng.standard_normal(d)
        theta /= np.linalg.norm(theta)
        thetas = rng.standard_normal((K, d)) / np.sqrt(d)
        self.d = d
        self.n = n
        self.X = X  # (n, K, d) per-arm features
        self.mu = X @ theta  # (n, K) shared θ
        self.ctx = np.ascontiguousarray(X[:, 0])  # (n, d) shared context
        self.mu_arm = self.ctx @ thetas.T  # (n, K) per-arm θ_a
        self.noise = 0.1 * rng.standard_normal(n)

    def reward(self, j: int, arms: np.ndarray, per_arm: bool = False) -> np.ndarray:
        rows = np.arange(j, j + arms.size)
        mu = self.mu_arm if per_arm else self.mu
        return mu[rows, arms] + self.noise[rows]


# Every implementation is ``prepare(s, lo, hi) -> go``: ``prepare`` builds it, formats its
# inputs and warms it up on rounds [0, lo) — outside the clock —; ``go()`` (timed) processes
# rounds [lo, hi).


# -- ours --------------------------------------------------------------------------------------
def _policy_loop(pol, s: Stream, lo: int, hi: int, batch: int = BATCH) -> None:
    t = lo
    X = s.X
    while t < hi:
        if pol.refit_due():
            pol.refit()
        m = min(pol.max_decide_batch(), batch, hi - t)
        Xb = X[t : t + m]
        dec = pol.decide(Xb)
        a = dec.arms
        pol.learn(Xb[np.arange(m), a], s.reward(t, a), dec.rounds)
        t += m


def _prepared(make, loop):
    def prepare(s: Stream, lo: int, hi: int):
        pol = make(s)
        loop(pol, s, 0, lo)
        return lambda: loop(pol, s, lo, hi)

    return prepare


class PerEvent:
    """Our per-event inputs, formatted before the clock as River's dict contexts and VW's text
    lines are: each round's (1, K, d) decision set (a view; for the per-arm models, the shared
    context broadcast to the K arms) and its K rewards as a list (River and VW look rewards up
    in such lists)."""

    def __init__(self, s: Stream, hi: int, per_arm: bool):
        if per_arm:
            ctx = s.ctx
            self.X = [np.broadcast_to(ctx[t : t + 1, None, :], (1, K, s.d)) for t in range(hi)]
            self.rows = [ctx[t : t + 1] for t in range(hi)]
            self.rewards = (s.mu_arm[:hi] + s.noise[:hi, None]).tolist()
        else:
            self.X = [s.X[t : t + 1] for t in range(hi)]
            self.rewards = (s.mu[:hi] + s.noise[:hi, None]).tolist()


def _per_event_loop(pol, inp: PerEvent, lo: int, hi: int) -> None:
    """Decide and learn one event per call (``batch_size=1``), as River and VW are driven."""
    X, rewards = inp.X, inp.rewards
    for t in range(lo, hi):
        if pol.refit_due():
            pol.refit()
        Xt = X[t]
        dec = pol.decide(Xt)
        a = int(dec.arms[0])
        pol.learn(Xt[0, a : a + 1], [rewards[t][a]], dec.rounds)


def _disjoint_per_event_loop(pol, inp: PerEvent, lo: int, hi: int) -> None:
    X, rows, rewards = inp.X, inp.rows, inp.rewards
    for t in range(lo, hi):
        if pol.refit_due():
            pol.refit()
        dec = pol.decide(X[t], arm_ids=ARM_IDS)
        pol.learn(rows[t], [rewards[t][int(dec.arms[0])]], dec.rounds)


def _prepared_per_event(make, loop, per_arm: bool):
    def prepare(s: Stream, lo: int, hi: int):
        pol = make(s)
        inp = PerEvent(s, hi, per_arm)
        loop(pol, inp, 0, lo)
        return lambda: loop(pol, inp, lo, hi)

    return prepare


def ours_linucb(batch: int = BATCH):
    if batch == 1:
        return _prepared_per_event(
            lambda s: LinUCB(d=s.d, beta=1.0, batch_size=1, seed=0), _per_event_loop, False
        )
    return _prepared(
        lambda s: LinUCB(d=s.d, beta=1.0, batch_size=batch, seed=0),
        lambda pol, s, a, b: _policy_loop(pol, s, a, b, batch),
    )


def ours_dp(noise: str, batch: int = BATCH):
    return _prepared(
        lambda s: DPLinUCB(
            d=s.d,
            epsilon=1.0,
            delta=1e-6,
            n_cap=1 << 24,
            noise=noise,
            batch_size=batch,
            tree_impl="binary",
            seed=0,
        ),
        lambda pol, s, a, b: _policy_loop(pol, s, a, b, batch),
    )


ARM_IDS = [f"arm-{k}" for k in range(K)]


def _disjoint_loop(pol, s: Stream, lo: int, hi: int, record: list | None = None) -> None:
    t = lo
    d = s.d
    while t < hi:
        if pol.refit_due():
            pol.refit()
        m = min(pol.max_decide_batch(), hi - t)
        ctx = s.ctx[t : t + m]
        dec = pol.decide(np.broadcast_to(ctx[:, None, :], (m, K, d)), arm_ids=ARM_IDS)
        pol.learn(ctx, s.reward(t, dec.arms, per_arm=True), dec.rounds)
        if record is not None:
            record.append(dec.arms)
        t += m


def ours_linucb_disjoint(batch: int = BATCH):
    if batch == 1:
        return _prepared_per_event(
            lambda s: LinUCBDisjoint(d=s.d, beta=1.0, batch_size=1, seed=0),
            _disjoint_per_event_loop,
            True,
        )
    return _prepared(
        lambda s: LinUCBDisjoint(d=s.d, beta=1.0, batch_size=batch, seed=0), _disjoint_loop
    )


# -- the scoring floor ---------------------------------------------------------------------------
def _floor_model(s: Stream, lo: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-arm ridge models (reg = 1) of the warm-up rounds with arms round-robin: A_a⁻¹, θ_a
    and C_a⁻ᵀ (A_a = C_a C_aᵀ). Their values do not change the cost of scoring."""
    d = s.d
    A = np.broadcast_to(np.eye(d), (K, d, d)).copy()
    b = np.zeros((K, d))
    arms = np.arange(lo) % K
    for a in range(K):
        xa = s.ctx[:lo][arms == a]
        A[a] += xa.T @ xa
        b[a] += xa.T @ s.mu_arm[:lo][arms == a, a]
    Ainv = np.linalg.inv(A)
    theta = np.einsum("kij,kj->ki", Ainv, b)
    CinvT = np.linalg.inv(np.linalg.cholesky(A)).transpose(0, 2, 1)
    return Ainv, theta, CinvT


def floor_factor_gemm(s: Stream, lo: int, hi: int, alpha: float = 1.0):
    """Scoring alone, the cheapest way we know: per batch of ``BATCH`` contexts, one GEMM with
    every arm's C_a⁻ᵀ and θ_a side by side, the squared norms, √, × α, + θ_aᵀx. No argmax, no
    learning, no refit: the work no per-arm LinUCB in float64 numpy can skip."""
    _, theta, CinvT = _floor_model(s, lo)
    d = s.d
    P = np.empty((d, K * d + K))
    P[:, : K * d] = CinvT.transpose(1, 0, 2).reshape(d, K * d)
    P[:, K * d :] = theta.T
    ctx = s.ctx

    def go() -> None:
        for t in range(lo, hi, BATCH):
            Y = ctx[t : min(t + BATCH, hi)] @ P
            Yk = Y[:, : K * d].reshape(Y.shape[0], K, d)
            sq = np.einsum("bkd,bkd->bk", Yk, Yk)
            width = np.sqrt(sq, out=sq)
            width *= alpha
            width += Y[:, K * d :]

    return go


def floor_inverse_per_arm(s: Stream, lo: int, hi: int, alpha: float = 1.0):
    """Scoring alone with the explicit A_a⁻¹, as the textbook writes it: per batch and arm,
    θ_aᵀx + α·sqrt(xᵀA_a⁻¹x) (one GEMM per arm for the quadratic forms, one for the means)."""
    Ainv, theta, _ = _floor_model(s, lo)
    ctx = s.ctx

    def go() -> None:
        for t in range(lo, hi, BATCH):
            x = ctx[t : min(t + BATCH, hi)]
            sc = x @ theta.T
            for a in range(K):
                sc[:, a] += alpha * np.sqrt(np.einsum("ij,ij->i", x @ Ainv[a], x))

    return go


# -- plain numpy ceilings ------------------------------------------------------------------------
def numpy_inverse_per_batch(s: Stream, lo: int, hi: int, alpha: float = 1.0):
    d = s.d
    st = {"A": np.eye(d), "b": np.zeros(d), "Ainv": np.eye(d), "theta": np.zeros(d)}

    def loop(a0, a1):
        A, b = st["A"], st["b"]
        t = a0
        while t < a1:
            m = min(BATCH, a1 - t)
            Xb = s.X[t : t + m]
            flat = Xb.reshape(-1, d)
            Ainv, theta = st["Ainv"], st["theta"]
            sc = flat @ theta + alpha * np.sqrt(np.einsum("ij,ij->i", flat @ Ainv, flat))
            arm = sc.reshape(m, K).argmax(axis=1)
            xc = Xb[np.arange(m), arm]
            A += xc.T @ xc
            b += xc.T @ s.reward(t, arm)
            st["Ainv"] = np.linalg.inv(A)
            st["theta"] = st["Ainv"] @ b
            t += m

    loop(0, lo)
    return lambda: loop(lo, hi)


def numpy_sherman_morrison(s: Stream, lo: int, hi: int, alpha: float = 1.0):
    d = s.d
    st = {"b": np.zeros(d), "Ainv": np.eye(d), "theta": np.zeros(d)}

    def loop(a0, a1):
        Ainv, b = st["Ainv"], st["b"]
        t = a0
        while t < a1:
            m = min(BATCH, a1 - t)
            Xb = s.X[t : t + m]
            flat = Xb.reshape(-1, d)
            theta = st["theta"]
            sc = flat @ theta + alpha * np.sqrt(np.einsum("ij,ij->i", flat @ Ainv, flat))
            arm = sc.reshape(m, K).argmax(axis=1)
            xc = Xb[np.arange(m), arm]
            for x in xc:  # rank-1 Sherman–Morrison updates of A⁻¹
                v = Ainv @ x
                Ainv -= np.outer(v, v) / (1.0 + x @ v)
            b += xc.T @ s.reward(t, arm)
            st["theta"] = Ainv @ b
            t += m

    loop(0, lo)
    return lambda: loop(lo, hi)


def numpy_per_arm(s: Stream, lo: int, hi: int, alpha: float = 1.0):
    """Plain numpy disjoint LinUCB: V_a⁻¹ recomputed per batch, one GEMM per arm."""
    d = s.d
    A = np.broadcast_to(np.eye(d), (K, d, d)).copy()
    bvec = np.zeros((K, d))
    st = {"Ainv": A.copy(), "theta": np.zeros((K, d))}

    def loop(a0, a1):
        t = a0
        while t < a1:
            m = min(BATCH, a1 - t)
            ctx = s.ctx[t : t + m]
            Ainv, theta = st["Ainv"], st["theta"]
            sc = ctx @ theta.T
            for a in range(K):
                sc[:, a] += alpha * np.sqrt(np.einsum("ij,ij->i", ctx @ Ainv[a], ctx))
            arm = sc.argmax(axis=1)
            r = s.reward(t, arm, per_arm=True)
            for a in range(K):
                sel = arm == a
                xa = ctx[sel]
                A[a] += xa.T @ xa
                bvec[a] += xa.T @ r[sel]
            st["Ainv"] = np.linalg.inv(A)
            st["theta"] = np.einsum("kij,kj->ki", st["Ainv"], bvec)
            t += m

    loop(0, lo)
    return lambda: loop(lo, hi)


# -- anchors ---------------------------------------------------------------------------------------
def river_linucb(s: Stream, lo: int, hi: int):
    from river import bandit

    pol = bandit.LinUCBDisjoint(alpha=1.0, seed=0)
    ctxs = [dict(enumerate(row)) for row in s.ctx[:hi].tolist()]
    rewards = (s.mu_arm[:hi] + s.noise[:hi, None]).tolist()

    def loop(a0, a1):
        for t in range(a0, a1):
            ctx = ctxs[t]
            arm = pol.pull(ARM_IDS, context=ctx)
            pol.update(arm, ctx, rewards[t][ARM_IDS.index(arm)])

    loop(0, lo)
    return lambda: loop(lo, hi)


def mabwiser_linucb(s: Stream, lo: int, hi: int):
    from mabwiser.mab import MAB, LearningPolicy

    mab = MAB(
        arms=list(range(K)),
        learning_policy=LearningPolicy.LinUCB(alpha=1.0, l2_lambda=1.0),
        seed=0,
    )

    def loop(a0, a1):
        t = a0
        while t < a1:
            m = min(BATCH, a1 - t)
            ctx = s.ctx[t : t + m]
            arms = np.asarray(mab.predict(ctx)).reshape(-1)
            mab.partial_fit(arms, s.reward(t, arms, per_arm=True), ctx)
            t += m

    first = np.arange(min(BATCH, lo)) % K  # its first call must be fit(): round-robin arms
    mab.fit(first, s.reward(0, first, per_arm=True), s.ctx[: first.size])
    loop(first.size, lo)
    return lambda: loop(lo, hi)


def vw_cb_explore_adf(s: Stream, lo: int, hi: int):
    import vowpalwabbit

    vw = vowpalwabbit.Workspace("--cb_explore_adf --quiet --random_seed 0")
    lines = [
        ["|a " + " ".join(f"{i}:{v:.6f}" for i, v in enumerate(row)) for row in s.X[t]]
        for t in range(hi)
    ]
    rng = np.random.default_rng(0)
    coins = rng.random(hi).tolist()
    rewards = (s.mu[:hi] + s.noise[:hi, None]).tolist()

    def loop(a0, a1):
        for t in range(a0, a1):
            acts = lines[t]
            pmf = vw.predict("\n".join(acts))
            cum, arm = 0.0, K - 1
            total = sum(pmf)
            for i, p in enumerate(pmf):
                cum += p
                if coins[t] * total < cum:
                    arm = i
                    break
            labelled = list(acts)
            labelled[arm] = f"0:{-rewards[t][arm]}:{pmf[arm]} {acts[arm]}"
            vw.learn("\n".join(labelled))

    loop(0, lo)
    return lambda: loop(lo, hi)


# -- timing ---------------------------------------------------------------------------------------
def timed(go) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    go()
    return time.process_time() - c0, time.perf_counter() - w0


def _median_best(xs):
    return (statistics.median(xs), max(xs)) if xs else (None, None)


def run_group(impls: dict, s: Stream, lo: int, hi: int, repeats: int) -> dict:
    """Interleaved repeats of every implementation on rounds [lo, hi) after a warm-up, the
    order reversed every other repeat."""
    cpu: dict[str, list] = {k: [] for k in impls}
    wall: dict[str, list] = {k: [] for k in impls}
    errors = {}
    n = hi - lo
    names = list(impls)
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            prepare = impls[name]
            if name in errors:
                continue
            try:
                go = prepare(s, lo, hi)  # set-up and warm-up: not timed
            except ImportError as err:
                errors[name] = str(err)
                continue
            c, w = timed(go)
            print(f"  {name} d={s.d}: {n / c:,.0f} events/cpu-s", file=sys.stderr, flush=True)
            cpu[name].append(n / c)
            wall[name].append(n / w)
    out = {}
    for name in impls:
        if name in errors:
            out[name] = {"error": errors[name]}
            continue
        mc, bc = _median_best(cpu[name])
        mw, bw = _median_best(wall[name])
        out[name] = {
            "events_per_cpu_s_median": round(mc),
            "events_per_cpu_s_best": round(bc),
            "events_per_wall_s_median": round(mw),
            "events_per_wall_s_best": round(bw),
        }
    return out


def _ratio(res: dict, a: str, b: str, key: str = "events_per_cpu_s_median"):
    x, y = res.get(a, {}).get(key), res.get(b, {}).get(key)
    return round(x / y, 2) if x and y else None


def bench_throughput(quick: bool) -> dict:
    proto = dict(PROTOCOL)
    if quick:
        proto.update(events=2048, repeats=3)
    lo, hi, repeats = proto["warmup"], proto["warmup"] + proto["events"], proto["repeats"]
    out = {"protocol": proto}
    for d in (20, 100):
        s = Stream(d, hi)
        per_arm = run_group(
            {
                "ours_linucb_disjoint": ours_linucb_disjoint(),
                "ours_linucb_disjoint_per_event": ours_linucb_disjoint(1),
                "river_linucb_disjoint": river_linucb,
                "mabwiser_linucb": mabwiser_linucb,
                "numpy_per_arm_inverse_per_batch": numpy_per_arm,
                **FLOORS,
            },
            s,
            lo,
            hi,
            repeats,
        )
        shared = run_group(
            {
                "ours_linucb": ours_linucb(),
                "ours_linucb_per_event": ours_linucb(1),
                "vw_cb_explore_adf": vw_cb_explore_adf,
                "numpy_inverse_per_batch": numpy_inverse_per_batch,
                "numpy_sherman_morrison": numpy_sherman_morrison,
            },
            s,
            lo,
            hi,
            repeats,
        )
        private = run_group(
            {
                "ours_linucb": ours_linucb(),
                "ours_dp_linucb_gaussian": ours_dp("gaussian"),
                "ours_dp_linucb_wishart": ours_dp("wishart"),
                "ours_linucb_b1024": ours_linucb(1024),
                "ours_dp_linucb_gaussian_b1024": ours_dp("gaussian", 1024),
                "ours_dp_linucb_wishart_b1024": ours_dp("wishart", 1024),
            },
            s,
            lo,
            hi,
            repeats,
        )
        ceiling = max(
            (shared.get(k, {}).get("events_per_cpu_s_median") or 0)
            for k in ("numpy_inverse_per_batch", "numpy_sherman_morrison")
        )
        ours = shared["ours_linucb"]["events_per_cpu_s_median"]
        out[f"d={d}"] = {
            "per_arm": per_arm,
            "per_arm_ratios_cpu_median": {
                "ours_disjoint_over_river": _ratio(
                    per_arm, "ours_linucb_disjoint", "river_linucb_disjoint"
                ),
                "ours_disjoint_per_event_over_river": _ratio(
                    per_arm, "ours_linucb_disjoint_per_event", "river_linucb_disjoint"
                ),
                "ours_disjoint_over_mabwiser": _ratio(
                    per_arm, "ours_linucb_disjoint", "mabwiser_linucb"
                ),
                "ours_disjoint_over_numpy_per_arm": _ratio(
                    per_arm, "ours_linucb_disjoint", "numpy_per_arm_inverse_per_batch"
                ),
                "ours_disjoint_over_mabwiser_wall_median": _ratio(
                    per_arm, "ours_linucb_disjoint", "mabwiser_linucb", "events_per_wall_s_median"
                ),
                **_floor_ratios(per_arm),
            },
            "shared_theta": shared,
            "shared_theta_ratios_cpu_median": {
                "ours_linucb_over_vw": _ratio(shared, "ours_linucb", "vw_cb_explore_adf"),
                "ours_linucb_per_event_over_vw": _ratio(
                    shared, "ours_linucb_per_event", "vw_cb_explore_adf"
                ),
                "ours_linucb_over_ceiling": round(ours / ceiling, 3) if ceiling else None,
            },
            "private": private,
            "private_ratios_cpu_median": {
                "dp_gaussian_over_linucb": _ratio(
                    private, "ours_dp_linucb_gaussian", "ours_linucb"
                ),
                "dp_wishart_over_linucb": _ratio(private, "ours_dp_linucb_wishart", "ours_linucb"),
                "b1024_dp_gaussian_over_linucb": _ratio(
                    private, "ours_dp_linucb_gaussian_b1024", "ours_linucb_b1024"
                ),
                "b1024_dp_wishart_over_linucb": _ratio(
                    private, "ours_dp_linucb_wishart_b1024", "ours_linucb_b1024"
                ),
            },
        }
    return out


FLOORS = {
    "floor_scoring_factor_gemm": floor_factor_gemm,
    "floor_scoring_inverse_per_arm": floor_inverse_per_arm,
}


def _floor_ratios(res: dict) -> dict:
    """The best scoring floor against MABWiser (the most any per-arm LinUCB doing at least
    that work could reach) and ours against the floor."""
    best = max(FLOORS, key=lambda k: res.get(k, {}).get("events_per_cpu_s_median") or 0)
    return {
        "best_floor": best,
        "floor_over_mabwiser": _ratio(res, best, "mabwiser_linucb"),
        "ours_disjoint_over_floor": _ratio(res, "ours_linucb_disjoint", best),
        "floor_over_mabwiser_wall_median": _ratio(
            res, best, "mabwiser_linucb", "events_per_wall_s_median"
        ),
    }


def bench_floor(quick: bool) -> dict:
    """``floor``: the scoring floor, our disjoint LinUCB and MABWiser on the same events under
    the throughput protocol, for the reachable ratio."""
    proto = dict(PROTOCOL)
    if quick:
        proto.update(events=2048, repeats=3)
    lo, hi, repeats = proto["warmup"], proto["warmup"] + proto["events"], proto["repeats"]
    out: dict = {
        "protocol": proto,
        "floor": "per batch of 256 shared contexts, every arm's θ_aᵀx + α·sqrt(xᵀA_a⁻¹x) "
        "(float64 numpy; scoring only: no argmax, no learning, no refit); factor_gemm: one "
        "GEMM with every C_a⁻ᵀ and θ_a side by side; inverse_per_arm: one GEMM per arm with A_a⁻¹",
        "load_average_at_start": os.getloadavg(),
    }
    for d in (20, 100):
        s = Stream(d, hi)
        res = run_group(
            {
                "ours_linucb_disjoint": ours_linucb_disjoint(),
                "mabwiser_linucb": mabwiser_linucb,
                **FLOORS,
            },
            s,
            lo,
            hi,
            repeats,
        )
        out[f"d={d}"] = {
            "per_arm": res,
            "ratios_cpu_median": {
                "ours_disjoint_over_mabwiser": _ratio(
                    res, "ours_linucb_disjoint", "mabwiser_linucb"
                ),
                **_floor_ratios(res),
            },
        }
    out["load_average_at_end"] = os.getloadavg()
    return out


def bench_per_event(quick: bool) -> dict:
    """``per_event``: deciding and learning one event per call (``batch_size=1``, a model
    refresh per event) against the per-event anchors, under the throughput protocol: our LinUCB
    against Vowpal Wabbit's ``cb_explore_adf`` (one θ over per-arm features), our disjoint
    LinUCB against River's (per-arm models on a shared context), at d = 20 and d = 100."""
    proto = dict(PROTOCOL)
    if quick:
        proto.update(events=2048, repeats=3)
    lo, hi, repeats = proto["warmup"], proto["warmup"] + proto["events"], proto["repeats"]
    out: dict = {"protocol": proto, "load_average_at_start": os.getloadavg()}
    for d in (20, 100):
        s = Stream(d, hi)
        shared = run_group(
            {"ours_linucb_per_event": ours_linucb(1), "vw_cb_explore_adf": vw_cb_explore_adf},
            s,
            lo,
            hi,
            repeats,
        )
        per_arm = run_group(
            {
                "ours_linucb_disjoint_per_event": ours_linucb_disjoint(1),
                "river_linucb_disjoint": river_linucb,
            },
            s,
            lo,
            hi,
            repeats,
        )
        out[f"d={d}"] = {
            "shared_theta": shared,
            "per_arm": per_arm,
            "ours_linucb_per_event_over_vw": _ratio(
                shared, "ours_linucb_per_event", "vw_cb_explore_adf"
            ),
            "ours_disjoint_per_event_over_river": _ratio(
                per_arm, "ours_linucb_disjoint_per_event", "river_linucb_disjoint"
            ),
            "load_average": os.getloadavg(),
        }
    out["load_average_at_end"] = os.getloadavg()
    out["compiled_kernels"] = kernel_first_use()
    return out


_FIRST_USE = """
import time
import numpy as np
from streaming_dpbandit.estimators import _ucb_kernels
from streaming_dpbandit.policies import LinUCBDisjoint
c0 = time.perf_counter()
if _ucb_kernels.load() is None:
    raise SystemExit("numba is not installed")
pol = LinUCBDisjoint(d=20, beta=1.0, batch_size=1, seed=0)
x = np.full(20, 0.2)
for _ in range(2):
    if pol.refit_due():
        pol.refit()
    dec = pol.decide(np.broadcast_to(x, (1, 10, 20)), arm_ids=list(range(10)))
    pol.learn(x[None], [1.0], dec.rounds)
print(time.perf_counter() - c0)
"""


def kernel_first_use() -> dict:
    """What the compiled per-event kernels (numba) cost before the first event, outside every
    timed region (the per-event groups' warm-up runs them first): seconds of wall time from
    the first use (numba imported then) to two decided and learned events, in a fresh process
    with an empty JIT cache (compiling) and again with that cache filled (loading)."""
    import subprocess
    import tempfile

    out: dict = {}
    try:
        import numba

        out["numba"] = numba.__version__
    except ImportError:
        return {"numba": None}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for key in ("first_use_s_cold_cache", "first_use_s_warm_cache"):
            res = subprocess.run(
                [sys.executable, "-c", _FIRST_USE], env=env, capture_output=True, text=True
            )
            out[key] = round(float(res.stdout), 2) if res.returncode == 0 else res.stderr[-300:]
    return out


# -- this tree against another checkout ---------------------------------------------------------
#: (d, batch size, timed events): the batched cases over 16× and 2× the throughput events (a
#: batch of 256 takes ≈ 0.3 ms at d = 20: shorter timings differ by ±50 % between processes on
#: this shared machine), the per-event case over the throughput's own 8,192
VERSION_CASES = ((20, BATCH, 131072), (100, BATCH, 16384), (20, 1, 8192))


def child_disjoint(d: int, batch: int, events: int, repeats: int) -> None:
    """Child of ``--old-tree``: our disjoint LinUCB of whichever package is on PYTHONPATH,
    timed as in ``throughput`` (``repeats`` fresh instances), then one untimed pass recording
    every decision; one JSON line."""
    import hashlib

    import streaming_dpbandit

    lo, hi = PROTOCOL["warmup"], PROTOCOL["warmup"] + events
    s = Stream(d, hi)
    rates = []
    for _ in range(repeats):
        c, _w = timed(ours_linucb_disjoint(batch)(s, lo, hi))
        rates.append((hi - lo) / c)
    arms: list = []
    pol = LinUCBDisjoint(d=d, beta=1.0, batch_size=batch, seed=0)
    _disjoint_loop(pol, s, 0, hi, arms)
    digest = hashlib.sha256(np.concatenate(arms).astype(np.int64).tobytes()).hexdigest()
    print(
        json.dumps(
            {"rates": rates, "decisions_sha256": digest, "package": streaming_dpbandit.__file__}
        )
    )


def bench_versions(old_tree: str, rounds: int, quick: bool) -> dict:
    """Our disjoint LinUCB of this tree against ``old_tree`` (same harness: this file; only
    the package differs), each sample a fresh process, the trees alternated ``rounds`` times
    with the order reversed every other round (``bench_service.alternated``)."""
    import subprocess
    from pathlib import Path

    from bench_service import alternated

    root = Path(__file__).resolve().parents[1]
    trees = {"new": root, "old": Path(old_tree).resolve()}
    out: dict = {
        "protocol": f"per case, {rounds} rounds alternating the trees (order reversed every "
        f"other round), each a fresh process warming up on {PROTOCOL['warmup']} rounds and "
        "timing the case's events 3 times (CPU time, fresh instance each, best of 3 per "
        "process); medians over rounds; then one untimed pass hashing every decision",
        "old_tree": str(trees["old"]),
        "load_average_at_start": os.getloadavg(),
    }
    for d, batch, events in VERSION_CASES:
        if quick:
            events = 2048

        def one(side: str, d: int = d, batch: int = batch, events: int = events) -> dict:
            res = subprocess.run(
                [sys.executable, __file__, "--child-disjoint", str(d), str(batch), str(events)],
                env={**os.environ, "PYTHONPATH": str(trees[side])},
                capture_output=True,
                text=True,
                check=True,
            )
            got = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"  versions d={d} b={batch} {side}: {max(got['rates']):,.0f}/cpu-s",
                  file=sys.stderr, flush=True)  # fmt: skip
            return got

        runs = alternated(["old", "new"], rounds, one)
        best = {k: [max(r["rates"]) for r in runs[k]] for k in runs}
        med = {k: statistics.median(v) for k, v in best.items()}
        out[f"d={d},batch={batch}"] = {
            "events": events,
            "new_events_per_cpu_s": [round(x) for x in best["new"]],
            "old_events_per_cpu_s": [round(x) for x in best["old"]],
            "median_new": round(med["new"]),
            "median_old": round(med["old"]),
            "new_over_old": round(med["new"] / med["old"], 3),
            "per_round_new_over_old": [round(n / o, 3) for n, o in zip(best["new"], best["old"])],
            "median_per_round_new_over_old": round(
                statistics.median(n / o for n, o in zip(best["new"], best["old"])), 3
            ),
            "same_decisions": len({r["decisions_sha256"] for k in runs for r in runs[k]}) == 1,
            "packages": sorted({r["package"] for k in runs for r in runs[k]}),
        }
    out["load_average_at_end"] = os.getloadavg()
    return out


# -- memory ---------------------------------------------------------------------------------------
def bench_memory() -> list:
    rows = []
    for d, n_cap, noise in (
        (5, 50_000_000, "gaussian"),
        (100, 1 << 30, "gaussian"),
        (100, 1 << 30, "wishart"),
    ):
        tracemalloc.start()
        pol = DPLinUCB(
            d=d,
            epsilon=1.0,
            delta=1e-6,
            n_cap=n_cap,
            noise=noise,
            seed=0,
            batch_size=256,
            tree_impl="binary",
        )
        pol.refit()
        X = np.random.default_rng(0).standard_normal((256, 2, d)) / np.sqrt(d)
        dec = pol.decide(X)
        pol.learn(X[np.arange(256), dec.arms], np.ones(256), dec.rounds)
        pol.refit()
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        agg = pol._agg
        P = (d + 1) * (d + 2) // 2
        m = agg.calibration().m
        rows.append(
            {
                "d": d,
                "m": m,
                "noise": noise,
                "tree_state_bytes": agg.nbytes,
                "spec_estimate_bytes_(m+2)P8": (m + 2) * P * 8,
                "policy_traced_bytes": traced,
            }
        )
    from streaming_dpbandit.privacy.factorization import SqrtToeplitzAggregator
    from streaming_dpbandit.privacy.matrix_noise import SymmetricGaussianNoise
    from streaming_dpbandit.privacy.noise import NoiseSource

    d, T = 20, 4096
    agg = SqrtToeplitzAggregator(d + 1, T, SymmetricGaussianNoise(d + 1, 1.0), NoiseSource(seed=0))
    one = np.zeros((1, d + 1))
    for _ in range(T):
        agg.insert_many(one)
        agg.release()
    rows.append(
        {
            "d": d,
            "sqrt_toeplitz_steps": T,
            "state_bytes": agg.nbytes,
            "per_step_bytes": agg.nbytes / T,
        }
    )
    return rows


# -- batching and regret --------------------------------------------------------------------------
def bench_batching(quick: bool) -> list:
    d = 5
    horizon = 1 << (15 if quick else 17)
    env = ShariffSheffetEnv(d=d, gap=0.1)
    specs = []
    for b in (1, 16, 256, 2048) if not quick else (16, 256, 2048):
        specs.append(
            RunSpec(
                f"linucb b={b}",
                "linucb",
                {"d": d, "alpha": 1.0 / horizon, "batch_size": b},
                horizon,
            )
        )
    for b in (16, 256, 2048):
        specs.append(
            RunSpec(
                f"dp-linucb gaussian b={b}",
                "dp-linucb",
                {"d": d, "epsilon": 1.0, "delta": 0.1, "n_cap": horizon, "batch_size": b},
                horizon,
                1.0,
                0.1,
            )
        )
    res = simulate(env, specs, seeds=2 if quick else 4, jobs=2, progress=False)
    out = []
    for row in res.summary():
        out.append(
            {
                "run": row["key"],
                "horizon": horizon,
                "final_regret_mean": round(row["final_regret"]["mean"], 1),
                "se": round(row["final_regret"]["se"], 1),
                "seeds": res.seeds,
            }
        )
    return out


def bench_noise() -> list:
    rows = []
    for n in (1 << 16, 1 << 20, 1 << 24):
        for b in (1, 256):
            tree = calibrate_gram_release(5, 1.0, 1e-6, n)
            fact = calibrate_gram_release(
                5, 1.0, 1e-6, n, tree_impl="sqrt_toeplitz", n_steps=-(-n // b)
            )
            rows.append(
                {
                    "n": n,
                    "release_every": b,
                    "tree_m": tree.m,
                    "tree_entry_std": tree.entry_std,
                    "sqrt_toeplitz_factor_norm": sqrt_toeplitz_norm(-(-n // b)),
                    "sqrt_toeplitz_entry_std": fact.entry_std,
                    "tree_over_factorisation_std": tree.entry_std / fact.entry_std,
                    "tree_rho_min": tree.rho_min,
                    "factorisation_rho_min": fact.rho_min,
                }
            )
    return rows


def profile_loops() -> None:
    from pyinstrument import Profiler

    for name, prepare, d in (
        ("ours_linucb_disjoint", ours_linucb_disjoint(), 20),
        ("ours_linucb_disjoint", ours_linucb_disjoint(), 100),
        ("ours_linucb", ours_linucb(), 20),
        ("ours_dp_linucb_gaussian", ours_dp("gaussian"), 20),
    ):
        s = Stream(d, 512 + (1 << 15))
        go = prepare(s, 512, s.n)
        prof = Profiler(interval=0.0002)
        prof.start()
        go()
        prof.stop()
        print(f"==== profile: {name} (d={d}) ====", file=sys.stderr)
        print(prof.output_text(show_all=False), file=sys.stderr)


def bench_disjoint_memory() -> dict:
    """State of LinUCBDisjoint (d = 20, max_arms = 1000) under a stream of new arms: 20 new
    ids every round of 20 candidates; flat once max_arms arms are kept."""
    pol = LinUCBDisjoint(d=20, max_arms=1000, beta=1.0, batch_size=256, seed=0)
    rng = np.random.default_rng(0)
    rows = []
    tracemalloc.start()
    for step in range(1, 401):
        if pol.refit_due():
            pol.refit()
        ids = [f"item-{step}-{j}" for j in range(20)]
        X = rng.standard_normal((1, 20, 20))
        dec = pol.decide(X, arm_ids=ids)
        pol.learn(X[0, dec.arms], [1.0], dec.rounds)
        if step % 50 == 0:
            rows.append(
                {
                    "arms_offered": 20 * step,
                    "arms_kept": len(pol.arm_ids),
                    "traced_bytes": tracemalloc.get_traced_memory()[0],
                }
            )
    tracemalloc.stop()
    return {"max_arms": 1000, "d": 20, "rows": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="throughput,memory,batching,noise")
    ap.add_argument("--profile", action="store_true", help="pyinstrument profiles on stderr")
    ap.add_argument(
        "--old-tree",
        help="only our disjoint LinUCB of this tree against another checkout (e.g. git archive "
        "COMMIT | tar -x -C DIR), alternated --versions-rounds times, fresh processes",
    )
    ap.add_argument("--versions-rounds", type=int, default=6)
    ap.add_argument("--child-disjoint", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_disjoint:
        child_disjoint(*args.child_disjoint, repeats=3)
        return
    only = set(args.only.split(","))
    result = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "load_average": os.getloadavg(),
        }
    }
    if args.old_tree:
        result["versions"] = bench_versions(args.old_tree, args.versions_rounds, args.quick)
        print(json.dumps(result, indent=1, default=float))
        return
    if "throughput" in only:
        result["throughput"] = bench_throughput(args.quick)
    if "floor" in only:
        result["floor"] = bench_floor(args.quick)
    if "per_event" in only:
        result["per_event"] = bench_per_event(args.quick)
    if "memory" in only:
        result["memory"] = bench_memory()
        result["disjoint_memory"] = bench_disjoint_memory()
    if "batching" in only:
        result["batching"] = bench_batching(args.quick)
    if "noise" in only:
        result["noise"] = bench_noise()
    print(json.dumps(result, indent=1, default=float))
    if args.profile:
        profile_loops()


if __name__ == "__main__":
    main()
