"""Bookkeeping shared by the step-wise continual-release aggregators (factorisation, BLT)."""

from __future__ import annotations

import numpy as np

from .draw_counter import DrawCounter
from .rows import exact_gram_units, units_to_float

__all__ = ["StepwisePrefix"]


class StepwisePrefix(DrawCounter):
    """Mixin for aggregators that release the exact Gram prefix plus the noise of their step.

    The host builds, in ``_state()``, the exact packed prefix ``_M`` (integer grid units), the
    row count ``_s``, the rows ``_pending`` since the last step, the step counter ``_step``, the
    current release noise ``_noise_sum`` and ``_draws``; it defines ``n_steps`` and
    ``row_norm_sq``. A new step (one noise draw) is taken only when rows arrived since the last.

    Examples
    --------
    >>> import numpy as np
    >>> class Agg(StepwisePrefix):
    ...     n_steps, row_norm_sq = 2, 2.0
    ...     def _state(self):
    ...         if not hasattr(self, "_M"):
    ...             self._M, self._s, self._pending, self._step = np.zeros(3, np.int64), 0, 0, 0
    ...             self._noise_sum, self._draws = np.zeros(3), {"node": 0, "pad": 0}
    ...         return self
    >>> a = Agg()
    >>> a.insert_many(np.array([[1.0, 0.5]])), a.s, a.steps, a.full
    (1, 1, 0, False)
    """

    @property
    def s(self) -> int:
        return self._state()._s

    @property
    def steps(self) -> int:
        return self._state()._step

    @property
    def full(self) -> bool:
        return self.steps >= self.n_steps

    def insert_many(self, rows: np.ndarray) -> int:
        self._state()
        if self._step >= self.n_steps or rows.shape[0] == 0:
            return 0
        self._M += exact_gram_units(rows, self.row_norm_sq)
        self._s += rows.shape[0]
        self._pending += rows.shape[0]
        return rows.shape[0]

    def exact_sum(self) -> np.ndarray:
        """The exact prefix (SENSITIVE)."""
        return units_to_float(self._state()._M)

    def noise_sum(self) -> np.ndarray:
        """Noise of the current release (SENSITIVE; simulation diagnostics only)."""
        return self._state()._noise_sum.copy()

    def _counters(self) -> dict:
        """The state every step-wise aggregator snapshots (with its own noise state)."""
        self._state()
        return {
            "M": self._M.copy(),
            "s": self._s,
            "pending": self._pending,
            "step": self._step,
        }

    def _load_counters(self, state: dict) -> None:
        self._M = np.asarray(state["M"], dtype=np.int64).copy()
        self._s = int(state["s"])
        self._pending = int(state["pending"])
        self._step = int(state["step"])
        self._draws = dict(state["draws"])
