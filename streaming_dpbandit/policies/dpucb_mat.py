"""DPUCB-MAT: differentially private UCB for matroid bandits (thesis Alg. 2; spec §6.1).

For decision t with the released batch statistics (T_e, w̃_e):

    U_t(e) = +∞                                                    if T_e = 0
    U_t(e) = w̃_e + sqrt(3·ln(K·t) / T_e) + 3·ln(K·t) / (ε0·T_e)    otherwise

— a Hoeffding width plus a Laplace-tail width (P(|Lap(1/ε0)| ≥ 3 ln(Kt)/ε0) = (Kt)⁻³) — then the
matroid greedy with never-played items first (spec §6.4: the thesis's "∞ at the end" would lock
onto the first slate). It is the private version of OMM (Kveton et al. 2014).

That is ``exploration="thesis"``. The default, ``exploration="posterior"``, uses

    U_t(e) = clip(m̂_e, 0, 1) + sqrt(2·ln t · v̂_e)

with m̂_e the precision-weighted pool of every released batch mean of item e and v̂_e its
variance bound (sampling and Laplace noise; see
:class:`~streaming_dpbandit.estimators.batch_means.DoublingBatchMeans`): one Gaussian-style
width on the pooled estimate instead of a Hoeffding width plus a Laplace-tail width on the last
batch (docs/privacy/dp-matroid.md, "Posterior exploration").

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

import numpy as np

from ..utils.arrays import FloatArray, IntArray
from .matroid_private import PrivateMatroidPolicy
from .registry import register

__all__ = ["DPUCBMAT"]


@register
class DPUCBMAT(PrivateMatroidPolicy):
    """DPUCB-MAT (see :class:`~.matroid_private.PrivateMatroidPolicy` for every parameter).

    Examples
    --------
    The thesis's synthetic instance (a linear matroid over ℝ³, item e7 a zero vector):

    >>> from streaming_dpbandit.envs.dp_matroid import MatroidSyntheticEnv
    >>> env = MatroidSyntheticEnv()
    >>> pol = DPUCBMAT(env.matroid, epsilon=2.0, seed=0)
    >>> pol.K, pol.epsilon0, pol.unreachable         # certified: ε0 = ε/2K
    (3, 0.3333333333333333, [6])
    >>> rng = np.random.default_rng(0)
    >>> for _ in range(200):
    ...     if pol.refit_due():
    ...         records = pol.refit()     # batch releases: persist before deciding again
    ...     dec = pol.decide_slates(1)
    ...     w = env.draw(rng, 1)          # the round's full reward vector; the served ones count
    ...     pol.learn(dec.slates, np.take_along_axis(w, dec.slates, 1), dec.rounds)
    >>> pol.t, sorted(set(dec.slates[0].tolist())) != [], pol.privacy.epsilon
    (200, True, 2.0)

    """

    name = "dpucb-mat"

    def _keys(self, rounds: IntArray) -> FloatArray:
        if self.exploration == "posterior":
            z = np.sqrt(2.0 * np.log(rounds.astype(np.float64)))
            keys = np.multiply.outer(z, self._a)
            keys += self._base
            return keys
        c = self._bonus_log(rounds)
        keys = np.multiply.outer(c, self._b)
        keys += self._base
        keys += np.multiply.outer(np.sqrt(c), self._a)
        return keys
