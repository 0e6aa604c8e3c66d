"""Base of the off-policy value estimators: per-event terms → ratio moments → intervals.

An estimator turns each logged event into terms (a_i, b_i) and estimates V = ā / b̄ (see
:mod:`..moments`). It keeps, in O(positions + blocks) memory: the ratio moments per position
(point estimate, delta-method standard error, normal interval, per-position values), an
adaptive-block bootstrap (percentile interval) and a thinned running curve of the estimate with
its normal interval (for plots).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ...utils.arrays import ArrayLike, FloatArray, IntArray
from ..bootstrap import BlockBootstrap
from ..moments import RatioMoments, Totals, normal_quantile, prefix_estimates

__all__ = ["FEW_NONZERO", "Estimate", "OffPolicyEstimator", "RunningCurve", "few_nonzero_warning"]

#: Per-event terms (a, b) of V = ā / b̄.
Terms = tuple[FloatArray, FloatArray]
#: An optional per-event array (importance weights, reward-model values).
MaybeArray = ArrayLike | None

#: Below this many events with a non-zero term, normal and bootstrap intervals are unreliable.
FEW_NONZERO = 10


def few_nonzero_warning(k: int, n: int) -> str:
    """Why the intervals cannot be trusted when almost every term is zero.

    >>> few_nonzero_warning(0, 120)  # doctest: +ELLIPSIS
    'only 0 of 120 events contribute a non-zero term: ... about 3/n = 0.025)'
    """
    text = f"only {k} of {n} events contribute a non-zero term: the intervals are unreliable"
    if k == 0 and n > 0:
        text += (
            f" (with no non-zero reward in n events, a 95% upper bound of a rate is about "
            f"3/n = {3 / n:.2g})"
        )
    return text


@dataclasses.dataclass
class Estimate:
    """A value estimate with its uncertainty.

    Attributes
    ----------
    estimator
        Name (``"ips"``, ``"snips"``, ``"dm"``, ``"dr"``, ``"replay"``, ``"on-policy"``).
    value, se
        Point estimate and its (delta-method) standard error.
    ci_normal, ci_bootstrap
        Normal-approximation and percentile-bootstrap intervals at ``level`` (the bootstrap one
        is ``None`` when switched off).
    n
        Events the estimate averages over (matched events for the replay method).
    per_position
        One dict per slate position: value, se, ci, n.
    diagnostics
        Weight diagnostics, match rates, notes.
    label
        What the interval does not cover, when that matters (e.g. DM's model bias).
    curve
        Running estimate: ``{"events": [...], "value": [...], "lo": [...], "hi": [...]}``.
    """

    estimator: str
    value: float
    se: float
    ci_normal: tuple[float, float]
    ci_bootstrap: tuple[float, float] | None
    n: int
    level: float
    per_position: list[dict[str, Any]]
    diagnostics: dict[str, Any] = dataclasses.field(default_factory=dict)
    label: str | None = None
    curve: dict[str, list[Any]] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_moments(
        cls,
        estimator: str,
        est: dict[str, Any],
        boot: tuple[float, float] | None,
        level: float,
        per_position: list[dict[str, Any]],
        **rest: Any,
    ) -> Estimate:
        """The estimate of a moments summary ``est`` (``value``, ``se``, ``ci``, ``n``)."""
        ci = tuple(est["ci"])
        return cls(
            estimator, est["value"], est["se"], ci, boot, est["n"], level, per_position, **rest
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ci_normal"] = list(self.ci_normal)
        out["ci_bootstrap"] = None if self.ci_bootstrap is None else list(self.ci_bootstrap)
        finite: dict[str, Any] = _finite(out)
        return finite


def _finite(obj: Any) -> Any:
    """NaN/inf → None, recursively (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.generic):
        return _finite(obj.item())
    return obj


class RunningCurve:
    """The running estimate and its normal interval at chunk ends, thinned to ≤ ``max_points``.

    >>> c = RunningCurve(max_points=4)
    >>> for i in range(1, 11):
    ...     c.record(i * 10, {"value": float(i), "ci": [i - 1.0, i + 1.0]})
    >>> c.finish(100, {"value": 10.0, "ci": [9.0, 11.0]})
    >>> c.to_dict()["events"]
    [40, 80, 100]
    """

    def __init__(self, max_points: int = 400):
        self.max_points = max_points
        self._rows: list[tuple[int, float, float, float]] = []
        self._stride = 1
        self._calls = 0

    def record_chunk(
        self, before: Totals, a: FloatArray, b: FloatArray, xs: IntArray, z: float, points: int = 8
    ) -> None:
        """Record up to ``points`` running estimates inside a chunk of terms (a, b) whose
        x positions (events of the log) are ``xs``; ``before`` are the totals before it."""
        n = a.size
        if n == 0:
            return
        k = min(points, n)
        ends = np.unique(np.linspace(0, n, k + 1).astype(np.int64)[1:])
        v, lo, hi = prefix_estimates(before, a, b, ends, z)
        for j, e in enumerate(ends):
            self.record(int(xs[e - 1]), {"value": float(v[j]), "ci": [float(lo[j]), float(hi[j])]})

    def record(self, events: int, est: dict[str, Any]) -> None:
        self._calls += 1
        if self._calls % self._stride:
            return
        lo, hi = est["ci"]
        self._rows.append((int(events), est["value"], lo, hi))
        if len(self._rows) > self.max_points:
            self._rows = self._rows[1::2]
            self._stride *= 2

    def finish(self, events: int, est: dict[str, Any]) -> None:
        """Record the final point (always kept)."""
        if self._rows and self._rows[-1][0] == events:
            self._rows.pop()
        lo, hi = est["ci"]
        self._rows.append((int(events), est["value"], lo, hi))

    def to_dict(self) -> dict[str, list[Any]]:
        cols: list[Any] = list(zip(*self._rows)) if self._rows else [[], [], [], []]
        return {
            "events": list(cols[0]),
            "value": list(cols[1]),
            "lo": list(cols[2]),
            "hi": list(cols[3]),
        }


class OffPolicyEstimator:
    """Base class: subclasses define :meth:`terms` (and ``name``, ``needs_model``).

    Parameters
    ----------
    level
        Confidence level of the intervals.
    bootstrap
        Bootstrap replicates (0 switches the bootstrap interval off).
    seed
        Seeds the bootstrap resampling (per instance; no global RNG).
    block_capacity
        Blocks kept by the bounded-memory bootstrap.
    """

    name = "base"
    #: needs a reward model q̂ (DM, DR)
    needs_model = False
    #: the estimate uses importance weights (their diagnostics are reported)
    uses_weights = True
    label: str | None = None

    def __init__(
        self,
        level: float = 0.95,
        bootstrap: int = 1000,
        seed: int = 0,
        block_capacity: int = 4096,
    ):
        self.level = level
        self.bootstrap = bootstrap
        self.seed = seed
        self.block_capacity = block_capacity
        normal_quantile(level)  # validates
        self._moments = RatioMoments()
        self._boot = BlockBootstrap(block_capacity)
        self._curve = RunningCurve()
        self._events = 0
        self._nonzero = 0

    def terms(
        self, rewards: FloatArray, weights: MaybeArray, q_logged: MaybeArray, q_target: MaybeArray
    ) -> Terms:
        """Per-event terms (a, b) of V = ā / b̄."""
        raise NotImplementedError

    def update(
        self,
        rewards: ArrayLike,
        weights: ArrayLike | None = None,
        positions: ArrayLike | None = None,
        q_logged: ArrayLike | None = None,
        q_target: ArrayLike | None = None,
        events: int | None = None,
    ) -> None:
        """Add a chunk of logged events.

        Parameters
        ----------
        rewards
            Logged rewards r_i.
        weights
            Importance weights w_i = π_e(a_i | x_i, p_i) / π_b(a_i | x_i, p_i).
        positions
            Slate position of each event (0-based; default 0).
        q_logged, q_target
            Reward model at the logged action, q̂(x_i, a_i, p_i), and under the evaluated
            policy, Σ_a π_e(a | x_i, p_i) q̂(x_i, a, p_i) (DM and DR only).
        events
            Events of the log read so far (x axis of the running curve; default: count).
        """
        r = np.asarray(rewards, dtype=np.float64)
        if r.size == 0:
            return
        if self.needs_model and (q_logged is None or q_target is None):
            raise ValueError(f"{self.name} needs the reward model's q_logged and q_target")
        a, b = self.terms(r, weights, q_logged, q_target)
        before = self._moments.total()
        self._moments.update(a, b, positions)
        self._nonzero += int(np.count_nonzero(a))
        if self.bootstrap:
            self._boot.add(a, b)
        start = (events if events is not None else self._events + r.size) - r.size
        self._events = start + r.size
        xs = np.arange(start + 1, start + r.size + 1)
        self._curve.record_chunk(before, a, b, xs, normal_quantile(self.level))

    def estimate(self) -> Estimate:
        """The estimate of everything seen so far."""
        est = self._moments.estimate(self.level)
        self._curve.finish(self._events, est)
        boot = None
        if self.bootstrap:
            rng = np.random.default_rng(self.seed)
            boot = self._boot.interval(self.level, self.bootstrap, rng)
        diagnostics = self._diagnostics()
        per_position = self._moments.per_position(self.level)
        return Estimate.from_moments(
            self.name, est, boot, self.level, per_position, diagnostics=diagnostics,
            label=self.label, curve=self._curve.to_dict(),
        )  # fmt: skip

    def _diagnostics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nonzero_terms": self._nonzero}
        if self._nonzero < FEW_NONZERO:
            out["warning"] = few_nonzero_warning(self._nonzero, self._moments.count)
        if self.bootstrap:
            out["bootstrap_blocks"] = self._boot.blocks
            out["bootstrap_block_size"] = self._boot.block_size
        return out
