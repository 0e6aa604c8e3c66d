"""Continual private release of M_t = Σ_{s<t} a_s a_sᵀ, a_s = [x_s; y_s] (DP-LinUCB spec §1, §5–§7).

:class:`ContinualGramRelease` is DP-LinUCB's private core: it owns the tree (or the square-root
or BLT factorisation, ``tree_impl`` ``sqrt_toeplitz`` / ``blt``, fixed horizon only), its
calibration, and the horizon handling of spec §7:

``fixed`` (default)
    One tree of capacity ``n_cap``. When it is full the release is frozen: later rows are not
    inserted (counted as ``rows_dropped``) and the last release keeps being served. Cost (ε, δ).
``doubling``
    Epochs e = 0, 1, … with capacity n_e = n0·2^e, each a fresh tree calibrated with the full
    (ε, δ) and (n_e, m_e, α_e = α·2^−(e+1)). Each row lies in exactly one epoch's tree, so the
    epochs compose in parallel: the whole unbounded run costs (ε, δ) per event (spec §7).
    Closing epoch e freezes its root node's release into F; later releases are F + tree_e.
    The bounds of epoch e account for the total noise (frozen roots + current tree).

Never changes m or n_cap of a live tree and never re-inserts rows (spec §7). The exact sums and
the noise are SENSITIVE: only :meth:`release` output is DP.

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
import numpy.typing as npt

from .blt import BLTAggregator
from .factorization import SqrtToeplitzAggregator
from .gram_calibration import GramCalibration, calibrate_gram_release
from .matrix_noise import SymmetricGaussianNoise, WishartNoise
from .noise import NoiseSource
from .symmetric import packing
from .tree import PaddedTree

if TYPE_CHECKING:
    from typing import Self

#: The continual-release aggregator of one epoch (``tree_impl``: binary, sqrt_toeplitz, blt).
Aggregator: TypeAlias = PaddedTree | SqrtToeplitzAggregator | BLTAggregator

__all__ = ["ContinualGramRelease"]


class ContinualGramRelease:
    """Private continual release of the (d+1)×(d+1) Gram matrix of [x; y] rows.

    Parameters
    ----------
    d, epsilon, delta, n_cap, noise, shift, calibration, L, B_tilde, alpha, wishart_gamma,
    tree_impl, n_steps, horizon_mode, n0
        As in :func:`~.gram_calibration.calibrate_gram_release`.
    noise_source
        The :class:`~.noise.NoiseSource` (secret key) of every draw.
    label
        Noise-stream label prefix, e.g. ``(bandit_id, "dp-linucb")``.
    noise_scale_multiplier
        Audit only.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.privacy.noise import NoiseSource
    >>> agg = ContinualGramRelease(d=2, epsilon=1.0, delta=0.1, n_cap=None, n0=4,
    ...                            horizon_mode="doubling", noise_source=NoiseSource(seed=3))
    >>> rows = np.array([[0.5, 0.5, 1.0]] * 10)
    >>> agg.insert_many(rows), agg.epoch, agg.s   # epochs of 4 and 8 rows: 4 + 6
    (10, 1, 6)
    >>> agg.release().shape, agg.calibration().m, agg.calibration().n
    ((6,), 4, 8)

    """

    # copy kept (~ calibrate_gram_release, DPLinUCB): the calibration keywords, forwarded as is
    def __init__(
        self,
        d: int,
        epsilon: float,
        delta: float,
        n_cap: int | None,
        noise: str = "gaussian",
        shift: bool = True,
        calibration: str = "certified",
        L: float = 1.0,
        B_tilde: float = 1.0,
        alpha: float | None = None,
        wishart_gamma: str = "printed",
        tree_impl: str = "binary",
        n_steps: int | None = None,
        horizon_mode: str = "fixed",
        n0: int | None = None,
        noise_source: NoiseSource | None = None,
        label: tuple[int | str, ...] = ("gram",),
        noise_scale_multiplier: float = 1.0,
    ):
        self.d = d
        self.epsilon = epsilon
        self.delta = delta
        self.n_cap = n_cap
        self.noise = noise
        self.shift = shift
        self.calibration_name = calibration
        self.L = L
        self.B_tilde = B_tilde
        self.alpha = alpha
        self.wishart_gamma = wishart_gamma
        self.tree_impl = tree_impl
        self.n_steps = n_steps
        self.horizon_mode = horizon_mode
        self.n0 = n0
        self.noise_source = noise_source
        self.label = tuple(label)
        self.noise_scale_multiplier = noise_scale_multiplier

    @property
    def noise_backend(self) -> str:
        """The noise source's backend (``fast`` unless a secure source was given)."""
        return getattr(self.noise_source, "backend", "fast")

    # -- calibration -------------------------------------------------------------------------
    def calibration(self, epoch: int | None = None) -> GramCalibration:
        """The public constants of an epoch (default: the current one)."""
        e = self.epoch if epoch is None else epoch
        cache: dict[int, GramCalibration] = self.__dict__.setdefault("_cal_cache", {})
        if e not in cache:
            cache[e] = calibrate_gram_release(
                d=self.d,
                epsilon=self.epsilon,
                delta=self.delta,
                n_cap=self.n_cap if self.n_cap is not None else 0,
                noise=self.noise,
                shift=self.shift,
                calibration=self.calibration_name,
                L=self.L,
                B_tilde=self.B_tilde,
                alpha=self.alpha,
                wishart_gamma=self.wishart_gamma,
                tree_impl=self.tree_impl,
                n_steps=self.n_steps,
                horizon_mode=self.horizon_mode,
                n0=self.n0,
                epoch=e,
                noise_scale_multiplier=self.noise_scale_multiplier,
                noise_backend=self.noise_backend,
            )
        return cache[e]

    def _sampler(self, cal: GramCalibration) -> SymmetricGaussianNoise | WishartNoise:
        p = self.d + 1
        law = cal.noise_law
        if law["law"] == "wishart":
            return WishartNoise(p, law["scale"], law["dof"], self.noise_scale_multiplier)
        return SymmetricGaussianNoise(p, law["sigma"], self.noise_scale_multiplier)

    def _gaussian_sampler(self, cal: GramCalibration) -> SymmetricGaussianNoise:
        # the factorisations are Gaussian-only (calibrate_gram_release refuses wishart)
        return cast(SymmetricGaussianNoise, self._sampler(cal))

    def _new_aggregator(self, epoch: int) -> Aggregator:
        cal = self.calibration(epoch)
        kind = {"sqrt_toeplitz": "fact", "blt": "blt"}.get(self.tree_impl, "tree")
        label = (*self.label, kind, epoch)
        Lt2 = cal.L_tilde**2
        if self.tree_impl == "blt":
            return BLTAggregator(
                self.d + 1,
                cal.per_node["steps"],
                cal.per_node["theta"],
                cal.per_node["omega"],
                self._gaussian_sampler(cal),
                self._source(),
                label,
                row_norm_sq=Lt2,
            )
        if self.tree_impl == "sqrt_toeplitz":
            return SqrtToeplitzAggregator(
                self.d + 1,
                cal.per_node["steps"],
                self._gaussian_sampler(cal),
                self._source(),
                label,
                row_norm_sq=Lt2,
            )
        return PaddedTree(self.d + 1, cal.n, self._sampler(cal), self._source(), label, Lt2)

    def _source(self) -> NoiseSource:
        if self.noise_source is None:
            self.noise_source = NoiseSource()
        return self.noise_source

    # -- state -------------------------------------------------------------------------------
    _epoch: int
    _F: npt.NDArray[np.float64]
    _F_noise: npt.NDArray[np.float64]
    _rows_dropped: int
    _rows_inserted: int
    _agg: Aggregator

    def _state(self) -> Self:
        if not hasattr(self, "_agg"):
            if self.horizon_mode == "fixed" and not self.n_cap:
                raise ValueError("fixed horizon mode needs n_cap")
            self._epoch = 0
            P = packing(self.d + 1).size
            self._F = np.zeros(P)
            self._F_noise = np.zeros(P)
            self._rows_dropped = 0
            self._rows_inserted = 0
            self._agg = self._new_aggregator(0)
        return self

    @property
    def epoch(self) -> int:
        return self._state()._epoch

    @property
    def s(self) -> int:
        """Rows in the current epoch's tree."""
        return self._state()._agg.s

    @property
    def rows_inserted(self) -> int:
        return self._state()._rows_inserted

    @property
    def rows_dropped(self) -> int:
        return self._state()._rows_dropped

    @property
    def aggregator(self) -> Aggregator:
        return self._state()._agg

    def draws(self) -> dict[str, int]:
        return self._state()._agg.draws

    def draw_counts(self) -> tuple[int, int]:
        """(node draws, pad draws) of the current epoch's aggregator."""
        return self._state()._agg.draw_counts()

    def insert_many(self, rows: npt.NDArray[np.float64]) -> int:
        """Insert clipped, grid-rounded rows; roll doubling epochs; return rows inserted."""
        self._state()
        done = 0
        while done < rows.shape[0]:
            agg = self._agg
            n = agg.insert_many(rows[done:])
            done += n
            self._rows_inserted += n
            if agg.full:
                if self.horizon_mode == "doubling":
                    # doubling mode is binary-tree only (calibrate_gram_release)
                    root = cast(PaddedTree, agg).root_value()
                    self._F_noise = self._F_noise + (root - agg.exact_sum())
                    self._F = self._F + root
                    self._epoch += 1
                    self._agg = self._new_aggregator(self._epoch)
                    continue
                break
            if n == 0:
                break
        self._rows_dropped += rows.shape[0] - done
        return done

    def release(self) -> npt.NDArray[np.float64]:
        """The packed DP release R = F + current tree release (exactly m noise terms each)."""
        return self._state()._F + self._agg.release()

    def noise_sum(self) -> npt.NDArray[np.float64]:
        """Noise of the current release (SENSITIVE; simulation diagnostics only)."""
        return self._state()._F_noise + self._agg.noise_sum()

    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            "epoch": self._epoch,
            "F": self._F.copy(),
            "F_noise": self._F_noise.copy(),
            "rows_dropped": self._rows_dropped,
            "rows_inserted": self._rows_inserted,
            "aggregator": self._agg.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> ContinualGramRelease:
        self._state()
        self._epoch = int(state["epoch"])
        self._F = np.asarray(state["F"], dtype=np.float64).copy()
        self._F_noise = np.asarray(state["F_noise"], dtype=np.float64).copy()
        self._rows_dropped = int(state["rows_dropped"])
        self._rows_inserted = int(state["rows_inserted"])
        self._agg = self._new_aggregator(self._epoch).load_state_dict(state["aggregator"])
        return self

    @property
    def nbytes(self) -> int:
        self._state()
        return int(self._agg.nbytes + self._F.nbytes + self._F_noise.nbytes)
