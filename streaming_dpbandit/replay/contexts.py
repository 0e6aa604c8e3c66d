"""Per-arm contexts of a chunk of logged events, built only when a policy needs them.

Policies decide on per-arm feature tensors (B, K, d). Logs rarely store them that way: the
service logs per-arm features, a CSV holds one shared context per event (mapped to per-arm
features by the disjoint encoding, as the service does for shared contexts), the Open Bandit
Dataset holds user features and item features separately. A :class:`Contexts` keeps the compact
form and builds the dense tensor on demand, so estimators that never look at contexts (a
context-free target policy, the on-policy value) cost nothing, and the features of one arm per
event (what a reward model or a policy's ``learn`` reads) cost O(B·d), not O(B·K·d).
"""

from __future__ import annotations

import abc

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray, IntArray

__all__ = ["ConstantContexts", "Contexts", "DenseContexts", "DisjointContexts"]


class Contexts(abc.ABC):
    """Per-arm features of B events with K candidate arms each, dimension d."""

    n_arms: int
    d: int

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def dense(self) -> FloatArray:
        """The (B, K, d) float64 tensor."""

    @abc.abstractmethod
    def rows(self, arms: ArrayLike) -> FloatArray:
        """Features (B, d) of arm ``arms[i]`` of event i."""

    @abc.abstractmethod
    def take(self, idx: IntArray) -> Contexts:
        """The contexts of the events ``idx`` (an index array)."""

    def project(self, coef: FloatArray) -> FloatArray:
        """⟨x_{i,a}, coef_i⟩ for every event i and arm a, (B, K); ``coef`` is (B, d).

        What a linear reward model needs for every arm; subclasses avoid the dense tensor.
        """
        out: FloatArray = np.einsum("bkd,bd->bk", self.dense(), coef)
        return out


class DenseContexts(Contexts):
    """Contexts stored as the dense (B, K, d) tensor.

    >>> X = np.arange(12.0).reshape(2, 3, 2)
    >>> c = DenseContexts(X)
    >>> c.rows(np.array([2, 0])).tolist(), len(c.take(np.array([1])))
    ([[4.0, 5.0], [6.0, 7.0]], 1)
    """

    def __init__(self, X: ArrayLike):
        self.X = np.asarray(X, dtype=np.float64)
        if self.X.ndim != 3:
            raise ValueError("dense contexts must be (B, K, d)")
        self.n_arms = int(self.X.shape[1])
        self.d = int(self.X.shape[2])

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def dense(self) -> FloatArray:
        return self.X

    def rows(self, arms: ArrayLike) -> FloatArray:
        out: FloatArray = self.X[np.arange(len(self)), np.asarray(arms)]
        return out

    def take(self, idx: IntArray) -> DenseContexts:
        return DenseContexts(self.X[idx])


class DisjointContexts(Contexts):
    """One shared context s ∈ R^w per event, encoded per arm: arm k's features are s in block k
    of a d = K·w vector and zeros elsewhere (the service's encoding of shared contexts,
    ``docs/events.md``), so a linear policy over them has one parameter block per arm.

    >>> c = DisjointContexts(np.array([[1.0, 2.0]]), n_arms=2)
    >>> c.dense().tolist()
    [[[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 1.0, 2.0]]]
    >>> c.rows(np.array([1])).tolist()
    [[0.0, 0.0, 1.0, 2.0]]
    """

    def __init__(self, shared: ArrayLike, n_arms: int):
        self.shared = np.asarray(shared, dtype=np.float64)
        self.n_arms = int(n_arms)
        self.width = int(self.shared.shape[1])
        self.d = self.n_arms * self.width

    def __len__(self) -> int:
        return int(self.shared.shape[0])

    def dense(self) -> FloatArray:
        B, K, w = len(self), self.n_arms, self.width
        X = np.zeros((B, K, K, w))
        k = np.arange(K)
        X[:, k, k, :] = self.shared[:, None, :]
        return X.reshape(B, K, K * w)

    def rows(self, arms: ArrayLike) -> FloatArray:
        B, w = len(self), self.width
        out = np.zeros((B, self.n_arms, w))
        out[np.arange(B), np.asarray(arms)] = self.shared
        return out.reshape(B, self.d)

    def take(self, idx: IntArray) -> DisjointContexts:
        return DisjointContexts(self.shared[idx], self.n_arms)

    def project(self, coef: FloatArray) -> FloatArray:
        B = len(self)
        out: FloatArray = np.einsum(
            "bw,bkw->bk", self.shared, coef.reshape(B, self.n_arms, self.width)
        )
        return out


class ConstantContexts(Contexts):
    """No features in the log: every arm of every event has the single feature 1.

    Enough for context-free target policies (random, a table of action probabilities); a
    linear policy over it cannot tell the arms apart.

    >>> c = ConstantContexts(3, n_arms=2)
    >>> c.dense().shape, c.rows(np.array([0, 1, 1])).tolist()
    ((3, 2, 1), [[1.0], [1.0], [1.0]])
    """

    d = 1

    def __init__(self, size: int, n_arms: int):
        self.size = int(size)
        self.n_arms = int(n_arms)

    def __len__(self) -> int:
        return self.size

    def dense(self) -> FloatArray:
        return np.ones((self.size, self.n_arms, 1))

    def rows(self, arms: ArrayLike) -> FloatArray:
        return np.ones((len(np.asarray(arms)), 1))

    def take(self, idx: IntArray) -> ConstantContexts:
        return ConstantContexts(len(np.arange(self.size)[idx]), self.n_arms)

    def project(self, coef: FloatArray) -> FloatArray:
        return np.broadcast_to(coef[:, :1], (self.size, self.n_arms))
