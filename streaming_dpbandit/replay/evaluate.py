"""Replay a logged stream through policies: one pass, every evaluator, bounded memory.

``replay_log`` reads the log chunk by chunk and feeds, for every policy configuration, the
replay method (a learning policy, uniform logs) and/or the off-policy estimators of the policy
frozen (IPS, SNIPS, DM, DR), plus the logged policy's own value. DM and DR first need a reward
model: one more pass over the log fits it (cross-fitted). Memory is one chunk plus O(positions +
bootstrap blocks) per estimator, whatever the length of the log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
import time
from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

import numpy as np

from ..policies import policy_class
from ..policies.base import Policy
from .errors import LogFormatError
from .ledger import InMemoryLedger
from .offpolicy import OffPolicyEvaluator
from .ope import ESTIMATORS, OnPolicy
from .readers.base import LogReader
from .replay_method import ReplayMethod
from .result import ReplayResult
from .reward_model import RidgeRewardModel

__all__ = ["PolicySpec", "replay_log"]


@dataclasses.dataclass
class PolicySpec:
    """One policy configuration to evaluate.

    Attributes
    ----------
    key
        Unique label of its estimates (e.g. ``"fliphat ε=1"``).
    policy
        Registry name.
    params
        Constructor parameters (without ``seed``).
    epsilon, delta
        The privacy budget (``None`` for non-private policies).
    note
        A label shown with the results (e.g. a non-default calibration's).
    reference
        A value to compare the estimates with, e.g. the on-policy value of the log a table
        policy was fitted from: ``{"label", "value", "se", "ci_normal", ...}``.
    config, user_level
        The validated configuration and a
        :class:`~streaming_dpbandit.config.UserLevelConfig`: the policy is then built at the
        group calibration behind the per-user bound (the log's user ids feed it).
    """

    key: str
    policy: str
    params: dict[str, Any]
    epsilon: float | None = None
    delta: float | None = None
    note: str | None = None
    reference: dict[str, Any] | None = None
    config: Any = None
    user_level: Any = None

    def build(self, seed: int | None) -> Policy:
        if self.user_level is not None and self.config is not None:
            wrapped: Policy = self.user_level.build(self.config, seed=seed)
            return wrapped
        cls = policy_class(self.policy, self.params)
        policy: Policy = cls(**self.params, seed=seed)  # a vectorised policy
        return policy


class PolicyRun(TypedDict):
    """One policy configuration's evaluators during :func:`replay_log`."""

    spec: PolicySpec
    replay: ReplayMethod | None
    offpolicy: OffPolicyEvaluator | None
    time: dict[str, float]  # seconds per evaluator
    replay_skipped: NotRequired[str]  # why the replay method stopped (a non-uniform log)


def policy_seed(base_seed: int, key: str, role: str) -> int:
    """Seed of one policy instance, from the base seed, the run key and its role."""
    h = hashlib.blake2b(f"{key}\x00{role}".encode(), digest_size=4).digest()
    ss = np.random.SeedSequence([base_seed, int.from_bytes(h, "little")])
    return int(ss.generate_state(1, np.uint32)[0])


class _Progress:
    def __init__(self, reader: LogReader, desc: str, enabled: bool):
        self.reader = reader
        self.bar: Any = None  # a tqdm bar (imported only when shown)
        self.seen = 0
        if enabled:
            from tqdm import tqdm

            _, total, unit = reader.progress()
            self.bar = tqdm(
                total=total,
                unit=unit,
                unit_scale=True,
                unit_divisor=1024 if unit == "B" else 1000,
                desc=desc,
                file=sys.stderr,
                leave=False,
                dynamic_ncols=True,
            )

    def update(self) -> None:
        if self.bar is None:
            return
        done, total, _ = self.reader.progress()
        if total is not None and self.bar.total != total:
            self.bar.total = total
        if done > self.seen:
            self.bar.update(done - self.seen)
            self.seen = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def replay_log(
    reader: LogReader,
    specs: list[PolicySpec],
    estimators: Sequence[str] = ("ips", "snips", "dr"),
    method: bool = True,
    level: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
    chunk_size: int | None = None,
    max_events: int | None = None,
    warmup: int = 0,
    reward_reg: float = 1.0,
    progress: bool = False,
) -> ReplayResult:
    """Evaluate every policy configuration of ``specs`` on the log of ``reader``.

    Parameters
    ----------
    reader
        The logged stream.
    specs
        Policy configurations.
    estimators
        Off-policy estimators of the frozen policies (subset of ips, snips, dm, dr; may be
        empty).
    method
        Also run the replay method (the policies learn online from matched events).
    level, bootstrap, seed
        Interval level, bootstrap replicates, base seed (bootstrap and policy seeds).
    chunk_size, max_events
        Events per chunk (default: by memory budget) and a cap on the events read.
    warmup
        Events learned by the replay method before a policy is frozen for the estimators.
    reward_reg
        Ridge penalty of the DM/DR reward model.
    progress
        Show progress bars on stderr.
    """
    estimators = list(dict.fromkeys(estimators))
    unknown = [e for e in estimators if e not in ESTIMATORS]
    if unknown:
        raise ValueError(f"unknown estimator(s) {', '.join(unknown)}")
    if not specs:
        raise ValueError("nothing to evaluate: give at least one policy")
    if not method and not estimators:
        raise ValueError("choose the replay method and/or at least one estimator")
    reader.open()
    t_start = time.perf_counter()
    model = None
    fit_s = 0.0
    if any(ESTIMATORS[e].needs_model for e in estimators):
        model = RidgeRewardModel(reward_reg)
        bar = _Progress(reader, "fitting reward model", progress)
        t0 = time.perf_counter()
        offset = 0
        for batch in reader.chunks(chunk_size, max_events):
            model.learn(batch, offset)
            offset += len(batch)
            bar.update()
        bar.close()
        model.fit()
        fit_s = time.perf_counter() - t0

    onpolicy = OnPolicy(level=level, bootstrap=bootstrap, seed=seed)
    runs: list[PolicyRun] = []
    for spec in specs:
        run: PolicyRun = {"spec": spec, "replay": None, "offpolicy": None, "time": {}}
        if method:
            ledger = InMemoryLedger()
            pol = spec.build(policy_seed(seed, spec.key, "replay"))
            run["replay"] = ReplayMethod(pol, ledger, level, bootstrap, seed)
            run["time"]["replay"] = 0.0
        if estimators:
            ledger = InMemoryLedger()
            pol = spec.build(policy_seed(seed, spec.key, "frozen"))
            run["offpolicy"] = OffPolicyEvaluator(
                pol, estimators, model, level, bootstrap, seed, warmup, ledger
            )
            run["time"]["offpolicy"] = 0.0
        runs.append(run)

    bar = _Progress(reader, "replaying", progress)
    t0 = time.perf_counter()
    offset = 0
    positions = 0
    rlo, rhi = math.inf, -math.inf
    for batch in reader.chunks(chunk_size, max_events):
        end = offset + len(batch)
        onpolicy.update(batch.rewards, None, batch.positions, events=end)
        if len(batch):
            rlo = min(rlo, float(np.min(batch.rewards)))
            rhi = max(rhi, float(np.max(batch.rewards)))
        positions = max(positions, int(batch.positions.max()) + 1)
        for run in runs:
            if run["replay"] is not None:
                t1 = time.perf_counter()
                try:
                    run["replay"].process(batch, events=end)
                except LogFormatError as err:
                    if not estimators:  # the replay method was all that was asked for
                        raise
                    # a log that is not uniform: the other estimators go on without it
                    run["replay"] = None
                    run["replay_skipped"] = str(err)
                run["time"]["replay"] += time.perf_counter() - t1
            if run["offpolicy"] is not None:
                t1 = time.perf_counter()
                run["offpolicy"].process(batch, offset)
                run["time"]["offpolicy"] += time.perf_counter() - t1
        offset = end
        bar.update()
    bar.close()
    pass_s = time.perf_counter() - t0
    if offset == 0:
        raise ValueError("the log has no events to evaluate")
    result = ReplayResult.collect(
        reader=reader,
        runs=runs,
        onpolicy=onpolicy,
        model=model,
        events=offset,
        positions=positions,
        level=level,
        settings={
            "estimators": estimators,
            "replay_method": method,
            "bootstrap": bootstrap,
            "seed": seed,
            "warmup": warmup,
            "chunk_size": chunk_size or reader.default_chunk_size(),
            "max_events": max_events,
            "reward_reg": reward_reg if model is not None else None,
        },
        timing={
            "reward_model_pass_s": fit_s,
            "evaluation_pass_s": pass_s,
            "total_s": time.perf_counter() - t_start,
        },
    )
    # the logged rewards' range (a click log: [0, 1]); the plot clips intervals to it
    result.log["reward_range"] = [rlo, rhi]
    return result
