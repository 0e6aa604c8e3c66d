"""Shared core of DPUCB-MAT and DPTS-MAT: the private batch means, calibration and ledger.

Privacy (DP-matroid spec §3; thesis Thms 8 and 10). Pure ε-DP, central model, event level: two
reward tables are neighbours if they differ in one round's entire L-vector. A round's rewards
are read only for its K served items, each lands in exactly one batch sum of sensitivity 1 (a
reward lies in [0, 1] after the fixed map and clipping), and each batch is released once with
Laplace noise of scale 1/ε0. The thesis bounds the L1 sensitivity of the whole sequence of
batch sums by 2K, so the run is 2K·ε0-DP:

* ``certified`` (default): ε0 = ε/(2K) — ε-DP (remark after Thm 8);
* ``paper``: ε0 = ε/K, the thesis experiments' value — certified as 2ε-DP only; reproduction
  only, refused by the service outside simulation, recorded with ``epsilon = 2ε``.

Everything else — indices, Thompson samples, greedy slates, published noisy means — is
post-processing. That includes the exploration rule (``exploration``): ``"posterior"`` (the
default) indexes each item by the precision-weighted pool of *all* its released batch means,
clipped to [0, 1], with the variance of that pool (sampling and Laplace noise); ``"thesis"`` is
the thesis's index on the last batch only (Algs. 2 and 5), which ``reproduce dp-matroid`` uses.
Which rewards form a batch, and when it closes, depends on the slate history only: the
caller finalizes every served item (default fill) and feeds rounds in order.

Ledger. The first release registers the run's guarantee (one record: ε_certified, a Laplace
component of sensitivity 2K and scale 1/ε0); every update that completes batches appends one
record listing them (item, batch, size, closing round, noisy mean) with zero accounting of its
own, in the same data slice: the registration covers the whole unbounded run for every event.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

import numpy as np

from ..estimators.batch_means import DoublingBatchMeans, Release
from ..matroids import Matroid
from ..privacy.ledger import ReleaseRecord
from ..privacy.noise import NoiseSource
from ..privacy.secure_noise import GRID_MARGIN, grid_of
from ..privacy.statement import PrivacyStatement
from ..utils.arrays import ArrayLike, FloatArray, IntArray
from .matroid_base import MatroidPolicy
from .types import AtLeastOne, NoiseBackend, Positive, UnitInterval

__all__ = [
    "CALIBRATIONS",
    "EXPLORATIONS",
    "PAPER_MATROID_LABEL",
    "PrivateMatroidPolicy",
    "epsilon0_for",
]

CALIBRATIONS = ("certified", "paper")
EXPLORATIONS = ("posterior", "thesis")
PRIVACY_UNIT = (
    "one decision round (one event): the rewards of all L items at that round, served or not"
)
NEIGHBOURING = "replace one round's entire reward vector (thesis Def. 9)"
PAPER_MATROID_LABEL = (
    "for reproducing the thesis's experiments only: ε0 = ε/K is certified as 2ε-DP "
    "(Thms 8 and 10), not ε-DP"
)
DATA_SLICE = "dp-matroid:run"


def epsilon0_for(epsilon: float, K: int, calibration: str) -> float:
    """Per-release budget ε0 (spec §3.2).

    >>> epsilon0_for(2.0, 3, "paper"), epsilon0_for(2.0, 3, "certified")
    (0.6666666666666666, 0.3333333333333333)
    """
    if calibration == "certified":
        return epsilon / (2 * K)
    if calibration == "paper":
        return epsilon / K
    raise ValueError(f"calibration must be one of {CALIBRATIONS}")


class PrivateMatroidPolicy(MatroidPolicy):
    """Base of DPUCB-MAT and DPTS-MAT (see the module docstring for the guarantee).

    Parameters
    ----------
    matroid, update_every, reward_range, default_reward, item_ids, bandit_id, seed
        See :class:`~.matroid_base.MatroidPolicy`.
    epsilon
        The run's target per-event ε.
    calibration
        ``"certified"`` (ε0 = ε/2K, default) or ``"paper"`` (ε0 = ε/K, reproduction only).
    exploration
        ``"posterior"`` (default): the index reads the pooled estimate of every released batch
        of an item (``DoublingBatchMeans.pooled_mean``, clipped to [0, 1]) and its variance;
        ``"thesis"``: the thesis's index on the last released batch (Algs. 2 and 5).
        Post-processing either way: same releases, same ε.
    noise_scale_multiplier
        Multiplies the Laplace scale. Must stay 1; exists for the privacy audit only.
    noise_backend
        ``"auto"`` (default: ``"secure"``), ``"secure"`` or ``"fast"``
        (:class:`~streaming_dpbandit.privacy.noise.NoiseSource`; docs/privacy/secure-noise.md).
    """

    private = True
    #: a configuration's ``items`` name the L items (default ``item-0`` … ``item-{L−1}``)
    config_names: ClassVar[Mapping[str, str]] = {"item_ids": "items"}

    @classmethod
    def config_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("item_ids") is None:
            from ..matroids import from_description

            n = from_description(dict(params["matroid"])).n_items
            params = {**params, "item_ids": [f"item-{i}" for i in range(n)]}
        return params

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        """Small valid constructor parameters for the generic checks in
        ``streaming_dpbandit.checks``: the matroids of :class:`~.matroid_base.MatroidPolicy`,
        certified, then the paper's calibration."""
        uniform, partition = MatroidPolicy._unit_test_params()
        yield {**uniform, "epsilon": 1.0}
        yield {**partition, "epsilon": 2.0, "calibration": "paper"}

    def __init__(
        self,
        matroid: Matroid | Mapping[str, Any],
        epsilon: Positive,
        calibration: Literal["certified", "paper"] = "certified",
        update_every: AtLeastOne = 1,
        reward_range: tuple[float, float] = (0.0, 1.0),
        default_reward: UnitInterval = 0.0,
        item_ids: list[str] | None = None,
        bandit_id: str = "default",
        seed: int | None = None,
        noise_scale_multiplier: float = 1.0,
        noise_backend: NoiseBackend = "auto",
        exploration: Literal["posterior", "thesis"] = "posterior",
    ) -> None:
        super().__init__(
            matroid, update_every, reward_range, default_reward, item_ids, bandit_id, seed
        )
        self.epsilon = epsilon
        self.calibration = calibration
        self.exploration = exploration
        self.noise_scale_multiplier = noise_scale_multiplier
        self.noise_backend = noise_backend

    # -- calibration -----------------------------------------------------------------------------
    def _validate(self) -> None:
        super()._validate()
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError("epsilon must be a positive number")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}")
        if self.exploration not in EXPLORATIONS:
            raise ValueError(f"exploration must be one of {EXPLORATIONS}")
        if not self.noise_scale_multiplier > 0:
            raise ValueError("noise_scale_multiplier must be > 0")

    @property
    def epsilon0(self) -> float:
        """ε0, used both for the Laplace scale and in the index bonus (spec §3.2)."""
        return epsilon0_for(float(self.epsilon), self.K, self.calibration)

    @property
    def epsilon_certified(self) -> float:
        """The guarantee the thesis certifies: 2K·ε0 (= ε certified, 2ε paper)."""
        return 2 * self.K * self.epsilon0

    @property
    def dp_valid(self) -> bool:
        return self.noise_scale_multiplier == 1.0

    # -- statistics ------------------------------------------------------------------------------
    def _init_stats(self) -> None:
        margin = GRID_MARGIN if self.noise_backend_in_force == "secure" else 0.0
        self._est = DoublingBatchMeans(self.L, self.epsilon0, self.noise_scale_multiplier, margin)
        self._est._state()
        self._noise = NoiseSource(self.seed, backend=self.noise_backend_in_force)
        self._registered = False

    def _observe(self, items: IntArray, rewards: FloatArray, rounds: IntArray) -> None:
        self._est.learn_many(items, rewards, rounds)

    def _has_pending(self) -> bool:
        return self._est.pending > 0

    def _refresh(self) -> None:
        """Per-item arrays of the index (+∞ base for a never-released item).

        ``thesis``: base = w̃ of the last batch, a = √(1/T), b = 1/(ε0·T).
        ``posterior``: base = the pooled mean clipped to [0, 1], a = its standard deviation,
        b = 0 (no separate privacy bonus: the Laplace variance is inside a).
        """
        est = self._est
        T = est.T.astype(np.float64)
        if self.exploration == "posterior":
            pooled = est.pool_den > 0  # exactly the items with a release (T > 0)
            self._base = np.where(pooled, np.clip(est.pooled_mean, 0.0, 1.0), np.inf)
            self._a = np.sqrt(np.where(pooled, est.pooled_var, 0.0))
            self._b = np.zeros_like(T)
            return
        played = T > 0
        inv = np.divide(1.0, T, out=np.zeros_like(T), where=played)
        self._base = np.where(played, est.mean, np.inf)
        self._a = np.sqrt(inv)
        self._b = inv / self.epsilon0

    def _bonus_log(self, rounds: IntArray) -> FloatArray:
        """3·ln(K·t) for every round (t is the 1-based index of the decision)."""
        return 3.0 * np.log(self.K * rounds.astype(np.float64))

    def quiet_rounds(self, slates: ArrayLike) -> int:
        """How many leading rows of ``slates`` (the slates of the next rounds, in order) can be
        learned with no batch completing before the last of them.

        Learning rows 0 … k−1 seals a batch at most at row k−1, so up to and including that
        round no release can happen and every decision uses the statistics in force now
        (simulation: :func:`~streaming_dpbandit.experiments.matroid_runner.simulate_slates`).
        Depends only on public batch counts.
        """
        self._state()
        S = np.asarray(slates, dtype=np.int64)
        n = S.shape[0]
        if n == 0:
            return 0
        est = self._est
        need = (np.int64(1) << (est.s + 1)) - est.cnt  # rewards until each open batch closes
        served = np.zeros((n, self.L), dtype=np.int64)
        served[np.arange(n)[:, None], S] = 1  # a slate holds distinct items
        hit = (np.cumsum(served, axis=0) >= need).any(axis=1)
        return int(np.argmax(hit)) + 1 if hit.any() else n

    @property
    def noisy_means(self) -> tuple[IntArray, FloatArray]:
        """(T, w̃): the released batch sizes and noisy means (DP outputs)."""
        self._state()
        return self._est.T.copy(), self._est.mean.copy()

    # -- releases --------------------------------------------------------------------------------
    def _update(self) -> list[ReleaseRecord]:
        label = (self.bandit_id, "dp-matroid")
        rels = self._est.release(self._noise, *label)
        if not rels:
            return []
        self._version += 1
        self._refresh()
        records = []
        if not self._registered:
            records.append(self._registration_record())
            self._registered = True
        records.append(self._batches_record(rels))
        return records

    def _common(self) -> dict[str, Any]:
        return {
            "bandit_id": self.bandit_id,
            "calibration": self.calibration,
            "formula": f"dp-matroid-{self.calibration}-v1",
            "dp_valid": self.dp_valid,
            "data_slice": DATA_SLICE,
            "composition": "parallel",
            "privacy_model": "central",
            "privacy_unit": PRIVACY_UNIT,
            "neighbouring": NEIGHBOURING,
            "note": PAPER_MATROID_LABEL if self.calibration == "paper" else None,
            "noise_backend": self.noise_backend_in_force,
        }

    def _registration_record(self) -> ReleaseRecord:
        K = self.K
        scale = self._est.laplace_scale
        # secure backend: each of the 2K affected sums moves by ≤ 1 + γ on its grid γ
        # (the scale 1/(ε0 − 2⁻³⁰) keeps 2K(1 + γ)/b within the certified ε: recorded as that
        # pure ε, the statement's number; the drawn one is a hair below it)
        gamma = grid_of(scale) if self._est.rounding_margin else 0.0
        component: dict[str, Any] = (
            {"type": "pure", "epsilon": self.epsilon_certified, "count": 1}
            if gamma
            else {"type": "laplace", "sensitivity": 2.0 * K, "scale": scale, "count": 1}
        )
        if gamma and 2.0 * K * (1.0 + gamma) / scale > self.epsilon_certified:
            raise RuntimeError("the secure batch-mean scale does not cover its grid term")
        return ReleaseRecord(
            release_id=f"{self.bandit_id}/{self.name}/guarantee",
            mechanism="doubling-batch-laplace",
            epsilon=self.epsilon_certified,
            delta=0.0,
            accounting=[component],
            params={
                "epsilon": float(self.epsilon),
                "epsilon0": self.epsilon0,
                "epsilon_certified": self.epsilon_certified,
                "K": K,
                "L": self.L,
                "matroid": self.structure.kind,
                "unreachable_items": self.unreachable,
                "laplace_scale": scale,
                "sensitivity": 2.0 * K,
                "rounding_margin": gamma,
                "reward_range": [float(x) for x in self.reward_range],
                "default_reward": float(self.default_reward),
                "noise_streams": f"{self.bandit_id}/dp-matroid/<item>/<batch>",
                "scope": "every batch release of the run, for every event (unbounded horizon)",
            },
            **self._common(),
        )

    def _batches_record(self, rels: list[Release]) -> ReleaseRecord:
        closed = [r.closed_at for r in rels]
        return ReleaseRecord(
            release_id=f"{self.bandit_id}/{self.name}/batches/v={self._version}",
            mechanism="doubling-batch-laplace",
            epsilon=0.0,
            delta=0.0,
            accounting=[{"type": "zero"}],
            event_range=(min(closed), max(closed)),
            rows_used=int(sum(r.size for r in rels)),
            model_version=self._version,
            params={
                "covered_by": f"{self.bandit_id}/{self.name}/guarantee",
                "batches": len(rels),
                "laplace_scale": self._est.laplace_scale,
            },
            release={
                "items": [r.item for r in rels],
                "batches": [r.batch for r in rels],
                "sizes": [r.size for r in rels],
                "closed_at": closed,
                "noisy_means": [r.noisy_mean for r in rels],
            },
            **self._common(),
        )

    # -- privacy and explanation -----------------------------------------------------------------
    @property
    def privacy(self) -> PrivacyStatement:
        return PrivacyStatement(
            model="central",
            unit=PRIVACY_UNIT,
            neighbouring=NEIGHBOURING,
            epsilon=self.epsilon_certified,
            delta=0.0,
            calibration=self.calibration,
            noise_backend=self.noise_backend_in_force,
            scope=(
                "the whole, unbounded run: the sequence of slates and of released batch means "
                "(every reward enters exactly one Laplace release; thesis Thms 8 and 10)."
            ),
            caveats=(
                "Event-level: a user who contributes k rounds is protected at k·ε (group "
                "privacy within a batch, sequential composition across the batches and items "
                "their rounds reach); bound them with user_level "
                "(docs/privacy/user-level-slates.md).",
                "Missing per-item feedback is filled with the public default reward at the "
                "deadline; counts of missing feedback are outside the guarantee.",
            ),
            label=PAPER_MATROID_LABEL if self.calibration == "paper" else None,
        )

    def explain(self, horizon: int | None = 10_000) -> dict[str, Any]:
        self._state()
        K = self.K
        t = horizon or 10_000
        bonus = {str(T): 3 * math.log(K * t) / (self.epsilon0 * T) for T in (1, 64, 1024, 4096)}
        return {
            "policy": self.name,
            "private": True,
            "model": "central DP (event level)",
            "calibration": self.calibration,
            "epsilon": float(self.epsilon),
            "epsilon0": self.epsilon0,
            "epsilon_certified": self.epsilon_certified,
            "laplace_scale": self._est.laplace_scale,
            "K": K,
            "L": self.L,
            "matroid": self.structure.kind,
            "unreachable_items": self.unreachable,
            "exploration": self.exploration,
            **(
                {"privacy_bonus_at_t": {"t": t, "by_T": bonus}}
                if self.exploration == "thesis"
                else {}
            ),
            "params": self.public_params(),
            "privacy_statement": self.privacy.text(),
            **({"label": PAPER_MATROID_LABEL} if self.calibration == "paper" else {}),
        }

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        out = self._base_state()
        out["estimator"] = self._est.state_dict()
        out["noise"] = self._noise.state_dict()
        out["registered"] = self._registered
        return out

    def load_state_dict(self, state: dict[str, Any]) -> PrivateMatroidPolicy:
        self._check_resumed_backend(state)
        self._load_base(state)
        self._est.load_state_dict(state["estimator"])
        self._noise = NoiseSource(self.seed, backend=self.noise_backend_in_force).load_state_dict(
            state["noise"]
        )
        self._registered = bool(state["registered"])
        self._refresh()
        return self
