"""The Laplace mechanism with a declared ℓ1 sensitivity."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .noise import NoiseGenerator

__all__ = ["LaplaceMechanism"]


class LaplaceMechanism:
    """Add Laplace noise of scale ``sensitivity / epsilon``: an ε-DP release (pure DP).

    Parameters
    ----------
    epsilon
        Privacy parameter ε > 0 of this one release.
    sensitivity
        Declared ℓ1 sensitivity of the released value over neighbouring inputs. The caller is
        responsible for enforcing it (clipping); the mechanism only trusts it.

    Examples
    --------
    >>> import numpy as np
    >>> mech = LaplaceMechanism(epsilon=0.5, sensitivity=2.0)
    >>> mech.scale
    4.0
    >>> out = mech.release(np.zeros(3), np.random.default_rng(0))
    >>> out.shape
    (3,)
    >>> mech.accounting()
    {'type': 'laplace', 'sensitivity': 2.0, 'scale': 4.0, 'count': 1}

    """

    def __init__(self, epsilon: float, sensitivity: float):
        self.epsilon = epsilon
        self.sensitivity = sensitivity

    @property
    def scale(self) -> float:
        if not (self.epsilon > 0 and self.sensitivity > 0):
            raise ValueError("epsilon and sensitivity must be positive")
        return float(self.sensitivity) / float(self.epsilon)

    def release(self, value: npt.ArrayLike, rng: NoiseGenerator) -> npt.NDArray[np.float64]:
        """Return ``value`` plus fresh Laplace noise (a new array).

        The value is passed as the noise's ``loc``, so a secure noise stream releases it on
        its public grid (``docs/privacy/secure-noise.md``); a numpy stream gives the same
        bits as ``value + rng.laplace(0, scale)``.
        """
        value = np.asarray(value, dtype=np.float64)
        return np.asarray(rng.laplace(value, self.scale, size=value.shape), dtype=np.float64)

    def accounting(self) -> dict[str, Any]:
        """The accountant's description of this release (see ``privacy.accountant``)."""
        return {
            "type": "laplace",
            "sensitivity": float(self.sensitivity),
            "scale": self.scale,
            "count": 1,
        }
