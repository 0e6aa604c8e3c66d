"""The replay method (Li, Chu, Langford & Wang, WSDM 2011) for learning policies.

On a log whose actions were chosen uniformly at random, stream the events through the policy:
when its choice equals the logged arm, the event is *matched* — its reward counts and the policy
learns from it, as if it had been served online; otherwise the event is discarded and the
policy's state does not move. With i.i.d. events, the T matched events are distributed exactly
as T rounds of online interaction (Li et al. 2011, Theorem 1), so the mean matched reward
estimates the policy's online per-round reward, learning included.

Vectorised: a policy decides with a frozen model until its next update (``max_decide_batch()``
rounds), so the evaluator scans a block of events with :meth:`decide_frozen`, keeps the first
matches up to that limit, commits exactly those with ``decide`` (which must reproduce the
frozen decisions: decisions are a function of (state, event id)) and ``learn``, refits when
due, and goes on after the last committed event. Block sizes follow the observed match rate.
Private releases go to an :class:`~.ledger.InMemoryLedger`.

Only valid for uniform logging: every propensity must be 1/(number of candidate arms); the
evaluator refuses other logs (use IPS, SNIPS or DR for a frozen policy instead).
"""

from __future__ import annotations

import math

import numpy as np

from ..policies.base import UNBOUNDED, Policy
from ..utils.arrays import IntArray
from .batch import LoggedBatch
from .bootstrap import BlockBootstrap
from .errors import LogFormatError, show
from .ledger import InMemoryLedger
from .moments import RatioMoments, normal_quantile
from .ope.base import FEW_NONZERO, Estimate, RunningCurve, few_nonzero_warning
from .target import frozen_choices, has_distribution

__all__ = ["ReplayMethod"]


