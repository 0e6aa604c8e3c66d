"""Bookkeeping shared by the step-wise continual-release aggregators (factorisation, BLT)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from .draw_counter import DrawCounter
from .rows import exact_gram_units, units_to_float

if TYPE_CHECKING:
    from .matrix_noise import SymmetricGaussianNoise
    from .noise import NoiseGenerator, NoiseSource
    from .secure_noise import SecureGenerator
    from .secure_steps import ExactToeplitzSteps

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

    # parameters and state of the host (see above)
    n_steps: int
    row_norm_sq: float
    noise: NoiseSource
    sampler: SymmetricGaussianNoise
    _M: npt.NDArray[Any]  # int64 grid units
    _M_last: npt.NDArray[Any]
    _s: int
    _pending: int
    _step: int
    _noise_sum: npt.NDArray[np.float64]

    if TYPE_CHECKING:  # provided by the host class (secure backend only)

        def _encoder(self) -> ExactToeplitzSteps: ...

    def _released(self) -> npt.NDArray[np.float64]:
        """The step's release: the exact prefix plus the noise N_t (secure: N_t alone, its
        steps γ·Y already carry the rows)."""
        if self.secure:
            return self._noise_sum.copy()
        return units_to_float(self._M) + self._noise_sum

    @property
    def s(self) -> int:
        return self._state()._s

    @property
    def steps(self) -> int:
        return self._state()._step

    @property
    def full(self) -> bool:
        return self.steps >= self.n_steps

    def insert_many(self, rows: npt.NDArray[np.float64]) -> int:
        self._state()
        n: int = rows.shape[0]
        if self._step >= self.n_steps or n == 0:
            return 0
        self._M += exact_gram_units(rows, self.row_norm_sq)
        self._s += n
        self._pending += n
        return n

    # -- the secure backend (docs/privacy/secure-noise.md, "Factorisations") ---------------------
    @property
    def secure(self) -> bool:
        """Whether steps are exact integer encodings plus discrete Gaussian noise."""
        return getattr(self.noise, "backend", "fast") == "secure"

    def _secure_step(self, g_stream: NoiseGenerator) -> npt.NDArray[np.float64]:
        """Step j on the secure backend: γ·(rint((C̃x)_j/γ) + Z_j) (floats: post-processing).

        The step sum x_j = M − M at the previous step (exact integers); ``_encoder`` is the
        host's :class:`~.secure_steps.ExactToeplitzSteps`.
        """
        enc = self._encoder()
        if not hasattr(self, "_M_last"):
            self._M_last = np.zeros_like(self._M)
        x = self._M - self._M_last
        self._M_last = self._M.copy()
        g = enc.g
        # a stream of the secure backend (the callers check ``self.secure``)
        rng = cast("SecureGenerator", g_stream)
        Y = enc.push(x) + self.sampler.sample_units(rng, g).astype(object)
        return np.array([math.ldexp(float(v), -g) for v in Y])

    def _secure_counters(self) -> dict[str, Any]:
        if not self.secure:
            return {}
        return {
            "M_last": getattr(self, "_M_last", np.zeros_like(self._M)).copy(),
            "encoder": self._encoder().state_dict(),
        }

    def _load_secure_counters(self, state: dict[str, Any]) -> None:
        if not self.secure:
            return
        if "encoder" not in state:
            raise ValueError(
                "this snapshot's factorisation was drawn by the fast backend: it cannot switch "
                "to the secure backend mid-way (noise_backend=fast resumes it)"
            )
        self._M_last = np.asarray(state["M_last"], dtype=np.int64).copy()
        self._encoder().load_state_dict(state["encoder"])

    def exact_sum(self) -> npt.NDArray[np.float64]:
        """The exact prefix (SENSITIVE)."""
        return units_to_float(self._state()._M)

    def noise_sum(self) -> npt.NDArray[np.float64]:
        """Noise of the current release (SENSITIVE; simulation diagnostics only)."""
        if self.secure:  # the secure release (the noisy steps, post-processed) − its rows
            self._state()
            last: npt.NDArray[Any] = getattr(self, "_M_last", np.zeros_like(self._M))
            return self._noise_sum - units_to_float(last)
        return self._state()._noise_sum.copy()

    def _counters(self) -> dict[str, Any]:
        """The state every step-wise aggregator snapshots (with its own noise state)."""
        self._state()
        return {
            "M": self._M.copy(),
            "s": self._s,
            "pending": self._pending,
            "step": self._step,
            **self._secure_counters(),
        }

    def _load_counters(self, state: dict[str, Any]) -> None:
        self._M = np.asarray(state["M"], dtype=np.int64).copy()
        self._s = int(state["s"])
        self._pending = int(state["pending"])
        self._step = int(state["step"])
        self._draws = dict(state["draws"])
        self._load_secure_counters(state)