class ReplayMethod:
    """Replay a policy against a uniformly logged stream.

    Parameters
    ----------
    policy
        Any policy of the product (it is mutated: it learns from the matched events).
    ledger
        Where the policy's releases go (default: a fresh :class:`~.ledger.InMemoryLedger`).
    level, bootstrap, seed
        Interval level, bootstrap replicates (0: none), bootstrap seed.
    uniform_rtol
        Relative tolerance of the uniform-logging check (propensity vs 1/K).
    max_block
        Largest block of events decided at once.
    record_matches
        Keep the log indices of the matched events in ``matches`` (one array per chunk; for
        tests and diagnostics — it grows with the log).

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.policies import LinUCB
    >>> from streaming_dpbandit.replay.batch import LoggedBatch
    >>> from streaming_dpbandit.replay.contexts import DenseContexts
    >>> rng = np.random.default_rng(0)
    >>> n, K = 6000, 3
    >>> X = rng.normal(size=(n, K, 2)); a = rng.integers(0, K, n)
    >>> r = X[np.arange(n), a] @ np.array([1.0, 0.0]) + 0.1 * rng.normal(size=n)
    >>> log = LoggedBatch(np.arange(n), a, r, np.full(n, 1 / K), np.zeros(n, np.int64),
    ...                   DenseContexts(X))
    >>> rm = ReplayMethod(LinUCB(d=2, batch_size=16, seed=0), bootstrap=0)
    >>> rm.process(log)
    >>> est = rm.estimate()
    >>> est.n == rm.matched, round(rm.matched / n, 1), bool(est.value > 0.6)
    (True, 0.3, True)
    """

    name = "replay"

    def __init__(
        self,
        policy: Policy,
        ledger: InMemoryLedger | None = None,
        level: float = 0.95,
        bootstrap: int = 1000,
        seed: int = 0,
        uniform_rtol: float = 5e-3,
        max_block: int = 8192,
        record_matches: bool = False,
    ):
        self.policy = policy
        self.ledger = ledger if ledger is not None else InMemoryLedger()
        self.level = level
        self.bootstrap = bootstrap
        self.seed = seed
        self.uniform_rtol = uniform_rtol
        self.max_block = max_block
        self.record_matches = record_matches
        self.matches: list[IntArray] = []
        self._moments = RatioMoments()
        self._boot = BlockBootstrap()
        self._curve = RunningCurve()
        self.events = 0
        self.matched = 0
        self.refits = 0
        self._expected = 0.0  # Σ 1/K_i: expected matches of any policy
        self._scanned = 0
        self._hits = 0
        self._nonzero = 0

    def check_uniform(self, batch: LoggedBatch) -> None:
        """Raise :class:`LogFormatError` unless every propensity is 1/(candidate arms)."""
        expected = 1.0 / batch.n_available()
        bad = np.flatnonzero(np.abs(batch.propensities - expected) > self.uniform_rtol * expected)
        if bad.size:
            i = int(bad[0])
            raise LogFormatError(
                f"the replay method needs uniformly logged events: event "
                f"{show(batch.event_ids[i])} has propensity {batch.propensities[i]:.6g}, not "
                f"1/{int(batch.n_available()[i])}; evaluate a frozen policy with "
                "--estimator ips,snips,dr instead"
            )

    def _refit(self) -> None:
        self.ledger.append(self.policy.refit())
        self.refits += 1

    def process(self, batch: LoggedBatch, events: int | None = None) -> None:
        """Replay one chunk of the log (in log order)."""
        self.check_uniform(batch)
        n = len(batch)
        self._expected += float((1.0 / batch.n_available()).sum())
        pol = self.policy
        acts = batch.actions
        if has_distribution(pol):  # a fixed table: nothing to learn, nothing to commit
            arms, _ = frozen_choices(self.policy, batch)
            hits = np.flatnonzero(arms == acts)
        else:
            hits = self._learning(batch)
        if self.record_matches:
            self.matches.append(hits + self.events)
        self.events += n
        self.matched += hits.size
        hits = np.sort(hits)
        r = batch.rewards[hits]
        self._nonzero += int(np.count_nonzero(r))
        before = self._moments.total()
        self._moments.update(r, np.ones_like(r), batch.positions[hits])
        if self.bootstrap:
            self._boot.add(r, np.ones_like(r))
        x = events if events is not None else self.events
        self._last_x = x
        if hits.size:
            xs = x - n + hits + 1  # log position of each matched event
            self._curve.record_chunk(before, r, np.ones_like(r), xs, normal_quantile(self.level))
        else:
            self._curve.record(x, self._moments.estimate(self.level))

    def _block(self, m: int, K: int, d: int) -> int:
        """Events to decide at once when the model stays frozen for ``m`` more matches.

        Events after the m-th match are decided in vain (the model changes there). Aiming at
        the expected distance to the m-th match (half of it for m ≤ 4) keeps that waste to
        about 10% of the work, and a floor keeps small problems from paying the per-call
        overhead too often.
        """
        rate = (self._hits + 1.0) / (self._scanned + K)  # observed match rate, prior 1/K
        aim = (0.5 if m <= 4 else 1.0) * m / rate
        floor = min(1024, max(8, (1 << 16) // max(1, K * d)), max(8, math.ceil(8 * aim)))
        return int(min(self.max_block, max(floor, math.ceil(aim))))

    def _learning(self, batch: LoggedBatch) -> IntArray:
        pol = self.policy
        X = batch.contexts.dense()
        ids, acts, mask = batch.event_ids, batch.actions, batch.mask
        n = len(batch)
        K = batch.n_arms
        users = None
        if hasattr(pol, "user_counters"):  # a UserLevel policy: it needs the log's user ids
            users = batch.user_ids
            if users is None:
                raise LogFormatError(
                    "--max-contributions-per-user needs user ids in the log (the contexts' "
                    "user_id field of a service-jsonl or kafka log, or --map user=COLUMN)"
                )
        out: list[IntArray] = []
        pos = 0
        while pos < n:
            if pol.refit_due():
                self._refit()
            m = pol.max_decide_batch()
            if m <= 0:
                raise RuntimeError(f"{pol.name}: no round can be decided after its update")
            if m >= UNBOUNDED:
                blk = n - pos
            else:
                blk = min(n - pos, self._block(m, K, batch.d))
            sl = slice(pos, pos + blk)
            dec = pol.decide_frozen(
                X[sl], ids[sl], None if mask is None else mask[sl], **batch.arm_id_kwargs(pol, sl)
            )
            hit = np.flatnonzero(dec.arms == acts[sl])
            if hit.size > m:
                hit = hit[:m]
                consumed = int(hit[-1]) + 1
            else:
                consumed = blk
            self._scanned += consumed
            self._hits += hit.size
            if hit.size:
                rows = pos + hit
                Xr = X[rows]
                live = pol.decide(
                    Xr,
                    ids[rows],
                    None if mask is None else mask[rows],
                    **batch.arm_id_kwargs(pol, rows),
                )
                if not np.array_equal(live.arms, acts[rows]):
                    raise RuntimeError(
                        f"{pol.name}: decide() disagrees with decide_frozen() for the same "
                        "state and event ids; the replay method needs deterministic decisions"
                    )
                if users is None:
                    pol.learn(
                        Xr[np.arange(rows.size), acts[rows]],
                        batch.rewards[rows],
                        live.rounds,
                        ids[rows],
                    )
                else:  # user level: at most k of a user's events per release (UserLevel)
                    pol.learn(  # type: ignore[call-arg]
                        Xr[np.arange(rows.size), acts[rows]],
                        batch.rewards[rows],
                        live.rounds,
                        ids[rows],
                        user_ids=users[rows],
                    )
                out.append(rows)
            pos += consumed
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def estimate(self) -> Estimate:
        est = self._moments.estimate(self.level)
        if self.events:
            self._curve.finish(getattr(self, "_last_x", self.events), est)
        boot = None
        if self.bootstrap:
            boot = self._boot.interval(self.level, self.bootstrap, np.random.default_rng(self.seed))
        return Estimate.from_moments(
            self.name,
            est,
            boot,
            self.level,
            self._moments.per_position(self.level),
            diagnostics={
                "events": self.events,
                "matched": self.matched,
                "match_rate": self.matched / self.events if self.events else math.nan,
                "expected_match_rate": self._expected / self.events if self.events else math.nan,
                "refits": self.refits,
                "releases": self.ledger.releases,
                "policy_rounds": int(getattr(self.policy, "t", 0)),
                "nonzero_terms": self._nonzero,
                **(
                    {"warning": few_nonzero_warning(self._nonzero, self.matched)}
                    if self._nonzero < FEW_NONZERO
                    else {}
                ),
            },
            label=(
                "mean reward per matched (replayed) round of the learning policy; the interval "
                "treats rounds as exchangeable"
            ),
            curve=self._curve.to_dict(),
        )
